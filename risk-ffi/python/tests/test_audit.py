"""The audit trail: an engine with [audit] logs its decisions; audit_flush makes them
durable; read_audit / read_audit_records find them again; audit_stats counts them.
(Ported from the ctypes binding's tests/test_audit.py.)"""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pandas as pd
import pytest

import risk
from _util import (
    AUDIT_ACTIONS,
    AUDIT_FLUSH_MS,
    AUDIT_TXNS,
    audit_engine,
    segments,
)


@pytest.fixture
def logged(tmp_path):
    """(log directory, {txn id: Decision}): AUDIT_TXNS decided, flushed, engine closed."""
    with audit_engine(tmp_path) as e:
        decisions = {t["id"]: e.decide(t) for t in AUDIT_TXNS}
        # The schema record, then one record per decision.
        assert e.audit_flush(AUDIT_FLUSH_MS) == 1 + len(AUDIT_TXNS)
    return tmp_path / "audit", decisions


def f32(x) -> float:
    return float(np.float32(x))


def test_read_audit_by_txn(logged):
    log, decisions = logged
    df = risk.read_audit(log, txn=1)
    assert len(df) == 1
    row = df.iloc[0]
    d = decisions[1]
    assert row["kind"] == "decision"
    assert row["txn_id"] == 1 == d.txn and row["entity"] == 7 == d.entity
    assert row["action"] == "approve" == d.action
    assert row["tier"] == "fast" == d.tier
    assert f32(row["score"]) == f32(d.score)
    assert f32(row["rule_score"]) == f32(d.rule_score)
    assert d.model_score is not None
    assert f32(row["model_score"]) == f32(d.model_score)
    assert row["hard_rule"] == False  # noqa: E712 - a numpy bool
    assert row["event_time_ms"] == 1767571200000
    assert row["decided_at_ms"] > 0
    assert row["decided_at_ms"] == d.decided_at_ms
    # Versions, flattened with dotted names.
    assert row["versions.rules.version"] == "audit-test-1"
    assert row["versions.rules.name"].endswith("audit.rules")
    assert len(row["versions.rules.hash"]) == 16
    assert row["versions.fast.name"] == "constant"
    assert row["versions.deep"] is None  # no deep tier
    assert d.versions["deep"] is None
    assert len(row["versions.config"]) == 16 and len(row["versions.schema"]) == 16
    assert row["versions.config"] == d.versions["config"]
    assert row["versions.schema"] == d.versions["schema"]
    assert f32(row["thresholds.approve_below"]) == f32(0.3)
    assert f32(row["thresholds.decline_at"]) == f32(0.7)
    assert row["timings_ns.total"] >= row["timings_ns.rules"]
    # Rules fired stay a list; reasons a list of {code, weight}.
    assert row["rules_fired"] == ["BIG_AMOUNT", "NIGHT"] == d.rules_fired
    assert row["rules_fired_total"] == 2
    assert {r["code"] for r in row["reasons"]} >= {"BIG", "NIGHT"}
    assert {r["code"] for r in row["reasons"]} == {code for code, _ in d.reasons}
    # Features by name.
    assert row["features.amount"] == 1000.0
    assert row["features.hour"] == 3.0
    assert row["features.segment"] == "b"
    assert row["amount"] == 1000.0 and row["currency"] == "USD"
    assert row["escalation"] == "none" == d.escalation
    assert d.ticket is None  # not escalated


def test_one_row_per_decision(logged):
    log, decisions = logged
    df = risk.read_audit(log)
    assert len(df) == len(AUDIT_TXNS)
    assert (df["kind"] == "decision").all()
    assert df["txn_id"].tolist() == [t["id"] for t in AUDIT_TXNS]
    assert df["seq"].tolist() == [2, 3, 4, 5]
    assert dict(zip(df["txn_id"], df["action"])) == AUDIT_ACTIONS
    assert dict(zip(df["txn_id"], df["action"])) == {i: d.action for i, d in decisions.items()}
    assert df["hard_rule"].tolist() == [False, False, True, True]
    # Missing features are missing values (NaN; pandas' missing string for text).
    two = df[df["txn_id"] == 2].iloc[0]
    assert math.isnan(two["features.hour"])
    assert pd.isna(two["features.segment"])
    assert two["rules_fired"] == []
    # Schema records on request.
    with_schema = risk.read_audit(log, kinds=["schema", "decision"])
    assert with_schema["kind"].tolist() == ["schema"] + ["decision"] * len(AUDIT_TXNS)
    assert with_schema.iloc[0]["fields"] == ["amount", "hour", "segment"]


