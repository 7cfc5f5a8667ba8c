#!/usr/bin/env python3
"""Trains the LightGBM reference models the native tree loader is tested against, and
writes their outputs on shared rows (testdata/models/lgbm/):

- `binary_nan.txt`: `objective=binary`, 80 trees, 31 leaves; four features hold NaN in
  training (missing type NaN), the rest none (missing type None).
- `binary_zero.txt`: `zero_as_missing=True` (missing type Zero: zero and NaN take the
  default branch).
- `xentropy.txt`: `objective=cross_entropy` on soft labels.
- `categorical.txt`: `hour` and `velocity_1h` as categorical features (bitset splits),
  NaN in `hour`.
- `regression.txt`, `poisson.txt`: regressions (identity and log link) of the loss
  amount and of a chargeback count.
- `multiclass.txt`: `multiclass` over fraud types (0 legitimate, 1 card testing, 2
  account takeover); `reference.json` holds its per-class margins, probabilities and SHAP.
- `shap_120x6.txt`: 120 trees of depth 6 (63 leaves) on 15 features, the TreeSHAP bench's
  shape (issue [21] part 3).
- `refused_*.txt`: models the loader refuses with a typed error (linear trees, `sigmoid:2`, multiclass, regression, random forest's averaged output).
- `categorical.dump.json`, `multiclass.dump.json`: the same models as
  `json.dump(booster.dump_model(), f)` (the loader reads both forms).
- `fuzz/seeds/lgbm_text/`: small models (3 trees of 4 leaves; NaN, None and Zero missing
  types, a split of NaN from every number; one also as a dump), the `lgbm_text` fuzz
  target's seeds.
- `reference.json`: the rows (float32, with NaN, zeros and values near the thresholds),
  and for each accepted model `predict(raw_score=True)` and `predict(pred_contrib=True)`.

    risk-ffi/python/.venv/bin/pip install lightgbm      # 4.x
    risk-ffi/python/.venv/bin/python tools/lightgbm_models.py
"""
import json
import math
import pathlib

import lightgbm as lgb
import numpy as np

OUT = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "models" / "lgbm"
FEATURES = 15
NAMED = [
    "amount", "hour", "card_age_days", "velocity_1h", "velocity_24h", "amount_ratio",
    "distance_km", "merchant_risk", "device_age_days", "failed_auths_24h", "is_foreign",
    "ip_risk", "email_age_days", "mcc_risk", "terminal_fraud_rate",
]


def data(n, seed):
    """Fraud-like rows: heavy-tailed amounts, counts, flags; NaN in four columns; a
    sparse column that is mostly exactly zero."""
    r = np.random.default_rng(seed)
    x = np.empty((n, FEATURES), dtype=np.float32)
    x[:, 0] = r.lognormal(3.5, 1.2, n)
    x[:, 1] = r.integers(0, 24, n)
    x[:, 2] = r.exponential(400, n)
    x[:, 3] = r.poisson(0.6, n)
    x[:, 4] = x[:, 3] + r.poisson(2.0, n)
    x[:, 5] = x[:, 0] / r.lognormal(3.5, 0.8, n)
    x[:, 6] = r.exponential(30, n)
    x[:, 7] = r.beta(2, 8, n)
    x[:, 8] = r.exponential(200, n)
    x[:, 9] = np.where(r.random(n) < 0.85, 0.0, r.poisson(2.0, n))
    x[:, 10] = r.random(n) < 0.1
    x[:, 11] = r.normal(0, 1, n)
    x[:, 12] = r.exponential(900, n)
    x[:, 13] = r.normal(0, 1, n)
    x[:, 14] = np.where(r.random(n) < 0.7, 0.0, r.beta(1, 20, n))
    logit = (-4.5 + 0.6 * np.log1p(x[:, 5]) + 0.5 * x[:, 3] + 1.2 * x[:, 7] * 4
             + 0.4 * x[:, 9] + 0.8 * x[:, 10] + 0.7 * x[:, 11] - 0.002 * x[:, 2]
             + 8 * x[:, 14] + 0.6 * ((x[:, 1] < 6) & (x[:, 0] > 100)))
    p = 1 / (1 + np.exp(-logit))
    y = (r.random(n) < p).astype(np.float64)
    for c, rate in [(6, 0.15), (8, 0.2), (12, 0.1), (13, 0.05)]:
        x[r.random(n) < rate, c] = np.nan
    return x, y, p


