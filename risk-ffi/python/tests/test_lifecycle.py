"""close / shutdown / threads / subscriptions (ported from the ctypes binding's
test_lifecycle.py)."""

from __future__ import annotations

import gc
import threading
import time

import pyarrow as pa
import pytest

import risk
from _util import (
    DEEP_TOML,
    EXAMPLES,
    HOUR_MS,
    base_txn,
    join_or_hang,
    no_hang,
    stuck_deep_toml,
    verdicts,
)

EXAMPLE_TOML = EXAMPLES / "risk.toml"


def deep_txn(i: int) -> dict:
    return {"id": i, "entity": 100 + i, "amount": 3.0, "currency": "USD"}


def expect_closed(s: risk.Subscription, what: str) -> risk.ClosedError:
    """An hour-long poll that must end with risk.ClosedError, at once or once the deep tier
    stops (not by its timeout: a poll that waited it out is reported as hung)."""
    with pytest.raises(risk.ClosedError) as ei:
        no_hang(lambda: s.poll(HOUR_MS), what)
    assert isinstance(ei.value, risk.RiskError) and ei.value.message, ei.value
    return ei.value


def expect_engine_closed(call) -> None:
    with pytest.raises(risk.ClosedError) as ei:
        call()
    assert isinstance(ei.value, risk.RiskError)
    assert "closed" in ei.value.message and ei.value.message in str(ei.value)


def test_use_after_close():
    e = risk.Engine.from_toml(EXAMPLE_TOML)
    assert "closed=false" in repr(e)
    e.decide(base_txn(1))
    e.close()
    assert "closed=true" in repr(e)
    one_row = pa.table({"id": [1], "amount": [1.0], "currency": ["USD"]})
    for call in (
        lambda: e.decide(base_txn(1)),
        lambda: e.decide_batch(one_row),
        lambda: e.decide_batch(one_row.slice(0, 0)),
        e.metrics,
        e.metrics_text,
        e.health,
        e.reload_rules,
        e.shutdown,
        e.subscribe,
    ):
        expect_engine_closed(call)


def test_double_close_and_context_manager():
    with risk.Engine.from_toml(EXAMPLE_TOML) as e:
        e.decide(base_txn(1))
    assert "closed=true" in repr(e)
    e.close()
    e.close()
    expect_engine_closed(lambda: e.decide(base_txn(1)))


def test_collected_engine_is_freed():
    """An engine nobody references is dropped (its deep tier stopped) without close(): a
    subscription that outlives it gets risk.ClosedError at once, where the live engine's
    deep tier would have kept an hour-long poll waiting (reported as hung)."""
    e = risk.Engine.from_toml(DEEP_TOML)
    s = e.subscribe()
    assert s.poll(0) is None  # the engine is alive: no verdict yet, not closed
    del e
    gc.collect()
    expect_closed(s, "poll after the engine was collected")
    s.close()


def test_shutdown_then_decide(engine):
    engine.decide(base_txn(1))
    report = engine.shutdown(drain_ms=0)
    # examples/risk.toml has no deep tier: nothing can have been queued.
    assert isinstance(report, tuple) and report == (0, 0)  # (drained, abandoned)
    with pytest.raises(risk.DecideError) as ei:
        engine.decide(base_txn(2))
    assert ei.value.code == 204 and "shut down" in ei.value.message  # DecideError::ShutDown
    with pytest.raises(risk.DecideError) as ei:
        engine.decide_batch(pa.table({"id": [3], "amount": [1.0], "currency": ["USD"]}))
    assert ei.value.code == 204 and "row 0" in ei.value.message
    kept = engine.decide_batch(pa.table({"id": [3], "amount": [1.0], "currency": ["USD"]}),
                               errors="keep")
    assert kept.column("action").to_pylist() == [None]
    assert "shut down" in kept.column("error")[0].as_py()
    # the engine stays usable (metrics, health) until close; refused decisions are not counted
    assert engine.metrics()["decisions"] == 1
    assert engine.health()["status"] == "shut_down"
    assert engine.shutdown() == (0, 0)  # again: harmless, and nothing left to report
    # a negative drain is refused by the argument conversion (an unsigned int)
    with pytest.raises(OverflowError):
        engine.shutdown(drain_ms=-1)


