#!/usr/bin/env bash
# Builds the native code the jar carries, into OUT (Maven passes
# target/classes/native/<os>-<arch>; run by the pom in generate-resources):
#   librisk_ffi.so   the C ABI library (risk-ffi/bindings/build_native.sh: cargo, or the
#                    prebuilt one in RISK_FFI_LIB_DIR), debug info stripped
#   librisk_jni.so   the JNI glue (src/main/c), rpath $ORIGIN so it finds the library beside it
#   libs.sha256      "<sha256> <size> <name>" per library, in load order: NativeLoader
#                    verifies every extracted file against it
# Env: JAVA_HOME (default: the JDK of the javac on PATH), CC (default gcc).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
die() { echo "build_jni.sh: error: $*" >&2; exit 1; }
[[ $# -eq 1 ]] || die "usage: build_jni.sh OUT_DIR"
out="$1"
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) die "the jar's native code builds on linux-x86_64 only so far (this is $(uname -s)-$(uname -m))" ;;
esac
if [[ -z "${JAVA_HOME:-}" ]]; then
  command -v javac >/dev/null || die "javac not on PATH and JAVA_HOME unset"
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")"
fi
[[ -f "$JAVA_HOME/include/jni.h" ]] || die "$JAVA_HOME/include/jni.h not found (JAVA_HOME must be a JDK)"
CC="${CC:-gcc}"
command -v "$CC" >/dev/null || die "no C compiler '$CC' (set CC)"

lib_dir="$("$repo/risk-ffi/bindings/build_native.sh")"
mkdir -p "$out"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# The library without its DWARF (the jar's size and the first start's hashing; symbols stay
# for stack traces).
objcopy --strip-debug "$lib_dir/librisk_ffi.so" "$tmp/librisk_ffi.so"
"$CC" -std=c11 -O2 -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion -Werror \
  -shared -fPIC -fvisibility=hidden \
  -I"$JAVA_HOME/include" -I"$JAVA_HOME/include/linux" -I"$repo/risk-ffi/include" \
  "$here"/src/main/c/*.c -o "$tmp/librisk_jni.so" \
  -L"$tmp" -lrisk_ffi -Wl,-rpath,'$ORIGIN' -Wl,-z,defs
# The glue must name the library by file name only (found through $ORIGIN, wherever the
# loader extracts the pair).
readelf -d "$tmp/librisk_jni.so" | grep -q 'NEEDED.*\[librisk_ffi.so\]' \
  || die "librisk_jni.so does not need librisk_ffi.so by its file name"
readelf -d "$tmp/librisk_jni.so" | grep -qE '(RUNPATH|RPATH).*\[\$ORIGIN\]' \
  || die "librisk_jni.so has no \$ORIGIN run path"

: >"$tmp/libs.sha256"
for f in librisk_ffi.so librisk_jni.so; do
  chmod 0644 "$tmp/$f"
  echo "$(sha256sum "$tmp/$f" | cut -d' ' -f1) $(stat -c %s "$tmp/$f") $f" >>"$tmp/libs.sha256"
done
for f in librisk_ffi.so librisk_jni.so libs.sha256; do mv -f "$tmp/$f" "$out/$f"; done
echo "build_jni.sh: $out: $(tr '\n' ';' <"$out/libs.sha256")" >&2
