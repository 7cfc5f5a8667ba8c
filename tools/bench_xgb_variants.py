#!/usr/bin/env python3
"""The peer of `benches/trees_variants.rs`: xgboost itself, one thread, on the same models
(testdata/models/xgb_variants/) and rows: `inplace_predict` of one row and of 1,024 rows
(per row), and `pred_contribs` of 1,024 rows (per row). Medians of `--repeats`.

    risk-ffi/python/.venv/bin/python tools/bench_xgb_variants.py
"""
import argparse
import json
import pathlib

import numpy as np
import xgboost as xgb

from bench_timing import per_call

DIR = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "models" / "xgb_variants"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2_000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    ref = json.loads((DIR / "reference.json").read_text())
    x = np.array([[np.nan if v == "nan" else v for v in r] for r in ref["rows"]],
                 dtype=np.float32)
    n = len(x)
    batch = np.ascontiguousarray(np.vstack([x] * (1024 // n + 1))[:1024])
    print(f"xgboost {xgb.__version__}, {n} rows x {x.shape[1]} features, one thread")
    for name in ["numeric", "categorical", "multiclass"]:
        b = xgb.Booster(model_file=str(DIR / f"{name}.json"))
        b.set_param({"nthread": 1})
        kw = {}
        if name != "numeric":
            kw = dict(feature_types=b.feature_types, enable_categorical=True)
        one = [x[i:i + 1] for i in range(n)]
        res = {"one_row": per_call(lambda i: b.inplace_predict(one[i % n]), a.calls, a.repeats)}
        d = xgb.DMatrix(batch, feature_names=b.feature_names, **kw)
        # inplace_predict: `predict` on one DMatrix answers later calls from its cache.
        res["batch_1024"] = per_call(lambda i: b.inplace_predict(batch), 20, a.repeats) / 1024
        res["shap_batch_1024"] = per_call(
            lambda i: b.predict(d, pred_contribs=True), 3, a.repeats) / 1024
        for k, v in res.items():
            print(f"{name:12s} {k:16s} {v:10.0f} ns/row")


if __name__ == "__main__":
    main()