def base(**kw):
    p = dict(objective="binary", num_leaves=31, learning_rate=0.1, min_data_in_leaf=20,
             feature_fraction=0.9, bagging_fraction=0.8, bagging_freq=1, seed=7,
             deterministic=True, force_row_wise=True, num_threads=1, verbose=-1)
    p.update(kw)
    return p


def train(params, x, y, rounds, **ds):
    d = lgb.Dataset(x, y, feature_name=NAMED, free_raw_data=False, **ds)
    return lgb.train(params, d, num_boost_round=rounds)


def rows(x_test, boosters):
    """Test rows: held-out rows, plus rows pushed onto the models' own thresholds (the
    `<=` boundary), exact zeros, tiny values inside LightGBM's zero range (1e-35),
    NaN everywhere, and infinities."""
    r = np.random.default_rng(99)
    out = [x_test[:160].copy()]
    thr = []
    for b in boosters:
        for t in b.dump_model()["tree_info"][:20]:
            stack = [t["tree_structure"]]
            while stack:
                n = stack.pop()
                if "split_feature" in n:
                    if n["decision_type"] == "<=":
                        thr.append((n["split_feature"], n["threshold"]))
                    stack += [n["left_child"], n["right_child"]]
    edge = x_test[160:256].copy()
    for i in range(len(edge)):
        for _ in range(3):
            f, t = thr[r.integers(len(thr))]
            t32 = np.float32(t)
            edge[i, f] = r.choice([t32, np.nextafter(t32, np.float32(np.inf)),
                                   np.nextafter(t32, np.float32(-np.inf))])
    out.append(edge)
    z = x_test[256:288].copy()
    z[:, [9, 14, 3]] = 0.0
    z[::2, 14] = np.float32(5e-36)
    z[1::4, 9] = np.float32(-1e-36)
    out.append(z)
    out.append(np.full((2, FEATURES), np.nan, dtype=np.float32))
    # Categories as they may arrive: negative, fractional (truncated), unseen, huge.
    c = x_test[292:304].copy()
    c[:, 1] = [-1, -0.5, 0.5, 3.99, 23, 24, 31, 32, 1e10, -1e10, np.nan, 7]
    c[:, 3] = [0, 1, 2.5, -2, 6, 40, 1e9, np.nan, 3, 0.999, 5, -0.0]
    out.append(c)
    inf = x_test[288:292].copy()
    inf[0, 0] = np.inf
    inf[1, 11] = -np.inf
    inf[2, 2] = np.inf
    out.append(inf)
    return np.vstack(out).astype(np.float32)


