"""Event-time replays: the clock follows the data, labels arrive when they were known,
the report's figures are right, and compare() finds what a rule change changes."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

import risk
from risk import _metrics
from conftest import EXAMPLES, state_toml

DAY_MS = 86_400_000


def test_replay_decides_at_event_time(raw_frame):
    with risk.Engine.from_toml(state_toml(), base_dir=EXAMPLES) as e:
        out = e.replay(raw_frame)
    t = raw_frame.column("time").cast(pa.int64()).to_pylist()
    assert out.column("decided_at_ms").to_pylist() == t
    assert set(out.column("state").to_pylist()) == {"fresh"}
    # no deadline expires on the data's clock: the model answers every row
    assert out.column("fallback").null_count == out.num_rows
    assert out.schema.metadata[b"risk.replay.deep"] == b"skipped"


def test_replay_equals_serving_on_the_same_rows_and_state(raw_frame):
    # Velocity features depend only on event times: the replay and decide_batch (wall
    # clock) agree on every decision of the stateful engine.
    with risk.Engine.from_toml(state_toml(), base_dir=EXAMPLES) as e:
        a = e.replay(raw_frame)
    with risk.Engine.from_toml(state_toml(), base_dir=EXAMPLES) as e:
        b = e.decide_batch(raw_frame)
    for c in ("action", "score", "rules_fired"):
        assert a.column(c).to_pylist() == b.column(c).to_pylist(), c


LABEL_TOML = """
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[rules.scorer]
kind = "rules"
path = "label.rules"
[state]
max_keys = 1000
[[state.features]]
name = "card_frauds_30d"
key = "card"
agg = "fraud_count"
window = "30d"
buckets = 30
"""

LABEL_RULES = """version "label-test-1"
policy first_hit
rule KNOWN_FRAUD { when card_frauds_30d >= 1  decline  hard }
"""


@pytest.fixture
def label_engine(tmp_path):
    (tmp_path / "label.rules").write_text(LABEL_RULES)
    with risk.Engine.from_toml(LABEL_TOML, base_dir=tmp_path) as e:
        yield e


def card_rows():
    """One card, five transactions a day apart, the first a fraud."""
    t0 = 1_767_571_200_000
    return pa.table({
        "id": pa.array([1, 2, 3, 4, 5], pa.uint64()),
        "entity": pa.array([7] * 5, pa.uint64()),
        "time": pa.array([t0 + i * DAY_MS for i in range(5)], pa.timestamp("ms", tz="UTC")),
        "amount": [20.0] * 5,
        "is_fraud": [True, False, False, False, False],
    })


def fired(out):
    return ["KNOWN_FRAUD" in (f or []) for f in out.column("rules_fired").to_pylist()]


def test_a_label_reaches_the_features_when_it_became_known(label_engine):
    rows = card_rows()
    # known 2 days and 1 ms after the fraud: the rows of days 3 and 4 see it
    out = label_engine.replay(rows, label_delay_ms=2 * DAY_MS + 1)
    assert fired(out) == [False, False, False, True, True]
    assert out.column("action").cast(pa.string()).to_pylist()[3:] == ["decline", "decline"]
    assert out.schema.metadata[b"risk.replay.labels_fed"] == b"1"
    # never known: nothing fires; known after the end: counted as such
    assert fired(label_engine.replay(rows)) == [False] * 5
    late = label_engine.replay(rows, label_delay_ms=30 * DAY_MS)
    assert fired(late) == [False] * 5
    assert late.schema.metadata[b"risk.replay.labels_after_end"] == b"1"
    # a label table with its own times: known one day after, so from day 1 on
    lab = pa.table({"id": pa.array([1], pa.uint64()),
                    "time": pa.array([rows.column("time")[0].value + DAY_MS], pa.int64()),
                    "fraud": [True]})
    assert fired(label_engine.replay(rows, labels=lab)) == [False, True, True, True, True]
    with pytest.raises(risk.InputError):
        label_engine.replay(rows, labels=lab, label_delay_ms=1)


def test_labels_from_a_label_time_column(label_engine):
    rows = card_rows()
    t0 = rows.column("time")[0].value
    # the fraud's label arrives a day and an hour after it: rows of days 2-4 see it
    at = pa.array([t0 + DAY_MS + 3_600_000, None, None, None, None], pa.timestamp("ms", tz="UTC"))
    bt = risk.backtest(label_engine, rows.append_column("label_time", at), labels="label_time")
    assert fired(bt.decisions) == [False, False, True, True, True]
    assert bt.report["labels_fed"] == 1
    # never labelled (null): nothing fires; a legitimate row's time is ignored
    never = pa.array([None, t0 + DAY_MS, None, None, None], pa.timestamp("ms", tz="UTC"))
    bt = risk.backtest(label_engine, rows.append_column("label_time", never), labels="label_time")
    assert fired(bt.decisions) == [False] * 5
    assert bt.report["labels_fed"] == 0
    with pytest.raises(risk.InputError, match="label_time"):
        risk.backtest(label_engine, rows, labels="label_time")
    with pytest.raises(risk.RiskTypeError, match="timestamps"):
        risk.backtest(label_engine, rows.append_column("label_time", pa.array([1] * 5)), labels="label_time")


def test_time_going_backwards_is_refused(raw_frame):
    # Swap the first two rows whose times differ: the second of them goes backwards.
    t = raw_frame.column("time").cast(pa.int64()).to_pylist()
    i = next(k for k in range(len(t) - 1) if t[k] < t[k + 1])
    order = list(range(len(t)))
    order[i], order[i + 1] = order[i + 1], order[i]
    shuffled = raw_frame.take(pa.array(order))
    with risk.Engine.from_toml(EXAMPLES / "risk.toml") as e:
        with pytest.raises(risk.InputError, match=f"backwards at row {i + 1}"):
            e.replay(shuffled)
        with pytest.raises(risk.InputError, match="event time"):
            e.replay(raw_frame.drop_columns(["time"]))
        with pytest.raises(risk.InputError):
            e.replay(raw_frame, label_delay_ms=-1)


def test_metrics_against_hand_computed_values():
    y = np.array([1, 0, 1, 0, 0, 1], bool)
    s = np.array([0.9, 0.8, 0.7, 0.3, 0.2, 0.1])
    # precision at each fraud: 1/1, 2/3, 3/6 -> AP = (1 + 2/3 + 1/2) / 3
    assert _metrics.average_precision(y, s) == pytest.approx((1 + 2 / 3 + 0.5) / 3)
    # ties: one threshold for equal scores
    assert _metrics.average_precision(np.array([1, 0], bool), np.array([0.5, 0.5])) == 0.5
    r, thr = _metrics.recall_at_fpr(y, s, 1 / 3)
    assert (r, thr) == (pytest.approx(2 / 3), 0.7)
    assert _metrics.precision_recall(y, s >= 0.7) == (pytest.approx(2 / 3), pytest.approx(2 / 3))


def test_backtest_report(frame):
    costs = {"approve": ("amount", 0.0), "review": (5.0, 5.0), "decline": (0.0, 25.0)}
    bt = risk.backtest(EXAMPLES / "risk.toml", frame, costs=costs)
    r = bt.report
    y = frame.column("is_fraud").to_numpy(zero_copy_only=False)
    assert r["rows"] == frame.num_rows and r["frauds"] == int(y.sum())
    assert sum(r["actions"].values()) == frame.num_rows
    act = np.array(bt.decisions.column("action").cast(pa.string()).to_pylist())
    flagged = act != "approve"
    assert r["alert_rate"] == pytest.approx(flagged.mean())
    assert r["recall_flagged"] == pytest.approx((flagged & y).sum() / y.sum())
    amount = frame.column("amount").to_numpy()
    want = (amount[(act == "approve") & y].sum() + 5.0 * (act == "review").sum()
            + 25.0 * ((act == "decline") & ~y).sum())
    assert r["cost"] == pytest.approx(want)
    assert 0.0 < r["auprc_model"] <= 1.0 and 0.0 < r["auprc"] <= 1.0
    assert set(r["recall_at_fpr"]) == {"0.001", "0.01", "0.05"}
    assert bt.rules and all(0 <= x["precision"] <= 1 for x in bt.rules)
    top = bt.rules[0]
    fired = [top["rule"] in (f or []) for f in bt.decisions.column("rules_fired").to_pylist()]
    assert top["hits"] == sum(fired) and top["frauds"] == int((np.array(fired) & y).sum())
    assert "auprc" in bt.summary().index
    assert list(bt.rules_frame().columns) == ["rule", "hits", "frauds", "precision", "recall"]


def test_compare_finds_a_threshold_change(frame):
    a = (EXAMPLES / "risk.toml").read_text()
    b = a.replace("decline_at = 0.7", "decline_at = 0.5")
    assert a != b
    cmp = risk.compare(frame, risk.Engine.from_toml(a, base_dir=EXAMPLES),
                       risk.Engine.from_toml(b, base_dir=EXAMPLES), costs={"decline": (0, 10)})
    assert len(cmp.changed) > 0
    assert set(cmp.transitions) <= {("review", "decline")}
    assert sum(cmp.transitions.values()) == len(cmp.changed)
    assert cmp.model["mean_abs_delta"] == 0.0 and cmp.model["action_changed"] == len(cmp.changed)
    assert cmp.metrics["b"]["decline_rate"] > cmp.metrics["a"]["decline_rate"]
    assert all(r["started"] == r["stopped"] == 0 for r in cmp.rules)
    assert cmp.metrics_frame().shape[1] == 2


def test_backtest_needs_the_label(frame):
    with pytest.raises(risk.InputError, match="label"):
        risk.backtest(EXAMPLES / "risk.toml", frame.drop_columns(["is_fraud"]))
    with pytest.raises(risk.RiskTypeError):
        risk.backtest(EXAMPLES / "risk.toml", frame, label_delay="7d")


def test_compare_finds_a_rule_change(tmp_path, frame):
    toml = """
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[rules.scorer]
kind = "rules"
path = "RULES"
"""
    rules = """version "v-{v}"
