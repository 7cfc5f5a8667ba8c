#!/usr/bin/env python3
"""Tier evaluation on the realistic preset (issue [20] part 4, first part): what the
entity's history, computed by the SDK's own entity state, adds to the fast tier.

One command (after `risk-ffi/python/run_tests.sh` has built the package once):

    risk-ffi/python/.venv/bin/python examples/evaluate.py [--rows 2000000] [--seed 1]

Steps:
1. `risk.synth(rows, preset="realistic")`: 120 days, 0.3% fraud, a third of it visible
   only in history, labels arriving after a per-episode delay.
2. Trains two XGBoost models on days 0-60 (the same parameters as the realism check):
   **fast** on the 18 velocity features, **fast+history** on those plus the 12 history
   features of `risk_core::synth::HISTORY` (links to confirmed fraud through a device,
   e-mail or merchant; cards per device and merchant; devices and categories per card;
   hour and amount against the card's own), as entity state computes them with each label
   fed when it arrived.
3. Replays the raw rows of all 120 days through two real engines (`risk.backtest`,
   event time, `labels="label_time"`): `examples/risk.toml`'s rules and thresholds, its
   fast tier replaced by each model, entity state computing every feature from raw rows.
   The offline features and the engine's must agree (parity, printed).
4. Reports on the test period (day 67 on, a 7-day gap) for **rules** (the rule score),
   **fast** and **fast+history** (the engines' final scores): AUPRC, recall at 1% and 5%
   FPR, and at an equal alert budget (each system alerting on the same share of test
   traffic) recall, value detection rate (fraud amount alerted / fraud amount) and cost
   (stated below); each with a 95% interval from a cluster bootstrap over cards (Poisson
   weights per card), and the paired lift of fast+history over fast.
5. Controls, under which the lifts of tiered and fast+history over fast must vanish
   (computed offline: the engine equals the offline models, see the parity figure):
   the history features shuffled across rows (train and test alike, so they carry no
   information about the row); and the data regenerated with the scenarios only history
   reveals switched off (`risk.synth(..., history_scenarios=False)`: their share of the
   fraud goes to the others, legitimate traffic unchanged).

6. **Tiered**: a third engine whose fast tier is the fast model and whose deep tier is
   the fast+history model, over a gray band fixed on the training period's fast scores
   (its top 3% below its top 0.3%); `risk.backtest(..., deep=True)` waits for each
   verdict before the next row, so it shifts the entity's next decisions at event time.
   Its feedback (centre, gain, bound, ttl) is fit on days 50-60 with models trained
   before day 50. Reported: verdicts, their wall latency, the share that would be in
   place before the entity's next transaction, rows shifted, actions changed.

What it does not do yet: an LLM deep tier (its prompt carrying the entity's history).
The quickstart's default run prints the same comparison for committed models
(`tools/train_realistic.py`, `examples/risk_realistic.toml`).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import tomllib

import numpy as np
import pyarrow as pa
import xgboost as xgb

import risk

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DAY_MS = 86_400_000
TRAIN_DAYS, GAP_DAYS = 60, 7
PARAMS = {
    "objective": "binary:logistic", "max_depth": 6, "eta": 0.05, "subsample": 0.8,
    "colsample_bytree": 0.8, "tree_method": "hist", "nthread": 2, "seed": 0,
}
ROUNDS = 300
#: Share of test traffic each system alerts on (review or decline) at the equal budget.
BUDGET = 0.01
#: The fast tier's gray zone for the in-band comparison: below its top 0.3%, within its
#: top 3% of test traffic.
BAND = (0.003, 0.03)
#: The gray band of the tiered engine: the fast scores between these quantiles of the
#: training period's (its top 3% below its top 0.3%), the same slice as the in-band
#: comparison, fixed before the test period.
GRAY_QUANTILES = (0.97, 0.997)
#: Feedback settings tried on the validation period (the deep score that shifts nothing,
#: the shift per unit of score, its bound, how long a verdict holds).
FEEDBACK_GRID = {
    "centre": (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    "gain": (0.25, 0.5, 1.0, 2.0),
    "max_shift": (0.2, 0.5),
    "ttl_days": (0.25, 1, 7, 30),
}
#: The feedback is fit with models trained before this day, on the days from it to the
#: training cut.
VALID_FROM = 50
#: Costs at the budget: an alert costs a review (5), a missed fraud its amount, a
#: caught fraud nothing more.
REVIEW_COST = 5.0
#: The history features and their entity-state definitions (risk_core::synth::history).
HISTORY_STATE = """
[[state.features]]
name = "device_fraud_90d"
key = "device"
agg = "fraud_count"
window = "90d"
buckets = 30

