#!/usr/bin/env bash
# Builds the JNI glue, runs the JUnit suite, then the decide benchmark.
# Works from any directory. Env: RISK_FFI_LIB_DIR (default <repo>/target/release),
# JAVA_HOME (default: the JDK of the javac on PATH), CC (default gcc),
# BENCH_ITERS (default 200000).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
LIB_DIR="${RISK_FFI_LIB_DIR:-$REPO/target/release}"
HEADER_DIR="$REPO/risk-ffi/include"
TOML="$REPO/examples/risk.toml"
CC="${CC:-gcc}"

die() { echo "run_tests.sh: ERROR: $*" >&2; exit 1; }

[[ -f "$LIB_DIR/librisk_ffi.so" ]] || die "$LIB_DIR/librisk_ffi.so not found (build risk-ffi in release mode, or set RISK_FFI_LIB_DIR)"
LIB_DIR="$(cd "$LIB_DIR" && pwd)"
[[ -f "$HEADER_DIR/risk.h" ]] || die "$HEADER_DIR/risk.h not found"
[[ -f "$TOML" ]] || die "$TOML not found"

if [[ -z "${JAVA_HOME:-}" ]]; then
  command -v javac >/dev/null || die "javac not on PATH and JAVA_HOME unset"
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")"
fi
export JAVA_HOME
[[ -f "$JAVA_HOME/include/jni.h" ]] || die "$JAVA_HOME/include/jni.h not found (JAVA_HOME must be a JDK)"
command -v mvn >/dev/null || die "mvn not on PATH"

NATIVE_DIR="$HERE/target/native"
JNI_LIB="$NATIVE_DIR/librisk_jni.so"
mkdir -p "$NATIVE_DIR"

echo "== compiling JNI glue -> $JNI_LIB"
"$CC" -std=c11 -O2 -g -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion -Werror \
  -shared -fPIC -fvisibility=hidden \
  -I"$JAVA_HOME/include" -I"$JAVA_HOME/include/linux" -I"$HEADER_DIR" \
  "$HERE"/src/main/c/*.c -o "$JNI_LIB" \
  -L"$LIB_DIR" -lrisk_ffi -Wl,-rpath,"$LIB_DIR" -Wl,-z,defs

# The glue must resolve librisk_ffi.so through its rpath.
if ldd "$JNI_LIB" | grep -q 'librisk_ffi.so => not found'; then
  die "librisk_jni.so cannot find librisk_ffi.so"
fi

echo "== mvn test (JUnit 5, -Xcheck:jni)"
rm -rf "$HERE/target/surefire-reports"
MVN_STATUS=0
# (sed: Debian's Maven 3.8 prints stray ANSI resets even with -B.)
mvn -q -B -Dstyle.color=never -f "$HERE/pom.xml" test \
  -Drisk.jni.path="$JNI_LIB" -Drisk.example.toml="$TOML" 2>&1 \
  | sed -u 's/\x1b\[[0-9;]*m//g' || MVN_STATUS=$?

# Surefire's counts (mvn -q prints nothing on success).
REPORTS="$HERE/target/surefire-reports"
total=0; failed=0; errors=0; skipped=0
if compgen -G "$REPORTS/TEST-*.xml" >/dev/null; then
  for f in "$REPORTS"/TEST-*.xml; do
    line="$(grep -m1 -o '<testsuite [^>]*>' "$f")"
    attr() { sed -n "s/.* $1=\"\([0-9]*\)\".*/\1/p" <<<"$line"; }
    total=$((total + $(attr tests))); failed=$((failed + $(attr failures)))
    errors=$((errors + $(attr errors))); skipped=$((skipped + $(attr skipped)))
  done
fi
# -Xcheck:jni reports misuse on the forked JVM's own output, which surefire keeps aside.
if grep -rlsE 'WARNING in native method|FATAL ERROR in native method' "$REPORTS" >/dev/null; then
  grep -rhsE -A3 'WARNING in native method|FATAL ERROR in native method' "$REPORTS" | head -40 >&2
  die "-Xcheck:jni reported JNI misuse (see above)"
fi
passed=$((total - failed - errors - skipped))
echo "java: $passed passed, $((failed + errors)) failed, $skipped skipped"
[[ "$MVN_STATUS" -eq 0 ]] || die "mvn test failed (exit $MVN_STATUS)"
[[ "$total" -gt 0 ]] || die "no tests ran"

echo "== DecideBench"
java -Drisk.jni.path="$JNI_LIB" \
  -cp "$HERE/target/classes:$HERE/target/test-classes" \
  dev.risk.DecideBench "$TOML" "${BENCH_ITERS:-200000}"