policy first_hit
rule BIG {{ when amount > {t}  review }}
rule HUGE {{ when amount > 5000  decline  hard }}
"""
    for name, t in (("a", 300), ("b", 100)):
        (tmp_path / f"{name}.rules").write_text(rules.format(v=name, t=t))
    a = risk.Engine.from_toml(toml.replace("RULES", "a.rules"), base_dir=tmp_path)
    b = risk.Engine.from_toml(toml.replace("RULES", "b.rules"), base_dir=tmp_path)
    cmp = risk.compare(frame, a, b)
    big = next(r for r in cmp.rules if r["rule"] == "BIG")
    amount = frame.column("amount").to_numpy()
    assert big["started"] == int(((amount > 100) & (amount <= 300)).sum()) > 0
    assert big["stopped"] == 0 and big["b"] - big["a"] == big["started"]
    assert all(r["started"] == r["stopped"] == 0 for r in cmp.rules if r["rule"] == "HUGE")
    assert cmp.model["scored_both"] == 0


def test_label_inputs_edge_cases(label_engine):
    rows = card_rows()
    with pytest.raises(risk.InputError, match="at least 1"):
        label_engine.replay(rows, label_delay_ms=0)
    # a label table in any order, a null label skipped, the last word for a transaction wins
    t0 = rows.column("time")[0].value
    lab = pa.table({"id": pa.array([3, 2, 1, 1], pa.uint64()),
                    "time": pa.array([t0 + 3 * DAY_MS, t0 + 2 * DAY_MS, t0 + DAY_MS, t0 + DAY_MS],
                                     pa.int64()),
                    "fraud": pa.array([None, True, True, False])})
    out = label_engine.replay(rows, labels=lab)
    # txn 1: True then False at the same time, in that order (cleared); txn 2's fraud known
    # at day 2; txn 3's null label skipped
    assert fired(out) == [False, False, True, True, True]
    assert out.schema.metadata[b"risk.replay.labels_fed"] == b"3"
    # a one-shot reader is read once, labels and rows alike
    reader = pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches())
    assert fired(label_engine.replay(reader, label_delay_ms=2 * DAY_MS + 1)) == [
        False, False, False, True, True]
    from risk.backtest import _delay_ms
    assert _delay_ms(dt.timedelta(milliseconds=1001)) == 1001


def test_a_path_with_an_equals_sign_and_a_relative_base_dir(tmp_path, monkeypatch):
    d = tmp_path / "runs" / "lr=0.1"
    d.mkdir(parents=True)
    (d / "label.rules").write_text(LABEL_RULES)
    (d / "risk.toml").write_text(LABEL_TOML)
    with risk.Engine.from_toml(str(d / "risk.toml")) as e:
        assert e.has_state
    monkeypatch.chdir(d)
    import pickle
    e = risk.Engine.from_toml(LABEL_TOML, base_dir=".")
    blob = pickle.dumps(e)
    monkeypatch.chdir(tmp_path)
    clone = pickle.loads(blob)  # the base directory was made absolute
    assert clone.has_state
    clone.close()
    e.close()


def test_labels_an_engine_cannot_take_are_warned_with_the_reason(frame):
    # examples/risk.toml has no [state]: the labels have nowhere to go.
    with pytest.warns(risk.LabelsRefusedWarning, match=r"\[state\]"):
        bt = risk.backtest(EXAMPLES / "risk.toml", frame.slice(0, 3_000), label_delay=dt.timedelta(hours=1))
    assert bt.report["labels_refused"] > 0
    assert "[state]" in bt.report["labels_refused_reason"]
    assert bt.report["labels_fed"] == 0


def test_backtest_of_toml_text_resolves_paths_against_base_dir(frame):
    text = (EXAMPLES / "risk.toml").read_text()
    rows = frame.slice(0, 500)
    with pytest.raises(risk.ConfigError):
        risk.backtest(text, rows, base_dir="/nonexistent")
    a = risk.backtest(text, rows, base_dir=EXAMPLES)
    b = risk.backtest(EXAMPLES / "risk.toml", rows)
    assert a.decisions.column("score").equals(b.decisions.column("score"))


def _live_only_toml(tmp_path) -> str:
    """The example engine with an audit log and a rule history under ``tmp_path``."""
    text = (EXAMPLES / "risk.toml").read_text()
    text = text.replace(
        'path = "../risk-rules/rules/default.rules"\n',
        f'path = "../risk-rules/rules/default.rules"\nhistory_dir = "{tmp_path / "history"}"\n',
    )
    assert "history_dir" in text
    return text + f'\n[audit]\ndir = "{tmp_path / "audit"}"\n'


def _tree(d):
    return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_replay_opens_no_audit_log_and_records_no_rule_history(tmp_path, frame):
    text = _live_only_toml(tmp_path)
    rows = frame.slice(0, 300)
    # a backtest of the configuration builds no live engine: nothing is created
    bt = risk.backtest(text, rows, base_dir=EXAMPLES)
    assert bt.report["rows"] == 300
    assert not (tmp_path / "audit").exists() and not (tmp_path / "history").exists()
    # a live engine writes both; its replay leaves them byte for byte as they were
    with risk.Engine.from_toml(text, base_dir=EXAMPLES) as live:
        live.decide_batch(rows.slice(0, 20))
        live.audit_flush()
        before = _tree(tmp_path)
        assert any(p.parts[0] == "audit" for p in before) and any(p.parts[0] == "history" for p in before)
        out = live.replay(rows)
        assert out.num_rows == 300
        assert _tree(tmp_path) == before


def _deep_toml() -> str:
    """examples/risk.toml with the XGBoost model also as the deep tier, batches run at
    once (a replay's clock stands still)."""
    return (EXAMPLES / "risk.toml").read_text() + """
[deep]
budget_ms = 1000
max_batch = 1
max_wait_ms = 0

[deep.scorer]
kind = "xgboost"
path = "../testdata/models/xgb_fraud.json"
"""


def test_a_backtest_can_replay_the_deep_tier(frame):
    rows = risk.synth(6_000, seed=3, raw=True)
    on = risk.backtest(_deep_toml(), rows, base_dir=EXAMPLES, deep=True)
    esc = on.decisions.column("escalation").cast(pa.string()).to_pylist()
    enqueued = esc.count("enqueued")
    assert enqueued > 0 and "shed" not in esc
    assert on.report["deep"] == "replayed"
    assert on.report["deep_verdicts"] == enqueued and on.report["deep_lost"] == 0
    assert 0 < on.report["deep_latency_p50_us"] <= on.report["deep_latency_p99_us"]
    # Each verdict reached its entity's feedback before the entity's next row.
    shift = np.nan_to_num(on.decisions.column("threshold_shift").to_numpy(zero_copy_only=False))
    assert (shift != 0).any()
    ent = on.decisions.column("entity").to_pylist()
    first_escalated = {}
    for i, (e, s) in enumerate(zip(ent, esc)):
        if s == "enqueued":
            first_escalated.setdefault(e, i)
    for i, e in enumerate(ent):
        if shift[i] != 0:
            assert e in first_escalated and first_escalated[e] < i
    # Replayed twice: the same decisions (each verdict waited for in order).
    again = risk.backtest(_deep_toml(), rows, base_dir=EXAMPLES, deep=True)
    assert again.decisions.column("threshold_shift").equals(on.decisions.column("threshold_shift"))
    # Without deep=True the tier is left out: its escalations are shed, nothing shifts.
    off = risk.backtest(_deep_toml(), rows, base_dir=EXAMPLES)
    assert off.report["deep"] == "skipped"
    assert "enqueued" not in off.decisions.column("escalation").cast(pa.string()).to_pylist()
    assert not np.nan_to_num(off.decisions.column("threshold_shift").to_numpy(zero_copy_only=False)).any()
