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