def test_read_audit_by_rule_entity_time_and_limit(logged):
    log, _ = logged
    blocked = risk.read_audit(log, rule="BLOCK")
    assert blocked["txn_id"].tolist() == [3]
    assert blocked.iloc[0]["action"] == "decline"
    assert risk.read_audit(log, rule="BIG_AMOUNT")["txn_id"].tolist() == [1, 3]
    assert risk.read_audit(log, rule="HOLD")["action"].tolist() == ["review"]
    assert risk.read_audit(log, entity=7)["txn_id"].tolist() == [1, 3]
    assert risk.read_audit(log, limit=2)["txn_id"].tolist() == [1, 2]
    at = int(risk.read_audit(log, txn=1).iloc[0]["decided_at_ms"])
    assert risk.read_audit(log, txn=1, from_ms=at, to_ms=at + 1)["txn_id"].tolist() == [1]
    # No match: an empty frame with the seq and kind columns.
    for empty in (risk.read_audit(log, txn=99), risk.read_audit(log, rule="NO_SUCH_RULE"),
                  risk.read_audit(log, kinds=["verdict"])):
        assert isinstance(empty, pd.DataFrame) and len(empty) == 0
        assert list(empty.columns) == ["seq", "kind"]


def test_records_are_the_library_json_views(logged):
    log, decisions = logged
    recs = risk.read_audit_records(log, txn=3)
    assert len(recs) == 1
    r = recs[0]
    assert r["kind"] == "decision" and r["txn_id"] == 3
    assert r["action"] == "decline" and r["hard_rule"] is True
    assert r["rules_fired"] == ["BIG_AMOUNT", "BLOCK"]
    assert r["features"] == {"amount": 9000.0, "hour": 12.0, "segment": None}
    assert r["versions"]["rules"]["version"] == "audit-test-1"
    assert f32(r["score"]) == f32(decisions[3].score)
    assert risk.flatten_record(r)["versions.rules.version"] == "audit-test-1"
    assert risk.flatten_record(r)["features.hour"] == 12.0
    # Paths may be str or os.PathLike.
    assert risk.read_audit_records(str(log), txn=3) == recs


def test_flush_and_stats(tmp_path):
    with audit_engine(tmp_path) as e:
        e.decide(AUDIT_TXNS[0])
        e.decide(AUDIT_TXNS[1])
        seq = e.audit_flush(AUDIT_FLUSH_MS)
        assert seq == 3
        s = e.audit_stats()
        assert set(s) == {"accepted", "shed_full", "shed_closed", "written_seq", "durable_seq", "batches",
                          "io_errors", "last_error", "segments_deleted", "recovery"}
        assert set(s["recovery"]) == {"segment", "truncated_bytes", "corrupt", "last_seq"}
        assert s["accepted"] == 2
        assert s["durable_seq"] == s["written_seq"] == seq
        assert s["shed_full"] == s["shed_closed"] == s["io_errors"] == 0
        assert s["last_error"] is None
        # A live engine's log reads while it writes: what was flushed is there.
        assert risk.read_audit(tmp_path / "audit")["txn_id"].tolist() == [1, 2]
        e.decide(AUDIT_TXNS[2])
        assert e.audit_flush() == 4  # default timeout
        assert risk.read_audit(tmp_path / "audit")["txn_id"].tolist() == [1, 2, 3]


