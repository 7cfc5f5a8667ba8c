"""The same wheel inside PySpark: ``DataFrame.mapInArrow`` scores each partition's Arrow
batches with a pickled engine (a local Spark session on 127.0.0.1, two cores).

- Stateless scoring does not depend on the partitioning: a row's decision is a function of
  the row. ``decide_batch`` equals the single-process call bit for bit on every row where
  the fast tier answered in both; it runs the model under its wall-clock deadline, as in
  serving, so on a loaded machine a few chunks fall back to the rules (in one process
  too). ``replay`` (the data's clock: no deadline expires) is exact on every row.
- Replay partitioned by entity (``repartition(k, "entity")``, then time order within each
  partition, one ``replay`` call per partition) is exact for everything keyed by the
  entity (the card: its velocity windows, its label features), since each entity's rows
  all live in one partition in event-time order. Features keyed by something else (here
  ``merchant_txn_count_1h``, keyed by merchant) see only their own partition's events:
  those rows, and only those, may differ from a single-process replay.

pyspark and a Java runtime are required: a missing one fails these tests, never skips them.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

import risk
from conftest import EXAMPLES, state_toml

# The Arrow functions below live in this module, which Spark's Python workers cannot
# import: ship them (and their helpers) by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# pyspark 4.x warns on every Arrow call that pandas >= 3 is not fully supported (no pandas
# is involved here).
pytestmark = pytest.mark.filterwarnings(
    "ignore:PySpark does not yet fully support pandas:FutureWarning")

DAY_MS = 86_400_000
ROWS = 20_000
PARTS = 4

ENV = {
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
    "SPARK_LOCAL_IP": "127.0.0.1",
}


@pytest.fixture(scope="module")
def spark():
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        pytest.fail("test_spark.py needs a Java runtime (java on PATH or JAVA_HOME)")
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)
    s = (
        SparkSession.builder.master("local[2]")
        .appName("risk-test-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(PARTS))
        .config("spark.sql.session.timeZone", "UTC")
        # several Arrow batches per partition: a replay must see the partition whole
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.log.level", "ERROR")
        .getOrCreate()
    )
    try:
        yield s
    finally:
        s.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ------------------------------------------------------------------------ Arrow <-> Spark
#
# Spark SQL has no unsigned integers. risk.synth's `id` and `entity` (uint64) fit a
# signed long and the engine reads int64 columns for them; `mcc` (uint16) widens to int.
# `device` is a 64-bit hash using the whole range: Spark carries it as the long with the
# same bits, which is how the engine reads a signed `device` or `entity` column.


def to_spark(table: pa.Table) -> pa.Table:
    """`table` with the types Spark can hold (dictionary strings and timestamps Spark
    converts itself)."""
    cols = []
    for f, c in zip(table.schema, table.columns):
        if f.name == "device":
            c = c.combine_chunks().view(pa.int64())
        elif pa.types.is_uint64(f.type):
            c = c.cast(pa.int64())  # checked: an id past 2**63 - 1 raises
        elif pa.types.is_unsigned_integer(f.type):
            c = c.cast(pa.int32())
        cols.append(c)
    return pa.table(cols, names=table.column_names)


# The engine's output columns a Spark job keeps, as a Spark schema. The engine's
# dictionary strings, uint64 ids and non-null list items are cast to the Arrow types of
# this schema before a batch goes back to Spark.
OUT = T.StructType([
    T.StructField("txn", T.LongType()),
    T.StructField("entity", T.LongType()),
    T.StructField("action", T.StringType()),
    T.StructField("score", T.FloatType()),
    T.StructField("tier", T.StringType()),
    T.StructField("fallback", T.StringType()),
    T.StructField("hard_rule", T.BooleanType()),
    T.StructField("rule_score", T.FloatType()),
    T.StructField("model_score", T.FloatType()),
    T.StructField("threshold_shift", T.FloatType()),
    T.StructField("escalation", T.StringType()),
    T.StructField("reasons", T.ArrayType(T.StructType([
        T.StructField("code", T.StringType()),
        T.StructField("weight", T.FloatType()),
    ]))),
    T.StructField("rules_fired", T.ArrayType(T.StringType())),
    T.StructField("state", T.StringType()),
    T.StructField("decided_at_ms", T.LongType()),
])
OUT_PART = T.StructType(OUT.fields + [T.StructField("part", T.IntegerType())])
OUT_ARROW = to_arrow_schema(OUT)


def for_spark(out: pa.Table) -> pa.Table:
    """The engine's result table as `OUT`'s Arrow types, plus the Spark partition."""
    t = out.select(OUT.names).cast(OUT_ARROW)
    part = TaskContext.get().partitionId()
    return t.append_column("part", pa.array([part] * t.num_rows, pa.int32()))


def collect(df) -> pa.Table:
    """A Spark DataFrame's rows as one Arrow table, ordered by txn."""
    return df.toArrow().sort_by("txn")


