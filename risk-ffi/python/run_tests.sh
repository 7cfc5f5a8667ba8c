#!/usr/bin/env bash
# Installs the risk Python package as a user would (one `pip install` of this directory:
# maturin builds the abi3 wheel, sharing the workspace's cargo target directory) into a
# virtualenv, then runs its pytest suite. Works from any directory.
#
#   risk-ffi/python/run_tests.sh [pytest args...]
#
# Environment:
#   PYTHON         interpreter to build the virtualenv with (default: python3, >= 3.10)
#   RISK_PY_VENV   virtualenv to create/reuse (default: <this dir>/.venv)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 10):
    sys.exit(f"run_tests.sh: Python >= 3.10 needed, {sys.executable} is {sys.version.split()[0]}")
PY
VENV="${RISK_PY_VENV:-$HERE/.venv}"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --disable-pip-version-check -r "$HERE/requirements-test.txt"
# The one install command a user runs (build isolation: pip fetches maturin itself).
"$PY" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$HERE"
# The type stubs against the module as built (from outside the source tree).
(cd / && "$PY" -m mypy.stubtest risk._native)
cd "$HERE"
export PYTHONDONTWRITEBYTECODE=1 MPLBACKEND=Agg
# From outside the source tree's python/ dir, so `import risk` is the installed wheel.
exec "$PY" -m pytest -p no:cacheprovider "$@"
