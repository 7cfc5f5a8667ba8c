"""Entity state through the package: velocity features, lists, labels, snapshots, the
state report, and the merchant / ip / email keys of a transaction (dict, decoded JSON and
Arrow batch) (ported from the ctypes binding's test_state.py)."""

from __future__ import annotations

import copy
import json

import pyarrow as pa
import pytest

import risk
from _util import load_config

# 2026-01-05 00:00 UTC; transactions of a test are a minute apart from here.
T0 = 1_767_571_200_000
MINUTE = 60_000

STATE_RULES = '''version "state-test-1"
policy first_hit
rule BLOCKED  { when device in list.blocked_devices  decline  hard }
rule MERCHANT { when merchant in list.blocked_merchants  decline  hard }
rule IP       { when ip in list.blocked_ips  decline  hard }
rule EMAIL    { when email in list.blocked_emails  decline  hard }
rule VELOCITY { when card_count_1h >= 2  review }
'''

# The rule tier alone (no fast tier: the rules decide every transaction); the engine
# adds the state fields (card_count_1h, merchant_fraud_7d, list.*) to the schema.
STATE_TOML = load_config("state.toml")

# A device of blocked_devices.txt from the start.
FILE_DEVICE = 99

NO_STATE_TOML = load_config("rules_only.toml")

# risk_core::state::StateError codes.
UNKNOWN_TXN, LABEL_BEFORE_TXN, UNKNOWN_LIST, BAD_ENTRY, BAD_LIST_FILE = 1601, 1602, 1604, 1605, 1606
STATE_IO, STATE_FILES = 1608, 1610


@pytest.fixture
def engine(tmp_path):
    """An engine with [state] built from files in a fresh directory (closed after)."""
    (tmp_path / "state.rules").write_text(STATE_RULES)
    (tmp_path / "blocked_devices.txt").write_text(f"{FILE_DEVICE}\n")
    with risk.Engine.from_toml(STATE_TOML, base_dir=tmp_path) as e:
        yield e


def txn(i: int, **over) -> dict:
    """Transaction ``i`` of card 42, ``i`` minutes after T0, from a device no list holds."""
    t = {"id": i, "entity": 42, "timestamp_ms": T0 + i * MINUTE, "amount": 25.0,
         "currency": "USD", "device": 7}
    t.update(over)
    return t


def names(d: risk.Decision) -> list:
    """The reason names of a decision, deciding tier first."""
    return [name for name, _ in d.reasons]


def expect_state_error(fn, *args, code: int | None = None) -> risk.StateError:
    """``fn(*args)`` raises risk.StateError, carrying the Rust StateError's code
    (``code``, or at least a nonzero one when None)."""
    with pytest.raises(risk.StateError) as info:
        fn(*args)
    e = info.value
    assert isinstance(e, risk.RiskError) and e.message and e.message in str(e)
    if code is None:
        assert e.code != 0, f"no StateError code: {e!r}"
    else:
        assert e.code == code, f"expected code {code}, got {e.code}: {e}"
    return e


def expect_not_configured(fn, *args) -> risk.NotConfiguredError:
    with pytest.raises(risk.NotConfiguredError) as info:
        fn(*args)
    e = info.value
    assert isinstance(e, risk.RiskError) and isinstance(e, LookupError)
    assert "[state]" in e.message, e.message
    return e


# ----- velocity -----


def test_third_transaction_of_a_card_within_the_hour_is_reviewed(engine):
    sent = [txn(i) for i in (1, 2, 3)]
    before = copy.deepcopy(sent)
    ds = [engine.decide(t) for t in sent]
    assert [d.action for d in ds] == ["approve", "approve", "review"]
    assert "VELOCITY" not in names(ds[0]) + names(ds[1])
    assert names(ds[2]) == ["VELOCITY"] and ds[2].rules_fired == ["VELOCITY"]
    assert not ds[2].hard_rule
    # The engine computed card_count_1h on its own copy: the caller's mappings are as sent.
    assert sent == before


def test_a_value_the_caller_sets_in_a_state_field_is_replaced(engine):
    # card_count_1h = 0 on every transaction: the engine's count (2 before the third) wins.
    sent = [txn(i, card_count_1h=0.0) for i in (1, 2, 3)]
    ds = [engine.decide(t) for t in sent]
    assert [d.action for d in ds] == ["approve", "approve", "review"]
    assert all(t["card_count_1h"] == 0.0 for t in sent)


