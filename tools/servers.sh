#!/usr/bin/env bash
# The servers the test suite uses, started once and shared by every test.
#
#   tools/servers.sh start  [NAME...]   start (idempotent: a server already answering is reused)
#   tools/servers.sh stop   [NAME...]   stop what start started here (idempotent)
#   tools/servers.sh status [NAME...]   one line per server; exit 0 when all run, 3 when not
#
# NAME defaults to all of: kafka prometheus redis mlserver. Servers:
#   kafka       Kafka 4.4.0 KRaft broker, data under $RISK_SERVERS_DIR/kafka; topics risk-audit
#               (3 partitions), risk-audit-test (1). Listeners: PLAINTEXT 127.0.0.1:9092, SSL
#               127.0.0.1:9093 (client certificate required, CA $RISK_TLS_DIR/ca.pem), SASL_SSL
#               127.0.0.1:9094 (SCRAM-SHA-512, user "risk", password random per start in
#               $RISK_SERVERS_DIR/kafka/scram.password, 0600); controller 127.0.0.1:9099 (plain).
#               Tests find them through RISK_KAFKA_BOOTSTRAP=127.0.0.1:9092,
#               RISK_KAFKA_SSL_BOOTSTRAP=127.0.0.1:9093, RISK_KAFKA_SASL_SSL_BOOTSTRAP=127.0.0.1:9094,
#               RISK_KAFKA_SCRAM_PASSWORD_FILE. A data directory made for other listeners (an
#               older servers.sh) is formatted anew; new certificates restart the broker.
#   prometheus  Prometheus (the distribution's package: apt-get install -y --no-install-recommends
#               prometheus) on 127.0.0.1:9095, config tools/prometheus/prometheus.yml, TSDB and
#               prometheus.log under $RISK_SERVERS_DIR/prometheus. It scrapes job "risk" at
#               127.0.0.1:9464/metrics every 1 s, where a test serves an engine's metrics
#               (RISK_PROMETHEUS_TARGET=127.0.0.1:9464; between tests that target is down).
#               Tests query it through RISK_PROMETHEUS_URL=http://127.0.0.1:9095. start waits for
#               /-/ready only; the first sample of a new target takes several seconds (~6 s seen
#               at a 1 s interval): poll /api/v1/query for up to ~15 s. Needs curl.
#   redis       Redis (Debian's redis-server: apt-get install -y --no-install-recommends
#               redis-server) on 127.0.0.1:6390 (plain) and 127.0.0.1:6391 (TLS: server.pem from
#               $tls_dir, clients must present a certificate signed by its ca.pem), one process,
#               no persistence, log under $RISK_SERVERS_DIR/redis. ACL (aclfile, 0600): user
#               `default` as before (no password, the plain tests), user `risk` with a random
#               password made at each start, written to $RISK_SERVERS_DIR/redis/acl.password
#               (0600). Tests find it through RISK_REDIS_URL=redis://127.0.0.1:6390/,
#               RISK_REDIS_TLS_URL=rediss://127.0.0.1:6391/, RISK_TLS_DIR and
#               RISK_REDIS_PASSWORD_FILE; the kill-mid-run test starts a redis-server of its own.
#   mlserver    MLServer 1.7.1 + its XGBoost runtime (venv target/mlserver-venv, made by
#               tools/fetch_test_deps.sh; RISK_MLSERVER_VENV overrides) on 127.0.0.1:8085 (gRPC
#               8086, metrics 8087), serving testdata/models/xgb_fraud.json as model "xgb-fraud"
#               (re-saved through xgboost.XGBClassifier so predict_proba is served; inputs
#               "input-0" FP32 [-1, 18], outputs predict_proba FP32 [-1, 2] declared). Model
#               repository and mlserver.log under $RISK_SERVERS_DIR/mlserver. Tests find it
#               through RISK_MLSERVER_URL=http://127.0.0.1:8085; the kill-mid-run test starts an
#               MLServer of its own from RISK_MLSERVER_VENV on the repository's model directory
#               (RISK_MLSERVER_REPO, default $RISK_SERVERS_DIR/mlserver/repo).
#               HTTPS in front of it (MLServer 1.7 has no TLS settings): stunnel (Debian's
#               stunnel4, installed by tools/setup.sh) on 127.0.0.1:8443 -> 127.0.0.1:8085, server
#               certificate $tls_dir/server.pem, client certificates REQUIRED and verified against
#               $tls_dir/ca.pem (mutual TLS); log and pid under $RISK_SERVERS_DIR/mlserver. Tests
#               find it through RISK_MLSERVER_TLS_URL=https://127.0.0.1:8443 and the certificates
#               through RISK_TLS_DIR.
#
# Environment: RISK_SERVERS_DIR (default <repo>/target/servers), RISK_KAFKA_LIBS (jar directory,
# default <repo>/target/kafka/libs; see tools/kafka/broker.sh), RISK_PROMETHEUS_START_TIMEOUT
# (seconds to wait for /-/ready, default 30), RISK_PROMETHEUS_STOP_TIMEOUT (default 30).
# Exit codes: 0 ok, 1 a server failed to start or stop, 2 usage, 3 status: some server not running.
#
# Adding a server: write NAME_start, NAME_stop and NAME_status functions (status prints one line
# and returns 0 when running) and append NAME to all_servers.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
servers_dir=${RISK_SERVERS_DIR:-$repo/target/servers}
broker=$here/kafka/broker.sh
# The throw-away CA and certificates of the TLS listeners (tools/certs.sh), made anew when
# missing or within a day of expiry. Tests find them through RISK_TLS_DIR ($servers_dir/tls).
tls_dir=${RISK_TLS_DIR:-$servers_dir/tls}
tls_certs() {
  [[ -s $tls_dir/server.pem ]] && openssl x509 -checkend 86400 -noout -in "$tls_dir/server.pem" >/dev/null \
    || "$here/certs.sh" "$tls_dir" >/dev/null
}

