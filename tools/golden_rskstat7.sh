#!/usr/bin/env bash
# Makes testdata/state/rskstat7.snap and rskstat7_features.txt: a state snapshot written
# by the version at 366e4c7 (format 7) and the features it computed for the 400
# transactions after it, read back by risk-core/tests/state/snapshot_golden.rs.
# Builds that version in a temporary git worktree (about two minutes, warm target).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wt=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$wt"' EXIT
git -C "$root" worktree add --detach "$wt" 366e4c7 >/dev/null
cp "$root/tools/golden_rskstat7.rs" "$wt/examples/golden7.rs"
cp "$root/risk-core/tests/state/golden_def.rs" "$wt/examples/golden_def.rs"
printf '\n[[example]]\nname = "golden7"\npath = "golden7.rs"\n' >> "$wt/examples/Cargo.toml"
out=$(mktemp -d)
(cd "$wt" && CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}" \
    cargo run --release -p risk-examples --example golden7 -- "$out")
cp "$out/rskstat7.snap" "$out/rskstat7_features.txt" "$root/testdata/state/"
chmod 644 "$root/testdata/state/rskstat7.snap"
rm -rf "$out"
echo "wrote testdata/state/rskstat7.snap and rskstat7_features.txt"
