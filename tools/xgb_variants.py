#!/usr/bin/env python3
"""Trains the XGBoost variants the native tree loader reads besides `gbtree` +
`binary:logistic` (testdata/models/xgb_variants/), and their outputs on shared rows:

- `categorical.json`: `enable_categorical=True` with two categorical features: `mcc_group`
  (40 categories, partition splits) and `channel` (3 categories, one-hot splits), NaN in
  both; `categorical.ubj` is the same model as UBJSON.
- `numeric.json`: the categorical model's twin with every feature numeric (same data,
  same parameters: the bench's peer of the same size).
- `logitraw.json`: `binary:logitraw` (the margin is the output; the probability is its
  logistic).
- `dart.json`: `booster="dart"` (trees weighted by `weight_drop` at inference).
- `squarederror.json`, `poisson.json`: regressions (identity and log link) of the loss
  amount and of a count.
- `multiclass.json`: `multi:softprob` over fraud types (0 legitimate, 1 card testing,
  2 account takeover); `reference.json` holds its margins, probabilities and SHAP per class.
- `reference.json`: rows (float32; NaN, negative, fractional, unseen and out-of-range
  categories) and for each model `predict(output_margin=True)` and
  `predict(pred_contribs=True)`.

    risk-ffi/python/.venv/bin/python tools/xgb_variants.py      # xgboost 3.x
"""
import json
import math
import pathlib

import numpy as np
import xgboost as xgb

OUT = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "models" / "xgb_variants"
NAMES = ["amount", "mcc_group", "channel", "velocity_1h", "card_age_days", "ip_risk"]
TYPES = ["q", "c", "c", "q", "q", "q"]


def data(n, seed):
    r = np.random.default_rng(seed)
    x = np.empty((n, len(NAMES)), dtype=np.float32)
    x[:, 0] = r.lognormal(3.5, 1.2, n)
    x[:, 1] = r.integers(0, 40, n)
    x[:, 2] = r.choice(3, n, p=[0.6, 0.3, 0.1])
    x[:, 3] = r.poisson(0.6, n)
    x[:, 4] = r.exponential(400, n)
    x[:, 5] = r.normal(0, 1, n)
    risky = np.isin(x[:, 1], [3, 7, 11, 19, 23, 31, 37])
    logit = (-4 + 1.8 * risky + 0.9 * (x[:, 2] == 2) + 0.5 * x[:, 3] + 0.6 * x[:, 5]
             + 0.4 * np.log1p(x[:, 0]) - 0.002 * x[:, 4])
    y = (r.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    x[r.random(n) < 0.05, 1] = np.nan
    x[r.random(n) < 0.03, 2] = np.nan
    x[r.random(n) < 0.1, 5] = np.nan
    return x, y


def loss_and_count(x, y, seed):
    """Regression targets: the amount lost (0 unless fraud) and a chargeback count."""
    r = np.random.default_rng(seed)
    loss = y * np.nan_to_num(x[:, 0]) * r.uniform(0.5, 1.0, len(y))
    count = r.poisson(0.2 + 1.5 * y)
    return loss, count.astype(np.float64)


def num(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    x, y = data(20_000, 11)
    d = xgb.DMatrix(x, y, feature_names=NAMES, feature_types=TYPES, enable_categorical=True)
    common = dict(max_depth=6, eta=0.1, seed=7, nthread=1, tree_method="hist",
                  max_cat_to_onehot=4)
    models = {
        "categorical": xgb.train(dict(common, objective="binary:logistic"), d, 60),
        "numeric": xgb.train(dict(common, objective="binary:logistic"),
                             xgb.DMatrix(x, y, feature_names=NAMES), 60),
        "logitraw": xgb.train(dict(common, objective="binary:logitraw", base_score=0.3), d, 40),
        "dart": xgb.train(dict(common, objective="binary:logistic", booster="dart",
                               rate_drop=0.2, skip_drop=0.3), d, 40),
    }
    loss, count = loss_and_count(x, y, 13)
    for name, obj, target, extra in [("squarederror", "reg:squarederror", loss, {}),
                                     ("poisson", "count:poisson", count, {})]:
        dr = xgb.DMatrix(x, target, feature_names=NAMES, feature_types=TYPES,
                         enable_categorical=True)
        models[name] = xgb.train(dict(common, objective=obj, **extra), dr, 40)
    kind = np.where(y > 0, np.where(np.nan_to_num(x[:, 0]) < 20, 1, 2), 0)
    dm = xgb.DMatrix(x, kind, feature_names=NAMES, feature_types=TYPES, enable_categorical=True)
    multi = xgb.train(dict(common, objective="multi:softprob", num_class=3), dm, 30)
    multi.save_model(str(OUT / "multiclass.json"))
    for name, b in models.items():
        b.save_model(str(OUT / f"{name}.json"))
    models["categorical"].save_model(str(OUT / "categorical.ubj"))
    t, _ = data(300, 12)
    c = t[:16].copy()
    c[:, 1] = [-1, -0.5, 0.5, 3.99, 39, 40, 63, 64, 16777215, 16777216, 1e10, -1e10,
               np.nan, 7, 11.5, -0.0]
    c[:, 2] = [0, 1, 2, 2.5, 3, -1, np.nan, 1e9, 0.999, -0.0, 2, 1, 0, 5, 1, 2]
    t = np.vstack([t, c]).astype(np.float32)
    dt = xgb.DMatrix(t, feature_names=NAMES, feature_types=TYPES, enable_categorical=True)
    ref = {"xgboost": xgb.__version__, "features": NAMES,
           "rows": [[num(v) for v in r] for r in t], "models": {}}
    for name, b in models.items():
        ref["models"][name] = {
            "margin": [float(v) for v in b.predict(dt, output_margin=True)],
            "output": [float(v) for v in b.predict(dt)],
            "contrib": [[float(v) for v in r] for r in b.predict(dt, pred_contribs=True)],
        }
    ref["multiclass"] = {
        "margin": multi.predict(dt, output_margin=True).tolist(),
        "prob": multi.predict(dt).tolist(),
        "contrib": multi.predict(dt, pred_contribs=True).tolist(),
    }
    (OUT / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    for f in sorted(OUT.iterdir()):
        print(f"{f.relative_to(OUT.parent.parent.parent)}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
