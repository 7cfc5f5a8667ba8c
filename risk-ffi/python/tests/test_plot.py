"""decide_batch on a pandas DataFrame, and the plot helpers. (Ported from the ctypes
binding's tests/test_frame_plot.py, whose decide_frame is decide_batch here.)"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pytest  # noqa: E402

import risk  # noqa: E402
from _util import EXAMPLES, no_deadline_toml  # noqa: E402
from risk.plot import plot_decisions_by_tier, plot_latency  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"

# decide_batch's columns, in order (errors="keep" adds "error" last).
COLUMNS = [
    "txn", "entity", "action", "score", "tier", "fallback", "hard_rule", "rule_score",
    "model_score", "threshold_shift", "escalation", "reasons", "rules_fired", "rules_shadow",
    "rules_version", "fast_version", "deep_version", "state", "lists_stale", "rules_ns",
    "fast_ns", "total_ns", "decided_at_ms",
]


@pytest.fixture(scope="module")
def shared_engine():
    """One engine for these read-only tests: the example config with the largest fast-tier
    deadline the engine allows (60 s) instead of 15 ms, so that which tier decides does not
    depend on how loaded the machine is."""
    with risk.Engine.from_toml(no_deadline_toml(), base_dir=EXAMPLES) as e:
        yield e


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


def test_decide_batch_round_trip(shared_engine):
    frame = make_frame()
    out = shared_engine.decide_batch(frame)
    assert isinstance(out, pa.Table)
    assert out.column_names == COLUMNS
    assert out.num_rows == len(frame)
    # One row per input row, in order.
    assert out.column("txn").to_pylist() == frame["id"].tolist()
    assert set(out.column("action").to_pylist()) <= {"approve", "review", "decline"}
    assert set(out.column("tier").to_pylist()) <= {"rules", "fast", "static"}
    scores = out.column("score").to_numpy()
    assert ((scores >= 0) & (scores <= 1)).all()
    assert all(t > 0 for t in out.column("total_ns").to_pylist())
    assert out.schema.field("hard_rule").type == pa.bool_()
    assert out.column("hard_rule").null_count == 0
    reasons = out.column("reasons").to_pylist()
    assert all(isinstance(r, list) and all(isinstance(x["code"], str) and isinstance(x["weight"], float)
                                           for x in r) for r in reasons)
    # each row decided on its own gives the same model score (the model is deterministic)
    model = out.column("model_score").to_pylist()
    assert any(m is not None for m in model[:10])
    for k, label in enumerate(frame.index[:10]):
        row = frame.loc[label]
        txn = {c: row[c] for c in ("id", "entity", "timestamp_ms", "amount", "currency",
                                   "mcc", "channel", "device")}
        txn = {k2: (int(v) if k2 in ("id", "entity", "timestamp_ms", "mcc", "device") else v)
               for k2, v in txn.items()}
        if not pd.isna(row["country"]):
            txn["country"] = row["country"]
        for c in frame.columns:
            if c not in risk.TXN_FIELDS:
                txn[c] = None if pd.isna(row[c]) else float(row[c])
        d = shared_engine.decide(txn)
        assert d.txn == int(row["id"])
        got = model[k]
        assert (got is None and d.model_score is None) or got == pytest.approx(d.model_score)


def test_decide_batch_bad_row(shared_engine):
    frame = make_frame(6)
    frame.loc[frame.index[3], "currency"] = "ZZZZ"
    with pytest.raises(risk.DecideError) as ei:
        shared_engine.decide_batch(frame)
    # Rows are numbered by position (an Arrow table has no index): index label 103 is row 3.
    assert ei.value.code == 201 and "row 3" in ei.value.message and "currency" in ei.value.message
    out = shared_engine.decide_batch(frame, errors="keep")
    assert out.column_names == COLUMNS + ["error"]
    errors = out.column("error").to_pylist()
    assert sum(e is not None for e in errors) == 1
    err = errors[3]
    assert isinstance(err, str) and "ZZZZ" in err and "currency" in err
    actions = out.column("action").to_pylist()
    assert actions[3] is None and sum(a is not None for a in actions) == 5
    assert out.column("txn").to_pylist() == [1, 2, 3, None, 5, 6]


def test_decide_batch_empty_and_wrong_type(shared_engine):
    out = shared_engine.decide_batch(make_frame(0))
    assert out.num_rows == 0 and out.column_names == COLUMNS
    with pytest.raises(risk.RiskTypeError):
        shared_engine.decide_batch([{"amount": 1.0}])


def test_plots_render_png(shared_engine, tmp_path):
    import matplotlib.pyplot as plt

    table = shared_engine.decide_batch(make_frame(60))

    ax = plot_latency(shared_engine)
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["rules", "fast", "deep", "total"]
    assert len(ax.patches) == 12  # 4 stages x 3 percentiles
    p1 = tmp_path / "latency.png"
    ax.figure.savefig(p1)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    plot_latency(shared_engine.metrics(), ax=a1)
    ax2 = plot_decisions_by_tier(table, ax=a2)
    assert ax2 is a2
    heights = sum(p.get_height() for p in a2.patches)
    assert heights == table.num_rows
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