def test_shutdown_abandon_counts_exactly_the_queued_items():
    """Five gray-zone items the deep dispatcher never takes (it waits for 64 items or an
    hour): shutdown(drain_ms=0) abandons exactly those five and drains none."""
    with risk.Engine.from_toml(stuck_deep_toml()) as e, e.subscribe() as s:
        tickets = [e.decide(deep_txn(i)).ticket for i in range(1, 6)]
        assert all(t is not None for t in tickets) and len(set(tickets)) == 5
        g = e.metrics()["gray"]
        assert (g["enqueued"], g["queue_len"], verdicts(g)) == (5, 5, 0)
        assert e.shutdown(drain_ms=0) == (0, 5)
        g = e.metrics()["gray"]
        assert (g["enqueued"], g["queue_len"], verdicts(g)) == (5, 0, 0)
        assert e.shutdown(drain_ms=0) == (0, 0)  # idempotent: nothing counted twice
        # no verdict was ever produced, and none will be
        expect_closed(s, "poll after an abandoning shutdown")


def test_shutdown_drain_that_times_out_abandons_the_rest():
    """max_batch 4, six items: the first four go as one batch the moment the fourth is
    queued; the last two wait for two more items or an hour, so they are still queued when
    a drain of 50 ms gives up. Exact counts whatever the machine's speed (the 50 ms only
    decides how long the drain waits, not what it finds)."""
    with risk.Engine.from_toml(stuck_deep_toml(max_batch=4)) as e, e.subscribe() as s:
        decisions = [e.decide(deep_txn(i)) for i in range(1, 7)]
        assert [d.escalation for d in decisions] == ["enqueued"] * 6
        first_four = {d.ticket for d in decisions[:4]}
        got = {no_hang(lambda: s.poll(HOUR_MS), f"verdict {k} of the first batch").ticket
               for k in range(4)}
        assert got == first_four
        assert e.metrics()["gray"]["queue_len"] == 2
        assert e.shutdown(drain_ms=50) == (0, 2)
        g = e.metrics()["gray"]
        assert g["enqueued"] == 6 and verdicts(g) == 4 and g["queue_len"] == 0
        expect_closed(s, "poll after the drain")


def test_shutdown_drain_finishes_queued_work():
    """A drain that completes: nothing is abandoned, every enqueued item gets exactly one
    verdict, and the report counts only those produced after the shutdown began (how many
    came before depends on the machine's speed, so that count is bounded, not pinned)."""
    with risk.Engine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        tickets = {e.decide(deep_txn(i)).ticket for i in range(1, 6)}
        assert len(tickets) == 5 and None not in tickets  # all five enqueued
        before = verdicts(e.metrics()["gray"])  # those the shutdown cannot count as drained
        # An hour-long drain: it must end because the queue emptied (else: hung).
        drained, abandoned = no_hang(lambda: e.shutdown(drain_ms=HOUR_MS), "draining shutdown")
        assert abandoned == 0
        assert drained <= 5 - before
        g = e.metrics()["gray"]
        assert g["enqueued"] == 5 and verdicts(g) == 5 and g["queue_len"] == 0
        got = {no_hang(lambda: s.poll(HOUR_MS), f"verdict {k}").ticket for k in range(5)}
        assert got == tickets
        expect_closed(s, "poll after the five verdicts")


def test_many_threads_one_engine(engine):
    n_threads, per_thread = 8, 2000
    barrier = threading.Barrier(n_threads)
    failures: list = []
    counts = [0] * n_threads
    before = engine.metrics()["decisions"]

    def worker(k: int) -> None:
        base = 1_000_000 * (k + 1)
        barrier.wait()
        for i in range(per_thread):
            try:
                d = engine.decide({
                    "id": base + i, "entity": 1000 + i % 97, "timestamp_ms": 1767571200000 + i,
                    "amount": 42.5, "currency": "USD", "mcc": 5411, "country": "US",
                    "channel": "pos", "device": 7, "txn_count_1h": 2.0, "hour": 14.0,
                })
            except Exception as e:  # noqa: BLE001 - collected and reported below
                failures.append((k, i, repr(e)))
                return
            if d.txn != base + i or d.action not in ("approve", "review", "decline"):
                failures.append((k, i, d))
                return
            counts[k] += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    join_or_hang(threads, "deciding from eight threads")
    assert not failures, failures[:5]
    assert counts == [per_thread] * n_threads
    assert engine.metrics()["decisions"] - before == n_threads * per_thread


