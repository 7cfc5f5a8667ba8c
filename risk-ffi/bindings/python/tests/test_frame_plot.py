"""decide_frame and the plot helpers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import risk
from risk.plot import plot_decisions_by_tier, plot_latency

PNG = b"\x89PNG\r\n\x1a\n"


def make_frame(n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    countries = np.array(["US", "GB", "NG", "RU", "DE"])
    channels = np.array(["pos", "ecom", "atm", "moto", "app"])
    f = pd.DataFrame(
        {
            "id": np.arange(1, n + 1, dtype=np.uint64),
            "entity": rng.integers(1, 50, n),
            "timestamp_ms": 1767571200000 + np.arange(n) * 1000,
            "amount": rng.gamma(2.0, 60.0, n).round(2),
            "currency": "USD",
            "mcc": rng.choice([5411, 5812, 5732, 6011], n),
            "country": rng.choice(countries, n),
            "channel": rng.choice(channels, n),
            "device": rng.integers(1, 9, n),
            "txn_count_1h": rng.integers(0, 10, n).astype(float),
            "small_count_1h": rng.integers(0, 8, n).astype(float),
            "hour": rng.integers(0, 24, n).astype(float),
            "device_new": rng.integers(0, 2, n).astype(float),
            "is_foreign": rng.integers(0, 2, n).astype(float),
            "amount_ratio": rng.gamma(1.5, 2.0, n),
        },
        index=pd.RangeIndex(100, 100 + n, name="row"),
    )
    f.loc[f.index[::5], "hour"] = np.nan       # missing numeric feature
    f.loc[f.index[1::7], "country"] = None     # unset country
    return f


def test_decide_frame_round_trip(shared_engine):
    frame = make_frame()
    out = shared_engine.decide_frame(frame)
    assert list(out.columns) == risk.FRAME_COLUMNS
    assert out.index.equals(frame.index)
    assert (out["txn"].to_numpy() == frame["id"].to_numpy()).all()
    assert set(out["action"]) <= {"approve", "review", "decline"}
    assert set(out["tier"]) <= {"rules", "fast", "static"}
    assert out["score"].between(0, 1).all()
    assert out["total_ns"].gt(0).all()
    assert out["hard_rule"].dtype == bool
    assert all(isinstance(r, list) and all(isinstance(x, str) for x in r) for r in out["reasons"])
    # each row decided on its own gives the same model score (the model is deterministic)
    for label in frame.index[:10]:
        row = frame.loc[label]
        feats = {c: (None if pd.isna(row[c]) else float(row[c]))
                 for c in frame.columns if c not in risk.TXN_FIELDS}
        txn = {c: row[c] for c in ("id", "entity", "timestamp_ms", "amount", "currency",
                                   "mcc", "channel", "device")}
        txn = {k: (int(v) if k in ("id", "entity", "timestamp_ms", "mcc", "device") else v)
               for k, v in txn.items()}
        if not pd.isna(row["country"]):
            txn["country"] = row["country"]
        d = shared_engine.decide(txn, features=feats)
        got = out.loc[label, "model_score"]
        assert (math.isnan(got) and math.isnan(d.model_score)) or got == pytest.approx(d.model_score)


def test_decide_frame_bad_row(shared_engine):
    frame = make_frame(6)
    frame.loc[frame.index[3], "currency"] = "ZZZZ"
    with pytest.raises(risk.RiskError) as ei:
        shared_engine.decide_frame(frame)
    assert ei.value.code == 5 and "row 103" in ei.value.message
    out = shared_engine.decide_frame(frame, errors="keep")
    assert list(out.columns) == risk.FRAME_COLUMNS + ["error"]
    assert out["error"].notna().sum() == 1
    err = out.loc[103, "error"]
    assert isinstance(err, risk.RiskError) and err.code == 5
    assert out["action"].isna().sum() == 1 and out["action"].notna().sum() == 5


def test_decide_frame_empty_and_wrong_type(shared_engine):
    out = shared_engine.decide_frame(make_frame(0))
    assert len(out) == 0 and list(out.columns) == risk.FRAME_COLUMNS
    with pytest.raises(risk.RiskError) as ei:
        shared_engine.decide_frame([{"amount": 1.0}])
    assert ei.value.code == 3


def test_plots_render_png(shared_engine, tmp_path):
    import matplotlib.pyplot as plt

    frame = shared_engine.decide_frame(make_frame(60))

    ax = plot_latency(shared_engine)
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["rules", "fast", "deep", "total"]
    assert len(ax.patches) == 12  # 4 stages x 3 percentiles
    p1 = tmp_path / "latency.png"
    ax.figure.savefig(p1)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    plot_latency(shared_engine.metrics(), ax=a1)
    ax2 = plot_decisions_by_tier(frame, ax=a2)
    assert ax2 is a2
    heights = sum(p.get_height() for p in a2.patches)
    assert heights == len(frame)
    p2 = tmp_path / "both.png"
    fig.savefig(p2)
    plt.close("all")

    for p in (p1, p2):
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 5000


def test_plot_input_errors():
    with pytest.raises(ValueError):
        plot_latency({"decisions": 0})
    with pytest.raises(ValueError):
        plot_decisions_by_tier(pd.DataFrame({"tier": []}))
