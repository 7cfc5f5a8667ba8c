"""close / shutdown / threads / subscriptions."""

from __future__ import annotations

import ctypes
import gc
import threading
import time

import pytest

import risk
from risk import _ffi as F
from _util import (
    DEEP_TOML,
    HOUR_MS,
    base_txn,
    join_or_hang,
    no_hang,
    stuck_deep_toml,
    verdicts,
)

OK, HANDLE, SHUT_DOWN, CLOSED = 0, 10, 6, 13


def raw_engine_from_path(path) -> int:
    """A raw ``risk_engine *`` (for tests that call the C ABI itself)."""
    out = F.risk_engine_p()
    assert F.lib().risk_engine_new_from_path(str(path).encode(), ctypes.byref(out)) == OK
    return out.value


def deep_txn(i: int) -> dict:
    return {"id": i, "entity": 100 + i, "amount": 3.0, "currency": "USD"}


def expect_closed(s: risk.Subscription, what: str) -> risk.RiskError:
    """An hour-long poll that must end with RISK_ERR_CLOSED, at once or once the deep tier
    stops (not by its timeout: a poll that waited it out is reported as hung)."""
    with pytest.raises(risk.RiskError) as ei:
        no_hang(lambda: s.poll(HOUR_MS), what)
    assert ei.value.code == CLOSED and ei.value.name == "RISK_ERR_CLOSED", ei.value
    return ei.value


def test_use_after_close(example_toml):
    e = risk.RiskEngine.from_path(example_toml)
    assert not e.closed
    e.decide(base_txn(1))
    e.close()
    assert e.closed
    for call in (
        lambda: e.decide(base_txn(1)),
        lambda: e.decide_json('{"amount": 1, "currency": "USD"}'),
        lambda: e.decide_batch([base_txn(1)]),
        lambda: e.decide_batch([]),
        e.metrics,
        e.metrics_text,
        e.reload_rules,
        e.shutdown,
        e.subscribe,
    ):
        with pytest.raises(risk.RiskError) as ei:
            call()
        assert ei.value.code == HANDLE and ei.value.name == "RISK_ERR_HANDLE"
        assert "closed" in ei.value.message


def test_double_close_and_context_manager(example_toml):
    with risk.RiskEngine.from_path(example_toml) as e:
        e.decide(base_txn(1))
    assert e.closed
    e.close()
    e.close()
    with pytest.raises(risk.RiskError):
        e.decide(base_txn(1))


def test_collected_engine_is_freed(example_toml):
    e = risk.RiskEngine.from_path(example_toml)
    fin = e._finalizer
    del e
    gc.collect()
    assert not fin.alive


def test_shutdown_then_decide(engine):
    engine.decide(base_txn(1))
    report = engine.shutdown(drain_ms=0)
    assert isinstance(report, risk.ShutdownReport)
    # examples/risk.toml has no deep tier: nothing can have been queued.
    assert report == risk.ShutdownReport(drained=0, abandoned=0)
    with pytest.raises(risk.RiskError) as ei:
        engine.decide(base_txn(2))
    assert ei.value.code == SHUT_DOWN and ei.value.message
    out = engine.decide_batch([base_txn(3)])
    assert isinstance(out[0], risk.RiskError) and out[0].code == SHUT_DOWN
    # the handle stays valid until close; refused decisions are not counted
    assert engine.metrics()["decisions"] == 1
    assert engine.shutdown() == (0, 0)  # again: harmless, and nothing left to report
    with pytest.raises(risk.RiskError) as ei:
        engine.shutdown(drain_ms=-1)
    assert ei.value.code == 3


