#!/usr/bin/env bash
# Instructions per decision of the in-process state stage (`state_scale/` bench, 50
# cards: every record in cache), counted by valgrind's callgrind. A count of
# instructions is the same on every run of the same binary, where this machine's
# shared cores move criterion's medians by ±10%: a change to the decide path's
# arithmetic shows here first.
#
#   tools/state_instructions.sh                # builds bench_main, counts it
#   tools/state_instructions.sh path/to/bench  # counts a binary kept aside
#
# Needs valgrind (`apt-get install -y --no-install-recommends valgrind`). Prints the
# decisions counted, the instructions per decision of `StateEngine::apply` (inclusive)
# and of the functions it calls that are not inlined.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
bin=${1:-}
if [ -z "$bin" ]; then
    bin=$(cargo bench -p risk-benches --bench bench_main --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "bench_main" and m.get("executable"):
        print(m["executable"])')
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" "$bin" \
    --bench '^state_scale/read_update_10_features_50_cards$' --profile-time 3 >"$out/log" 2>&1 \
    || { cat "$out/log" >&2; exit 1; }
python3 - "$out/cg.out" <<'PY'
import collections, re, sys

names, incl, calls = {}, collections.Counter(), collections.Counter()
callee, pending = None, False
for line in open(sys.argv[1]):
    m = re.match(r"(cfn|fn)=\((\d+)\)(?: (.*))?", line)
    if m:
        if m.group(3):
            names[m.group(2)] = m.group(3)
        callee = names[m.group(2)] if m.group(1) == "cfn" else None
        continue
    if line.startswith("calls=") and callee:
        calls[callee] += int(line[6:].split()[0])
        pending = True
        continue
    if pending:
        incl[callee] += int(line.split()[1])
        pending = False
top = "risk_core::state::StateEngine::apply"
n = calls[top]
if n == 0:
    sys.exit("no StateEngine::apply calls were counted")
print(f"decisions {n}, instructions per decision {incl[top] / n:.0f}")
inner = [k for k in incl if k.startswith("risk_core::state::") and k != top]
for k in sorted(inner, key=lambda k: -incl[k])[:8]:
    print(f"  {k.removeprefix('risk_core::state::')}: {incl[k] / n:.0f}")
PY