[[state.features]]
name = "email_fraud_90d"
key = "email"
agg = "fraud_count"
window = "90d"
buckets = 30

[[state.features]]
name = "merchant_fraud_90d"
key = "merchant"
agg = "fraud_count"
window = "90d"
buckets = 30

[[state.features]]
name = "merchant_fraud_rate_90d"
key = "merchant"
agg = "fraud_rate"
window = "90d"
buckets = 30

[[state.features]]
name = "device_cards_30d"
key = "device"
agg = "distinct"
of = "entity"
window = "30d"
buckets = 30

[[state.features]]
name = "card_devices_30d"
key = "card"
agg = "distinct"
of = "device"
window = "30d"
buckets = 30

[[state.features]]
name = "merchant_cards_7d"
key = "merchant"
agg = "distinct"
of = "entity"
window = "7d"
buckets = 7

[[state.features]]
name = "card_mccs_90d"
key = "card"
agg = "distinct"
of = "mcc"
window = "90d"
buckets = 30

[[state.features]]
name = "card_hour_ratio_90d"
key = "card"
agg = "ratio"
of = "hour"
window = "90d"
buckets = 30

[[state.features]]
name = "card_amount_std_30d"
key = "card"
agg = "stddev"
of = "amount"
window = "30d"
buckets = 30

[[state.features]]
name = "card_count_90d"
key = "card"
agg = "count"
window = "90d"
buckets = 30

[[state.features]]
name = "device_since_last"
key = "device"
agg = "since_last"
"""


def schema_fields() -> list[dict]:
    return tomllib.loads((EXAMPLES / "risk.toml").read_text())["schema"]["fields"]


def history_names() -> list[str]:
    return [d["name"] for d in tomllib.loads(HISTORY_STATE)["state"]["features"]]


def matrix(table: pa.Table, history: bool) -> np.ndarray:
    """The exact values an engine's model sees: categoricals as their index in the
    schema's vocabulary, numerics as float32, missing as NaN."""
    cols = []
    for f in schema_fields():
        col = table.column(f["name"])
        if f["kind"] == "categorical":
            # Category ids start at 1 (0: a value outside the vocabulary).
            index = {v: i + 1 for i, v in enumerate(f["vocab"])}
            values = col.cast(pa.string()) if f["name"] != "mcc" else col
            strings = [(v if isinstance(v, str) else f"{v:04d}") for v in values.to_pylist()]
            cols.append(np.array([index.get(s, 0) for s in strings], np.float32))
        else:
            cols.append(col.cast(pa.float32()).to_numpy(zero_copy_only=False))
    if history:
        for name in history_names():
            cols.append(table.column(name).cast(pa.float32()).to_numpy(zero_copy_only=False))
    return np.stack(cols, axis=1)


