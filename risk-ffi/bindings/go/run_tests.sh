#!/usr/bin/env bash
# Vets, tests (with the race detector) and benchmarks the Go binding against a built
# librisk_ffi.so. Works from any directory; needs no network (the module has no
# dependencies).
#
#   RISK_FFI_LIB_DIR   directory holding librisk_ffi.so (default: <repo>/target/release)
#   RISK_CONFIG        engine config for the tests (default: <repo>/examples/risk.toml)
#   BENCHTIME          go test -benchtime (default: 20000x)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
lib_dir="${RISK_FFI_LIB_DIR:-$repo/target/release}"
include_dir="$repo/risk-ffi/include"

die() {
  echo "run_tests.sh: error: $*" >&2
  exit 1
}

[[ -d "$lib_dir" ]] || die "library directory '$lib_dir' does not exist.
  Build the C ABI first (cargo build --release -p risk-ffi) or set RISK_FFI_LIB_DIR."
lib_dir="$(cd "$lib_dir" && pwd)"
[[ -f "$lib_dir/librisk_ffi.so" ]] || die "librisk_ffi.so not found in '$lib_dir'.
  Build the C ABI first (cargo build --release -p risk-ffi) or set RISK_FFI_LIB_DIR
  to the directory that holds it."
[[ -f "$include_dir/risk.h" ]] || die "C header '$include_dir/risk.h' not found."
command -v go >/dev/null || die "the go command is not on PATH."
command -v "${CC:-gcc}" >/dev/null || command -v cc >/dev/null ||
  die "no C compiler (cgo needs gcc or cc; set CC)."

export CGO_ENABLED=1
export CGO_CFLAGS="-O2 -g -I'$include_dir'"
# -L to link, rpath so the test binaries find the library without LD_LIBRARY_PATH.
export CGO_LDFLAGS="'-L$lib_dir' '-Wl,-rpath,$lib_dir'"
export RISK_CONFIG="${RISK_CONFIG:-$repo/examples/risk.toml}"

cd "$here"
echo "== $(go version); library $lib_dir/librisk_ffi.so"

echo "== go vet ./..."
go vet ./...

echo "== go test -race -count=1 ./..."
go test -race -count=1 ./...

echo "== go test -run=NONE -bench=. -benchtime=${BENCHTIME:-20000x}"
go test -run=NONE -bench=. -benchmem -benchtime="${BENCHTIME:-20000x}" -count=1 ./...