all_servers=(kafka prometheus redis mlserver)

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---- kafka ----------------------------------------------------------------------------------
kafka_port=9092
kafka_ssl_port=9093
kafka_sasl_ssl_port=9094
kafka_controller_port=9099
kafka_dir=$servers_dir/kafka
kafka_topics=("risk-audit 3" "risk-audit-test 1")
export RISK_KAFKA_CONTROLLER_PORT=$kafka_controller_port

kafka_start() {
  "$broker" fetch
  local want="listeners=PLAINTEXT://127.0.0.1:$kafka_port,SSL://127.0.0.1:$kafka_ssl_port,SASL_SSL://127.0.0.1:$kafka_sasl_ssl_port,CONTROLLER://127.0.0.1:$kafka_controller_port"
  if "$broker" status "$kafka_dir" >/dev/null 2>&1 \
     && ! cat "$tls_dir/server.key" "$tls_dir/server.pem" | cmp -s - "$kafka_dir/keystore.pem"; then
    echo "kafka: the certificates in $tls_dir changed: restarting the broker"
    "$broker" stop "$kafka_dir"
  fi
  if ! "$broker" status "$kafka_dir" >/dev/null 2>&1 && [[ -f $kafka_dir/server.properties ]] \
     && ! grep -qxF "$want" "$kafka_dir/server.properties"; then
    echo "kafka: $kafka_dir was made for other listeners: formatting it anew (test data only)"
    rm -rf "$kafka_dir/data" "$kafka_dir/server.properties"
  fi
  if "$broker" status "$kafka_dir" >/dev/null 2>&1; then
    echo "kafka: already running on 127.0.0.1:$kafka_port (pid $(<"$kafka_dir/broker.pid"), $kafka_dir)"
  elif listening "$kafka_port"; then
    echo "kafka: something answers on 127.0.0.1:$kafka_port already (not started here): reusing it"
  else
    "$broker" start "$kafka_port" "$kafka_dir" "$kafka_ssl_port" "$kafka_sasl_ssl_port" "$tls_dir"
  fi
  # also checks that what answers on the port is a Kafka broker
  local t
  for t in "${kafka_topics[@]}"; do
    # shellcheck disable=SC2086 # "NAME PARTITIONS"
    "$broker" topic "$kafka_port" $t \
      || { echo "servers.sh: kafka: cannot create topic ${t% *} on 127.0.0.1:$kafka_port" >&2; return 1; }
  done
}
kafka_stop() { "$broker" stop "$kafka_dir"; }
kafka_status() {
  if "$broker" status "$kafka_dir" >/dev/null 2>&1; then
    echo "kafka: running on 127.0.0.1:$kafka_port (pid $(<"$kafka_dir/broker.pid"), $kafka_dir)"
  elif listening "$kafka_port"; then
    echo "kafka: something answers on 127.0.0.1:$kafka_port (not started by servers.sh)"
  else
    echo "kafka: not running"
    return 1
  fi
}