def num(v):
    """JSON cannot hold NaN / infinities: they are strings."""
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    x, y, p = data(30_000, 7)
    x_test, _, _ = data(400, 8)
    x_test[:, 1] = np.where(np.random.default_rng(5).random(400) < 0.05, np.nan, x_test[:, 1])
    models = {}
    models["binary_nan"] = train(base(), x, y, 80)
    xz = x.copy()
    xz[np.isnan(xz)] = 0.0
    models["binary_zero"] = train(base(zero_as_missing=True, seed=8), xz, y, 60)
    models["xentropy"] = train(base(objective="cross_entropy", seed=9), x, p, 50)
    xc = x.copy()
    xc[np.random.default_rng(4).random(len(xc)) < 0.05, 1] = np.nan
    models["categorical"] = train(base(seed=10, cat_smooth=5, min_data_per_group=50), xc, y, 60,
                                  categorical_feature=[1, 3])
    rr = np.random.default_rng(13)
    loss = y * np.nan_to_num(x[:, 0]) * rr.uniform(0.5, 1.0, len(y))
    models["regression"] = train(base(objective="regression", seed=11), x, loss, 40)
    models["poisson"] = train(base(objective="poisson", seed=12), x,
                              rr.poisson(0.2 + 1.5 * y).astype(float), 40)
    models["shap_120x6"] = train(base(num_leaves=63, max_depth=6, learning_rate=0.05,
                                      min_data_in_leaf=10), x, y, 120)
    kind = np.where(y > 0, np.where(np.nan_to_num(x[:, 0]) < 20, 1, 2), 0).astype(float)
    multi = train(base(objective="multiclass", num_class=3, seed=13), x, kind, 30)
    multi.save_model(str(OUT / "multiclass.txt"))
    for name, b in models.items():
        b.save_model(str(OUT / f"{name}.txt"))
    for name, b in [("categorical", models["categorical"]), ("multiclass", multi)]:
        with open(OUT / f"{name}.dump.json", "w") as f:
            json.dump(b.dump_model(), f)
    refused = {
        "refused_linear": (base(linear_tree=True), {}),
        "refused_sigmoid2": (base(sigmoid=2.0), {}),
        "refused_multiclassova": (base(objective="multiclassova", num_class=3), {}),
        "refused_reg_sqrt": (base(objective="regression", reg_sqrt=True), {}),
        "refused_rf": (base(boosting="rf", bagging_fraction=0.5), {}),
    }
    for name, (params, ds) in refused.items():
        yy = (y + (x[:, 7] > 0.3)).astype(np.float64) if "multi" in name else y
        xx = np.nan_to_num(x) if "linear" in name else x
        train(params, xx, yy, 3, **ds).save_model(str(OUT / f"{name}.txt"))
    seeds = OUT.parent.parent.parent / "fuzz" / "seeds" / "lgbm_text"
    seeds.mkdir(parents=True, exist_ok=True)
    small = base(num_leaves=4, min_data_in_leaf=200)
    seed_model = train(small, x, y, 3)
    seed_model.save_model(str(seeds / "nan_missing.txt"))
    with open(seeds / "nan_missing.dump.json", "w") as f:
        json.dump(seed_model.dump_model(), f, indent=1)
    train(dict(small, zero_as_missing=True), xz, y, 3).save_model(str(seeds / "zero_missing.txt"))
    xi = x.copy()
    xi[:, [0, 7]] = np.nan_to_num(xi[:, [0, 7]])
    xi[np.random.default_rng(3).random(len(xi)) < 0.3, 11] = np.nan
    train(dict(small, num_leaves=3), xi, (np.isnan(xi[:, 11]) | (y > 0)).astype(float), 2) \
        .save_model(str(seeds / "nan_split.txt"))
    t = rows(x_test, list(models.values()))
    ref = {
        "lightgbm": lgb.__version__,
        "features": NAMED,
        "rows": [[num(v) for v in r] for r in t],
        "models": {},
    }
    for name, b in models.items():
        ref["models"][name] = {
            "raw": [float(v) for v in b.predict(t, raw_score=True)],
            "prob": [float(v) for v in b.predict(t)],
            "contrib": [[float(v) for v in r] for r in b.predict(t, pred_contrib=True)],
        }
    k = multi.num_model_per_iteration()
    ref["multiclass"] = {
        "margin": multi.predict(t, raw_score=True).tolist(),
        "prob": multi.predict(t).tolist(),
        "contrib": [np.split(r, k) for r in multi.predict(t, pred_contrib=True)],
    }
    ref["multiclass"]["contrib"] = [[c.tolist() for c in r] for r in ref["multiclass"]["contrib"]]
    (OUT / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    for f in sorted(OUT.iterdir()):
        print(f"{f.relative_to(OUT.parent.parent.parent)}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