def test_close_while_other_threads_decide():
    """close() from one thread while others decide: calls before it complete, every call
    after it raises risk.ClosedError; nothing crashes. Each worker decides until it gets an
    error, so every one of them must end with ClosedError (close waits for the calls in
    flight, so none sees the engine half shut down: no DecideError "shut down"), and each
    decided at least once before close (the barrier comes after its first decision)."""
    e = risk.Engine.from_toml(EXAMPLE_TOML)
    decided_once = threading.Barrier(5)
    outcomes: dict = {}
    counts: dict = {}

    def worker(k: int) -> None:
        n = 0
        try:
            e.decide(base_txn(k))
            n = 1
        finally:
            decided_once.wait()
        while True:
            try:
                e.decide(base_txn(k * 100_000 + n))
                n += 1
            except risk.RiskError as err:
                outcomes[k] = (type(err).__name__, err.code, err.message)
                counts[k] = n
                return

    ts = [threading.Thread(target=worker, args=(k,), name=f"decider-{k}") for k in range(4)]
    for t in ts:
        t.start()
    decided_once.wait()
    e.close()
    join_or_hang(ts, "deciding while the engine is closed")
    assert sorted(outcomes) == [0, 1, 2, 3]
    assert all(cls == "ClosedError" and "closed" in msg
               for cls, _, msg in outcomes.values()), outcomes
    assert all(n >= 1 for n in counts.values()), counts


def test_subscription_poll_timeout_is_none():
    """Nothing in time is None, after waiting out the timeout (at least the timeout: a
    floor, which no machine's speed can break; there is no ceiling)."""
    with risk.Engine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        assert s.poll(0) is None
        assert s.poll() is None
        t0 = time.monotonic()
        assert s.poll(120) is None
        # (1 µs of slack for the float arithmetic of two monotonic() readings)
        assert time.monotonic() - t0 >= 0.120 - 1e-6
        # a negative timeout is refused by the argument conversion (an unsigned int)
        with pytest.raises(OverflowError):
            s.poll(-1)
    # closed by the with block: no verdict can come any more
    with pytest.raises(risk.ClosedError):
        s.poll(0)
    s.close()  # double close: harmless


def test_subscription_without_deep_tier_is_closed(engine):
    """examples/risk.toml has no deep tier: ClosedError at once, not after the timeout
    (an hour: a poll that waited it out is reported as hung)."""
    with engine.subscribe() as s:
        for timeout in (0, HOUR_MS):
            with pytest.raises(risk.ClosedError) as ei:
                no_hang(lambda: s.poll(timeout), f"poll({timeout}) without a deep tier")
            assert isinstance(ei.value, risk.RiskError)
            assert ei.value.message and "deep tier" in str(ei.value)


def test_subscription_receives_deep_verdict():
    with risk.Engine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        d = e.decide({"id": 77, "entity": 5, "amount": 3.0, "currency": "USD"})
        assert d.escalation == "enqueued" and d.ticket is not None and d.ticket != 0
        v = no_hang(lambda: s.poll(HOUR_MS), "waiting for the verdict")  # returns when it arrives
        assert isinstance(v, risk.Verdict)
        assert (v.ticket, v.txn, v.entity) == (d.ticket, 77, 5)
        assert v.score == pytest.approx(0.9) and v.fast_score == pytest.approx(0.6)
        assert v.source == "model" and v.failure is None
        assert v.latency_ns > 0
        assert s.poll(0) is None
        assert e.metrics()["latency"]["deep"]["count"] == 1


def test_subscription_outlives_engine():
    e = risk.Engine.from_toml(DEEP_TOML)
    s = e.subscribe()
    e.close()
    # the engine is gone: ClosedError at once (not after the hour-long timeout)
    expect_closed(s, "poll after the engine was closed")
    s.close()


def test_poll_blocked_when_the_engine_is_closed_returns_closed():
    """A poll already waiting (an hour) when another thread closes the engine ends with
    ClosedError once the deep tier stops. The poller signals right before it polls;
    whether close() then lands while it waits or just before it gets there, the outcome is
    the same, so nothing depends on timing."""
    e = risk.Engine.from_toml(DEEP_TOML)
    s = e.subscribe()
    polling = threading.Event()
    box: dict = {}

    def poller() -> None:
        polling.set()
        try:
            box["result"] = s.poll(HOUR_MS)
        except risk.RiskError as err:
            box["error"] = err

    t = threading.Thread(target=poller, name="poller")
    t.start()
    assert polling.wait(60), "poller thread did not start"
    e.close()
    join_or_hang([t], "poll waiting while the engine is closed")
    assert "result" not in box, box
    assert isinstance(box["error"], risk.ClosedError), box
    s.close()