def engine_toml(model: pathlib.Path, history: bool, deep: pathlib.Path | None = None,
                band: tuple[float, float] = (0.3, 0.7), feedback: dict | None = None) -> str:
    """examples/risk.toml with its fast tier replaced by `model` and entity state
    computing the velocity features (and the history features with `history`); with
    `deep`, that model as the deep tier over the gray band `band`."""
    text = (EXAMPLES / "risk.toml").read_text()
    if deep is not None:
        text = text.replace("band = [0.3, 0.7]", f"band = [{band[0]:.9g}, {band[1]:.9g}]")
    if feedback is not None:
        fb = text.index("[feedback]")
        end = text.index("\n\n", fb) if "\n\n" in text[fb:] else len(text)
        text = text[:fb] + (
            f"[feedback]\ngain = {feedback['gain']}\ncentre = {feedback['centre']}\n"
            f"max_shift = {feedback['max_shift']}\nttl_ms = {int(feedback['ttl_days'] * DAY_MS)}\n"
        ) + text[end:]
        text += f"""
[deep]
budget_ms = 1000
max_batch = 1
max_wait_ms = 0
workers = 1

[deep.scorer]
kind = "xgboost"
path = "{deep}"
"""
    text = text.replace('path = "../testdata/models/xgb_fraud.json"', f'path = "{model}"')
    if history:
        extra = "".join(f'  {{ name = "{n}", kind = "numeric", required = false }},\n'
                        for n in history_names())
        end = text.index("\n]\n", text.index("[schema]")) + 1
        text = text[:end] + extra + text[end:]
    seq = (EXAMPLES / "risk_sequence.toml").read_text()
    state = seq[seq.index("[state]"): seq.index("[[state.sequences]]")]
    state = state.replace("max_keys = 1000000", "max_keys = 4000000\nmax_pending_labels = 4000000")
    return text + "\n" + state + (HISTORY_STATE if history else "")


def weighted_metrics(y, p, amount, w) -> dict:
    """AUPRC, recall at 1% / 5% FPR and, at the equal budget, recall, value detection
    and cost; every row weighted by `w` (the bootstrap's weights)."""
    order = np.argsort(-p, kind="stable")
    y, p, amount, w = y[order], p[order], amount[order], w[order]
    wf, wl = w * y, w * (1 - y)
    tp, fp = np.cumsum(wf), np.cumsum(wl)
    frauds, legit = tp[-1], fp[-1]
    precision = tp / np.maximum(tp + fp, 1e-12)
    out = {"auprc": float((precision * wf).sum() / max(frauds, 1e-12))}
    for fpr in (0.01, 0.05):
        k = np.searchsorted(fp, fpr * legit, side="right")
        out[f"recall_{int(fpr * 100)}"] = float(tp[k - 1] / frauds) if k else 0.0
    cut = np.searchsorted(np.cumsum(w), BUDGET * w.sum(), side="right")
    caught = tp[cut - 1] if cut else 0.0
    value = w * y * amount
    out["recall_budget"] = float(caught / frauds)
    out["value_detection"] = float(value[:cut].sum() / max(value.sum(), 1e-12))
    alerts = w[:cut].sum()
    out["cost"] = float(alerts * REVIEW_COST + value[cut:].sum())
    return out


def bootstrap(y, scores: dict, amount, cards, reps: int, seed: int) -> dict:
    """Point figures and 95% intervals per system, and of the paired lift of
    fast+history over fast, with Poisson(1) weights per card."""
    rng = np.random.default_rng(seed)
    _, card_ix = np.unique(cards, return_inverse=True)
    ones = np.ones(len(y))
    point = {k: weighted_metrics(y, s, amount, ones) for k, s in scores.items()}
    draws = {k: [] for k in scores}
    for _ in range(reps):
        w = rng.poisson(1.0, card_ix.max() + 1)[card_ix].astype(np.float64)
        for k, s in scores.items():
            draws[k].append(weighted_metrics(y, s, amount, w))
    out = {}
    for k in scores:
        out[k] = {m: (point[k][m], *np.percentile([d[m] for d in draws[k]], [2.5, 97.5]))
                  for m in point[k]}
    for other in ("tiered", "fast+history"):
        if "fast" in scores and other in scores:
            out[f"lift {other}"] = {
                m: (point[other][m] - point["fast"][m],
                    *np.percentile([a[m] - b[m] for a, b in zip(draws[other], draws["fast"])],
                                   [2.5, 97.5]))
                for m in point["fast"]}
    return out


