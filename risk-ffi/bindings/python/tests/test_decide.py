"""decide / decide_json / decide_batch: fields, names, per-item codes."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import risk
from _util import base_txn, is_nan, load_config

ACTIONS = {"approve", "review", "decline"}
TIERS = {"rules", "fast", "static"}
FALLBACKS = {"none", "timeout", "error", "panic", "invalid_score", "circuit_open", "absent", "saturated"}
ESCALATIONS = {"none", "enqueued", "shed"}


def assert_sane(d: risk.Decision, txn_id: int) -> None:
    assert isinstance(d, risk.Decision)
    assert d.txn == txn_id
    assert d.action in ACTIONS
    assert d.tier in TIERS
    assert d.fallback in FALLBACKS
    assert d.escalation in ESCALATIONS
    assert 0.0 <= d.score <= 1.0
    assert is_nan(d.rule_score) or 0.0 <= d.rule_score <= 1.0
    assert is_nan(d.model_score) or 0.0 <= d.model_score <= 1.0
    assert isinstance(d.hard_rule, bool)
    assert d.total_ns > 0 and d.total_ns >= d.rules_ns
    assert (d.ticket != 0) == (d.escalation == "enqueued")
    assert len(d.reasons) <= 8
    for r in d.reasons:
        assert isinstance(r, risk.Reason)
        assert r.name and not r.name.startswith("unknown") and r.name.isprintable()
        assert math.isfinite(r.weight)
        assert risk.reason_name(r.code) == r.name


def test_version_and_library_path():
    assert risk.version().count(".") == 2
    assert risk.library_path().endswith("librisk_ffi.so")


def test_decide_one(shared_engine):
    d = shared_engine.decide(base_txn(1))
    assert_sane(d, 1)
    assert d.entity == 1000 + 1 % 97
    # the fast tier answered and explained itself (explain_above = 0.3 in examples/risk.toml)
    assert d.tier == "fast" and d.fallback == "none"
    assert d.model_score == pytest.approx(d.score)
    assert d.reasons and all(r.name.startswith("xgb:") for r in d.reasons)
    assert d.reason_names == tuple(r.name for r in d.reasons)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.action = "approve"  # type: ignore[misc]


def test_decide_kwargs_equal_mapping(shared_engine):
    t = base_txn(2)
    a = shared_engine.decide(t)
    b = shared_engine.decide(**t)
    c = shared_engine.decide({k: v for k, v in t.items() if k != "id"}, id=2)
    for d in (a, b, c):
        assert_sane(d, 2)
        assert d.model_score == a.model_score
        assert d.reason_names == a.reason_names


def test_hard_rule_decline_has_named_rule_reasons(shared_engine):
    d = shared_engine.decide(
        id=3, amount=900.0, currency="USD", country="NG", channel="ecom", device=9,
        features={"txn_count_1h": 9, "small_count_1h": 7, "hour": 3, "device_new": 1,
                  "is_foreign": 1, "amount_ratio": 20, "high_risk_country": 1},
    )
    assert_sane(d, 3)
    assert d.action == "decline" and d.hard_rule and d.tier == "rules"
    assert "CARD_TESTING" in d.reason_names


def test_minimal_and_missing_features(shared_engine):
    d = shared_engine.decide(amount=10.0, currency="USD")
    assert_sane(d, 0)
    d = shared_engine.decide(
        id=4, amount=10.0, currency="USD",
        features={"txn_count_1h": None, "hour": math.nan, "country": "GB", "is_foreign": True},
    )
    assert_sane(d, 4)


def test_decide_json(shared_engine):
    doc = {
        "id": 9, "entity": 5, "timestamp_ms": 1767571200000, "amount": 12.5,
        "currency": "GBP", "country": "GB", "channel": "ecom",
        "features": {"txn_count_1h": 1, "hour": None},
    }
    text = json.dumps(doc)
    for arg in (text, text.encode(), doc):
        d = shared_engine.decide_json(arg)
        assert_sane(d, 9)
        assert d.entity == 5


def test_decide_json_carries_text_fields(shared_engine):
    # Free-text fields (for a BERT text tier) travel in the JSON document's "text" object.
    doc = {"id": 10, "amount": 12.5, "currency": "GBP",
           "text": {"merchant_descriptor": "SQ *JOES PIZZA", "email_domain": "gmail.com"}}
    assert_sane(shared_engine.decide_json(doc), 10)
    for bad, what in (({"Memo": "x"}, "Memo"), ({"memo": "a\nb"}, "control character"),
                      ({"memo": "x" * 5000}, "at most 4096")):
        with pytest.raises(risk.RiskError) as ei:
            shared_engine.decide_json({"amount": 1, "currency": "USD", "text": bad})
        assert ei.value.code == 5 and what in str(ei.value), str(ei.value)
    with pytest.raises(risk.RiskError) as ei:
        shared_engine.decide_json({"amount": 1, "currency": "USD", "text": {"memo": 1}})
    assert "`text`" in str(ei.value)


def test_json_and_struct_paths_agree(shared_engine):
    t = base_txn(11)
    a = shared_engine.decide(t)
    b = shared_engine.decide_json(json.dumps(t))
    assert a.model_score == b.model_score and a.reason_names == b.reason_names


def test_batch_with_bad_items(shared_engine):
    txns = [base_txn(100 + i) for i in range(6)]
    txns[2]["amount"] = -1.0          # the library rejects it
    txns[4]["currency"] = 840         # refused Python-side (not a str)
    out = shared_engine.decide_batch(txns)
    assert len(out) == 6
    for i in (0, 1, 3, 5):
        assert_sane(out[i], 100 + i)
    e2 = out[2]
    assert isinstance(e2, risk.RiskError)
    assert e2.code == 5 and e2.name == "RISK_ERR_TRANSACTION"
    assert "amount" in e2.message and "item 2" in e2.message
    e4 = out[4]
    assert isinstance(e4, risk.RiskError) and isinstance(e4, TypeError)
    assert e4.code == 3 and e4.name == "RISK_ERR_INVALID" and "currency" in e4.message


def test_batch_two_library_failures_keep_their_codes(shared_engine):
    txns = [base_txn(200), base_txn(201, amount=math.nan), base_txn(202, channel="pigeon"), base_txn(203)]
    out = shared_engine.decide_batch(txns)
    assert isinstance(out[0], risk.Decision) and isinstance(out[3], risk.Decision)
    assert [o.code for o in out[1:3]] == [5, 5]
    assert all(o.message for o in out[1:3])


def test_batch_empty_and_not_mappings(shared_engine):
    assert shared_engine.decide_batch([]) == []
    out = shared_engine.decide_batch([base_txn(1), "not a txn"])
    assert isinstance(out[0], risk.Decision)
    assert isinstance(out[1], risk.RiskError) and out[1].code == 3


def test_metrics_and_reload(shared_engine):
    # The shared engine is used by other tests, but one at a time: exact deltas.
    before = shared_engine.metrics()
    shared_engine.decide(base_txn(7))
    m = shared_engine.metrics()
    assert m["decisions"] == before["decisions"] + 1
    assert set(m["by_action"]) == ACTIONS
    assert set(m["by_tier"]) == TIERS
    for stage in ("rules", "fast", "total", "deep"):
        assert {"count", "p50_ns", "p99_ns", "p999_ns", "max_ns"} <= set(m["latency"][stage])
    assert m["latency"]["total"]["count"] == before["latency"]["total"]["count"] + 1
    shared_engine.reload_rules()  # the same rule file: compiles


# A rules-only engine (a constant rule score of 0.1, no fast tier): the rule tier decides
# every transaction, so the exposition's per-tier counts are exact.
RULES_ONLY_TOML = load_config("rules_only.toml")


def test_metrics_text_is_the_openmetrics_exposition():
    e = risk.RiskEngine.from_toml(RULES_ONLY_TOML)
    for i in range(3):
        assert e.decide(id=i + 1, amount=10.0, currency="USD").tier == "rules"
    t = e.metrics_text()
    assert isinstance(t, str)
    assert 'risk_decisions_by_tier_total{tier="rules"} 3\n' in t, t
    assert 'risk_decisions_total{action="approve"} 3\n' in t, t
    assert "# TYPE risk_decide_latency_seconds histogram\n" in t, t
    assert 'risk_decide_latency_seconds_bucket{le="+Inf",stage="total"} 3\n' in t, t
    assert t.rstrip().endswith("# EOF"), t[-200:]
    e.close()
    with pytest.raises(risk.RiskError) as ei:
        e.metrics_text()
    assert ei.value.code == 10 and ei.value.name == "RISK_ERR_HANDLE"


def test_reason_name_of_unknown_code():
    with pytest.raises(risk.RiskError) as ei:
        risk.reason_name(0xFFFFFFF0)
    assert ei.value.code == 3 and str(0xFFFFFFF0) in ei.value.message
    assert risk.fallback_name(200) == "unknown"
    assert risk.fallback_name(1) == "timeout"


def test_code_unknown_is_named_unknown():
    """RISK_CODE_UNKNOWN (255): a tier, fallback, source or failure from a newer library."""
    from risk import _ffi as F

    assert risk.RISK_CODE_UNKNOWN == 255
    order = ["none", "timeout", "error", "panic", "invalid_score", "circuit_open", "absent", "saturated"]
    assert set(order) == FALLBACKS
    for code, name in enumerate(order):
        assert risk.fallback_name(code) == name
    assert risk.fallback_name(255) == "unknown"
    assert (F.RISK_FALLBACK_TIMEOUT, F.RISK_FALLBACK_SATURATED) == (1, 7)
    c = F.risk_decision(txn=5, tier=255, fallback=255, action=0, escalation=0, total_ns=1)
    d = risk.Decision._from_c(c)
    assert (d.tier, d.fallback, d.action) == ("unknown", "unknown", "approve")
    v = risk.Verdict._from_c(F.risk_verdict(ticket=1, source=255, failure=255))
    assert (v.source, v.failure) == ("unknown", "unknown")
    v = risk.Verdict._from_c(F.risk_verdict(ticket=1, source=2, failure=3))
    assert (v.source, v.failure) == ("global_prior", "saturated")


def test_batch_chunking_keeps_order(shared_engine):
    txns = [base_txn(1000 + i) for i in range(150)]
    txns[77]["amount"] = math.nan
    for bs in (1, 7, 64, 65_536):
        out = shared_engine.decide_batch(txns, batch_size=bs)
        assert [o.txn for i, o in enumerate(out) if i != 77] == [1000 + i for i in range(150) if i != 77]
        assert isinstance(out[77], risk.RiskError) and out[77].code == 5 and "amount" in out[77].message
    for bad in (0, 65_537):
        with pytest.raises(risk.RiskError) as ei:
            shared_engine.decide_batch(txns, batch_size=bad)
        assert ei.value.code == 3
