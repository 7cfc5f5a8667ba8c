#!/usr/bin/env bash
# Builds tests/c/stress.c against target/release/librisk_ffi.so and runs it under valgrind:
# memcheck (leaks of kind "definite" are errors) and helgrind, each with the subscription
# freed first and with the engine freed first, while every thread still calls.
#
#   bash risk-ffi/tests/c/run_valgrind.sh            # short: 4 deciders x 100 rounds (CI)
#   bash risk-ffi/tests/c/run_valgrind.sh --long     # 8 deciders x 10000 rounds
#   bash risk-ffi/tests/c/run_valgrind.sh --no-supp  # helgrind without valgrind.supp, every
#                                                    # report printed (for triage; never fails)
# DECIDERS=n ROUNDS=n override the counts. Needs gcc and valgrind (Debian/Ubuntu:
# apt-get install -y valgrind) and a built library (cargo build --release -p risk-ffi).
# Valgrind runs at nice 19: the machines this runs on are shared.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
lib="$root/target/release"

mode=short
for a in "$@"; do
  case "$a" in
    --long) mode=long ;;
    --no-supp) mode=nosupp ;;
    *) echo "run_valgrind.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
case "$mode" in
  long) deciders="${DECIDERS:-8}" rounds="${ROUNDS:-10000}" ;;
  *) deciders="${DECIDERS:-4}" rounds="${ROUNDS:-100}" ;;
esac

if ! command -v valgrind >/dev/null 2>&1; then
  echo "run_valgrind.sh: FAIL: valgrind not found (install it: apt-get install -y valgrind)" >&2
  exit 1
fi
command -v gcc >/dev/null 2>&1 || { echo "run_valgrind.sh: FAIL: gcc not found" >&2; exit 1; }
test -f "$lib/librisk_ffi.so" || {
  echo "run_valgrind.sh: FAIL: $lib/librisk_ffi.so missing (cargo build --release -p risk-ffi)" >&2
  exit 1
}

tmp="$(mktemp -d "${TMPDIR:-/tmp}/risk-valgrind.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
gcc -std=c11 -Wall -Wextra -Werror -g -O1 -pthread -I "$root/risk-ffi/include" \
  "$here/stress.c" -o "$tmp/stress" \
  -L "$lib" "-Wl,--disable-new-dtags,-rpath,$lib" -lrisk_ffi -lm

echo "run_valgrind.sh: $(valgrind --version), $mode mode: $deciders deciders x $rounds rounds"
# --fair-sched=yes: valgrind runs one thread at a time, and its default lock is unfair: a
# thread that never blocks (a poller with timeout 0) can take it again and again and starve
# the deciders for minutes (seen: 10+ min for the short mode). The ticket lock is fair.
common=(--error-exitcode=99 --num-callers=64 --fair-sched=yes --suppressions="$here/valgrind.supp")

# run NAME ORDER VALGRIND-ARGS...: runs stress under valgrind; fails on a non-zero exit.
run() {
  local name="$1" order="$2"
  shift 2
  local log="$tmp/$name-$order.log" start end rc=0
  mkdir -p "$tmp/work-$name-$order"
  start=$(date +%s)
  env -u LD_LIBRARY_PATH nice -n 19 valgrind "$@" --log-file="$log" \
    "$tmp/stress" "$tmp/work-$name-$order" "$deciders" "$rounds" "$order" \
    >"$tmp/$name-$order.out" 2>&1 || rc=$?
  end=$(date +%s)
  echo "==> $name ($order): exit $rc, $((end - start)) s"
  sed 's/^/    /' "$tmp/$name-$order.out"
  grep -E 'ERROR SUMMARY|(definitely|indirectly|possibly) lost:' "$log" | sed 's/^==[0-9]*==/    valgrind:/' | uniq
  if [ "$mode" = long ]; then
    grep -E 'used_suppression' "$log" | sed 's/^--[0-9]*--/    valgrind:/' || true
  fi
  if [ "$rc" -ne 0 ]; then
    echo "run_valgrind.sh: FAIL: $name ($order) exited $rc (99: valgrind errors; 1: unexpected result codes). Log:" >&2
    cat "$log" >&2
    exit 1
  fi
}

if [ "$mode" = nosupp ]; then
  env -u LD_LIBRARY_PATH nice -n 19 valgrind --tool=helgrind --num-callers=64 --fair-sched=yes \
    "$tmp/stress" "$tmp" "$deciders" "$rounds" || true
  exit 0
fi

verbose=()
[ "$mode" = long ] && verbose=(-v)
for order in sub-first engine-first; do
  run memcheck "$order" --tool=memcheck "${common[@]}" "${verbose[@]}" \
    --leak-check=full --errors-for-leak-kinds=definite
  run helgrind "$order" --tool=helgrind "${common[@]}" "${verbose[@]}"
done
echo "run_valgrind.sh: all runs clean"