def test_shutdown_abandon_counts_exactly_the_queued_items():
    """Five gray-zone items the deep dispatcher never takes (it waits for 64 items or an
    hour): shutdown(drain_ms=0) abandons exactly those five and drains none."""
    with risk.RiskEngine.from_toml(stuck_deep_toml()) as e, e.subscribe() as s:
        tickets = [e.decide(deep_txn(i)).ticket for i in range(1, 6)]
        assert all(tickets) and len(set(tickets)) == 5
        g = e.metrics()["gray"]
        assert (g["enqueued"], g["queue_len"], verdicts(g)) == (5, 5, 0)
        assert e.shutdown(drain_ms=0) == risk.ShutdownReport(drained=0, abandoned=5)
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
    with risk.RiskEngine.from_toml(stuck_deep_toml(max_batch=4)) as e, e.subscribe() as s:
        decisions = [e.decide(deep_txn(i)) for i in range(1, 7)]
        assert [d.escalation for d in decisions] == ["enqueued"] * 6
        first_four = {d.ticket for d in decisions[:4]}
        got = {no_hang(lambda: s.poll(HOUR_MS), f"verdict {k} of the first batch").ticket
               for k in range(4)}
        assert got == first_four
        assert e.metrics()["gray"]["queue_len"] == 2
        assert e.shutdown(drain_ms=50) == risk.ShutdownReport(drained=0, abandoned=2)
        g = e.metrics()["gray"]
        assert g["enqueued"] == 6 and verdicts(g) == 4 and g["queue_len"] == 0
        expect_closed(s, "poll after the drain")


def test_shutdown_drain_finishes_queued_work():
    """A drain that completes: nothing is abandoned, every enqueued item gets exactly one
    verdict, and the report counts only those produced after the shutdown began (how many
    came before depends on the machine's speed, so that count is bounded, not pinned)."""
    with risk.RiskEngine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        tickets = {e.decide(deep_txn(i)).ticket for i in range(1, 6)}
        assert len(tickets) == 5 and 0 not in tickets  # all five enqueued
        before = verdicts(e.metrics()["gray"])  # those the shutdown cannot count as drained
        # An hour-long drain: it must end because the queue emptied (else: hung).
        report = no_hang(lambda: e.shutdown(drain_ms=HOUR_MS), "draining shutdown")
        assert report.abandoned == 0
        assert report.drained <= 5 - before
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
        feats = {"txn_count_1h": 2.0, "hour": 14.0}
        barrier.wait()
        for i in range(per_thread):
            try:
                d = engine.decide(
                    id=base + i, entity=1000 + i % 97, timestamp_ms=1767571200000 + i,
                    amount=42.5, currency="USD", mcc=5411, country="US", channel="pos",
                    device=7, features=feats,
                )
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
    for t in threads:
        t.join()
    assert not failures, failures[:5]
    assert counts == [per_thread] * n_threads
    assert engine.metrics()["decisions"] - before == n_threads * per_thread


def test_close_while_other_threads_decide(example_toml):
    """close() from one thread while others decide: calls before it complete, every call
    after it raises RISK_ERR_HANDLE; nothing crashes. Each worker decides until it gets an
    error, so every one of them must end with RISK_ERR_HANDLE (close waits for the calls in
    flight, so none sees the engine half shut down), and each decided at least once before
    close (the barrier comes after its first decision)."""
    e = risk.RiskEngine.from_path(example_toml)
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
                outcomes[k] = (err.code, err.message)
                counts[k] = n
                return

    ts = [threading.Thread(target=worker, args=(k,), name=f"decider-{k}") for k in range(4)]
    for t in ts:
        t.start()
    decided_once.wait()
    e.close()
    join_or_hang(ts, "deciding while the engine is closed")
    assert sorted(outcomes) == [0, 1, 2, 3]
    assert all(code == HANDLE and "closed" in msg for code, msg in outcomes.values()), outcomes
    assert all(n >= 1 for n in counts.values()), counts


