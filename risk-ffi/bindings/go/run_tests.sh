#!/usr/bin/env bash
# Vets, tests (with the race detector) and benchmarks the Go binding, linked statically
# against librisk_ffi.a the way a user's build links it: `go generate` puts the archive in
# lib/linux_amd64/, and nothing else is set (every CGO_* variable is unset). Works from any
# directory; needs no network (the module has no dependencies).
#
#   RISK_FFI_LIB_DIR   directory holding the built library, which `go generate` copies
#                      instead of running cargo (default: <repo>/target/release)
#   RISK_CONFIG        engine config for the tests (default: <repo>/examples/risk.toml)
#   BENCHTIME          go test -benchtime (default: 20000x)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"

die() {
  echo "run_tests.sh: error: $*" >&2
  exit 1
}

command -v go >/dev/null || die "the go command is not on PATH."
command -v ldd >/dev/null || die "ldd is not on PATH (it checks the test binary's dependencies)."

# The build must need nothing but the module's own #cgo directives.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^CGO_' || true)
unset LD_LIBRARY_PATH
[[ "$(go env CGO_ENABLED)" == 1 ]] ||
  die "cgo is disabled (go env CGO_ENABLED is not 1): the binding needs a C compiler (gcc or cc; set CC)."
export RISK_FFI_LIB_DIR="${RISK_FFI_LIB_DIR:-$repo/target/release}"
export RISK_CONFIG="${RISK_CONFIG:-$repo/examples/risk.toml}"

cd "$here"
echo "== $(go version); CGO_* variables set: $(compgen -e | grep -c '^CGO_' || true)"
echo "== go generate (RISK_FFI_LIB_DIR=$RISK_FFI_LIB_DIR)"
go generate || die "go generate failed (its error is above)."

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "== go test -c; ldd: the test binary must not depend on librisk_ffi.so"
go test -c -o "$tmp/risk.test" .
deps="$(ldd "$tmp/risk.test")" || die "ldd $tmp/risk.test failed."
printf '%s\n' "$deps"
if grep -F librisk_ffi <<<"$deps"; then
  die "the test binary depends on librisk_ffi.so (above); the #cgo directives must link lib/linux_amd64/librisk_ffi.a."
fi
rm -f "$tmp/risk.test"

echo "== go vet ./..."
go vet ./...

echo "== go test -race -count=1 ./..."
go test -race -count=1 ./...

echo "== go test -run=NONE -bench=. -benchtime=${BENCHTIME:-20000x}"
go test -run=NONE -bench=. -benchmem -benchtime="${BENCHTIME:-20000x}" -count=1 ./...
