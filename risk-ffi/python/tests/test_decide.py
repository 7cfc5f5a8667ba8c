"""One transaction from a mapping: the fields of a decision, typed errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import risk

TXN = {"id": 7, "entity": 42, "amount": 25.0, "currency": "USD", "country": "GB",
       "channel": "ecom", "mcc": 5411, "txn_count_1h": 3, "hour": 23}


def test_import_and_version():
    assert risk.__version__ == "0.1.0"
    assert "amount" in risk.TXN_FIELDS and "time" in risk.TXN_FIELDS
    assert issubclass(risk.InputError, risk.RiskError) and issubclass(risk.InputError, ValueError)
    assert issubclass(risk.RiskTypeError, TypeError)


def test_a_decision_has_every_field(engine):
    d = engine.decide(TXN)
    assert d.txn == 7 and d.entity == 42
    assert d.action in ("approve", "review", "decline")
    assert 0.0 <= d.score <= 1.0
    assert d.tier == "fast" and d.fallback is None
    assert d.model_score == pytest.approx(d.score)
    assert not math.isnan(d.rule_score)
    assert d.state == "off" and d.escalation in ("none", "enqueued", "shed")
    assert d.versions["rules"].startswith("rules:") and d.versions["fast"].startswith("xgboost@")
    assert d.versions["deep"] is None
    assert set(d.timings) == {"rules_ns", "fast_ns", "combine_ns", "total_ns"}
    assert d.timings["total_ns"] >= d.timings["rules_ns"]
    assert all(isinstance(c, str) and isinstance(w, float) for c, w in d.reasons)
    row = d.to_dict()
    assert row["action"] == d.action and row["reasons"] == d.reasons
    assert "Decision(txn=7" in repr(d)


def test_numpy_scalars_and_none_are_accepted(engine):
    t = dict(TXN, id=np.uint64(8), amount=np.float32(25.0), txn_count_1h=np.int64(3), hour=None)
    d = engine.decide(t)
    assert d.txn == 8
    # hour missing (None) and hour NaN decide alike
    assert engine.decide(dict(TXN, hour=float("nan"))).score == pytest.approx(
        engine.decide(dict(TXN, hour=None)).score)


def test_a_string_entity_is_hashed_stably(engine):
    a = engine.decide(dict(TXN, entity="card-123"))
    b = engine.decide(dict(TXN, entity="card-123"))
    assert a.entity == b.entity != 0


@pytest.mark.parametrize(
    "txn, cls, words",
    [
        (dict(TXN, amount=-1.0), risk.DecideError, "amount"),
        (dict(TXN, amount="12"), risk.RiskTypeError, "amount"),
        (dict(TXN, id=1.5), risk.RiskTypeError, "id"),
        (dict(TXN, id=-1), risk.InputError, "out of range"),
        (dict(TXN, currency="DOLLARS"), risk.DecideError, "DOLLARS"),
        (dict(TXN, channel="carrier-pigeon"), risk.DecideError, "carrier-pigeon"),
        (dict(TXN, no_such_feature=1.0), risk.DecideError, "no_such_feature"),
        (dict(TXN, country=3), risk.RiskTypeError, "country"),
        ({k: v for k, v in TXN.items() if k != "amount"}, risk.InputError, "amount"),
        (dict(TXN, text={"memo": "x" * 5000}), risk.DecideError, "memo"),
    ],
)
def test_bad_transactions_raise_typed_errors(engine, txn, cls, words):
    with pytest.raises(cls) as info:
        engine.decide(txn)
    e = info.value
    assert isinstance(e, risk.RiskError)
    assert words in str(e)
    assert e.kind == cls.kind


def test_decide_errors_carry_the_rust_code(engine):
    with pytest.raises(risk.DecideError) as info:
        engine.decide(dict(TXN, amount=float("inf")))
    assert info.value.code == 201  # DecideError::InvalidField


def test_a_bad_configuration_is_a_config_error(tmp_path):
    with pytest.raises(risk.ConfigError) as info:
        risk.Engine.from_toml("[thresholds]\napprove_below = 2.0\n")
    assert info.value.code in (401, 406) and "thresholds" in str(info.value) or "schema" in str(info.value)
    with pytest.raises(risk.ConfigError) as info:
        risk.Engine.from_toml(tmp_path / "missing.toml")
    assert info.value.code == 402
    with pytest.raises(risk.RiskTypeError):
        risk.Engine.from_toml(3)
