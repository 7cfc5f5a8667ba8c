"""One transaction from a mapping: the fields of a decision, typed errors."""

from __future__ import annotations

import collections
import json
import math
import threading

import numpy as np
import pyarrow as pa
import pytest

import risk
from _util import EXAMPLES, base_txn, join_or_hang, load_config, no_deadline_toml, no_hang

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


# ----- ported from the ctypes binding's test_decide.py -----

ACTIONS = {"approve", "review", "decline"}
TIERS = {"rules", "fast", "static"}
FALLBACKS = {"timeout", "error", "panic", "invalid_score", "circuit_open", "absent", "saturated"}
ESCALATIONS = {"none", "enqueued", "shed"}


@pytest.fixture(scope="module")
def shared_engine():
    """One engine for read-only tests: the example configuration with the largest
    fast-tier deadline the engine allows (60 s) instead of 15 ms, so which tier decides
    does not depend on how loaded the machine is."""
    with risk.Engine.from_toml(no_deadline_toml(), base_dir=EXAMPLES) as e:
        yield e


def assert_sane(d: risk.Decision, txn_id: int) -> None:
    assert isinstance(d, risk.Decision)
    assert d.txn == txn_id
    assert d.action in ACTIONS
    assert d.tier in TIERS
    assert d.fallback is None or d.fallback in FALLBACKS
    assert d.escalation in ESCALATIONS
    assert 0.0 <= d.score <= 1.0
    assert math.isnan(d.rule_score) or 0.0 <= d.rule_score <= 1.0
    assert d.model_score is None or 0.0 <= d.model_score <= 1.0
    assert isinstance(d.hard_rule, bool)
    t = d.timings
    assert t["total_ns"] > 0 and t["total_ns"] >= t["rules_ns"]
    assert (d.ticket is not None) == (d.escalation == "enqueued")
    assert len(d.reasons) <= 8
    for name, weight in d.reasons:
        assert isinstance(name, str) and isinstance(weight, float)
        assert name and not name.startswith("unknown") and name.isprintable()
        assert math.isfinite(weight)


def test_decide_one(shared_engine):
    d = shared_engine.decide(base_txn(1))
    assert_sane(d, 1)
    assert d.entity == 1000 + 1 % 97
    # the fast tier answered and explained itself (explain_above = 0.3 in examples/risk.toml)
    assert d.score > 0.3
    assert d.tier == "fast" and d.fallback is None
    assert d.model_score == pytest.approx(d.score)
    assert d.reasons and all(name.startswith("xgb:") for name, _ in d.reasons)
    assert d.to_dict()["reasons"] == d.reasons
    with pytest.raises(AttributeError):
        d.action = "approve"  # type: ignore[misc]


def test_explain_on_request_gives_the_models_reasons(shared_engine):
    # A decision the model explained: the same reasons on request.
    t = base_txn(1)
    d = shared_engine.decide(t)
    model = [(n, w) for n, w in d.reasons if n.startswith("xgb:")]
    assert model and shared_engine.explain(t) == model
    # Below explain_above the decision carries none; on request it still has them.
    low = dict(base_txn(4), amount=3.0, txn_count_1h=0, small_count_1h=0, amount_ratio=1.0,
               device_new=0, is_foreign=0, high_risk_country=0)
    d = shared_engine.decide(low)
    assert d.model_score < 0.3 and not [n for n, _ in d.reasons if n.startswith("xgb:")]
    asked = shared_engine.explain(low)
    assert asked and all(n.startswith("xgb:") for n, _ in asked)
    with pytest.raises(risk.DecideError):
        shared_engine.explain(dict(base_txn(5), amount=float("nan")))


def test_key_order_and_dict_subclasses_decide_alike(shared_engine):
    t = base_txn(2)
    a = shared_engine.decide(t)
    b = shared_engine.decide(dict(reversed(list(t.items()))))
    c = shared_engine.decide(collections.OrderedDict(t))
    for d in (a, b, c):
        assert_sane(d, 2)
        assert d.model_score == a.model_score
        assert d.reasons == a.reasons


def test_hard_rule_decline_has_named_rule_reasons(shared_engine):
    d = shared_engine.decide({
        "id": 3, "amount": 900.0, "currency": "USD", "country": "NG", "channel": "ecom",
        "device": 9, "txn_count_1h": 9, "small_count_1h": 7, "hour": 3, "device_new": 1,
        "is_foreign": 1, "amount_ratio": 20, "high_risk_country": 1,
    })
    assert_sane(d, 3)
    assert d.action == "decline" and d.hard_rule and d.tier == "rules"
    assert "CARD_TESTING" in [name for name, _ in d.reasons]
    assert d.rules_fired  # the rules that fired, by id