def test_velocity_is_per_card(engine):
    ds = [engine.decide(txn(i, entity=100 + i)) for i in (1, 2, 3)]
    assert [d.action for d in ds] == ["approve"] * 3


def test_decision_reports_the_state_it_was_decided_with(engine):
    # fresh when the engine has [state] and the transaction an event time; off without one.
    assert engine.decide(txn(1)).state == "fresh"
    assert engine.decide(json.loads(json.dumps(txn(2)))).state == "fresh"
    out = engine.decide_batch(pa.Table.from_pylist([txn(3), txn(4, timestamp_ms=0)]))
    assert out.column("state").to_pylist() == ["fresh", "off"]
    with risk.Engine.from_toml(NO_STATE_TOML) as e:
        assert e.decide(txn(5)).state == "off"


def test_batch_and_json_paths_share_the_state(engine):
    assert engine.decide(json.loads(json.dumps(txn(1)))).action == "approve"
    out = engine.decide_batch(pa.Table.from_pylist([txn(2), txn(3)]))
    assert out.column("action").to_pylist() == ["approve", "review"]


# ----- lists -----


def test_list_add_contains_remove(engine):
    assert not engine.list_contains("blocked_devices", 7)
    d = engine.decide(txn(1))
    assert d.action == "approve"

    engine.list_add("blocked_devices", 7)
    assert engine.list_contains("blocked_devices", 7)
    assert engine.list_contains("blocked_devices", "7")
    d = engine.decide(txn(2))
    assert (d.action, d.hard_rule, names(d)) == ("decline", True, ["BLOCKED"])

    assert engine.list_remove("blocked_devices", "7") is True
    assert not engine.list_contains("blocked_devices", 7)
    assert engine.list_remove("blocked_devices", 7) is False
    assert engine.decide(txn(3, entity=43)).action == "approve"


def test_list_entries_from_the_file_serve(engine):
    assert engine.list_contains("blocked_devices", FILE_DEVICE)
    assert engine.decide(txn(1, device=FILE_DEVICE)).action == "decline"
    assert engine.state_report()["lists"]["blocked_devices"] == 1


def test_expired_entry_is_not_live(engine):
    engine.list_add("blocked_devices", 8, expires_at_ms=1)
    assert not engine.list_contains("blocked_devices", 8)
    assert engine.decide(txn(1, device=8)).action == "approve"
    # 0 and negative: never expires.
    engine.list_add("blocked_devices", 8, expires_at_ms=-5)
    assert engine.list_contains("blocked_devices", 8)


def test_unknown_list_and_bad_value_are_state_errors(engine):
    e = expect_state_error(engine.list_add, "no_such_list", "1", code=UNKNOWN_LIST)
    assert "no_such_list" in e.message
    expect_state_error(engine.list_contains, "no_such_list", "1", code=UNKNOWN_LIST)
    expect_state_error(engine.list_remove, "no_such_list", "1", code=UNKNOWN_LIST)
    # A device list holds decimal device ids.
    e = expect_state_error(engine.list_add, "blocked_devices", "nine", code=BAD_ENTRY)
    assert "nine" in e.message


def test_list_argument_types_are_checked(engine):
    with pytest.raises(risk.RiskTypeError):
        engine.list_add("blocked_devices", 7.0)
    with pytest.raises(risk.RiskTypeError):
        engine.list_add("blocked_devices", True)
    with pytest.raises(TypeError):  # the list's name: the argument conversion's TypeError
        engine.list_add(3, "7")
    # Refused as list entries (a device id is a decimal u64; no control characters).
    for bad in (-1, 1 << 64, "7\0"):
        expect_state_error(engine.list_add, "blocked_devices", bad, code=BAD_ENTRY)
        assert not engine.list_contains("blocked_devices", 7)
    assert engine.state_report()["lists"]["blocked_devices"] == 1  # the file's entry only