# ---- redis ----------------------------------------------------------------------------------
redis_port=6390
redis_tls_port=6391
redis_dir=$servers_dir/redis
redis_ping() { redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG; }
# PONG over TLS with the client certificate as ACL user risk (password from the file, passed
# through the environment, never on a command line).
redis_tls_ping() {
  [[ -s $redis_dir/acl.password ]] || return 1
  REDISCLI_AUTH=$(<"$redis_dir/acl.password") redis-cli -p "$redis_tls_port" --tls \
    --cacert "$tls_dir/ca.pem" --cert "$tls_dir/client.pem" --key "$tls_dir/client.key" \
    --user risk --no-auth-warning ping 2>/dev/null | grep -q PONG
}
redis_pid() {
  [[ -f $redis_dir/redis.pid ]] || return 0
  local pid
  pid=$(<"$redis_dir/redis.pid")
  if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}
redis_start() {
  command -v redis-server >/dev/null \
    || { echo "servers.sh: redis: redis-server not found (apt-get install -y --no-install-recommends redis-server)" >&2; return 1; }
  (umask 077 && mkdir -p "$redis_dir") && chmod 700 "$redis_dir"
  if redis_ping && redis_tls_ping; then
    echo "redis: already answering on 127.0.0.1:$redis_port and TLS 127.0.0.1:$redis_tls_port"
    return 0
  fi
  if redis_ping; then
    # Ours but older (no TLS listener, or certificates made anew since): restart it.
    if [[ -n $(redis_pid) ]]; then
      redis_stop
    else
      echo "servers.sh: redis: something not started here answers on 127.0.0.1:$redis_port without" \
        "TLS on $redis_tls_port; stop it first" >&2
      return 1
    fi
  fi
  # A new password each start, 0600, written before the server reads its aclfile.
  local pw
  pw=$(openssl rand -hex 24)
  (umask 077 && printf '%s\n' "$pw" >"$redis_dir/acl.password.tmp" \
    && printf 'user default on nopass ~* &* +@all\nuser risk on >%s ~* &* +@all\n' "$pw" \
      >"$redis_dir/users.acl.tmp") || return 1
  mv -f "$redis_dir/acl.password.tmp" "$redis_dir/acl.password"
  mv -f "$redis_dir/users.acl.tmp" "$redis_dir/users.acl"
  # fd 8 closed: it may hold prometheus_lock's flock (start runs prometheus first), which a
  # daemon inheriting it would keep for its whole life.
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --tls-port "$redis_tls_port" --tls-cert-file "$tls_dir/server.pem" \
    --tls-key-file "$tls_dir/server.key" --tls-ca-cert-file "$tls_dir/ca.pem" \
    --tls-auth-clients yes --aclfile "$redis_dir/users.acl" \
    --dir "$redis_dir" --pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log" >/dev/null 8>&-
  local deadline=$((SECONDS + 20))
  until redis_ping && redis_tls_ping; do
    if (( SECONDS >= deadline )); then
      echo "servers.sh: redis: no PONG on 127.0.0.1:$redis_port and TLS $redis_tls_port after 20 s;" \
        "$redis_dir/redis.log:" >&2
      tail -n 20 "$redis_dir/redis.log" >&2 || true
      return 1
    fi
    sleep 0.05
  done
  echo "redis: ready on 127.0.0.1:$redis_port and TLS 127.0.0.1:$redis_tls_port" \
    "(pid $(<"$redis_dir/redis.pid"), ACL user risk, password in $redis_dir/acl.password)"
}
redis_stop() {
  if [[ -f $redis_dir/redis.pid ]]; then
    local pid
    pid=$(<"$redis_dir/redis.pid")
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$redis_dir/redis.pid"
    echo "redis: stopped (pid $pid)"
  else
    echo "redis: not running (none started here)"
  fi
}
redis_status() {
  if redis_ping && redis_tls_ping; then
    echo "redis: running on 127.0.0.1:$redis_port and TLS 127.0.0.1:$redis_tls_port"
  elif redis_ping; then
    echo "redis: running on 127.0.0.1:$redis_port, but TLS 127.0.0.1:$redis_tls_port does not answer"
    return 1
  else
    echo "redis: not running"
    return 1
  fi
}