def test_buffered_verdict_then_closed_after_engine_close():
    """A verdict delivered before the engine is closed is still read after it, then
    ClosedError. Knowing the verdict is buffered without sleeping: a second subscription
    (``waiter``) blocks until it receives it. The deep tier hands a verdict to every
    subscriber under one lock that shutdown also takes, so once ``waiter`` has it, ``s``
    has it too."""
    e = risk.Engine.from_toml(DEEP_TOML)
    s = e.subscribe()
    waiter = e.subscribe()
    d = e.decide({"id": 78, "entity": 6, "amount": 3.0, "currency": "USD"})
    assert d.escalation == "enqueued"
    w = no_hang(lambda: waiter.poll(HOUR_MS), "waiting for the verdict")
    assert isinstance(w, risk.Verdict) and w.ticket == d.ticket
    e.close()
    v = s.poll(0)  # already buffered: no waiting needed
    assert isinstance(v, risk.Verdict) and v.ticket == d.ticket
    expect_closed(s, "poll after the buffered verdict")
    expect_closed(waiter, "the other subscription after its verdict")
    s.close()
    waiter.close()


def test_poll_after_shutdown_is_closed():
    """After shutdown (the engine not closed) no verdict will ever come: ClosedError, at
    once, for a poll made after it and for one already waiting when it happened (an
    hour-long poll from another thread; whether it is waiting or about to be when shutdown
    runs, the answer is the same)."""
    with risk.Engine.from_toml(DEEP_TOML) as e, e.subscribe() as s, e.subscribe() as s2:
        polling = threading.Event()
        box: dict = {}

        def poller() -> None:
            polling.set()
            try:
                box["result"] = s2.poll(HOUR_MS)
            except risk.RiskError as err:
                box["error"] = err

        t = threading.Thread(target=poller, name="poller")
        t.start()
        assert polling.wait(60), "poller thread did not start"
        assert e.shutdown(drain_ms=0) == (0, 0)
        join_or_hang([t], "poll waiting while the engine shuts down")
        assert "result" not in box, box
        assert isinstance(box["error"], risk.ClosedError), box
        expect_closed(s, "poll after shutdown")
        expect_closed(s2, "poll again after shutdown")


def test_long_poll_blocks_nothing():
    """An hour-long poll (the GIL released while it waits) while this thread builds, uses
    and closes engines and subscriptions: nothing global is held, so that work completes
    (else: reported as hung) while the poll waits, and the poll itself ends only when its
    engine is closed (ClosedError).

    The poller signals right before its call; the main thread cannot see it start waiting.
    If the work ran before it got there, the test would pass without testing anything,
    never fail spuriously; the work is repeated so that the poll waits for nearly all of
    it."""
    e = risk.Engine.from_toml(DEEP_TOML)
    s = e.subscribe()
    polling = threading.Event()
    result: list = []

    def long_poll() -> None:
        polling.set()
        try:
            result.append(s.poll(HOUR_MS))
        except risk.RiskError as err:
            result.append(err)

    t = threading.Thread(target=long_poll, name="long-poll")
    t.start()
    assert polling.wait(60), "poller thread did not start"

    def other_work() -> None:
        for i in range(20):
            with risk.Engine.from_toml(EXAMPLE_TOML) as other, other.subscribe() as s2:
                other.decide(base_txn(i))
                with pytest.raises(risk.ClosedError):
                    s2.poll(0)

    no_hang(other_work, "building, using and closing engines during a long poll")
    assert result == []  # still waiting: only closing its engine ends it
    e.close()
    join_or_hang([t], "the long poll after its engine was closed")
    assert len(result) == 1 and isinstance(result[0], risk.ClosedError), result
    s.close()


def test_closing_a_subscription_ends_a_waiting_poll():
    """A poll waiting an hour on a deep tier that has nothing to say ends with ClosedError
    when another thread closes the subscription (whether close lands while it waits or
    just before it starts, the outcome is the same), and the close itself returns."""
    with risk.Engine.from_toml(DEEP_TOML) as e:
        s = e.subscribe()
        started = threading.Event()
        box = {}

        def poll():
            started.set()
            try:
                box["v"] = s.poll(HOUR_MS)
            except risk.ClosedError as err:
                box["closed"] = err

        t = threading.Thread(target=poll)
        t.start()
        started.wait()
        no_hang(s.close, "closing a subscription a poll waits on")
        join_or_hang([t], "the poll after its subscription closed")
        assert "closed" in box, box