def test_reload_of_a_bad_file_names_its_line_and_keeps_serving(engine, tmp_path):
    engine.list_add("blocked_devices", 7)
    f = tmp_path / "blocked_devices.txt"
    f.write_text(f"{FILE_DEVICE}\nnine\n")
    e = expect_state_error(engine.lists_reload, code=BAD_LIST_FILE)
    assert "blocked_devices.txt:2" in e.message
    assert "nine" in e.message
    # The list serves what it had.
    assert engine.list_contains("blocked_devices", FILE_DEVICE)
    assert engine.list_contains("blocked_devices", 7)
    assert engine.decide(txn(1)).action == "decline"


def test_reload_of_a_good_file_reads_it(engine, tmp_path):
    (tmp_path / "blocked_devices.txt").write_text(f"{FILE_DEVICE}\n5\n6,1\n")
    engine.lists_reload()
    assert engine.list_contains("blocked_devices", 5)
    assert not engine.list_contains("blocked_devices", 6)  # expired in 1970
    assert engine.list_contains("blocked_devices", FILE_DEVICE)


# ----- labels and the state report -----


def test_report_label(engine):
    ds = [engine.decide(txn(i, merchant="m-1")) for i in (1, 2)]
    assert [d.txn for d in ds] == [1, 2]
    assert engine.report_label(1, True, T0 + 2 * MINUTE) >= 1
    # Retracting it is a label too.
    assert engine.report_label(1, False, T0 + 3 * MINUTE) >= 1

    e = expect_state_error(engine.report_label, 999_999, True, T0, code=UNKNOWN_TXN)
    assert "999999" in e.message
    # Dated before its transaction.
    expect_state_error(engine.report_label, 2, True, T0, code=LABEL_BEFORE_TXN)

    # fraud must be a bool, the txn id an unsigned int (the argument conversion's errors)
    with pytest.raises(TypeError):
        engine.report_label(1, 1, T0)
    with pytest.raises(OverflowError):
        engine.report_label(-1, True, T0)

    stats = engine.state_report()["stats"]
    assert stats["labels"] == 2
    assert stats["labels_unknown"] == 1


def test_state_report_counts_decisions_with_a_timestamp(engine):
    n = 5
    for i in range(1, n + 1):
        engine.decide(txn(i, entity=i, merchant=f"m-{i % 2}"))
    engine.decide(txn(n + 1, timestamp_ms=0, entity=500))  # no event time: no state
    engine.list_add("blocked_devices", 7)
    engine.decide(txn(n + 2, entity=501))  # a list hit

    r = engine.state_report()
    assert set(r) >= {"stats", "memory", "pending_labels", "lists"}
    stats = r["stats"]
    assert set(stats) >= {"updates", "no_time", "late", "labels", "labels_unknown", "list_hits"}
    assert stats["updates"] == n + 1
    assert stats["late"] == stats["labels"] == stats["labels_unknown"] == 0
    assert stats.get("degraded", 0) == 0  # the in-process store never fails
    assert stats["no_time"] == 1
    assert stats["list_hits"] >= 1
    assert r["lists"] == {"blocked_devices": 2, "blocked_merchants": 0, "blocked_ips": 0,
                          "blocked_emails": 0}
    sources = {m["source"]: m for m in r["memory"]}
    assert sources["entity"]["keys"] == n + 1
    assert sources["merchant"]["keys"] == 2
    assert all(m["bytes_per_key"] > 0 for m in r["memory"])
    assert isinstance(r["pending_labels"], int) and r["pending_labels"] >= 1


# ----- snapshots -----


def test_snapshot_writes_a_file_a_new_engine_restores(engine, tmp_path):
    for i in (1, 2):
        engine.decide(txn(i))
    path = tmp_path / "snap" / "state.bin"
    path.parent.mkdir()
    engine.state_snapshot(path)
    assert path.is_file() and path.stat().st_size > 0
    engine.state_snapshot(str(path))  # again, over it (atomically)
    assert path.stat().st_size > 0

    # A new engine whose [state] names the snapshot starts from it: card 42 already has
    # two transactions in the hour, so its next one is reviewed.
    toml = STATE_TOML.replace("[state]\n", f'[state]\nsnapshot = "{path.as_posix()}"\n', 1)
    with risk.Engine.from_toml(toml, base_dir=tmp_path) as again:
        assert again.decide(txn(3)).action == "review"
        again.state_snapshot()  # None: the configured path
        assert path.stat().st_size > 0