def test_free_while_raw_calls_are_in_flight(example_toml):
    """risk_engine_free straight through the C ABI while four threads decide with the same
    raw handle: calls in flight finish on their own reference (RISK_OK, or
    RISK_ERR_SHUT_DOWN once the free has shut the engine down), later calls get
    RISK_ERR_HANDLE, and a freed handle stays dead. Each thread calls until it sees
    RISK_ERR_HANDLE, so the sequence of codes it saw is fully checked: OK+ SHUT_DOWN* HANDLE+."""
    L = F.lib()
    h = raw_engine_from_path(example_toml)
    js = b'{"amount": 1, "currency": "USD"}'
    n = 4
    first_done = threading.Barrier(n + 1)
    seen: list = [[] for _ in range(n)]

    def worker(k: int) -> None:
        out = F.risk_decision()
        call = lambda: L.risk_engine_decide_json(h, js, len(js), ctypes.byref(out))  # noqa: E731
        try:
            seen[k].append(call())
        finally:
            first_done.wait()
        while seen[k][-1] != HANDLE:
            seen[k].append(call())
        seen[k].extend(call() for _ in range(3))  # after RISK_ERR_HANDLE: never live again

    ts = [threading.Thread(target=worker, args=(k,), name=f"raw-decider-{k}") for k in range(n)]
    for t in ts:
        t.start()
    first_done.wait()
    L.risk_engine_free(h)
    join_or_hang(ts, "raw decides while the engine is freed")
    L.risk_engine_free(h)  # a freed handle: ignored
    for k, codes in enumerate(seen):
        assert codes[0] == OK, (k, codes[:5])
        shape = [codes[0]] + [c for i, c in enumerate(codes[1:]) if c != codes[i]]  # runs
        assert shape in ([OK, HANDLE], [OK, SHUT_DOWN, HANDLE]), (k, shape)
        assert codes[-4:] == [HANDLE] * 4


def test_subscription_poll_timeout_is_none():
    """RISK_ERR_EMPTY (nothing in time) is None, after waiting out the timeout (at least the
    timeout: a floor, which no machine's speed can break; there is no ceiling)."""
    with risk.RiskEngine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        assert s.poll(0) is None
        assert s.poll() is None
        t0 = time.monotonic()
        assert s.poll(120) is None
        # (1 µs of slack for the float arithmetic of two monotonic() readings)
        assert time.monotonic() - t0 >= 0.120 - 1e-6
        assert not s.closed
    assert s.closed
    with pytest.raises(risk.RiskError) as ei:
        s.poll(0)
    assert ei.value.code == HANDLE
    s.close()  # double close: harmless


def test_subscription_without_deep_tier_is_closed(shared_engine):
    """examples/risk.toml has no deep tier: RISK_ERR_CLOSED at once, not after the timeout
    (an hour: a poll that waited it out is reported as hung)."""
    assert risk.RISK_ERR_CLOSED == CLOSED and risk.RESULT_NAMES[CLOSED] == "RISK_ERR_CLOSED"
    with shared_engine.subscribe() as s:
        for timeout in (0, HOUR_MS):
            with pytest.raises(risk.RiskError) as ei:
                no_hang(lambda: s.poll(timeout), f"poll({timeout}) without a deep tier")
            assert ei.value.code == CLOSED and ei.value.name == "RISK_ERR_CLOSED"
            assert ei.value.message and "RISK_ERR_CLOSED" in str(ei.value)
        assert not s.closed  # the object is still open: closed is about close()


def test_subscription_receives_deep_verdict():
    with risk.RiskEngine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        d = e.decide(id=77, entity=5, amount=3.0, currency="USD")
        assert d.escalation == "enqueued" and d.ticket != 0
        v = no_hang(lambda: s.poll(HOUR_MS), "waiting for the verdict")  # returns when it arrives
        assert isinstance(v, risk.Verdict)
        assert (v.ticket, v.txn, v.entity) == (d.ticket, 77, 5)
        assert v.score == pytest.approx(0.9) and v.fast_score == pytest.approx(0.6)
        assert v.source == "model" and v.failure == "none"
        assert s.poll(0) is None
        assert e.metrics()["latency"]["deep"]["count"] == 1


def test_subscription_outlives_engine():
    e = risk.RiskEngine.from_toml(DEEP_TOML)
    s = e.subscribe()
    e.close()
    # the engine is gone: RISK_ERR_CLOSED at once (not after the hour-long timeout)
    expect_closed(s, "poll after the engine was closed")
    s.close()