def local(out: pa.Table) -> pa.Table:
    """A single-process result in `OUT`'s types, ordered by txn."""
    return out.select(OUT.names).cast(OUT_ARROW).sort_by("txn")


# ------------------------------------------------------------------- stateless scoring


def test_spark_types_are_read_as_the_originals():
    # what the Spark conversion costs: nothing; a device hash past 2**63 is a negative
    # long there, read back as the same bits
    frame = risk.synth(2_000, seed=2)
    with risk.Engine.from_toml(EXAMPLES / "risk.toml") as e:
        want = local(e.replay(frame))
        spark_typed = to_spark(frame)
        assert [spark_typed.schema.field(c).type for c in ("id", "entity", "mcc", "device")] == [
            pa.int64(), pa.int64(), pa.int32(), pa.int64()]
        assert pc.any(pc.less(spark_typed.column("device"), 0)).as_py()
        assert local(e.replay(spark_typed)).equals(want)


# decide_batch runs the fast tier under its wall-clock deadline (15 ms per chunk of 64
# rows), as in serving: on a loaded machine a chunk may miss it and fall back to the rules,
# in Spark or in one process alike. Those rows are compared on what does not depend on
# the clock (the model's answer decides the score, tier, reasons and gray-band escalation).
CLOCKED = ["fallback", "tier", "score", "action", "model_score", "reasons", "escalation",
           "decided_at_ms"]


def test_map_in_arrow_scores_like_one_process(spark):
    frame = risk.synth(ROWS, seed=7)
    engine = risk.Engine.from_toml(EXAMPLES / "risk.toml")

    def score(batches):
        for b in batches:  # any batch size, any partition: decisions are per row
            # one thread: Spark already runs a task per core
            yield from for_spark(engine.decide_batch(b, threads=1)).to_batches()

    df = spark.createDataFrame(to_spark(frame)).repartition(PARTS)
    assert df.rdd.getNumPartitions() == PARTS
    got = collect(df.mapInArrow(score, OUT_PART))
    want = local(engine.decide_batch(frame))
    engine.close()

    assert got.num_rows == ROWS
    assert got.column("txn").equals(want.column("txn"))
    assert len(set(got.column("part").to_pylist())) == PARTS
    # the model answered both: every column equal, scores bit for bit (decided_at_ms is
    # the wall clock)
    answered = pc.and_(pc.is_null(got.column("fallback")), pc.is_null(want.column("fallback")))
    assert pc.sum(answered).as_py() > 0
    cols = [c for c in OUT.names if c != "decided_at_ms"]
    assert got.select(cols).filter(answered).equals(want.select(cols).filter(answered))
    # a fallback has a wall-clock cause only, and the rules said the same
    late = pc.invert(answered)
    causes = pc.unique(pc.drop_null(pa.concat_arrays([
        got.column("fallback").combine_chunks(), want.column("fallback").combine_chunks()])))
    assert set(causes.to_pylist()) <= {"timeout", "circuit_open"}
    same = [c for c in OUT.names if c not in CLOCKED]
    assert got.select(same).filter(late).equals(want.select(same).filter(late))


def test_map_in_arrow_replay_of_a_stateless_engine_is_exact(spark):
    # on the data's clock no deadline expires: every row, every column, unconditionally
    frame = risk.synth(ROWS, seed=8)
    engine = risk.Engine.from_toml(EXAMPLES / "risk.toml")

    def score(batches):
        for b in batches:  # stateless: a replay per batch is as good as one per partition
            yield from for_spark(engine.replay(b)).to_batches()

    df = spark.createDataFrame(to_spark(frame)).repartition(PARTS).sortWithinPartitions("time", "id")
    got = collect(df.mapInArrow(score, OUT_PART))
    want = local(engine.replay(frame))
    engine.close()
    assert len(set(got.column("part").to_pylist())) == PARTS
    assert got.drop_columns(["part"]).equals(want)
    assert pc.sum(pc.is_null(want.column("fallback"))).as_py() == ROWS
    assert set(got.column("action").to_pylist()) >= {"approve", "review", "decline"}


