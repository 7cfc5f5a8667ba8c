#!/usr/bin/env bash
# The machine-level set-up the README's test command needs, run first by that command.
# Idempotent: a present tool is not reinstalled, and a machine that has everything changes
# nothing (no apt-get update, no network). Says what it installs.
#
#   Debian packages: valgrind (the C ABI stress runs under memcheck and helgrind),
#                    redis-server (the Redis entity-state store tests), prometheus (the
#                    metrics tests query a real Prometheus), curl (tools/servers.sh polls it),
#                    stunnel4 (the HTTPS, mutual-TLS proxy in front of MLServer)
#                    pkg-config and libssl-dev (rdkafka's librdkafka is built against the
#                    system OpenSSL for the Kafka forwarder's SSL and SASL_SSL)
#   rustup components: rustfmt, clippy
#   checked, not installed (they come with the machine): gcc, go, java 17+ and mvn (the Go
#   and Java bindings, the Kafka broker's jars), python3 >= 3.10 with pip and venv
#
# Needs root for apt-get (or sudo without a password); without either it names what is
# missing and how to install it, and fails.
set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# ---- Debian packages ---------------------------------------------------------------------
declare -A pkg_of=([valgrind]=valgrind [redis-server]=redis-server [prometheus]=prometheus [curl]=curl [stunnel4]=stunnel4)
missing=()
for cmd in valgrind redis-server prometheus curl stunnel4; do
  command -v "$cmd" >/dev/null || missing+=("${pkg_of[$cmd]}")
done
# libraries, not commands: asked of dpkg
for pkg in pkg-config libssl-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    apt=(apt-get)
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    apt=(sudo apt-get)
  else
    die "missing ${missing[*]}; install as root: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
  fi
  say "installing Debian packages: ${missing[*]}"
  "${apt[@]}" update -qq
  # --no-install-recommends: prometheus would pull exporters and disk tools otherwise.
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for cmd in valgrind redis-server prometheus curl stunnel4; do
  command -v "$cmd" >/dev/null || die "$cmd still missing after apt-get install"
done
pkg-config --exists openssl || die "OpenSSL's pkg-config file still missing after apt-get install (libssl-dev)"

# ---- Rust components ---------------------------------------------------------------------
for c in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    say "installing rustup component $c"
    rustup component add "$c"
  fi
done

# ---- toolchains that come with the machine -----------------------------------------------
for t in gcc go java mvn python3; do
  command -v "$t" >/dev/null || die "$t not found on PATH (the bindings' tests and the Kafka broker need it)"
done
java_major=$(java -XshowSettings:properties -version 2>&1 | awk -F' = ' '/java.specification.version/{print $2}')
[[ $java_major =~ ^([0-9]+) ]] && ((BASH_REMATCH[1] >= 17)) \
  || die "Java 17+ needed (Kafka 4.4, the JNI binding); java.specification.version is '$java_major'"
python3 - <<'PY' || die "python3 >= 3.10 with venv and pip needed"
import sys, venv, ensurepip  # noqa: F401
sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY
say "ready: $(valgrind --version), $(redis-server --version | awk '{print $3}'), $(prometheus --version 2>&1 | head -1 | awk '{print $1, $3}'), java $java_major, $(go version | awk '{print $3}')"
