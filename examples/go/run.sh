#!/usr/bin/env bash
# Builds and runs the Go example the way a new user would, and checks what it prints:
# `go generate` in the binding (risk-ffi/bindings/go), then `go build` and a run of this
# module, from an empty module cache and an empty build cache, with no CGO_* variables, no
# go.work, no toolchain switch and no network (GOPROXY=off: nothing needs downloading).
# Works from any directory.
#
#   RISK_FFI_LIB_DIR   passed to `go generate`: copy the librisk_ffi.a built there instead
#                      of running cargo (CI: the workspace build)
#   RISK_CONFIG        the engine config to run with (default: <repo>/examples/risk.toml)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
binding="$repo/risk-ffi/bindings/go"
# Relative to examples/go, where the example runs (a relative RISK_CONFIG: to the caller's).
config="../risk.toml"
if [[ -n "${RISK_CONFIG:-}" ]]; then
  config="$RISK_CONFIG"
  [[ "$config" == /* ]] || config="$PWD/$config"
fi
die() { echo "examples/go/run.sh: error: $*" >&2; exit 1; }
start=$(date +%s)

command -v go >/dev/null || die "the go command is not on PATH (Go 1.26: https://go.dev/dl/)"
# A new user's environment: no cgo flags (the binding's #cgo directives are all it takes),
# no library search path that could hide a dependency on librisk_ffi.so.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^CGO_' || true)
unset LD_LIBRARY_PATH
[[ "$(go env CGO_ENABLED)" == 1 ]] ||
  die "cgo is disabled (go env CGO_ENABLED is not 1): the binding needs a C compiler (gcc) on PATH"

tmp="$(mktemp -d)"
cleanup() {
  # The module cache is read-only; make it writable so it can be removed.
  chmod -R u+w "$tmp" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
export GOMODCACHE="$tmp/modcache" GOCACHE="$tmp/gocache"
# -mod=readonly (go run's default, spelled out): fail rather than edit go.mod if it is
# incomplete. GOPROXY=off: no module may be downloaded. GOTOOLCHAIN=local: no toolchain
# either. GOWORK=off: a go.work around the checkout must not change what is built.
export GOFLAGS=-mod=readonly GOPROXY=off GOTOOLCHAIN=local GOWORK=off

echo "== $(go version); GOMODCACHE and GOCACHE empty under $tmp; no CGO_* variables"
echo "== cd risk-ffi/bindings/go && go generate${RISK_FFI_LIB_DIR:+ (RISK_FFI_LIB_DIR=$RISK_FFI_LIB_DIR)}"
(cd "$binding" && go generate) || die "go generate in $binding failed (its error is above)"

cd "$here"
echo "== go build (examples/go)"
go build -o "$tmp/risk-example" . || die "go build of the example failed (its error is above)"
if ldd "$tmp/risk-example" | grep -F librisk_ffi.so; then
  die "the example binary depends on librisk_ffi.so; the binding must link librisk_ffi.a"
fi

echo "== risk-example $config"
out="$("$tmp/risk-example" "$config")" || die "risk-example $config exited with status $?"
printf '%s\n' "$out"
grep -Eq '^decision: txn=1 action=(approve|review|decline) score=[0-9.]+ tier=[a-z]+ ' <<<"$out" ||
  die "risk-example printed no decision line"
grep -q '^reasons: ' <<<"$out" || die "risk-example printed no reasons line"

# An error must come out as a message and a non-zero status, not a decision.
missing="$tmp/no-such-risk.toml"
if err_out="$("$tmp/risk-example" "$missing" 2>&1)"; then
  die "risk-example exited 0 for a missing config: $err_out"
fi
grep -qF "engine from $missing" <<<"$err_out" ||
  die "risk-example's error for a missing config does not name it: $err_out"
echo "== a missing config: exit status non-zero, \"$err_out\""

echo "== examples/go OK in $(( $(date +%s) - start ))s (cold caches)"
