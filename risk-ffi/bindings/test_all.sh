#!/usr/bin/env bash
# Builds the C ABI library once and runs each binding's own test runner against it
# (Go: go test, Java: Maven + JUnit 5), then the Python package (risk-ffi/python: PyO3, no
# C ABI; pip install, pytest). Part of the README's test command.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
# The same targets and features as the README's `cargo test` (RISK_CARGO_FEATURES), so after
# it nothing recompiles: one feature set for the whole run.
cargo build --release --workspace --lib --tests --examples --features "${RISK_CARGO_FEATURES:-risk-core/kafka,risk-core/redis}"
export RISK_FFI_LIB_DIR="$root/target/release"
test -f "$RISK_FFI_LIB_DIR/librisk_ffi.so" || { echo "librisk_ffi.so missing in $RISK_FFI_LIB_DIR"; exit 1; }
bash "$root/risk-ffi/tests/c/run_valgrind.sh" # C stress under valgrind memcheck + helgrind; fails if valgrind is missing
for lang in go java; do
  echo "==> bindings/$lang"
  bash "$root/risk-ffi/bindings/$lang/run_tests.sh"
done
# The paths a new user takes: the jar installed into a new local Maven repository and a
# program depending on it; the Go example from empty module and build caches.
echo "==> examples/java (the installed jar)"
bash "$root/examples/java/run.sh"
echo "==> examples/go (the module from empty caches)"
bash "$root/examples/go/run.sh"
echo "==> risk-ffi/python (the PyO3 package: pip install, pytest)"
bash "$root/risk-ffi/python/run_tests.sh"
