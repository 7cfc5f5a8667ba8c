#!/usr/bin/env bash
# Builds the C ABI library the Java jar and the Go module package, and prints the directory
# that holds it (librisk_ffi.so and librisk_ffi.a). Works from any directory.
#
#   RISK_FFI_LIB_DIR     take the library already built there (CI: the README test command's
#                        workspace build) instead of running cargo
#   RISK_CARGO_FEATURES  the features cargo builds with (default risk-core/kafka,risk-core/redis:
#                        the Kafka audit forwarder and the Redis state store, the fleet
#                        deployments JVM and Go services are)
#   CARGO_TARGET_DIR     cargo's target directory (default <repo>/target)
#
# Everything else goes to stderr, so callers can write `dir=$(build_native.sh)`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
die() { echo "build_native.sh: error: $*" >&2; exit 1; }

if [[ -n "${RISK_FFI_LIB_DIR:-}" ]]; then
  dir="$RISK_FFI_LIB_DIR"
  [[ -d "$dir" ]] || die "RISK_FFI_LIB_DIR '$dir' is not a directory"
  echo "build_native.sh: using the library in $dir (RISK_FFI_LIB_DIR)" >&2
else
  command -v cargo >/dev/null || die "cargo is not on PATH (https://rustup.rs), or set RISK_FFI_LIB_DIR"
  features="${RISK_CARGO_FEATURES:-risk-core/kafka,risk-core/redis}"
  echo "build_native.sh: cargo build --release -p risk-ffi --lib --features $features" >&2
  (cd "$repo" && cargo build --release -p risk-ffi --lib --features "$features" >&2)
  dir="${CARGO_TARGET_DIR:-$repo/target}/release"
fi
dir="$(cd "$dir" && pwd)"
for f in librisk_ffi.so librisk_ffi.a; do
  [[ -f "$dir/$f" ]] || die "$dir/$f is missing (cargo build --release -p risk-ffi builds it)"
done
echo "$dir"
