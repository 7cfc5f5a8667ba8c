#!/usr/bin/env bash
# Runs the Python binding's tests against librisk_ffi.so. Works from any directory.
#
#   risk-ffi/bindings/python/run_tests.sh [pytest args...]
#
# Environment:
#   RISK_FFI_LIB_DIR  directory holding librisk_ffi.so (default: <repo>/target/release);
#                     a missing library fails the run, it never skips.
#   PYTHON            interpreter to build the virtualenv with (default: python3, >= 3.10)
#   RISK_PY_VENV      virtualenv to create/reuse (default: <this dir>/.venv)
#   RISK_PY_NO_VENV=1 install into and run with $PYTHON itself instead of a virtualenv
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
export RISK_FFI_LIB_DIR="${RISK_FFI_LIB_DIR:-$REPO/target/release}"
PYTHON="${PYTHON:-python3}"

if [[ ! -f "$RISK_FFI_LIB_DIR/librisk_ffi.so" ]]; then
  echo "run_tests.sh: FAIL: $RISK_FFI_LIB_DIR/librisk_ffi.so does not exist." >&2
  echo "  Build it (cargo build --release -p risk-ffi) or set RISK_FFI_LIB_DIR." >&2
  exit 1
fi

"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 10):
    sys.exit(f"run_tests.sh: Python >= 3.10 needed, {sys.executable} is {sys.version.split()[0]}")
PY

if [[ "${RISK_PY_NO_VENV:-0}" == "1" ]]; then
  PY="$PYTHON"
else
  VENV="${RISK_PY_VENV:-$HERE/.venv}"
  if [[ ! -x "$VENV/bin/python" ]]; then
    "$PYTHON" -m venv "$VENV"
  fi
  PY="$VENV/bin/python"
fi

"$PY" -m pip install --quiet --disable-pip-version-check -r "$HERE/requirements-test.txt"

cd "$HERE"
export MPLBACKEND=Agg
export PYTHONDONTWRITEBYTECODE=1
exec "$PY" -m pytest -p no:cacheprovider "$@"
