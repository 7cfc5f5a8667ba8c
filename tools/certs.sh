#!/usr/bin/env bash
# A throw-away certificate authority for the TLS servers tools/servers.sh starts, made anew
# each time (never committed, never reused across machines):
#
#   certs.sh DIR      writes into DIR (mode 0700, files 0600):
#     ca.pem / ca.key               the CA the tests trust (RISK_TLS_CA)
#     server.pem / server.key       127.0.0.1 and localhost, signed by the CA, valid 2 days
#     client.pem / client.key       CN=risk-client, signed by the CA (mTLS client identity)
#     expired.pem / expired.key     CN=risk-client, signed by the CA, expired in 2020
#     other-ca.pem / other-ca.key   a second CA nothing is signed by (the "wrong CA" tests)
#     stranger.pem / stranger.key   CN=risk-client signed by other-ca (a client the servers refuse)
#
# Needs openssl (1.1.1 or 3.x). Keys are EC P-256 in PKCS#8 PEM (what rustls, OpenSSL,
# Redis and Kafka's PEM key stores all read).
set -euo pipefail
dir=${1:?usage: certs.sh DIR}
umask 077
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { # name cn
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days 3 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$1.pem" 2>/dev/null
}
# name cn ca extfile-lines [startdate enddate]
leaf() {
  local name=$1 cn=$2 signer=$3 ext=$4 start=${5:-} end=${6:-}
  key "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr" 2>/dev/null
  printf '%b\n' "$ext" >"$name.ext"
  if [[ -z $start ]]; then
    openssl x509 -req -in "$name.csr" -CA "$signer.pem" -CAkey "$signer.key" -CAcreateserial \
      -days 2 -sha256 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  else
    # openssl ca is the one 3.0 tool that takes explicit dates (x509 -req cannot back-date).
    mkdir -p "ca-$name"
    : >"ca-$name/index.txt"
    cat >"ca-$name/ca.cnf" <<CNF
[ca]
default_ca = d
[d]
database = ca-$name/index.txt
new_certs_dir = ca-$name
serial = ca-$name/serial
default_md = sha256
policy = p
unique_subject = no
[p]
commonName = supplied
CNF
    echo 01 >"ca-$name/serial"
    openssl ca -batch -config "ca-$name/ca.cnf" -cert "$signer.pem" -keyfile "$signer.key" \
      -notext -in "$name.csr" -startdate "$start" -enddate "$end" -extfile "$name.ext" \
      -out "$name.pem" 2>/dev/null
    rm -rf "ca-$name"
  fi
  rm -f "$name.csr" "$name.ext"
}

ca ca "risk test CA"
ca other-ca "risk other CA"
leaf server localhost ca "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"
leaf client risk-client ca "extendedKeyUsage=clientAuth"
leaf expired risk-client ca "extendedKeyUsage=clientAuth" 20200101000000Z 20200102000000Z
leaf stranger risk-client other-ca "extendedKeyUsage=clientAuth"
rm -f ./*.srl
chmod 600 ./*
echo "certs: throw-away CA and certificates in $dir"
