#!/usr/bin/env bash
# Puts libonnxruntime.so (ONNX Runtime 1.31.1, CPU) in .ort/ from the PyPI wheel, without
# installing the Python package. Idempotent. The ONNX tests and the `onnx` scorer find it
# there (or wherever ORT_DYLIB_PATH points).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.31.1
LIB=.ort/libonnxruntime.so.$VERSION
if [ -f "$LIB" ]; then
  echo "$LIB present"
  exit 0
fi
mkdir -p .ort/wheel
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
  --python-version 3.11 --implementation cp "onnxruntime==$VERSION" -d .ort/wheel
python3 - "$VERSION" <<'PY'
import glob, sys, zipfile
version = sys.argv[1]
wheel = glob.glob(".ort/wheel/onnxruntime-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(f"capi/libonnxruntime.so.{version}"))
    with z.open(name) as src, open(f".ort/libonnxruntime.so.{version}", "wb") as dst:
        dst.write(src.read())
PY
rm -rf .ort/wheel
echo "extracted $LIB"
