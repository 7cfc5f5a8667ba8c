"""An independent consumer of the audit log: no code of this package or of the library reads
the segments here. The schema (risk-core/proto/risk/audit/v1/audit.proto) is compiled with
protoc (grpcio-tools) at test time, the segment files are parsed by hand from their
documented format, every frame's CRC-32C is checked, and each payload is decoded with the
generated class. What it finds must equal what ``risk.read_audit`` returns.
(Ported from the ctypes binding's tests/test_audit_proto.py.)

Segment format: a 16-byte header (``RISKAUD1``, format version u32 LE, 4 reserved bytes),
then frames: u32 LE payload length, u32 LE CRC-32C (Castagnoli) of the payload, payload =
one ``risk.audit.v1.AuditRecord``.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys

import numpy as np
import pytest

import risk
from _util import AUDIT_ACTIONS, AUDIT_FLUSH_MS, AUDIT_TXNS, REPO, audit_engine, segments

PROTO_ROOT = REPO / "risk-core" / "proto"
PROTO = "risk/audit/v1/audit.proto"


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78)."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert crc32c(b"") == 0


@pytest.fixture(scope="module")
def audit_pb2(tmp_path_factory):
    """The module protoc generates from audit.proto, compiled now into a temp directory
    and loaded by path (its package name, ``risk.audit.v1``, is not this package's
    ``risk``)."""
    out = tmp_path_factory.mktemp("audit_proto")
    p = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--python_out={out}", PROTO],
        capture_output=True, text=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    path = out / "risk" / "audit" / "v1" / "audit_pb2.py"
    assert path.is_file(), list(out.rglob("*"))
    spec = importlib.util.spec_from_file_location("independent_audit_v1_pb2", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_segment(path, pb2) -> list:
    """Every record of one segment file, each frame's checksum verified."""
    data = path.read_bytes()
    assert data[:8] == b"RISKAUD1", data[:16]
    assert int.from_bytes(data[8:12], "little") == 1  # format version
    at, records = 16, []
    while at < len(data):
        assert at + 8 <= len(data), f"{path.name}: frame header cut at {at}"
        n = int.from_bytes(data[at:at + 4], "little")
        crc = int.from_bytes(data[at + 4:at + 8], "little")
        payload = data[at + 8:at + 8 + n]
        assert len(payload) == n, f"{path.name}: frame at {at} cut short"
        assert crc32c(payload) == crc, f"{path.name}: CRC mismatch at {at}"
        rec = pb2.AuditRecord()
        rec.ParseFromString(payload)
        records.append(rec)
        at += 8 + n
    return records


def test_a_consumer_reads_the_records_without_this_package(tmp_path, audit_pb2):
    with audit_engine(tmp_path) as e:
        decisions = {t["id"]: e.decide(t) for t in AUDIT_TXNS}
        e.audit_flush(AUDIT_FLUSH_MS)
    log = tmp_path / "audit"
    records = [r for seg in segments(log) for r in read_segment(seg, audit_pb2)]
    assert [r.seq for r in records] == list(range(1, len(records) + 1))  # dense from 1
    kinds = [r.WhichOneof("body") for r in records]
    assert kinds == ["schema"] + ["decision"] * len(AUDIT_TXNS)

    pb2 = audit_pb2
    schema = records[0].schema
    assert [f.name for f in schema.fields] == ["amount", "hour", "segment"]
    assert [f.kind for f in schema.fields] == [pb2.FIELD_KIND_NUMERIC, pb2.FIELD_KIND_NUMERIC,
                                               pb2.FIELD_KIND_CATEGORICAL]
    assert list(schema.fields[2].vocabulary) == ["a", "b"]
    assert schema.complete

    def action(d) -> str:
        return pb2.Action.Name(d.action).removeprefix("ACTION_").lower()

    ours = risk.read_audit(log)
    theirs = [r.decision for r in records if r.WhichOneof("body") == "decision"]
    # Same records, same order: txn ids, actions, scores, rules, versions.
    assert [d.txn_id for d in theirs] == ours["txn_id"].tolist() == [t["id"] for t in AUDIT_TXNS]
    assert [action(d) for d in theirs] == ours["action"].tolist() == [AUDIT_ACTIONS[d.txn_id] for d in theirs]
    for d, (_, row) in zip(theirs, ours.iterrows()):
        assert d.score == np.float32(row["score"]) == np.float32(decisions[d.txn_id].score)
        assert list(d.rules_fired) == row["rules_fired"]
        assert d.rules_fired_total == row["rules_fired_total"]
        assert d.hard_rule == row["hard_rule"]
        assert d.versions.rules.version == row["versions.rules.version"] == "audit-test-1"
        assert d.versions.rules.name == row["versions.rules.name"]
        assert f"{d.versions.rules.hash:016x}" == row["versions.rules.hash"]
        assert d.versions.fast.name == row["versions.fast.name"] == "constant"
        assert not d.versions.HasField("deep")
        assert d.versions.schema == schema.fingerprint
        assert f"{d.versions.schema:016x}" == row["versions.schema"]
        assert d.currency == row["currency"] and d.amount == row["amount"]
        assert d.decided_at_ms == row["decided_at_ms"]
        # Features in the schema record's order; categorical as 1-based vocabulary index.
        assert len(d.features) == len(schema.fields)
        amount, hour, segment = d.features
        assert amount == row["features.amount"]
        assert (math.isnan(hour) and math.isnan(row["features.hour"])) or hour == row["features.hour"]
        want = row["features.segment"]
        if isinstance(want, str):
            assert schema.fields[2].vocabulary[int(segment) - 1] == want
        else:
            assert math.isnan(segment)
    first = theirs[0]
    assert first.event_time_ms == 1767571200000 and first.entity == 7
    assert first.HasField("model_score") and first.model_score == np.float32(0.2)
    assert first.model_score == np.float32(decisions[first.txn_id].model_score)
    assert pb2.Tier.Name(first.tier) == "TIER_FAST"
    assert first.escalation == pb2.ESCALATION_NONE and first.ticket == 0