# ---- prometheus -----------------------------------------------------------------------------
prometheus_port=9095
prometheus_url=http://127.0.0.1:$prometheus_port
prometheus_dir=$servers_dir/prometheus
prometheus_config=$here/prometheus/prometheus.yml
prometheus_start_timeout=${RISK_PROMETHEUS_START_TIMEOUT:-30}
prometheus_stop_timeout=${RISK_PROMETHEUS_STOP_TIMEOUT:-30}

# true while pid $1 runs (a zombie counts as gone)
prometheus_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local state
  { state=$(<"/proc/$1/stat"); } 2>/dev/null || return 1
  state=${state##*) }
  [[ ${state%% *} != Z ]]
}
# the pid of the Prometheus started here, or nothing (a stale pid file is removed)
prometheus_pid() {
  local pidfile=$prometheus_dir/prometheus.pid pid
  [[ -f $pidfile ]] || return 0
  pid=$(<"$pidfile")
  if [[ $pid =~ ^[0-9]+$ ]] && prometheus_alive "$pid" \
     && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--config.file=$prometheus_config"; then
    echo "$pid"
  else
    rm -f "$pidfile"
  fi
}
# start and stop take turns (parallel test setups): flock on $prometheus_dir/.lock, fd 8,
# which Prometheus itself does not inherit
prometheus_lock() {
  mkdir -p "$prometheus_dir" || return 1
  command -v flock >/dev/null || return 0
  exec 8>"$prometheus_dir/.lock"
  flock -w $((prometheus_start_timeout + prometheus_stop_timeout + 30)) 8 \
    || { echo "servers.sh: prometheus: timed out waiting for $prometheus_dir/.lock" >&2; return 1; }
}
prometheus_ready() { curl -fsS --max-time 2 -o /dev/null "$prometheus_url/-/ready" 2>/dev/null; }