def _before_next(t: pa.Table, escalated: np.ndarray, latency_us) -> float:
    """Share of escalated rows whose entity's next transaction came later than the deep
    tier's 99th-percentile latency: the verdicts that would be in place in time live."""
    if not latency_us or not escalated.any():
        return float("nan")
    ent = t.column("entity").to_numpy()
    ms = t.column("time").cast(pa.int64()).to_numpy()
    order = np.lexsort((ms, ent))
    gap = np.full(len(ms), np.inf)
    same = ent[order][1:] == ent[order][:-1]
    gap[order[:-1][same]] = (ms[order][1:] - ms[order][:-1])[same]
    return float((gap[escalated] * 1000 > latency_us).mean())


def latest_verdicts(ent, ms, esc, ph):
    """For each row, the time and score of its entity's latest escalated row before it
    (a verdict the engine would hold when deciding the row); time far past when none."""
    last_t = np.full(len(ph), np.iinfo(np.int64).min // 2)
    last_v = np.zeros(len(ph))
    seen: dict = {}
    for i in range(len(ph)):
        prev = seen.get(ent[i])
        if prev is not None:
            last_t[i], last_v[i] = prev
        if esc[i]:
            seen[ent[i]] = (ms[i], ph[i])
    return last_t, last_v


def shift_of(ms, last_t, last_v, fb) -> np.ndarray:
    """The engine's feedback rule: clamp(gain * (verdict - centre), +-max_shift) while
    the verdict is younger than the ttl."""
    live = (ms - last_t) <= fb["ttl_days"] * DAY_MS
    return np.where(live, np.clip(fb["gain"] * (last_v - fb["centre"]),
                                  -fb["max_shift"], fb["max_shift"]), 0.0)


def fit_feedback(t: pa.Table, xf, xh, y, day) -> dict:
    """The feedback settings (FEEDBACK_GRID) under which the fast score shifted by the
    deep verdicts ranks the validation period's frauds best at the equal budget: models
    trained before VALID_FROM, the engine's rule (the entity's latest verdict before the
    row, shift = clamp(gain * (verdict - centre), +-max_shift) while younger than the
    ttl) replayed on their scores; recall at the budget over days VALID_FROM to the cut."""
    fit, valid = day < VALID_FROM, (day >= VALID_FROM) & (day < TRAIN_DAYS)
    nf, nh = [f["name"] for f in schema_fields()], [f["name"] for f in schema_fields()] + history_names()
    fast = xgb.train(PARAMS, xgb.DMatrix(xf[fit], y[fit], feature_names=nf), ROUNDS)
    hist = xgb.train(PARAMS, xgb.DMatrix(xh[fit], y[fit], feature_names=nh), ROUNDS)
    span = day < TRAIN_DAYS
    pf = fast.predict(xgb.DMatrix(xf[span], feature_names=nf))
    ph = hist.predict(xgb.DMatrix(xh[span], feature_names=nh))
    band = np.quantile(pf[fit[span]], GRAY_QUANTILES)
    esc = (pf >= band[0]) & (pf <= band[1])
    ent = t.column("entity").to_numpy()[span]
    ms = t.column("time").cast(pa.int64()).to_numpy()[span]
    last_t, last_v = latest_verdicts(ent, ms, esc, ph)
    v = valid[span]
    yv, amount, ones = y[span][v], np.zeros(int(v.sum())), np.ones(int(v.sum()))
    best, best_recall = None, -1.0
    for centre in FEEDBACK_GRID["centre"]:
        for gain in FEEDBACK_GRID["gain"]:
            for bound in FEEDBACK_GRID["max_shift"]:
                for ttl in FEEDBACK_GRID["ttl_days"]:
                    fb = {"centre": centre, "gain": gain, "max_shift": bound, "ttl_days": ttl}
                    shift = shift_of(ms, last_t, last_v, fb)
                    r = weighted_metrics(yv, (pf + shift)[v], amount, ones)["recall_budget"]
                    if r > best_recall + 1e-9:
                        best_recall, best = r, fb
    base = weighted_metrics(yv, pf[v], amount, ones)["recall_budget"]
    return {**best, "valid_recall": best_recall, "valid_recall_fast": base}


def offline_lifts(t: pa.Table, xf, xh, y, day, fb: dict, reps: int, seed: int) -> dict:
    """A control's lifts over fast, offline (the engine matches the offline models to
    ~1e-6, shown by the parity figure): fast and fast+history trained on the training
    period of `t`, tiered as the fast score shifted by the history model's verdicts on
    the gray band (the training period's quantiles) under the feedback `fb`."""
    train, test = day < TRAIN_DAYS, day >= TRAIN_DAYS + GAP_DAYS
    fast = xgb.train(PARAMS, xgb.DMatrix(xf[train], y[train]), ROUNDS)
    hist = xgb.train(PARAMS, xgb.DMatrix(xh[train], y[train]), ROUNDS)
    pf = fast.predict(xgb.DMatrix(xf))
    ph = hist.predict(xgb.DMatrix(xh))
    band = np.quantile(pf[train], GRAY_QUANTILES)
    esc = (pf >= band[0]) & (pf <= band[1])
    ent = t.column("entity").to_numpy()
    ms = t.column("time").cast(pa.int64()).to_numpy()
    last_t, last_v = latest_verdicts(ent, ms, esc, ph)
    tiered = pf + shift_of(ms, last_t, last_v, fb)
    scores = {"fast": pf[test], "tiered": tiered[test], "fast+history": ph[test]}
    amount = t.column("amount").to_numpy()[test]
    res = bootstrap(y[test], scores, amount, ent[test], reps, seed)
    return {"lift tiered": res["lift tiered"], "lift fast+history": res["lift fast+history"],
            "test_frauds": int(y[test].sum())}


def in_band(y, fast, other, cards, reps: int, seed: int) -> dict:
    """AUPRC of `fast` and `other` over the fast tier's gray zone (rows the fast score
    ranks below its top 0.3% and within its top 3%: the uncertain slice a deep tier
    would see), their ratio and its 95% interval (card-level bootstrap)."""
    hi, lo = np.quantile(fast, [1 - BAND[0], 1 - BAND[1]])
    band = (fast < hi) & (fast >= lo)
    y, fast, other, cards = y[band], fast[band], other[band], cards[band]
    _, card_ix = np.unique(cards, return_inverse=True)
    ones = np.ones(len(y))
    amount = np.zeros(len(y))

    def ap(s, w):
        return weighted_metrics(y, s, amount, w)["auprc"]

    rng = np.random.default_rng(seed + 2)
    ratios = []
    for _ in range(reps):
        w = rng.poisson(1.0, card_ix.max() + 1)[card_ix].astype(np.float64)
        ratios.append(ap(other, w) / max(ap(fast, w), 1e-12))
    a, b = ap(fast, ones), ap(other, ones)
    return {"rows": int(band.sum()), "frauds": int(y.sum()), "fast": a, "other": b,
            "ratio": (b / max(a, 1e-12), *np.percentile(ratios, [2.5, 97.5]))}


def by_scenario(y, scenario, scores: dict) -> str:
    """Recall at the equal budget by scenario."""
    cut = {k: np.quantile(s, 1 - BUDGET) for k, s in scores.items()}
    lines = ["| scenario | frauds | " + " | ".join(scores) + " |",
             "|---|---|" + "---|" * len(scores)]
    for sc in sorted(set(scenario[y == 1])):
        k = scenario == sc
        cells = " | ".join(f"{(s[k] > cut[name]).mean():.2f}" for name, s in scores.items())
        lines.append(f"| {sc} | {int(k.sum())} | {cells} |")
    return "\n".join(lines)


def table(res: dict) -> str:
    metrics = ("auprc", "recall_1", "recall_5", "recall_budget", "value_detection", "cost")
    head = "| system | " + " | ".join(metrics) + " |\n|---|" + "---|" * len(metrics) + "\n"
    rows = []
    for k, v in res.items():
        cells = []
        for m in metrics:
            x, lo, hi = v[m]
            cells.append(f"{x:,.0f} [{lo:,.0f}, {hi:,.0f}]" if m == "cost"
                         else f"{x:.3f} [{lo:.3f}, {hi:.3f}]")
        rows.append(f"| {k} | " + " | ".join(cells) + " |")
    return head + "\n".join(rows)


def evaluate(rows: int, seed: int, reps: int, out=sys.stdout) -> dict:
    t = risk.synth(rows, seed=seed, preset="realistic", history=True)
    raw = risk.synth(rows, seed=seed, preset="realistic", raw=True)
    ms = t.column("time").cast(pa.int64()).to_numpy()
    day = (ms - ms[0]) / DAY_MS
    train, test = day < TRAIN_DAYS, day >= TRAIN_DAYS + GAP_DAYS
    y = t.column("is_fraud").to_numpy(zero_copy_only=False).astype(np.int32)
    amount = t.column("amount").to_numpy()
    cards = t.column("entity").to_numpy()
    xf, xh = matrix(t, False), matrix(t, True)
    res: dict = {"rows": rows, "seed": seed, "test_rows": int(test.sum()),
                 "test_frauds": int(y[test].sum())}
    scores, parity = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for name, x, hist in (("fast", xf, False), ("fast+history", xh, True)):
            names = [f["name"] for f in schema_fields()] + (history_names() if hist else [])
            booster = xgb.train(PARAMS, xgb.DMatrix(x[train], y[train], feature_names=names), ROUNDS)
            path = pathlib.Path(tmp) / f"{name.replace('+', '_')}.json"
            booster.save_model(path)
            models[name] = path
            offline = booster.predict(xgb.DMatrix(x[test], feature_names=names))
            if name == "fast":
                p_train = booster.predict(xgb.DMatrix(x[train], feature_names=names))
                band = tuple(float(q) for q in np.quantile(p_train, GRAY_QUANTILES))
            # Only the history engine has label features to feed.
            bt = risk.backtest(engine_toml(path, hist), raw, base_dir=EXAMPLES,
                               labels="label_time" if hist else None)
            d = bt.decisions
            model = d.column("model_score").to_numpy(zero_copy_only=False)[test]
            served = ~np.isnan(model)
            parity[name] = float(np.max(np.abs(model[served] - offline[served]))) if served.any() else np.nan
            scores[name] = d.column("score").to_numpy(zero_copy_only=False)[test]
            if "rules" not in scores:
                scores["rules"] = np.nan_to_num(
                    d.column("rule_score").to_numpy(zero_copy_only=False)[test])
            res[f"labels_fed_{name}"] = bt.report["labels_fed"]
            if name == "fast":
                fast_actions = d.column("action").cast(pa.string()).to_numpy(zero_copy_only=False)[test]
        # Tiered: the fast model decides; the gray zone goes to the history model as the
        # deep tier, whose verdict shifts the entity's thresholds for its next decisions.
        fb = fit_feedback(t, xf, xh, y, day)
        bt = risk.backtest(engine_toml(models["fast"], True, deep=models["fast+history"], band=band,
                                       feedback=fb), raw,
                           base_dir=EXAMPLES, labels="label_time", deep=True)
        d = bt.decisions
        shift = np.nan_to_num(d.column("threshold_shift").to_numpy(zero_copy_only=False))[test]
        scores["tiered"] = d.column("score").to_numpy(zero_copy_only=False)[test] + shift
        actions = d.column("action").cast(pa.string()).to_numpy(zero_copy_only=False)[test]
        escalated = (d.column("escalation").cast(pa.string()).to_numpy(zero_copy_only=False) == "enqueued")
        res["deep"] = {k: bt.report.get(k) for k in
                       ("deep_verdicts", "deep_lost", "deep_latency_p50_us", "deep_latency_p99_us")}
        res["deep"]["band"] = band
        res["deep"]["feedback"] = fb
        res["deep"]["escalated_share"] = float(escalated[test].mean())
        res["deep"]["shifted_rows"] = int((shift != 0).sum())
        res["deep"]["changed_actions"] = int((actions != fast_actions).sum())
        res["deep"]["before_next"] = _before_next(t, escalated, res["deep"]["deep_latency_p99_us"])
    scores = {"rules": scores["rules"], "fast": scores["fast"], "tiered": scores["tiered"],
              "fast+history": scores["fast+history"]}
    res["parity"] = parity
    res["figures"] = bootstrap(y[test], scores, amount[test], cards[test], reps, seed)
    res["in_band"] = in_band(y[test], scores["fast"], scores["fast+history"], cards[test], reps, seed)
    res["in_band_tiered"] = in_band(y[test], scores["fast"], scores["tiered"], cards[test], reps, seed)
    scenario = np.asarray(t.column("scenario").to_pylist())[test]
    # Control 1: history shuffled across rows, train and test alike.
    rng = np.random.default_rng(seed + 1)
    xs = xh.copy()
    xs[:, len(schema_fields()):] = xs[rng.permutation(len(xs)), len(schema_fields()):]
    fb = res["deep"]["feedback"]
    res["control_shuffled"] = offline_lifts(t, xf, xs, y, day, fb, reps, seed)
    # Control 2: the same generator with the scenarios only history reveals switched off
    # (their share of the fraud goes to the others; legitimate traffic unchanged).
    t2 = risk.synth(rows, seed=seed, preset="realistic", history=True, history_scenarios=False)
    ms2 = t2.column("time").cast(pa.int64()).to_numpy()
    y2 = t2.column("is_fraud").to_numpy(zero_copy_only=False).astype(np.int32)
    res["control_no_history_scenarios"] = offline_lifts(
        t2, matrix(t2, False), matrix(t2, True), y2, (ms2 - ms2[0]) / DAY_MS, fb, reps, seed)
    print(f"realistic preset, {rows:,} rows, seed {seed}: test from day {TRAIN_DAYS + GAP_DAYS}, "
          f"{res['test_rows']:,} rows, {res['test_frauds']:,} frauds; budget {BUDGET:.0%} of "
          f"traffic; 95% intervals from {reps} card-level bootstrap draws", file=out)
    print(f"engine vs offline model score, max |diff|: {parity}", file=out)
    print(table(res["figures"]), file=out)
    ib = res["in_band"]
    print(f"in the fast tier's gray zone ({ib['rows']:,} rows, {ib['frauds']} frauds): AUPRC fast "
          f"{ib['fast']:.3f}, fast+history {ib['other']:.3f}, ratio {ib['ratio'][0]:.2f} "
          f"[{ib['ratio'][1]:.2f}, {ib['ratio'][2]:.2f}]", file=out)
    ib = res["in_band_tiered"]
    print(f"  tiered (fast score + the deep verdict's threshold shift): AUPRC {ib['other']:.3f}, "
          f"ratio {ib['ratio'][0]:.2f} [{ib['ratio'][1]:.2f}, {ib['ratio'][2]:.2f}]", file=out)
    print(f"deep tier: {res['deep']}", file=out)
    print(by_scenario(y[test], scenario, scores), file=out)
    for name, label in (("control_shuffled", "history shuffled across rows"),
                        ("control_no_history_scenarios", "history-only scenarios switched off")):
        c = res[name]
        print(f"control ({label}; offline, {c['test_frauds']} test frauds):", file=out)
        for lift in ("lift tiered", "lift fast+history"):
            print(f"  {lift}: " + ", ".join(
                f"{m} {v[0]:+.3f} [{v[1]:+.3f}, {v[2]:+.3f}]" for m, v in c[lift].items()
                if m != "cost"), file=out)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--boot", type=int, default=200, help="bootstrap draws")
    a = ap.parse_args()
    evaluate(a.rows, a.seed, a.boot)


if __name__ == "__main__":
    main()