# --------------------------------------------------------- replay partitioned by entity

def without_merchant_state(toml: str) -> str:
    """`toml` without its one state feature keyed by something other than the card
    (`merchant_txn_count_1h` is then read from its column: null in a raw frame)."""
    head, state = toml.split("[state]", 1)
    blocks = state.split("[[state.features]]")
    kept = [x for x in blocks if 'key = "merchant"' not in x]
    assert len(kept) == len(blocks) - 1
    return head + "[state]" + "[[state.features]]".join(kept)


def spark_replay(spark, engine, raw: pa.Table, **kw) -> pa.Table:
    """`engine.replay` per partition of `raw` partitioned by entity, in event-time order."""
    def replay(batches):
        # One replay per partition over ALL its rows: entity state (and label feeding)
        # starts from nothing in every call, so the batches are one table first.
        parts = list(batches)
        if not parts:
            return
        table = pa.Table.from_batches(parts)
        out = engine.replay(table, **kw)
        yield from for_spark(out).to_batches()

    df = (spark.createDataFrame(to_spark(raw))
          .repartition(PARTS, "entity")
          .sortWithinPartitions("time", "id"))
    return collect(df.mapInArrow(replay, OUT_PART))


def merchant_alone(raw: pa.Table, part_of_txn: dict[int, int], window_ms: int) -> np.ndarray:
    """Rows whose merchant had no transaction in another partition within `window_ms`
    before (or at) the row's time: the merchant-keyed feature reads the same there."""
    merchant = raw.column("merchant").to_numpy(zero_copy_only=False)
    t = raw.column("time").cast(pa.int64()).to_numpy()
    part = np.array([part_of_txn[i] for i in raw.column("id").to_pylist()])
    ok = np.ones(raw.num_rows, bool)
    order = np.lexsort((t, merchant))
    for k in range(1, len(order)):
        i = order[k]
        j = k - 1
        while j >= 0 and merchant[order[j]] == merchant[i] and t[i] - t[order[j]] <= window_ms:
            if part[order[j]] != part[i]:
                ok[i] = False
                break
            j -= 1
    return ok


@pytest.fixture(scope="module")
def raw():
    t = risk.synth(ROWS, seed=21, raw=True)
    # rows in txn order and in time order: a result sorted by txn lines up with the frame
    assert pc.all(pc.greater(t.column("id").slice(1), t.column("id").slice(0, ROWS - 1))).as_py()
    assert pc.all(pc.less_equal(t.column("time").slice(0, ROWS - 1), t.column("time").slice(1))).as_py()
    return t


def test_replay_by_entity_is_exact_for_per_card_state(spark, raw):
    # the card's velocity windows only: every row, every column (decided_at_ms is the
    # event time in a replay)
    engine = risk.Engine.from_toml(without_merchant_state(state_toml()), base_dir=EXAMPLES)
    assert "merchant_txn_count_1h" not in engine.state_features
    assert "txn_count_1h" in engine.state_features
    whole = local(engine.replay(raw))
    got = spark_replay(spark, engine, raw)
    engine.close()

    # each entity lives in exactly one partition, and every partition has rows
    pairs = set(zip(got.column("entity").to_pylist(), got.column("part").to_pylist()))
    assert len(pairs) == len({e for e, _ in pairs})
    assert len({p for _, p in pairs}) == PARTS
    assert got.drop_columns(["part"]).equals(whole)
    fired = {r for f in whole.column("rules_fired").to_pylist() for r in f}
    assert {"R_VEL_1H_4", "R_CT_SMALL_BURST"} <= fired  # the windows did count