def test_a_large_answer_reads_back_whole(tmp_path):
    """More than 64 KiB of records (the ctypes binding's first buffer) in one answer:
    every record comes back, in log order."""
    n = 300
    with audit_engine(tmp_path) as e:
        for i in range(n):
            e.decide({"id": 1000 + i, "amount": float(i), "currency": "USD", "hour": float(i % 24)})
        e.audit_flush(AUDIT_FLUSH_MS)
    recs = risk.read_audit_records(tmp_path / "audit")
    assert len(json.dumps(recs)) > 1 << 16
    assert [r["txn_id"] for r in recs] == [1000 + i for i in range(n)]


def test_flush_after_shutdown_is_an_audit_error(tmp_path):
    with audit_engine(tmp_path) as e:
        e.decide(AUDIT_TXNS[0])
        assert e.shutdown(drain_ms=AUDIT_FLUSH_MS) == (0, 0)  # closes the log, durable first
        with pytest.raises(risk.AuditError) as ei:
            e.audit_flush(AUDIT_FLUSH_MS)
        err = ei.value
        assert isinstance(err, risk.RiskError)
        assert err.kind == "audit"
        assert err.code == 0  # the audit log's errors have no numeric code
        assert "closed" in err.message
        assert str(err) == err.message
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is risk.AuditError
        assert (back.message, back.code) == (err.message, err.code)
        assert e.audit_stats()["durable_seq"] == 2
    assert risk.read_audit(tmp_path / "audit")["txn_id"].tolist() == [1]


def test_an_engine_without_audit(engine):
    for call in (engine.audit_flush, engine.audit_stats):
        with pytest.raises(risk.NotConfiguredError) as ei:
            call()
        assert isinstance(ei.value, risk.RiskError) and isinstance(ei.value, LookupError)
        assert "[audit]" in ei.value.message
        assert not isinstance(ei.value, risk.AuditError)
    engine.close()
    for call in (engine.audit_flush, engine.audit_stats):
        with pytest.raises(risk.ClosedError):
            call()


def test_bad_queries(logged, tmp_path):
    log, _ = logged
    with pytest.raises(risk.InputError) as ei:
        risk.read_audit_records(log, kinds=["decision", "decisions"])
    assert isinstance(ei.value, ValueError) and "decisions" in ei.value.message
    with pytest.raises(risk.AuditError) as ei:
        risk.read_audit(tmp_path / "no-such-log")
    assert "no-such-log" in ei.value.message
    # Argument types and ranges (the extension's argument conversion).
    for kwargs in ({"kinds": "decision"}, {"txn": "1"}, {"rule": 5}, {"limit": 1.5}, {"kinds": [1]}):
        with pytest.raises(TypeError):
            risk.read_audit_records(log, **kwargs)
    for kwargs in ({"txn": -1}, {"entity": 1 << 64}, {"from_ms": 1 << 63}):
        with pytest.raises(OverflowError):
            risk.read_audit_records(log, **kwargs)
    with pytest.raises(TypeError):
        risk.read_audit_records(12)
    with audit_engine(tmp_path) as e:
        with pytest.raises(OverflowError):
            e.audit_flush(-1)
    # A directory without segments is an empty log.
    assert risk.read_audit_records(tmp_path) == []


def test_a_damaged_segment_is_a_damaged_row(logged):
    log, _ = logged
    (seg,) = segments(log)
    data = bytearray(seg.read_bytes())
    # Flip a byte inside the payload of the third frame (the second decision), not in a
    # frame header (a damaged length at the tail could read as a write in progress).
    at = 16
    for _ in range(2):
        at += 8 + int.from_bytes(data[at:at + 4], "little")
    n = int.from_bytes(data[at:at + 4], "little")
    data[at + 8 + n // 2] ^= 0x5A
    seg.write_bytes(bytes(data))
    recs = risk.read_audit_records(log)
    kinds = [r["kind"] for r in recs]
    assert kinds.count("damaged") == 1, recs
    # The first decision reads as before; the damage is reported where it is.
    assert recs[0]["txn_id"] == 1 and kinds[1] == "damaged"
    assert "corrupt" in recs[1]["error"] and seg.name in recs[1]["error"]
    df = risk.read_audit(log)
    assert df["kind"].tolist() == kinds
    assert "corrupt" in df[df["kind"] == "damaged"].iloc[0]["error"]
