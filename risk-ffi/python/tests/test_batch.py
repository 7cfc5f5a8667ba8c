"""Arrow in, Arrow out: decide_batch equals decide row by row, over every input kind,
with typed errors for bad frames."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import risk

FIELDS = ("action", "tier", "fallback", "hard_rule", "rules_fired", "escalation")


def row_dict(table: pa.Table, i: int) -> dict:
    return {c: table.column(c)[i].as_py() for c in table.column_names}


def mapping(frame: pa.Table, i: int) -> dict:
    """Row i of a synth frame as decide's mapping."""
    r = {c: frame.column(c)[i].as_py() for c in frame.column_names}
    r["time"] = int(frame.column("time").cast(pa.int64())[i].as_py())
    for k in ("is_fraud", "scenario", "label_time"):
        r.pop(k)
    if r.get("email") is None:
        r.pop("email", None)
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}


def assert_same(batch_row: dict, d: risk.Decision):
    for f in FIELDS:
        assert batch_row[f] == getattr(d, f), f
    assert batch_row["score"] == pytest.approx(d.score, abs=0)
    assert [(r["code"], r["weight"]) for r in batch_row["reasons"]] == [
        (c, pytest.approx(w, abs=0)) for c, w in d.reasons]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_batch_equals_decide_row_by_row(engine, frame, threads):
    out = engine.decide_batch(frame, threads=threads)
    assert isinstance(out, pa.Table) and out.num_rows == frame.num_rows
    assert out.column("txn").to_pylist() == frame.column("id").to_pylist()
    rng = np.random.default_rng(3)
    for i in rng.choice(frame.num_rows, 150, replace=False):
        assert_same(row_dict(out, int(i)), engine.decide(mapping(frame, int(i))))
    # explanations appear where the model says so
    assert any(len(r) > 0 for r in out.column("reasons").to_pylist())


def test_every_input_kind_gives_the_same_table(engine, frame):
    small = frame.slice(0, 300)
    want = engine.decide_batch(small).select(["txn", "action", "score", "tier"])
    batches = small.to_batches()
    kinds = {
        "record_batch": pa.RecordBatch.from_pandas(small.to_pandas(), preserve_index=False),
        "polars": pl.from_arrow(small),
        "pandas": small.to_pandas(),
        "dict_of_numpy": {c: small.column(c).to_numpy() for c in
                          ("id", "entity", "amount", "mcc", "hour", "txn_count_1h",
                           "amount_ratio", "merchant_txn_count_1h", "card_age_days",
                           "is_foreign", "device_new", "txn_count_24h", "amount_sum_24h",
                           "small_count_1h", "distinct_countries_24h", "secs_since_last",
                           "high_risk_country")}
        | {c: small.column(c).to_pylist() for c in ("currency", "country", "channel")},
        "reader": pa.RecordBatchReader.from_batches(small.schema, batches),
    }
    for name, data in kinds.items():
        got = engine.decide_batch(data).select(["txn", "action", "score", "tier"])
        assert got.equals(want), name


def test_several_batches_keep_row_order(engine, frame):
    chunks = pa.Table.from_batches(frame.to_batches(max_chunksize=333))
    a = engine.decide_batch(chunks, threads=2)
    b = engine.decide_batch(frame, threads=1)
    assert a.column("txn").equals(b.column("txn"))
    assert a.column("score").equals(b.column("score"))


def test_a_missing_required_column_is_named(engine, frame):
    with pytest.raises(risk.InputError, match='"amount"'):
        engine.decide_batch(frame.drop_columns(["amount"]))


def test_a_column_of_the_wrong_type_is_named(engine, frame):
    bad = frame.set_column(frame.column_names.index("amount"), "amount",
                           pa.array(["1.0"] * frame.num_rows))
    with pytest.raises(risk.RiskTypeError, match='"amount"'):
        engine.decide_batch(bad)
    bad = frame.set_column(frame.column_names.index("country"), "country",
                           pa.array(np.ones(frame.num_rows)))
    with pytest.raises(risk.RiskTypeError, match='"country"'):
        engine.decide_batch(bad)