def test_replay_by_entity_differs_only_where_merchants_cross_partitions(spark, raw):
    # the example state engine as it is: its merchant burst count sees only the
    # partition's own events
    engine = risk.Engine.from_toml(state_toml(), base_dir=EXAMPLES)
    assert "merchant_txn_count_1h" in engine.state_features
    whole = local(engine.replay(raw))
    got = spark_replay(spark, engine, raw)
    engine.close()
    assert got.column("txn").equals(whole.column("txn"))

    part_of_txn = dict(zip(got.column("txn").to_pylist(), got.column("part").to_pylist()))
    # the window is 1h in 12 buckets: an event older than 1h05 never counts
    alone = merchant_alone(raw, part_of_txn, 65 * 60 * 1000)
    mask = pa.array(alone)
    assert got.drop_columns(["part"]).filter(mask).equals(whole.filter(mask))

    # elsewhere the burst count is the partition's, never above the whole's (a partition
    # holds a subset of the merchant's events): some decisions move, the terminal-burst
    # rules fire on a subset
    differs = np.array(got.column("score").to_pylist()) != np.array(whole.column("score").to_pylist())
    assert differs.sum() > 0
    assert not (differs & alone).any()
    burst = [{r for r in f if r.startswith("R_TERM_")} for f in got.column("rules_fired").to_pylist()]
    burst_whole = [{r for r in f if r.startswith("R_TERM_")}
                   for f in whole.column("rules_fired").to_pylist()]
    assert all(x <= y for x, y in zip(burst, burst_whole))
    assert sum(x != y for x, y in zip(burst, burst_whole)) > 0


LABEL_TOML = """
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[rules.scorer]
kind = "rules"
path = "labels.rules"
[state]
max_keys = 100000
[[state.features]]
name = "card_frauds_30d"
key = "card"
agg = "fraud_count"
window = "30d"
buckets = 30
[[state.features]]
name = "merchant_frauds_30d"
key = "merchant"
agg = "fraud_count"
window = "30d"
buckets = 30
"""

LABEL_RULES = """version "spark-labels-1"
policy collect_all sum cap 1.0
rule CARD_FRAUD { when card_frauds_30d >= 1  score 0.6  reason "CARD_FRAUD" }
rule MERCHANT_FRAUD { when merchant_frauds_30d >= 1  score 0.3  reason "MERCHANT_FRAUD" }
"""


def test_replay_by_entity_labels_are_exact_per_card_not_per_merchant(spark, raw, tmp_path):
    (tmp_path / "labels.rules").write_text(LABEL_RULES)
    delay = 2 * DAY_MS
    engine = risk.Engine.from_toml(LABEL_TOML, base_dir=tmp_path)
    one = engine.replay(raw, label_delay_ms=delay)
    assert int(one.schema.metadata[b"risk.replay.labels_fed"]) > 0
    whole = local(one)
    got = spark_replay(spark, engine, raw, label_delay_ms=delay)
    engine.close()

    def fired(t, rule):
        return np.array([rule in f for f in t.column("rules_fired").to_pylist()])

    # a card's labels come with its own rows, into its own partition, at the same times
    assert fired(whole, "CARD_FRAUD").sum() > 0
    assert (fired(got, "CARD_FRAUD") == fired(whole, "CARD_FRAUD")).all()
    # a merchant's labels come from every card that used it: a partition sees its own
    m_got, m_whole = fired(got, "MERCHANT_FRAUD"), fired(whole, "MERCHANT_FRAUD")
    assert m_whole.sum() > 0
    assert not (m_got & ~m_whole).any()
    merchant = raw.column("merchant").to_pylist()
    part = dict(zip(got.column("txn").to_pylist(), got.column("part").to_pylist()))
    parts_of = {}
    for m, txn in zip(merchant, raw.column("id").to_pylist()):
        parts_of.setdefault(m, set()).add(part[txn])
    one_part = pa.array([len(parts_of[m]) == 1 for m in merchant])
    assert got.drop_columns(["part"]).filter(one_part).equals(whole.filter(one_part))
    assert (m_got != m_whole).sum() > 0


def test_replaying_a_partition_batch_by_batch_restarts_its_state(raw):
    # why the Arrow function above concatenates its batches: a replay per batch loses
    # every window across batch boundaries
    e = risk.Engine.from_toml(state_toml(), base_dir=EXAMPLES)
    one = e.replay(raw)
    parts = [e.replay(pa.Table.from_batches([b])) for b in raw.to_batches(max_chunksize=1_000)]
    e.close()
    split = pa.concat_tables(parts)
    assert not split.column("score").equals(one.column("score"))
