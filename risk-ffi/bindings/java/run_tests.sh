#!/usr/bin/env bash
# Packages the jar as a user gets it and tests it: `mvn verify` builds the native code into
# the jar (build_jni.sh: the C ABI library from RISK_FFI_LIB_DIR and the JNI glue), then
# failsafe runs the whole JUnit suite on the packaged jar (its native code extracted from
# it), with the packaging tests (*IT: two class loaders, a child JVM in a read-only working
# directory); then the decide benchmark on the packaged jar.
# Works from any directory. Env: RISK_FFI_LIB_DIR (default <repo>/target/release; unset it to
# let cargo build the library), JAVA_HOME, CC (build_jni.sh), BENCH_ITERS (default 200000).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
export RISK_FFI_LIB_DIR="${RISK_FFI_LIB_DIR-$REPO/target/release}"
TOML="$REPO/examples/risk.toml"

die() { echo "run_tests.sh: ERROR: $*" >&2; exit 1; }

[[ -f "$TOML" ]] || die "$TOML not found"
command -v mvn >/dev/null || die "mvn not on PATH"

echo "== mvn verify (native build, jar, sources and javadoc jars; JUnit 5 on the jar under -Xcheck:jni)"
rm -rf "$HERE/target/failsafe-reports"
MVN_STATUS=0
# (sed: Debian's Maven 3.8 prints stray ANSI resets even with -B.)
mvn -q -B -Dstyle.color=never -f "$HERE/pom.xml" verify -Drisk.example.toml="$TOML" 2>&1 \
  | sed -u 's/\x1b\[[0-9;]*m//g' || MVN_STATUS=$?

# Failsafe's counts (mvn -q prints nothing on success).
total=0; failed=0; errors=0; skipped=0
for f in "$HERE"/target/failsafe-reports/TEST-*.xml; do
  [[ -f "$f" ]] || continue
  line="$(grep -m1 -o '<testsuite [^>]*>' "$f")"
  attr() { sed -n "s/.* $1=\"\([0-9]*\)\".*/\1/p" <<<"$line"; }
  total=$((total + $(attr tests))); failed=$((failed + $(attr failures)))
  errors=$((errors + $(attr errors))); skipped=$((skipped + $(attr skipped)))
done
compgen -G "$HERE/target/failsafe-reports/TEST-dev.risk.PackagingIT.xml" >/dev/null \
  || die "the packaging tests (PackagingIT) did not run"
# -Xcheck:jni reports misuse on the forked JVM's own output, which failsafe keeps aside.
REPORTS=("$HERE/target/failsafe-reports")
if grep -rlsE 'WARNING in native method|FATAL ERROR in native method' "${REPORTS[@]}" >/dev/null; then
  grep -rhsE -A3 'WARNING in native method|FATAL ERROR in native method' "${REPORTS[@]}" | head -40 >&2
  die "-Xcheck:jni reported JNI misuse (see above)"
fi
passed=$((total - failed - errors - skipped))
echo "java: $passed passed, $((failed + errors)) failed, $skipped skipped"
[[ "$MVN_STATUS" -eq 0 ]] || die "mvn verify failed (exit $MVN_STATUS)"
[[ "$total" -gt 0 ]] || die "no tests ran"

echo "== DecideBench (the packaged jar)"
java -cp "$HERE/target/risk-jni-0.1.0-SNAPSHOT.jar:$HERE/target/test-classes" \
  dev.risk.DecideBench "$TOML" "${BENCH_ITERS:-200000}"