def test_minimal_and_missing_features(shared_engine):
    d = shared_engine.decide({"amount": 10.0, "currency": "USD"})
    assert_sane(d, 0)
    d = shared_engine.decide({
        "id": 4, "amount": 10.0, "currency": "USD",
        "txn_count_1h": None, "hour": math.nan, "country": "GB", "is_foreign": True,
    })
    assert_sane(d, 4)


def test_decoded_json_documents_decide(shared_engine):
    """decide_json is gone: a JSON document decides once decoded (null: missing)."""
    doc = {
        "id": 9, "entity": 5, "timestamp_ms": 1767571200000, "amount": 12.5,
        "currency": "GBP", "country": "GB", "channel": "ecom",
        "txn_count_1h": 1, "hour": None,
    }
    text = json.dumps(doc)
    for arg in (text, text.encode()):
        d = shared_engine.decide(json.loads(arg))
        assert_sane(d, 9)
        assert d.entity == 5
    assert shared_engine.decide(doc).score == shared_engine.decide(json.loads(text)).score


def test_text_fields(shared_engine):
    # Free-text fields (for a BERT text tier) travel in the "text" mapping.
    doc = {"id": 10, "amount": 12.5, "currency": "GBP",
           "text": {"merchant_descriptor": "SQ *JOES PIZZA", "email_domain": "gmail.com"}}
    assert_sane(shared_engine.decide(doc), 10)
    for bad, what in (({"Memo": "x"}, "Memo"), ({"memo": "a\nb"}, "control character"),
                      ({"memo": "x" * 5000}, "at most 4096")):
        with pytest.raises(risk.DecideError) as ei:
            shared_engine.decide({"amount": 1, "currency": "USD", "text": bad})
        assert ei.value.code == 201 and what in str(ei.value), str(ei.value)
    # a value that is not a str: the message names the text field (text.memo)
    with pytest.raises(risk.RiskTypeError) as ei:
        shared_engine.decide({"amount": 1, "currency": "USD", "text": {"memo": 1}})
    assert "memo" in str(ei.value) and "text" in str(ei.value), str(ei.value)


def test_json_and_dict_paths_agree(shared_engine):
    t = base_txn(11)
    a = shared_engine.decide(t)
    b = shared_engine.decide(json.loads(json.dumps(t)))
    assert a.model_score == b.model_score and a.reasons == b.reasons


def test_batch_with_bad_rows(shared_engine):
    rows = [base_txn(100 + i) for i in range(6)]
    rows[2]["amount"] = -1.0          # refused by the engine
    rows[4]["channel"] = "pigeon"     # refused by the engine
    table = pa.Table.from_pylist(rows)
    out = shared_engine.decide_batch(table, errors="keep")
    assert out.num_rows == 6
    errors = out.column("error").to_pylist()
    for i in (0, 1, 3, 5):
        assert errors[i] is None
        assert out.column("txn")[i].as_py() == 100 + i
        assert_sane(shared_engine.decide(rows[i]), 100 + i)
        assert out.column("action")[i].as_py() in ACTIONS
    assert "row 2" in errors[2] and "amount" in errors[2]
    assert "row 4" in errors[4] and "pigeon" in errors[4]
    assert out.column("action").to_pylist()[2] is None and out.column("action").to_pylist()[4] is None
    # errors="raise": the first refused row, with the Rust error's code
    with pytest.raises(risk.DecideError) as ei:
        shared_engine.decide_batch(table)
    assert ei.value.code == 201 and "row 2" in ei.value.message and "amount" in ei.value.message
    # each refused row keeps its own code
    for i in (2, 4):
        with pytest.raises(risk.DecideError) as ei:
            shared_engine.decide_batch(table.slice(i, 1))
        assert ei.value.code == 201 and "row 0" in ei.value.message
    # a column of the wrong type is refused before any row is decided
    with pytest.raises(risk.RiskTypeError) as ei:
        shared_engine.decide_batch(table.set_column(
            table.column_names.index("currency"), "currency", pa.array([840] * 6)))
    assert "currency" in ei.value.message


def test_batch_of_python_rows_is_a_type_error(shared_engine):
    """decide_batch takes Arrow data or a dict of arrays, not a list of mappings."""
    for data in ([], [base_txn(1)], [base_txn(1), "not a txn"]):
        with pytest.raises(risk.RiskTypeError):
            shared_engine.decide_batch(data)
    assert shared_engine.decide_batch({"amount": []}).num_rows == 0


def test_metrics_and_reload(engine):
    before = engine.metrics()
    engine.decide(base_txn(7))
    m = engine.metrics()
    assert m["decisions"] == before["decisions"] + 1
    assert set(m["by_action"]) == ACTIONS
    assert set(m["by_tier"]) == TIERS
    assert sum(m["by_action"].values()) == sum(m["by_tier"].values()) == m["decisions"]
    for stage in ("rules", "fast", "total", "deep"):
        assert {"count", "p50_ns", "p99_ns", "p999_ns", "max_ns"} <= set(m["latency"][stage])
    assert m["latency"]["total"]["count"] == before["latency"]["total"]["count"] + 1
    engine.reload_rules()  # the same rule file: compiles
    assert engine.decide(base_txn(8)).txn == 8