def test_snapshot_without_a_path_or_to_a_missing_directory_fails(engine, tmp_path):
    e = expect_state_error(engine.state_snapshot, code=0)  # no Rust error: code 0
    assert "snapshot" in e.message
    e = expect_state_error(engine.state_snapshot, tmp_path / "no" / "such" / "dir" / "s.bin")
    assert e.code in (STATE_IO, STATE_FILES) and "no/such" in e.message


# ----- merchant / ip / email -----


@pytest.mark.parametrize("path", ["dict", "json", "batch"])
def test_merchant_ip_email_reach_the_engine(engine, path):
    def decide(t) -> list:
        """The reason names of ``t``'s decision, by ``path``."""
        if path == "dict":
            return names(engine.decide(t))
        if path == "json":
            return names(engine.decide(json.loads(json.dumps(t))))
        out = engine.decide_batch(pa.Table.from_pylist([t]))
        assert out.num_rows == 1
        return [r["code"] for r in out.column("reasons")[0].as_py()]

    keys = {"merchant": "m-77", "ip": "203.0.113.9", "email": "Jo@Example.com"}
    assert decide(txn(1, entity=1, **keys)) == []
    # One list per key, each holding that key's value: only the right field hits it.
    engine.list_add("blocked_ips", "203.0.113.9")
    assert decide(txn(2, entity=2, **keys)) == ["IP"]
    engine.list_add("blocked_emails", "jo@example.com")  # trimmed and lower-cased
    assert decide(txn(3, entity=3, merchant="m-77", email=" JO@example.COM ")) == ["EMAIL"]
    engine.list_add("blocked_merchants", "m-77")
    assert decide(txn(4, entity=4, merchant="m-77")) == ["MERCHANT"]
    # Unset keys hit nothing.
    assert decide(txn(5, entity=5)) == []
    assert engine.decide(txn(6, entity=6, merchant=None, ip=None, email=None)).action == "approve"


def test_key_fields_are_type_checked(engine):
    for key in ("merchant", "ip", "email"):
        with pytest.raises(risk.RiskTypeError) as info:
            engine.decide(txn(1, **{key: 77}))
        assert key in info.value.message
    assert {"merchant", "ip", "email"} <= set(risk.TXN_FIELDS)


def test_frame_columns_fill_the_key_fields(engine):
    import pandas as pd

    engine.list_add("blocked_merchants", "m-9")
    df = pd.DataFrame([txn(1, entity=1, merchant="m-1"), txn(2, entity=2, merchant="m-9"),
                       txn(3, entity=3, merchant=None)])
    out = engine.decide_batch(df)
    assert out.column("action").to_pylist() == ["approve", "decline", "approve"]


# ----- an engine without [state] -----


def test_engine_without_state_refuses_every_state_call():
    with risk.Engine.from_toml(NO_STATE_TOML) as e:
        assert not e.has_state and e.state_features == []
        expect_not_configured(e.list_add, "blocked_devices", "1")
        expect_not_configured(e.list_remove, "blocked_devices", "1")
        expect_not_configured(e.list_contains, "blocked_devices", "1")
        expect_not_configured(e.lists_reload)
        expect_not_configured(e.state_report)
        expect_not_configured(e.state_snapshot, "/nonexistent/state.bin")
        # The key fields are accepted (and ignored) without state.
        d = e.decide({"amount": 1.0, "currency": "USD", "merchant": "m", "ip": "::1",
                      "email": "a@b.c"})
        assert d.action == "approve"
        # (last: labels too are a state call)
        expect_not_configured(e.report_label, 1, True, T0)


def test_state_calls_after_close_are_closed_errors(tmp_path):
    (tmp_path / "state.rules").write_text(STATE_RULES)
    (tmp_path / "blocked_devices.txt").write_text("")
    e = risk.Engine.from_toml(STATE_TOML, base_dir=tmp_path)
    e.close()
    for call in (lambda: e.list_add("blocked_devices", 1),
                 lambda: e.list_contains("blocked_devices", 1),
                 lambda: e.list_remove("blocked_devices", 1),
                 e.lists_reload, e.state_report, lambda: e.state_snapshot(tmp_path / "s.bin"),
                 lambda: e.report_label(1, True, T0)):
        with pytest.raises(risk.ClosedError):
            call()