prometheus_start() {
  command -v curl >/dev/null \
    || { echo "servers.sh: prometheus: curl not found (apt-get install -y curl)" >&2; return 1; }
  prometheus_lock || return 1
  local pid started=0
  pid=$(prometheus_pid)
  if [[ -n $pid ]]; then
    echo "prometheus: already running on 127.0.0.1:$prometheus_port (pid $pid, $prometheus_dir)"
  elif listening "$prometheus_port"; then
    echo "prometheus: something answers on 127.0.0.1:$prometheus_port already (not started here): reusing it"
  else
    if ! command -v prometheus >/dev/null; then
      echo "servers.sh: prometheus: the prometheus binary is not on PATH;" \
        "install it with: apt-get install -y --no-install-recommends prometheus" >&2
      return 1
    fi
    mkdir -p "$prometheus_dir/data" || return 1
    local log=$prometheus_dir/prometheus.log
    [[ -f $log ]] && mv -f "$log" "$log.prev"
    # stdin/stdout/stderr detached: a caller reading this script's output does not wait for
    # Prometheus to exit
    nohup prometheus --config.file="$prometheus_config" \
      --web.listen-address=127.0.0.1:"$prometheus_port" \
      --storage.tsdb.path="$prometheus_dir/data" </dev/null >"$log" 2>&1 8>&- &
    pid=$!
    disown "$pid"
    echo "$pid" >"$prometheus_dir/prometheus.pid"
    started=1
  fi
  # also checks that what answers on the port is a Prometheus
  local deadline=$((SECONDS + prometheus_start_timeout)) t0
  t0=$(date +%s%N)
  until prometheus_ready; do
    if (( started )) && ! prometheus_alive "$pid"; then
      rm -f "$prometheus_dir/prometheus.pid"
      echo "servers.sh: prometheus exited during startup; $prometheus_dir/prometheus.log:" >&2
      tail -n 40 "$prometheus_dir/prometheus.log" >&2
      return 1
    fi
    if (( SECONDS >= deadline )); then
      echo "servers.sh: prometheus: $prometheus_url/-/ready not ready after ${prometheus_start_timeout}s" >&2
      if (( started )); then
        echo "$prometheus_dir/prometheus.log:" >&2
        tail -n 40 "$prometheus_dir/prometheus.log" >&2
        kill -KILL "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while prometheus_alive "$pid" && (( SECONDS < deadline )); do sleep 0.1; done
        rm -f "$prometheus_dir/prometheus.pid"
      fi
      return 1
    fi
    sleep 0.1
  done
  if (( started )); then
    echo "prometheus: ready on 127.0.0.1:$prometheus_port (pid $pid, $prometheus_dir," \
      "$((($(date +%s%N) - t0) / 1000000)) ms; scrapes 127.0.0.1:9464/metrics)"
  fi
}
prometheus_stop() {
  [[ -d $prometheus_dir ]] || { echo "prometheus: not running ($prometheus_dir does not exist)"; return 0; }
  prometheus_lock || return 1
  local pid
  pid=$(prometheus_pid)
  if [[ -z $pid ]]; then
    echo "prometheus: not running (none started here, $prometheus_dir)"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + prometheus_stop_timeout))
  while prometheus_alive "$pid" && (( SECONDS < deadline )); do sleep 0.1; done
  if prometheus_alive "$pid"; then
    echo "servers.sh: prometheus (pid $pid) still up after ${prometheus_stop_timeout}s: KILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while prometheus_alive "$pid" && (( SECONDS < deadline )); do sleep 0.1; done
    if prometheus_alive "$pid"; then
      echo "servers.sh: prometheus (pid $pid) survived KILL" >&2
      return 1
    fi
  fi
  rm -f "$prometheus_dir/prometheus.pid"
  echo "prometheus: stopped (pid $pid, $prometheus_dir)"
}
prometheus_status() {
  local pid
  pid=$(prometheus_pid)
  if [[ -n $pid ]]; then
    echo "prometheus: running on 127.0.0.1:$prometheus_port (pid $pid, $prometheus_dir)"
  elif listening "$prometheus_port"; then
    echo "prometheus: something answers on 127.0.0.1:$prometheus_port (not started by servers.sh)"
  else
    echo "prometheus: not running"
    return 1
  fi
}

