#!/usr/bin/env bash
# The servers the test suite uses, started once and shared by every test.
#
#   tools/servers.sh start  [NAME...]   start (idempotent: a server already answering is reused)
#   tools/servers.sh stop   [NAME...]   stop what start started here (idempotent)
#   tools/servers.sh status [NAME...]   one line per server; exit 0 when all run, 3 when not
#
# NAME defaults to all of: kafka. Servers:
#   kafka  Kafka 4.4.0 KRaft broker on 127.0.0.1:9092 (controller 127.0.0.1:9093), data under
#          $RISK_SERVERS_DIR/kafka; topics risk-audit (3 partitions), risk-audit-test (1).
#          Tests find it through RISK_KAFKA_BOOTSTRAP=127.0.0.1:9092.
#
# Environment: RISK_SERVERS_DIR (default <repo>/target/servers), RISK_KAFKA_LIBS (jar directory,
# default <repo>/target/kafka/libs; see tools/kafka/broker.sh).
# Exit codes: 0 ok, 1 a server failed to start or stop, 2 usage, 3 status: some server not running.
#
# Adding a server: write NAME_start, NAME_stop and NAME_status functions (status prints one line
# and returns 0 when running) and append NAME to all_servers.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
servers_dir=${RISK_SERVERS_DIR:-$repo/target/servers}
broker=$here/kafka/broker.sh

all_servers=(kafka)

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---- kafka ----------------------------------------------------------------------------------
kafka_port=9092
kafka_dir=$servers_dir/kafka
kafka_topics=("risk-audit 3" "risk-audit-test 1")

kafka_start() {
  "$broker" fetch
  if "$broker" status "$kafka_dir" >/dev/null 2>&1; then
    echo "kafka: already running on 127.0.0.1:$kafka_port (pid $(<"$kafka_dir/broker.pid"), $kafka_dir)"
  elif listening "$kafka_port"; then
    echo "kafka: something answers on 127.0.0.1:$kafka_port already (not started here): reusing it"
  else
    "$broker" start "$kafka_port" "$kafka_dir"
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