# A rules-only engine (a constant rule score of 0.1, no fast tier): the rule tier decides
# every transaction, so the exposition's per-tier counts are exact.
RULES_ONLY_TOML = load_config("rules_only.toml")


def test_metrics_text_is_the_openmetrics_exposition():
    e = risk.Engine.from_toml(RULES_ONLY_TOML)
    for i in range(3):
        assert e.decide({"id": i + 1, "amount": 10.0, "currency": "USD"}).tier == "rules"
    t = e.metrics_text()
    assert isinstance(t, str)
    assert 'risk_decisions_by_tier_total{tier="rules"} 3\n' in t, t
    assert 'risk_decisions_total{action="approve"} 3\n' in t, t
    assert "# TYPE risk_decide_latency_seconds histogram\n" in t, t
    assert 'risk_decide_latency_seconds_bucket{le="+Inf",stage="total"} 3\n' in t, t
    assert t.rstrip().endswith("# EOF"), t[-200:]
    e.close()
    with pytest.raises(risk.ClosedError) as ei:
        e.metrics_text()
    assert "closed" in ei.value.message


@pytest.mark.parametrize("chunk", [1, 7, 64, 65_536])
@pytest.mark.parametrize("threads", [1, 3])
def test_batches_of_any_chunking_keep_order(shared_engine, chunk, threads):
    """Rows in record batches of any size, over threads: one result row per input row, in
    order, the refused row's error at its own index."""
    rows = [base_txn(1000 + i) for i in range(150)]
    rows[77]["amount"] = math.nan
    table = pa.Table.from_batches(pa.Table.from_pylist(rows).to_batches(max_chunksize=chunk))
    out = shared_engine.decide_batch(table, threads=threads, errors="keep")
    assert out.num_rows == 150
    txns = out.column("txn").to_pylist()
    assert [t for i, t in enumerate(txns) if i != 77] == [1000 + i for i in range(150) if i != 77]
    errors = out.column("error").to_pylist()
    assert [i for i, e in enumerate(errors) if e is not None] == [77]
    assert "row 77" in errors[77] and "amount" in errors[77]


def test_a_batch_longer_than_a_chunk_keeps_order(shared_engine):
    """More rows than risk._native.DECIDE_CHUNK: the refused row just past the first chunk
    is named by its index in the whole table."""
    n = risk._native.DECIDE_CHUNK + 3
    rows = [base_txn(10_000 + i) for i in range(n)]
    bad = risk._native.DECIDE_CHUNK + 1
    rows[bad]["amount"] = -1.0
    out = shared_engine.decide_batch(pa.Table.from_pylist(rows), errors="keep")
    errors = out.column("error").to_pylist()
    assert [i for i, e in enumerate(errors) if e is not None] == [bad]
    assert f"row {bad}" in errors[bad]
    txns = out.column("txn").to_pylist()
    assert [t for i, t in enumerate(txns) if i != bad] == [10_000 + i for i in range(n) if i != bad]


class _Reentrant:
    """A number whose conversion decides on the same engine (Python code run while a
    mapping is being read), on this thread or on another one it waits for."""

    def __init__(self, engine, value, threaded=False):
        self.engine, self.value, self.threaded, self.inner = engine, value, threaded, None

    def _decide(self):
        self.inner = self.engine.decide({"id": 99, "amount": 1.0, "currency": "USD"})

    def __float__(self):
        if self.threaded:
            t = threading.Thread(target=self._decide)
            t.start()
            t.join()
        else:
            self._decide()
        return self.value


@pytest.mark.parametrize("threaded", [False, True])
def test_a_value_that_decides_on_the_same_engine_while_read(shared_engine, threaded):
    def run():
        r = _Reentrant(shared_engine, 3.0, threaded)
        d = shared_engine.decide({"id": 1, "amount": 10.0, "currency": "USD", "txn_count_1h": r})
        assert r.inner is not None and r.inner.txn == 99
        r2 = _Reentrant(shared_engine, 3.0, threaded)
        again = shared_engine.decide({"id": 1, "amount": 10.0, "currency": "USD", "txn_count_1h": r2})
        return d, again

    d, again = no_hang(run, "a decide inside a value's __float__")
    assert d.txn == 1 and again.score == d.score


def test_refused_mappings_from_threads_do_not_deadlock(shared_engine):
    # a refusal builds its exception (Python code) while the mapping is read
    refused = []

    def worker():
        for i in range(300):
            try:
                shared_engine.decide({"id": i, "amount": 1.0, "no_such_feature": 1.0})
            except risk.DecideError:
                refused.append(i)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    join_or_hang(threads, "refused mappings decided from 4 threads")
    assert len(refused) == 4 * 300
