#!/usr/bin/env bash
# `go generate` step of the module (the //go:generate line in generate.go): builds the C ABI
# with ../build_native.sh and copies its static library, librisk_ffi.a, to
# lib/<goos>_<goarch>/, where the #cgo LDFLAGS of risk.go link it, with its SHA-256 beside
# it (librisk_ffi.a.sha256, embedded by native_linux_amd64.go). After it, `go build`,
# `go test` and modules that require this one (through a replace to this directory) need
# no CGO_* variables, and their binaries do not depend on librisk_ffi.so.
#
#   RISK_FFI_LIB_DIR     copy the librisk_ffi.a already built there instead of running cargo
#   RISK_CARGO_FEATURES  passed to build_native.sh (default risk-core/kafka,risk-core/redis)
#
# Runs from any directory (go generate runs it in the module directory).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "gen_native.sh: error: $*" >&2; exit 1; }

# go generate sets GOOS and GOARCH; the target is the platform being built for.
goos="${GOOS:-$(go env GOOS)}"
goarch="${GOARCH:-$(go env GOARCH)}"
platform="${goos}_${goarch}"
# The platforms risk.go has a #cgo LDFLAGS line for. Adding one: README "Other platforms".
case "$platform" in
  linux_amd64) ;;
  *) die "no prebuilt library layout for $goos/$goarch: risk.go links lib/linux_amd64/librisk_ffi.a
  only (see README.md, \"Other platforms\")" ;;
esac
host="$(uname -s)_$(uname -m)"
[[ "$host" == Linux_x86_64 || -n "${RISK_FFI_LIB_DIR:-}" ]] ||
  die "cargo on this $host host does not build a $goos/$goarch library; set RISK_FFI_LIB_DIR to
  a directory holding one built for $goos/$goarch"

# build_native.sh prints the directory holding librisk_ffi.a (everything else on stderr).
src_dir="$(bash "$here/../build_native.sh")" || die "../build_native.sh failed (its error is above)"
src="$src_dir/librisk_ffi.a"
[[ -f "$src" ]] || die "static library '$src' is missing (cargo build --release -p risk-ffi builds it)"
# A Unix ar archive starts with "!<arch>\n"; refuse anything else before cgo links it.
[[ "$(head -c 8 "$src")" == '!<arch>' ]] || die "'$src' is not an ar archive (a static library)"

dest_dir="$here/lib/$platform"
dest="$dest_dir/librisk_ffi.a"
mkdir -p "$dest_dir"
# Copy to temporary names in the same directory, then rename: a build running meanwhile
# links either the old archive or the new one, never a partly written one.
tmp="$(mktemp "$dest_dir/.librisk_ffi.a.XXXXXX")"
tmp_sum="$(mktemp "$dest_dir/.librisk_ffi.a.sha256.XXXXXX")"
trap 'rm -f "$tmp" "$tmp_sum"' EXIT
cp "$src" "$tmp"
chmod 0644 "$tmp"
# The archive's SHA-256 (sha256sum's format), which native_linux_amd64.go embeds. cgo does
# not track a library named in #cgo LDFLAGS: without it, the go command would keep
# reusing packages, binaries and test results built with the previous archive.
sum="$(sha256sum "$tmp" | cut -d' ' -f1)"
printf '%s  librisk_ffi.a\n' "$sum" >"$tmp_sum"
chmod 0644 "$tmp_sum"
mv -f "$tmp" "$dest"
mv -f "$tmp_sum" "$dest.sha256"
trap - EXIT
echo "gen_native.sh: $dest ($(du -h "$dest" | cut -f1), sha256 $sum) from $src" >&2
