"""close / shutdown / threads / subscriptions."""

from __future__ import annotations

import ctypes
import gc
import threading
import time

import pytest

import risk
from risk import _ffi as F
from _util import DEEP_TOML, base_txn

HANDLE, SHUT_DOWN, CLOSED = 10, 6, 13


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
    assert report.drained >= 0 and report.abandoned >= 0
    with pytest.raises(risk.RiskError) as ei:
        engine.decide(base_txn(2))
    assert ei.value.code == SHUT_DOWN and ei.value.message
    out = engine.decide_batch([base_txn(3)])
    assert isinstance(out[0], risk.RiskError) and out[0].code == SHUT_DOWN
    assert engine.metrics()["decisions"] >= 1  # the handle stays valid until close
    engine.shutdown()  # again: harmless
    with pytest.raises(risk.RiskError) as ei:
        engine.shutdown(drain_ms=-1)
    assert ei.value.code == 3


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
    """close() from one thread while others decide: each call either completes or raises
    RISK_ERR_HANDLE; nothing crashes."""
    e = risk.RiskEngine.from_path(example_toml)
    started = threading.Barrier(5)
    outcomes: list = []

    def worker() -> None:
        started.wait()
        for i in range(5000):
            try:
                e.decide(base_txn(i))
            except risk.RiskError as err:
                outcomes.append(err.code)
                return
        outcomes.append("done")

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    started.wait()
    e.close()
    for t in ts:
        t.join()
    assert len(outcomes) == 4 and all(o in ("done", HANDLE) for o in outcomes), outcomes


def test_subscription_poll_timeout_is_none():
    """RISK_ERR_EMPTY (nothing in time) is None, after waiting out the timeout."""
    with risk.RiskEngine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        assert s.poll(0) is None
        assert s.poll() is None
        t0 = time.monotonic()
        assert s.poll(120) is None
        assert time.monotonic() - t0 >= 0.1
        assert not s.closed
    assert s.closed
    with pytest.raises(risk.RiskError) as ei:
        s.poll(0)
    assert ei.value.code == HANDLE
    s.close()  # double close: harmless


def test_subscription_without_deep_tier_is_closed(shared_engine):
    """examples/risk.toml has no deep tier: RISK_ERR_CLOSED at once, not after the timeout."""
    assert risk.RISK_ERR_CLOSED == CLOSED and risk.RESULT_NAMES[CLOSED] == "RISK_ERR_CLOSED"
    with shared_engine.subscribe() as s:
        for timeout in (0, 60_000):
            t0 = time.monotonic()
            with pytest.raises(risk.RiskError) as ei:
                s.poll(timeout)
            assert time.monotonic() - t0 < 10
            assert ei.value.code == CLOSED and ei.value.name == "RISK_ERR_CLOSED"
            assert ei.value.message and "RISK_ERR_CLOSED" in str(ei.value)
        assert not s.closed  # the object is still open: closed is about close()


def test_subscription_receives_deep_verdict():
    with risk.RiskEngine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        d = e.decide(id=77, entity=5, amount=3.0, currency="USD")
        assert d.escalation == "enqueued" and d.ticket != 0
        v = s.poll(10_000)  # returns as soon as the verdict arrives
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
    # the engine is gone: RISK_ERR_CLOSED at once (not after the timeout)
    t0 = time.monotonic()
    with pytest.raises(risk.RiskError) as ei:
        s.poll(60_000)
    assert ei.value.code == CLOSED
    assert time.monotonic() - t0 < 10
    s.close()


def test_buffered_verdict_then_closed_after_engine_close():
    e = risk.RiskEngine.from_toml(DEEP_TOML)
    s = e.subscribe()
    d = e.decide(id=78, entity=6, amount=3.0, currency="USD")
    assert d.escalation == "enqueued"
    deadline = time.monotonic() + 10
    while e.metrics()["latency"]["deep"]["count"] < 1:  # the verdict is in the channel
        assert time.monotonic() < deadline, "no deep verdict within 10 s"
        time.sleep(0.005)
    e.close()
    # (a timeout, not 0: the deep worker counts the verdict just before it sends it)
    v = s.poll(10_000)
    assert isinstance(v, risk.Verdict) and v.ticket == d.ticket
    with pytest.raises(risk.RiskError) as ei:
        s.poll(1000)
    assert ei.value.code == CLOSED
    s.close()


def test_poll_after_shutdown_ends_by_its_deadline():
    """After shutdown (engine not freed) a poll ends by its timeout: None, or
    RISK_ERR_CLOSED (the header's contract; this library version still answers "empty")."""
    with risk.RiskEngine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        e.shutdown(drain_ms=0)
        t0 = time.monotonic()
        try:
            assert s.poll(200) is None
        except risk.RiskError as err:
            assert err.code == CLOSED
        assert time.monotonic() - t0 < 5


def test_long_library_poll_blocks_nothing(example_toml):
    """A 2 s poll straight through the C ABI (not sliced) while another thread builds,
    uses and frees engines and subscriptions: the library holds no global lock."""
    with risk.RiskEngine.from_toml(DEEP_TOML) as e, e.subscribe() as s:
        started = threading.Event()
        result: list = []

        def long_poll() -> None:
            out = F.risk_verdict()
            with risk._engine._Use(s) as p:
                started.set()
                result.append(F.lib().risk_subscription_poll(p, 2000, ctypes.byref(out)))

        t = threading.Thread(target=long_poll)
        t.start()
        started.wait()
        time.sleep(0.05)
        t0 = time.monotonic()
        with risk.RiskEngine.from_path(example_toml) as other, other.subscribe() as s2:
            other.decide(base_txn(1))
            with pytest.raises(risk.RiskError):
                s2.poll(0)
        elapsed = time.monotonic() - t0
        t.join()
        assert result == [F.RISK_ERR_EMPTY]
        assert elapsed < 1.0, f"building and freeing an engine during a poll took {elapsed:.2f} s"


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