def test_nan_in_a_required_field_names_the_row(engine, frame):
    amounts = frame.column("amount").to_numpy().copy()
    amounts[17] = np.nan
    bad = frame.set_column(frame.column_names.index("amount"), "amount", pa.array(amounts))
    with pytest.raises(risk.DecideError, match="row 17"):
        engine.decide_batch(bad, threads=2)
    kept = engine.decide_batch(bad, errors="keep")
    assert kept.num_rows == frame.num_rows
    errs = kept.column("error").to_pylist()
    assert errs[17] is not None and "row 17" in errs[17]
    assert sum(e is not None for e in errs) == 1
    assert kept.column("action")[17].as_py() is None
    assert kept.column("action")[16].as_py() is not None


def test_negative_ids_are_refused_not_wrapped(engine, frame):
    ids = pa.array(np.arange(frame.num_rows, dtype=np.int64) - 5)
    bad = frame.set_column(frame.column_names.index("id"), "id", ids)
    with pytest.raises(risk.InputError, match='"id"'):
        engine.decide_batch(bad)


def test_keys_as_signed_longs_are_their_bits(engine, frame):
    # Spark and the JVM have no unsigned type: a uint64 hash travels as a long.
    n = 64
    rows = frame.slice(0, n)
    keys = np.array([2**64 - 1 - i for i in range(n)], dtype=np.uint64)
    as_u64 = rows.set_column(rows.column_names.index("entity"), "entity", pa.array(keys))
    as_i64 = rows.set_column(rows.column_names.index("entity"), "entity", pa.array(keys.view(np.int64)))
    a, b = engine.decide_batch(as_u64), engine.decide_batch(as_i64)
    assert b.column("entity").to_pylist() == [int(k) for k in keys]
    assert a.column("score").equals(b.column("score"))


def test_an_empty_frame_gives_an_empty_table(engine, frame):
    out = engine.decide_batch(frame.slice(0, 0))
    assert out.num_rows == 0 and "action" in out.column_names


def test_strict_refuses_columns_nothing_reads(engine, frame):
    engine.decide_batch(frame.slice(0, 10))  # is_fraud, scenario ignored
    with pytest.raises(risk.InputError, match="is_fraud"):
        engine.decide_batch(frame.slice(0, 10), strict=True)


def test_bad_arguments(engine, frame):
    with pytest.raises(risk.InputError):
        engine.decide_batch(frame, errors="ignore")
    with pytest.raises(risk.InputError):
        engine.decide_batch(frame, threads=0)
    with pytest.raises(risk.RiskTypeError):
        engine.decide_batch([1, 2, 3])
    both = frame.append_column("timestamp_ms", frame.column("time").cast(pa.int64()))
    with pytest.raises(risk.InputError, match="time"):
        engine.decide_batch(both)


def test_the_result_reads_as_pandas_and_polars(engine, frame):
    out = engine.decide_batch(frame.slice(0, 100))
    df = out.to_pandas()
    assert isinstance(df["action"].dtype, pd.CategoricalDtype)
    assert set(df["action"].unique()) <= {"approve", "review", "decline"}
    pf = pl.from_arrow(out)
    assert pf.height == 100 and pf["score"].dtype == pl.Float32


def test_state_engine_batch_equals_decide_in_order(raw_frame):
    from conftest import EXAMPLES, state_toml

    with risk.Engine.from_toml(state_toml(), base_dir=EXAMPLES) as a, \
            risk.Engine.from_toml(state_toml(), base_dir=EXAMPLES) as b:
        assert a.has_state and "txn_count_1h" in a.state_features
        out = a.decide_batch(raw_frame, threads=4)  # state: one thread, rows in order
        assert set(out.column("state").to_pylist()) == {"fresh"}
        for i in range(raw_frame.num_rows):
            d = b.decide(mapping(raw_frame, i))
            if i % 97 == 0 or d.action != "approve":
                assert_same(row_dict(out, i), d)