# ---- mlserver -------------------------------------------------------------------------------
mlserver_port=8085
mlserver_dir=$servers_dir/mlserver
mlserver_venv=${RISK_MLSERVER_VENV:-$repo/target/mlserver-venv}
mlserver_ready() { curl -sf -o /dev/null "http://127.0.0.1:$mlserver_port/v2/models/xgb-fraud/ready"; }
mlserver_pid() {
  [[ -f $mlserver_dir/mlserver.pid ]] || return 0
  local pid
  pid=$(<"$mlserver_dir/mlserver.pid")
  if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}
mlserver_start() {
  [[ -x $mlserver_venv/bin/mlserver ]] \
    || { echo "servers.sh: mlserver: $mlserver_venv/bin/mlserver missing (run tools/fetch_test_deps.sh)" >&2; return 1; }
  command -v curl >/dev/null || { echo "servers.sh: mlserver: curl not found" >&2; return 1; }
  if mlserver_ready; then
    echo "mlserver: already serving xgb-fraud on 127.0.0.1:$mlserver_port"
    mlserver_tls_start
    return
  fi
  local model=$mlserver_dir/repo/xgb-fraud
  mkdir -p "$model"
  # XGBClassifier.save_model records the estimator type, so MLServer serves predict_proba.
  "$mlserver_venv/bin/python" - "$repo/testdata/models/xgb_fraud.json" "$model/model.json" <<'PY'
import sys, xgboost
c = xgboost.XGBClassifier()
c.load_model(sys.argv[1])
c.save_model(sys.argv[2])
PY
  cat > "$model/model-settings.json" <<'JSON'
{"name": "xgb-fraud", "implementation": "mlserver_xgboost.XGBoostModel",
 "parameters": {"uri": "./model.json", "version": "1"},
 "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 18]}],
 "outputs": [{"name": "predict_proba", "datatype": "FP32", "shape": [-1, 2]}]}
JSON
  cat > "$mlserver_dir/repo/settings.json" <<JSON
{"host": "127.0.0.1", "http_port": $mlserver_port, "grpc_port": $((mlserver_port + 1)),
 "metrics_port": $((mlserver_port + 2)), "parallel_workers": 0, "debug": false}
JSON
  # fd 8 closed (see redis_start); a plain cd, then `cmd &`, so $! is mlserver itself.
  cd "$mlserver_dir/repo"
  "$mlserver_venv/bin/mlserver" start . >"$mlserver_dir/mlserver.log" 2>&1 8>&- &
  echo $! >"$mlserver_dir/mlserver.pid"
  cd "$repo"
  local deadline=$((SECONDS + 60))
  until mlserver_ready; do
    if [[ -z $(mlserver_pid) ]] || (( SECONDS >= deadline )); then
      echo "servers.sh: mlserver: xgb-fraud not ready on 127.0.0.1:$mlserver_port; $mlserver_dir/mlserver.log:" >&2
      tail -n 30 "$mlserver_dir/mlserver.log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
  echo "mlserver: ready on 127.0.0.1:$mlserver_port (pid $(<"$mlserver_dir/mlserver.pid"), $mlserver_dir)"
  mlserver_tls_start
}
# The TLS-terminating proxy (stunnel, mutual TLS) in front of MLServer's HTTP port.
mlserver_tls_port=8443
mlserver_tls_ready() {
  curl -sf -o /dev/null --cacert "$tls_dir/ca.pem" --cert "$tls_dir/client.pem" --key "$tls_dir/client.key" \
    "https://127.0.0.1:$mlserver_tls_port/v2/models/xgb-fraud/ready"
}
mlserver_tls_pid() {
  [[ -f $mlserver_dir/stunnel.pid ]] || return 0
  local pid
  pid=$(<"$mlserver_dir/stunnel.pid")
  if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}
