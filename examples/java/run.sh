#!/usr/bin/env bash
# Runs this example as a new JVM user would, in CI: the binding installed (`mvn install`) into a
# new local Maven repository that holds no risk artifact, then this project built against it
# and run in its own JVM. No -Drisk.jni.path, no LD_LIBRARY_PATH: the jar carries its native
# code. The new repository starts with a copy of ~/.m2/repository's plugins (dev/risk
# removed) so nothing is downloaded twice; it is deleted at the end.
#   RISK_FFI_LIB_DIR   an already built C ABI library for the binding's build (default: cargo)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
m2="$work/repository"
if [[ -d "$HOME/.m2/repository" ]]; then cp -a "$HOME/.m2/repository" "$m2"; else mkdir -p "$m2"; fi
rm -rf "$m2/dev/risk"
unset LD_LIBRARY_PATH
mvn() { command mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$m2" "$@" 2>&1 | sed -u 's/\x1b\[[0-9;]*m//g'; return "${PIPESTATUS[0]}"; }

echo "== mvn install (risk-ffi/bindings/java) into a new local repository"
mvn -f "$repo/risk-ffi/bindings/java/pom.xml" install -DskipTests
jar="$m2/dev/risk/risk-jni/0.1.0-SNAPSHOT/risk-jni-0.1.0-SNAPSHOT.jar"
for f in "$jar" "${jar%.jar}-sources.jar" "${jar%.jar}-javadoc.jar"; do
  [[ -f "$f" ]] || { echo "run.sh: $f was not installed" >&2; exit 1; }
done

echo "== examples/java: mvn package exec:exec, from a read-only working directory"
(cd "$here" && mvn package)
ro="$work/ro"; tmpdir="$work/tmp"; mkdir -p "$ro" "$tmpdir"; chmod 0555 "$ro"
out="$(cd "$here" && JAVA_TOOL_OPTIONS="-Djava.io.tmpdir=$tmpdir" mvn exec:exec -Drun.dir="$ro" -Drisk.toml="$repo/examples/risk.toml")"
echo "$out"
grep -qE '^risk [^ ]+: (APPROVE|REVIEW|DECLINE) score ' <<<"$out" \
  || { echo "run.sh: the example printed no decision" >&2; exit 1; }
left="$(find "$tmpdir" -mindepth 1 -maxdepth 1 -name 'risk-native-*')"
[[ -z "$left" ]] || { echo "run.sh: the extraction directory was left behind: $left" >&2; exit 1; }
echo "java example: ok"
