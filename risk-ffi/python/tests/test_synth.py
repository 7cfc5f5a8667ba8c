"""risk.synth: the synthetic stream as Arrow."""

from __future__ import annotations

import pyarrow as pa
import pytest

import risk


def test_synth_is_deterministic_and_ordered():
    a, b = risk.synth(5_000, seed=1), risk.synth(5_000, seed=1)
    assert a.equals(b)
    assert not a.equals(risk.synth(5_000, seed=2))
    t = a.column("time").cast(pa.int64()).to_numpy()
    assert (t[1:] >= t[:-1]).all()
    assert a.schema.field("time").type == pa.timestamp("ms", tz="UTC")
    assert 0.005 < pa.compute.mean(a.column("is_fraud").cast(pa.float64())).as_py() < 0.06


def test_raw_leaves_velocity_features_null():
    raw = risk.synth(1_000, seed=1, raw=True)
    assert raw.column("txn_count_1h").null_count == raw.num_rows
    full = risk.synth(1_000, seed=1)
    assert full.column("txn_count_1h").null_count == 0


def test_bad_arguments():
    with pytest.raises(risk.InputError):
        risk.synth(10, days=0)
    with pytest.raises(risk.InputError):
        risk.synth(10, fraud_rate=2.0)
    with pytest.raises(risk.InputError, match="preset"):
        risk.synth(10, preset="hard")
    with pytest.raises(risk.InputError):
        risk.synth(10, preset="realistic", days=0)


def test_realistic_preset_defaults_and_overrides():
    t = risk.synth(50_000, seed=4, preset="realistic")
    ms = t.column("time").cast(pa.int64()).to_numpy()
    assert 100 < (ms[-1] - ms[0]) / 86_400_000 <= 120
    assert "label_time" in t.column_names
    rate = pa.compute.mean(t.column("is_fraud").cast(pa.float64())).as_py()
    assert 0.001 < rate < 0.006
    more = risk.synth(50_000, seed=4, preset="realistic", fraud_rate=0.03, days=60)
    rate = pa.compute.mean(more.column("is_fraud").cast(pa.float64())).as_py()
    assert 0.02 < rate < 0.04
    assert set(more.column("scenario").to_pylist()) >= {"low_slow_takeover", "mule_chain"}
    # The evaluation's second control: no fraud from the scenarios only history reveals,
    # the same fraud rate from the others.
    off = risk.synth(50_000, seed=4, preset="realistic", fraud_rate=0.03, days=60,
                     history_scenarios=False)
    fraud = [s for s, f in zip(off.column("scenario").to_pylist(),
                                off.column("is_fraud").to_pylist()) if f]
    assert 0.02 < len(fraud) / off.num_rows < 0.04
    hidden = {"low_slow_takeover", "mule_chain", "cash_out", "shared_identity"}
    assert not hidden & set(fraud)
    assert {"compromised_card", "card_testing"} <= set(fraud)
