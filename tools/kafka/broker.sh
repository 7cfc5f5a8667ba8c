#!/usr/bin/env bash
# Single-node Kafka 4.4.0 (KRaft, broker+controller in one JVM) from Maven Central jars, for CI
# and the integration tests. No Kafka tarball is needed: tools/kafka/pom.xml lists the jars.
#
#   broker.sh fetch                         jars -> $RISK_KAFKA_LIBS (idempotent; fast when present)
#   broker.sh start PORT DIR [SSL_PORT SASL_SSL_PORT TLS_DIR]
#                                           start (formats DIR if fresh, else reuses its data);
#                                           returns once the broker is ready. With the TLS
#                                           arguments, also an SSL listener (client certificate
#                                           required) and a SASL_SSL SCRAM-SHA-512 listener, see below
#   broker.sh stop DIR                      TERM, then KILL after a bounded wait (idempotent)
#   broker.sh kill9 DIR                     kill -9 (outage tests; DIR keeps its data)
#   broker.sh status DIR                    exit 0 when DIR's broker runs, 3 when not
#   broker.sh topic PORT NAME [PARTITIONS]  create a topic (idempotent; default 1 partition)
#   broker.sh produce PORT TOPIC            stdin lines "KEY<TAB>VALUE" -> TOPIC (acks=all)
#   broker.sh consume PORT TOPIC N TIMEOUT_MS
#                                           from the beginning, at most N records, exits after
#                                           TIMEOUT_MS without a record; stdout, one line a record:
#                                           "HEADERS<TAB>KEY" (HEADERS "k1:v1,k2:v2" or NO_HEADERS)
#
# The listener is PLAINTEXT on 127.0.0.1:PORT, the controller on 127.0.0.1:PORT+1
# (RISK_KAFKA_CONTROLLER_PORT overrides). DIR holds server.properties, data/ (log.dirs),
# broker.log (broker.log.prev: the previous run's) and broker.pid.
#
# TLS (start with SSL_PORT SASL_SSL_PORT TLS_DIR; TLS_DIR as tools/certs.sh writes it):
#   SSL://127.0.0.1:SSL_PORT            TLS, server.pem/server.key, client certificates required
#                                       and checked against ca.pem (ssl.client.auth=required)
#   SASL_SSL://127.0.0.1:SASL_SSL_PORT  TLS (no client certificate) + SASL SCRAM-SHA-512, user
#                                       "risk"; its password is random, made at each start and
#                                       written to DIR/scram.password (0600)
# PEM key and trust stores (DIR/keystore.pem: server key + certificate, 0600). The controller
# and the inter-broker listener stay PLAINTEXT on loopback; there is no authorizer (no ACLs).
#
# Environment:
#   RISK_KAFKA_LIBS           jar directory (default <repo>/target/kafka/libs)
#   RISK_KAFKA_START_TIMEOUT  seconds start waits for "Kafka Server started" (default 60)
#   RISK_KAFKA_STOP_TIMEOUT   seconds stop waits after TERM before KILL (default 30)
#   RISK_KAFKA_JAVA_OPTS      extra JVM options for the broker (after the defaults: they win)
#
# Exit codes: 0 ok; 1 failure (the broker log's tail is printed); 2 usage; 3 status: not running.
# Tools' logs (WARN and up) go to stderr, their data to stdout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
libs=${RISK_KAFKA_LIBS:-$repo/target/kafka/libs}
log4j=$here/log4j2.xml
start_timeout=${RISK_KAFKA_START_TIMEOUT:-60}
stop_timeout=${RISK_KAFKA_STOP_TIMEOUT:-30}
# The jars fetch checks for; a directory holding all of them counts as fetched.
key_jars=(kafka_2.13-4.4.0.jar kafka-tools-4.4.0.jar kafka-clients-4.4.0.jar log4j-slf4j-impl-2.25.5.jar)

