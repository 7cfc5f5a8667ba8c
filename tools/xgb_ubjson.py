#!/usr/bin/env python3
"""Writes testdata/models/xgb_fraud.ubj: the committed fast-tier model
(testdata/models/xgb_fraud.json) saved by XGBoost in its UBJSON format (the default of
`save_model("m.ubj")`), so the native loader's UBJSON path is checked against the same
reference outputs (xgb_ref_*.f32) as the JSON one; and the `xgb_json` fuzz seeds saved
as UBJSON, the seeds of the `xgb_ubjson` fuzz target (fuzz/seeds/xgb_ubjson/).

    risk-ffi/python/.venv/bin/python tools/xgb_ubjson.py     # any Python with xgboost
"""
import pathlib

import xgboost as xgb

MODELS = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "models"

booster = xgb.Booster(model_file=str(MODELS / "xgb_fraud.json"))
out = MODELS / "xgb_fraud.ubj"
booster.save_model(str(out))
print(f"wrote {out} ({out.stat().st_size} bytes) with xgboost {xgb.__version__}")

seeds = MODELS.parent.parent / "fuzz" / "seeds"
(seeds / "xgb_ubjson").mkdir(exist_ok=True)
for seed in sorted((seeds / "xgb_json").glob("*.json")):
    ubj = seeds / "xgb_ubjson" / (seed.stem + ".ubj")
    xgb.Booster(model_file=str(seed)).save_model(str(ubj))
    print(f"wrote {ubj}")