def test_poll_blocked_when_the_engine_is_closed_returns_closed():
    """A poll already waiting (an hour) when another thread closes the engine ends with
    RISK_ERR_CLOSED once the deep tier stops. The poller signals right before it polls;
    whether close() then lands while it waits inside the library or just before it gets
    there, the outcome is the same, so nothing depends on timing."""
    e = risk.RiskEngine.from_toml(DEEP_TOML)
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
    assert box["error"].code == CLOSED
    s.close()


def test_buffered_verdict_then_closed_after_engine_close():
    """A verdict delivered before the engine is closed is still read after it, then
    RISK_ERR_CLOSED. Knowing the verdict is buffered without sleeping: a second
    subscription (``waiter``) blocks until it receives it. The deep tier hands a verdict to
    every subscriber under one lock that shutdown also takes, so once ``waiter`` has it,
    ``s`` has it too."""
    e = risk.RiskEngine.from_toml(DEEP_TOML)
    s = e.subscribe()
    waiter = e.subscribe()
    d = e.decide(id=78, entity=6, amount=3.0, currency="USD")
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
    """After shutdown (the engine not freed) no verdict will ever come: RISK_ERR_CLOSED, at
    once, for a poll made after it and for one already waiting when it happened (an
    hour-long poll from another thread; whether it is inside the library or about to be
    when shutdown runs, the answer is the same)."""
    with risk.RiskEngine.from_toml(DEEP_TOML) as e, e.subscribe() as s, e.subscribe() as s2:
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
        assert box["error"].code == CLOSED
        expect_closed(s, "poll after shutdown")
        expect_closed(s2, "poll again after shutdown")


def test_long_library_poll_blocks_nothing(example_toml):
    """An hour-long poll straight through the C ABI (not sliced) while this thread builds,
    uses and frees engines and subscriptions: the library holds no global lock, so that
    work completes (else: reported as hung) while the poll waits, and the poll itself ends
    only when its engine is closed (RISK_ERR_CLOSED).

    The poller signals right before its call; the main thread cannot see it enter the
    library. If the work ran before it got there, the test would pass without testing
    anything, never fail spuriously; the work is repeated so that the poll is in the
    library for nearly all of it."""
    e = risk.RiskEngine.from_toml(DEEP_TOML)
    s = e.subscribe()
    polling = threading.Event()
    result: list = []

    def long_poll() -> None:
        out = F.risk_verdict()
        with risk._engine._Use(s) as p:
            polling.set()
            result.append(F.lib().risk_subscription_poll(p, HOUR_MS, ctypes.byref(out)))

    t = threading.Thread(target=long_poll, name="long-poll")
    t.start()
    assert polling.wait(60), "poller thread did not start"

    def other_work() -> None:
        for i in range(20):
            with risk.RiskEngine.from_path(example_toml) as other, other.subscribe() as s2:
                other.decide(base_txn(i))
                with pytest.raises(risk.RiskError) as ei:
                    s2.poll(0)
                assert ei.value.code == CLOSED

    no_hang(other_work, "building, using and freeing engines during a long poll")
    assert result == []  # still waiting: only closing its engine ends it
    e.close()
    join_or_hang([t], "the long poll after its engine was closed")
    assert result == [CLOSED]
    s.close()


def test_stale_handle_refused_by_library(example_toml):
    """Handles are never-reused tokens: a freed one is RISK_ERR_HANDLE even after new
    engines are created."""
    e = risk.RiskEngine.from_path(example_toml)
    stale = e._ptr
    e.close()
    others = [risk.RiskEngine.from_path(example_toml) for _ in range(3)]
    try:
        out = F.risk_decision()
        js = b'{"amount": 1, "currency": "USD"}'
        assert F.lib().risk_engine_decide_json(stale, js, len(js), ctypes.byref(out)) == HANDLE
        assert F.lib().risk_engine_decide_batch(stale, None, 0, None, None) == HANDLE  # empty batch too
        for o in others:
            assert o.decide_json(js).txn == 0
    finally:
        for o in others:
            o.close()