die() { echo "broker.sh: $*" >&2; exit 1; }
usage() {
  sed -n '/^#   broker.sh /,/^#$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
is_port() { [[ $1 =~ ^[0-9]+$ ]] && (( $1 > 0 && $1 < 65535 )); }
is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
# true when something accepts TCP connections on 127.0.0.1:$1
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# true while pid $1 runs (a zombie counts as gone: a container's pid 1 may never reap it;
# and while any of its threads runs: after kill -9 the main thread turns zombie before the rest
# have exited and closed the listening sockets)
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local stat state
  for stat in /proc/"$1"/task/*/stat; do
    { read -r state <"$stat"; } 2>/dev/null || continue
    state=${state##*) } # after "(comm) ": comm may hold spaces and parentheses
    [[ ${state%% *} == Z ]] || return 0
  done
  return 1
}
# the running broker's pid for DIR $1, or nothing (a stale pid file is removed)
broker_pid() {
  local pidfile=$1/broker.pid pid
  [[ -f $pidfile ]] || return 0
  pid=$(<"$pidfile")
  if is_uint "$pid" && alive "$pid" \
     && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "kafka.Kafka $1/server.properties"; then
    echo "$pid"
  else
    rm -f "$pidfile"
  fi
}
need_libs() {
  local j
  for j in "${key_jars[@]}"; do
    [[ -f $libs/$j ]] || die "Kafka jars missing in $libs ($j): run tools/kafka/broker.sh fetch"
  done
}
java_tool() { # CLASS ARGS...: a Kafka CLI tool, logs to stderr
  need_libs
  java -Xmx256m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$log4j" \
    -Dlog4j2.shutdownHookEnabled=false \
    -cp "$libs"'/*' "$@"
}
abs_dir() { mkdir -p "$1" && (cd "$1" && pwd); }
# start, stop and kill9 on one DIR take turns (parallel test setups): flock on DIR/.broker.lock,
# fd 9, which the broker itself does not inherit
lock_dir() {
  command -v flock >/dev/null || return 0
  exec 9>"$1/.broker.lock"
  flock -w $((start_timeout + stop_timeout + 30)) 9 || die "timed out waiting for $1/.broker.lock"
}

cmd_fetch() {
  local j missing=0 tmp
  for j in "${key_jars[@]}"; do [[ -f $libs/$j ]] || missing=1; done
  if (( !missing )); then
    echo "kafka jars present in $libs"
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (Maven fetches the Kafka jars from Maven Central)"
  mkdir -p "$(dirname "$libs")"
  tmp=$(mktemp -d "$(dirname "$libs")/.kafka-libs.XXXXXX")
  local t0=$SECONDS
  # copied into a temporary directory first: an interrupted fetch leaves no partial $libs
  if ! mvn -q -B -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies \
       -DoutputDirectory="$tmp" >"$tmp.mvn.log" 2>&1; then
    cat "$tmp.mvn.log" >&2
    rm -rf "$tmp" "$tmp.mvn.log"
    die "mvn dependency:copy-dependencies failed"
  fi
  rm -f "$tmp.mvn.log"
  if [[ -d $libs ]]; then
    mv -f "$tmp"/*.jar "$libs"/ && rmdir "$tmp"
  else
    mv "$tmp" "$libs"
  fi
  echo "kafka jars fetched into $libs ($(ls "$libs" | wc -l) files, $((SECONDS - t0)) s)"
}

# the listeners= line for PORT [SSL_PORT SASL_SSL_PORT]
listeners_line() {
  local cport=${RISK_KAFKA_CONTROLLER_PORT:-$(($1 + 1))}
  if (( $# == 3 )); then
    echo "listeners=PLAINTEXT://127.0.0.1:$1,SSL://127.0.0.1:$2,SASL_SSL://127.0.0.1:$3,CONTROLLER://127.0.0.1:$cport"
  else
    echo "listeners=PLAINTEXT://127.0.0.1:$1,CONTROLLER://127.0.0.1:$cport"
  fi
}

write_properties() { # PORT DIR [SSL_PORT SASL_SSL_PORT TLS_DIR]
  local port=$1 dir=$2 cport=${RISK_KAFKA_CONTROLLER_PORT:-$(($1 + 1))}
  local advertised="PLAINTEXT://127.0.0.1:$port" map="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
  if (( $# == 5 )); then
    advertised+=",SSL://127.0.0.1:$3,SASL_SSL://127.0.0.1:$4"
    map+=",SSL:SSL,SASL_SSL:SASL_SSL"
  fi
  cat >"$dir/server.properties.new" <<EOF
# written by tools/kafka/broker.sh start $*
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
$(listeners_line "$port" "${@:3:2}")
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
# one partition, not 50: the first consumer group on a fresh broker joins ~2 s sooner
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# After kill -9 the restarted broker cannot register until the dead one's session expires
# (DUPLICATE_BROKER_REGISTRATION): 4 s instead of 9 s brings that restart from ~15 s to ~8 s.
broker.session.timeout.ms=4000
broker.heartbeat.interval.ms=1000
EOF
  if (( $# == 5 )); then
    local tls=$5
    # PEM stores (KIP-651): the key store is the server's PKCS#8 key and its certificate
    (umask 077 && cat "$tls/server.key" "$tls/server.pem" >"$dir/keystore.pem")
    cat >>"$dir/server.properties.new" <<EOF
ssl.keystore.type=PEM
ssl.keystore.location=$dir/keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
  fi
  mv -f "$dir/server.properties.new" "$dir/server.properties"
}

cmd_start() {
  (( $# == 2 || $# == 5 )) || usage
  local port=$1 dir pid tls_args=()
  is_port "$port" || die "bad PORT: $port"
  dir=$(abs_dir "$2")
  if (( $# == 5 )); then
    is_port "$3" || die "bad SSL_PORT: $3"
    is_port "$4" || die "bad SASL_SSL_PORT: $4"
    local f
    for f in ca.pem server.pem server.key; do
      [[ -s $5/$f ]] || die "TLS_DIR $5 has no $f (make it with tools/certs.sh)"
    done
    tls_args=("$3" "$4" "$(cd "$5" && pwd)")
  fi
  need_libs
  lock_dir "$dir"
  command -v java >/dev/null || die "java not found (Kafka 4.4 needs Java 17+)"
  # A formatted DIR keeps its port: the controller's endpoint is in its KRaft bootstrap records.
  if [[ -f $dir/data/meta.properties && -f $dir/server.properties ]] \
     && ! grep -qxF "$(listeners_line "$port" "${tls_args[@]:0:2}")" "$dir/server.properties"; then
    die "$dir was set up for another port ($(grep '^listeners=' "$dir/server.properties")); use that port or a fresh DIR"
  fi
  pid=$(broker_pid "$dir")
  if [[ -n $pid ]]; then
    echo "kafka broker already running on 127.0.0.1:$port (pid $pid, $dir)"
    return 0
  fi
  local p
  for p in "$port" "${RISK_KAFKA_CONTROLLER_PORT:-$((port + 1))}" "${tls_args[@]:0:2}"; do
    listening "$p" && die "127.0.0.1:$p is already in use"
  done
  write_properties "$port" "$dir" "${tls_args[@]}"
  if [[ ! -f $dir/data/meta.properties ]]; then
    rm -rf "$dir/data" # never formatted (or half formatted): nothing to keep
    local cluster_id
    cluster_id=$(java_tool kafka.tools.StorageTool random-uuid)
    java_tool kafka.tools.StorageTool format --standalone -t "$cluster_id" \
      -c "$dir/server.properties" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; die "kafka storage format failed ($dir)"; }
  fi
  [[ -f $dir/broker.log ]] && mv -f "$dir/broker.log" "$dir/broker.log.prev"
  local t0 opts
  t0=$(date +%s%N)
  # shellcheck disable=SC2206 # RISK_KAFKA_JAVA_OPTS is split on spaces on purpose
  opts=(${RISK_KAFKA_JAVA_OPTS:-})
  # stdin/stdout/stderr detached: a caller reading this script's output (a test's
  # Command::output()) does not wait for the broker to exit
  nohup java -Xmx512m -Xms64m -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dlog4j2.shutdownHookEnabled=false -Dlog4j2.configurationFile="$log4j" \
    "${opts[@]}" -cp "$libs"'/*' \
    kafka.Kafka "$dir/server.properties" </dev/null >"$dir/broker.log" 2>&1 9>&- &
  pid=$!
  disown "$pid" # no "Killed" job report from this shell
  echo "$pid" >"$dir/broker.pid"
  local deadline=$((SECONDS + start_timeout))
  while ! grep -q "Kafka Server started" "$dir/broker.log" 2>/dev/null; do
    if ! alive "$pid"; then
      rm -f "$dir/broker.pid"
      echo "broker.sh: kafka broker exited during startup; $dir/broker.log:" >&2
      tail -n 40 "$dir/broker.log" >&2
      exit 1
    fi
    if (( SECONDS >= deadline )); then
      echo "broker.sh: kafka broker not ready after ${start_timeout}s; $dir/broker.log:" >&2
      tail -n 40 "$dir/broker.log" >&2
      kill -9 "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 10))
      while alive "$pid" && (( SECONDS < deadline )); do sleep 0.1; done
      rm -f "$dir/broker.pid"
      exit 1
    fi
    sleep 0.1
  done
  (( ${#tls_args[@]} )) && scram_user "$port" "$dir"
  local ms=$((($(date +%s%N) - t0) / 1000000))
  echo "kafka broker ready on 127.0.0.1:$port${tls_args:+ (SSL ${tls_args[0]}, SASL_SSL ${tls_args[1]})} (pid $pid, $dir, ${ms} ms)"
}

# A new random password for SCRAM-SHA-512 user "risk", set through the PLAINTEXT listener
# (kafka-configs) and written to DIR/scram.password (0600). The tool takes it on its command
# line for a few seconds (its --add-config-file mangles SCRAM keys): a throw-away test password
# on a test machine. The tool's output is kept out of sight: it repeats the password on errors.
scram_user() { # PORT DIR
  local port=$1 dir=$2 pw
  pw=$(openssl rand -hex 24)
  (umask 077 && printf '%s\n' "$pw" >"$dir/scram.password.new")
  if ! java_tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$port" \
       --command-config "$here/admin.properties" --alter --entity-type users --entity-name risk \
       --add-config "SCRAM-SHA-512=[iterations=8192,password=$pw]" >"$dir/scram.log" 2>&1; then
    sed "s/$pw/[redacted]/g" "$dir/scram.log" >&2
    rm -f "$dir/scram.password.new" "$dir/scram.log"
    die "cannot create the SCRAM user (127.0.0.1:$port)"
  fi
  rm -f "$dir/scram.log"
  mv -f "$dir/scram.password.new" "$dir/scram.password"
}

cmd_stop() {
  (( $# == 1 )) || usage
  local dir pid
  [[ -d $1 ]] || { echo "kafka broker not running ($1 does not exist)"; return 0; }
  dir=$(abs_dir "$1")
  lock_dir "$dir"
  pid=$(broker_pid "$dir")
  if [[ -z $pid ]]; then
    echo "kafka broker not running ($dir)"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + stop_timeout))
  while alive "$pid" && (( SECONDS < deadline )); do sleep 0.1; done
  if alive "$pid"; then
    echo "broker.sh: kafka broker (pid $pid) still up after ${stop_timeout}s: KILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while alive "$pid" && (( SECONDS < deadline )); do sleep 0.1; done
    alive "$pid" && die "kafka broker (pid $pid) survived KILL"
  fi
  rm -f "$dir/broker.pid"
  echo "kafka broker stopped (pid $pid, $dir)"
}

cmd_kill9() {
  (( $# == 1 )) || usage
  local dir pid
  [[ -d $1 ]] || { echo "kafka broker not running ($1 does not exist)"; return 0; }
  dir=$(abs_dir "$1")
  lock_dir "$dir"
  pid=$(broker_pid "$dir")
  if [[ -z $pid ]]; then
    echo "kafka broker not running ($dir)"
    return 0
  fi
  kill -KILL "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  while alive "$pid" && (( SECONDS < deadline )); do sleep 0.05; done
  alive "$pid" && die "kafka broker (pid $pid) survived KILL"
  rm -f "$dir/broker.pid"
  echo "kafka broker killed (pid $pid, $dir)"
}

cmd_status() {
  (( $# == 1 )) || usage
  local dir pid
  [[ -d $1 ]] || { echo "kafka broker not running ($1 does not exist)"; exit 3; }
  dir=$(abs_dir "$1")
  pid=$(broker_pid "$dir")
  if [[ -z $pid ]]; then
    echo "kafka broker not running ($dir)"
    exit 3
  fi
  echo "kafka broker running (pid $pid, $(grep '^listeners=' "$dir/server.properties"), $dir)"
}

cmd_topic() {
  (( $# == 2 || $# == 3 )) || usage
  local port=$1 name=$2 parts=${3:-1}
  is_port "$port" || die "bad PORT: $port"
  is_uint "$parts" && (( parts > 0 )) || die "bad PARTITIONS: $parts"
  java_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
    --command-config "$here/admin.properties" \
    --create --if-not-exists --topic "$name" --partitions "$parts" --replication-factor 1
}

cmd_produce() {
  (( $# == 2 )) || usage
  local port=$1 topic=$2
  is_port "$port" || die "bad PORT: $port"
  java_tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "127.0.0.1:$port" \
    --topic "$topic" --request-required-acks all \
    --reader-property parse.key=true --reader-property "key.separator="$'\t'
}

cmd_consume() {
  (( $# == 4 )) || usage
  local port=$1 topic=$2 n=$3 timeout_ms=$4
  is_port "$port" || die "bad PORT: $port"
  is_uint "$n" && (( n > 0 )) || die "bad N: $n"
  is_uint "$timeout_ms" || die "bad TIMEOUT_MS: $timeout_ms"
  java_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "127.0.0.1:$port" \
    --topic "$topic" --from-beginning --max-messages "$n" --timeout-ms "$timeout_ms" \
    --command-property group.protocol=consumer \
    --formatter-property print.key=true --formatter-property print.headers=true \
    --formatter-property print.value=false --formatter-property "key.separator="$'\t'
}

(( $# >= 1 )) || usage
cmd=$1
shift
case "$cmd" in
  fetch) (( $# == 0 )) || usage; cmd_fetch ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  kill9) cmd_kill9 "$@" ;;
  status) cmd_status "$@" ;;
  topic) cmd_topic "$@" ;;
  produce) cmd_produce "$@" ;;
  consume) cmd_consume "$@" ;;
  -h | --help | help) usage ;;
  *) echo "broker.sh: unknown command: $cmd" >&2; usage ;;
esac
