#!/usr/bin/env python3
"""Train the realistic preset's tiers for the quickstart (dev-time tool; outputs committed).

Writes:
  testdata/models/xgb_realistic_fast.json     fast tier: XGBoost on the 18 velocity
                                              features (binary:logistic)
  testdata/models/xgb_realistic_history.json  deep tier (non-LLM): XGBoost on those plus
                                              the 12 history features (risk_core::synth::HISTORY)
  examples/risk_realistic.toml                the tiered engine: examples/risk.toml's rules
                                              and policy, the fast model, the history model as
                                              the deep tier over a gray band fixed on the
                                              training period, feedback fit on validation days,
                                              review from the training period's top 1% of fast
                                              scores, entity state computing every feature

Data: `risk.synth(ROWS, seed=7, preset="realistic", history=True)`, trained on days 0-60
with the parameters of examples/evaluate.py (the same functions: the band is the
training period's fast scores between their 97th and 99.7th percentiles; the feedback
centre, gain, bound and ttl are fit on days 50-60 with models trained before day 50).
The quickstart replays another seed (42) and reports from day 67, so neither the cards
nor the period it is judged on were seen here.

    risk-ffi/python/run_tests.sh   # builds the package into risk-ffi/python/.venv once
    risk-ffi/python/.venv/bin/python tools/train_realistic.py [--rows 2000000]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
import pyarrow as pa
import xgboost as xgb

import risk

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import evaluate as ev  # noqa: E402  (the evaluation's own definitions)

MODELS = ROOT / "testdata" / "models"
SEED = 7


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    a = ap.parse_args()
    t = risk.synth(a.rows, seed=SEED, preset="realistic", history=True)
    ms = t.column("time").cast(pa.int64()).to_numpy()
    day = (ms - ms[0]) / ev.DAY_MS
    train = day < ev.TRAIN_DAYS
    y = t.column("is_fraud").to_numpy(zero_copy_only=False).astype(np.int32)
    xf, xh = ev.matrix(t, False), ev.matrix(t, True)
    names = [f["name"] for f in ev.schema_fields()]
    paths = {}
    for name, x, cols in (("fast", xf, names), ("history", xh, names + ev.history_names())):
        booster = xgb.train(ev.PARAMS, xgb.DMatrix(x[train], y[train], feature_names=cols),
                            ev.ROUNDS)
        path = MODELS / f"xgb_realistic_{name}.json"
        booster.save_model(path)
        paths[name] = path
        if name == "fast":
            p = booster.predict(xgb.DMatrix(x[train], feature_names=cols))
            band = tuple(float(q) for q in np.quantile(p, ev.GRAY_QUANTILES))
            # Review from the score that alerts on the evaluation's budget of training
            # traffic: the engine's own actions are then the budgeted alerts.
            review_at = float(np.quantile(p, 1 - ev.BUDGET))
    fb = ev.fit_feedback(t, xf, xh, y, day)
    rel = {k: pathlib.Path("..") / v.relative_to(ROOT) for k, v in paths.items()}
    text = ev.engine_toml(rel["fast"], True, deep=rel["history"], band=band, feedback=fb)
    # examples/risk.toml's own header describes that file, not this one.
    text = text[text.index("[schema]"):]
    assert "approve_below = 0.3\n" in text
    text = text.replace("approve_below = 0.3\n", f"approve_below = {review_at:.9g}\n")
    facts = {"rows": a.rows, "seed": SEED, "train_days": ev.TRAIN_DAYS,
             "train_frauds": int(y[train].sum()), "band": band, "review_at": review_at,
             "feedback": {k: fb[k] for k in ("centre", "gain", "max_shift", "ttl_days")},
             "valid_recall_at_budget": [round(fb["valid_recall_fast"], 4),
                                        round(fb["valid_recall"], 4)]}
    head = (
        "# The tiered engine of the realistic preset (quickstart's default run), written by\n"
        "# tools/train_realistic.py: do not edit by hand, rerun the tool.\n"
        f"# Trained on {json.dumps(facts)}\n"
        "# fast: XGBoost on the velocity features; deep: XGBoost on velocity + history\n"
        "# features over the gray band (the training period's fast scores between their\n"
        "# 97th and 99.7th percentiles); feedback fit on validation days 50-60; review from\n"
        "# the fast score of the training period's top 1% (the evaluation's alert budget).\n\n"
    )
    (ROOT / "examples" / "risk_realistic.toml").write_text(head + text)
    print(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main()
