#!/usr/bin/env python3
"""The peer of `benches/trees_lightgbm.rs`: the `lightgbm` library on the same models
(testdata/models/lgbm/) and rows (reference.json), one thread, through its C API:

- `c_single_row`: `LGBM_BoosterPredictForMatSingleRowFast` (the C API's one-row path,
  called through ctypes: the ctypes call itself, measured on `LGBM_GetLastError`, is
  printed so it can be told apart);
- `py_one_row`: `Booster.predict(row)` as a Python user calls it;
- `batch_1024`: `Booster.predict(1,024 rows, num_threads=1)` (`LGBM_BoosterPredictForMat`),
  per row;
- `shap_c_single_row`: the one-row path with `C_API_PREDICT_CONTRIB` (LightGBM's TreeSHAP);
- `shap_batch_1024`: `predict(1,024 rows, pred_contrib=True)`, per row.

Medians of `--repeats` timings of `--calls` calls each.

    risk-ffi/python/.venv/bin/python tools/bench_lightgbm.py
"""
import argparse
import ctypes
import json
import pathlib

import lightgbm as lgb
import numpy as np

from bench_timing import per_call

LGBM = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "models" / "lgbm"


def rows():
    ref = json.loads((LGBM / "reference.json").read_text())
    conv = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}
    return np.array([[conv.get(v, v) if isinstance(v, str) else v for v in r]
                     for r in ref["rows"]], dtype=np.float32)


def fast_config(lib, booster, predict_type, nf):
    h = ctypes.c_void_p()
    rc = lib.LGBM_BoosterPredictForMatSingleRowFastInit(
        booster._handle, ctypes.c_int(predict_type), ctypes.c_int(0), ctypes.c_int(-1),
        ctypes.c_int(0), ctypes.c_int32(nf), ctypes.c_char_p(b"num_threads=1"),
        ctypes.byref(h))
    assert rc == 0, lib.LGBM_GetLastError()
    return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    x = rows()
    n, nf = x.shape
    lib = lgb.basic._LIB
    lib.LGBM_GetLastError.restype = ctypes.c_char_p
    print(f"lightgbm {lgb.__version__}, {n} rows x {nf} features, one thread")
    ctypes_ns = per_call(lambda i: lib.LGBM_GetLastError(), a.calls, a.repeats)
    print(f"ctypes call overhead (LGBM_GetLastError): {ctypes_ns:.0f} ns")
    batch = np.ascontiguousarray(np.vstack([x] * (1024 // n + 1))[:1024])
    ptrs = [x[i].ctypes.data_as(ctypes.c_void_p) for i in range(n)]
    for name in ["binary_nan", "shap_120x6"]:
        b = lgb.Booster(model_file=str(LGBM / f"{name}.txt"))
        res = {}
        out_len = ctypes.c_int64()
        for label, ptype, width in [("c_single_row", 1, 1), ("shap_c_single_row", 3, nf + 1)]:
            cfg = fast_config(lib, b, ptype, nf)
            out = (ctypes.c_double * width)()
            f = lib.LGBM_BoosterPredictForMatSingleRowFast
            res[label] = per_call(
                lambda i: f(cfg, ptrs[i % n], ctypes.byref(out_len), out), a.calls, a.repeats)
            lib.LGBM_FastConfigFree(cfg)
        one = [x[i:i + 1] for i in range(n)]
        res["py_one_row"] = per_call(
            lambda i: b.predict(one[i % n], raw_score=True, num_threads=1),
            a.calls // 10, a.repeats)
        res["batch_1024"] = per_call(
            lambda i: b.predict(batch, raw_score=True, num_threads=1), 20, a.repeats) / 1024
        res["shap_batch_1024"] = per_call(
            lambda i: b.predict(batch, pred_contrib=True, num_threads=1), 5, a.repeats) / 1024
        for k, v in res.items():
            print(f"{name:12s} {k:18s} {v:10.0f} ns/row")


if __name__ == "__main__":
    main()
