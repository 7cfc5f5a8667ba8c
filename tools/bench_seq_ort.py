#!/usr/bin/env python3
"""Batch-1 latency of testdata/models/seq_gru.onnx in ONNX Runtime from Python (dev-time tool).

Runs the reference rows written by tools/train_sequence.py (seq_ref_*.f32), cycling
through them one at a time, on the CPU execution provider with sequential execution
and the given intra-op threads (inter-op 1). Warm-up runs first, then every timed run is
measured with time.perf_counter_ns; prints one JSON line (p50/p90/p99/mean in µs, runs/s).
The time includes the Python binding's per-call overhead (input dict, output copy).

    pip install numpy onnxruntime
    python3 tools/bench_seq_ort.py [--runs 5000] [--threads 1]
"""
import argparse
import json
import pathlib
import platform
import sys
import time

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ROOT / "testdata" / "models"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads")
    ap.add_argument("--dir", default=str(MODELS),
                    help="folder of seq_gru.onnx and seq_ref_* (default testdata/models)")
    args = ap.parse_args()
    d = pathlib.Path(args.dir)
    model = d / "seq_gru.onnx"

    man = json.loads((d / "seq_ref.manifest.json").read_text())
    r, n, f, k = man["rows"], man["N"], man["F"], man["K"]
    seq = np.fromfile(d / "seq_ref_seq.f32", dtype="<f4").reshape(r, n, f)
    mask = np.fromfile(d / "seq_ref_mask.f32", dtype="<f4").reshape(r, n)
    x = np.fromfile(d / "seq_ref_x.f32", dtype="<f4").reshape(r, k)
    probs = np.fromfile(d / "seq_ref_probs.f32", dtype="<f4")
    feeds = [{"seq": seq[i:i + 1], "mask": mask[i:i + 1], "x": x[i:i + 1]} for i in range(r)]

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    out = ["probabilities"]

    got = np.array([sess.run(out, feeds[i])[0].reshape(-1)[0] for i in range(r)], np.float32)
    max_diff = float(np.abs(got - probs).max())

    for i in range(args.warmup):
        sess.run(out, feeds[i % r])
    ns = np.empty(args.runs, np.int64)
    clock = time.perf_counter_ns
    t_all = clock()
    for i in range(args.runs):
        fd = feeds[i % r]
        t0 = clock()
        sess.run(out, fd)
        ns[i] = clock() - t0
    wall = (clock() - t_all) / 1e9
    us = ns / 1e3
    print(json.dumps({
        "model": model.name,
        "batch": 1,
        "N": n,
        "runs": args.runs,
        "warmup": args.warmup,
        "intra_op_threads": args.threads,
        "inter_op_threads": 1,
        "p50_us": round(float(np.percentile(us, 50)), 2),
        "p90_us": round(float(np.percentile(us, 90)), 2),
        "p99_us": round(float(np.percentile(us, 99)), 2),
        "mean_us": round(float(us.mean()), 2),
        "runs_per_s": round(args.runs / wall, 1),
        "max_abs_vs_ref_probs": max_diff,
        "onnxruntime": ort.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
    }))


if __name__ == "__main__":
    sys.exit(main())