mlserver_tls_start() {
  if mlserver_tls_ready; then
    echo "mlserver: already serving HTTPS (mutual TLS) on 127.0.0.1:$mlserver_tls_port"
    return 0
  fi
  local stunnel
  stunnel=$(command -v stunnel4 || command -v stunnel) \
    || { echo "servers.sh: mlserver: stunnel4 not found (tools/setup.sh installs it)" >&2; return 1; }
  mkdir -p "$mlserver_dir"
  cat > "$mlserver_dir/stunnel.conf" <<CONF
foreground = yes
pid =
output = $mlserver_dir/stunnel.log
[mlserver-tls]
accept = 127.0.0.1:$mlserver_tls_port
connect = 127.0.0.1:$mlserver_port
cert = $tls_dir/server.pem
key = $tls_dir/server.key
CAfile = $tls_dir/ca.pem
verifyChain = yes
requireCert = yes
sslVersionMin = TLSv1.2
CONF
  "$stunnel" "$mlserver_dir/stunnel.conf" >>"$mlserver_dir/stunnel.log" 2>&1 8>&- &
  echo $! >"$mlserver_dir/stunnel.pid"
  local deadline=$((SECONDS + 20))
  until mlserver_tls_ready; do
    if [[ -z $(mlserver_tls_pid) ]] || (( SECONDS >= deadline )); then
      echo "servers.sh: mlserver: HTTPS not ready on 127.0.0.1:$mlserver_tls_port; $mlserver_dir/stunnel.log:" >&2
      tail -n 30 "$mlserver_dir/stunnel.log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
  echo "mlserver: HTTPS (mutual TLS) on 127.0.0.1:$mlserver_tls_port (stunnel pid $(<"$mlserver_dir/stunnel.pid"))"
}
mlserver_tls_stop() {
  local pid
  pid=$(mlserver_tls_pid)
  rm -f "$mlserver_dir/stunnel.pid"
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
  echo "mlserver: HTTPS proxy stopped (stunnel pid $pid)"
}
mlserver_stop() {
  mlserver_tls_stop
  local pid
  pid=$(mlserver_pid)
  if [[ -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$mlserver_dir/mlserver.pid"
    echo "mlserver: stopped (pid $pid)"
  else
    rm -f "$mlserver_dir/mlserver.pid"
    echo "mlserver: not running (none started here)"
  fi
}
mlserver_status() {
  local pid
  pid=$(mlserver_pid)
  if mlserver_ready; then
    echo "mlserver: serving xgb-fraud on 127.0.0.1:$mlserver_port${pid:+ (pid $pid)}"
    if mlserver_tls_ready; then
      echo "mlserver: serving HTTPS (mutual TLS) on 127.0.0.1:$mlserver_tls_port"
    else
      echo "mlserver: HTTPS proxy on 127.0.0.1:$mlserver_tls_port not running"
      return 1
    fi
  else
    echo "mlserver: not running"
    return 1
  fi
}

# ---- dispatch -------------------------------------------------------------------------------
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

(( $# >= 1 )) || usage
cmd=$1
shift
names=("$@")
(( ${#names[@]} )) || names=("${all_servers[@]}")
for n in "${names[@]}"; do
  [[ " ${all_servers[*]} " == *" $n "* ]] || { echo "servers.sh: unknown server: $n" >&2; usage; }
done

case "$cmd" in
  start)
    tls_certs || { echo "servers.sh: cannot make the test certificates in $tls_dir" >&2; exit 1; }
    for n in "${names[@]}"; do
      "${n}_start" || { echo "servers.sh: $n failed to start" >&2; exit 1; }
    done
    ;;
  stop) # reverse order; stop every one even when one fails
    rc=0
    for ((i = ${#names[@]} - 1; i >= 0; i--)); do
      "${names[i]}_stop" || { echo "servers.sh: ${names[i]} failed to stop" >&2; rc=1; }
    done
    exit "$rc"
    ;;
  status)
    rc=0
    for n in "${names[@]}"; do "${n}_status" || rc=3; done
    exit "$rc"
    ;;
  -h | --help | help) usage ;;
  *) echo "servers.sh: unknown command: $cmd" >&2; usage ;;
esac
