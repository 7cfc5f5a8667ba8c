"""close / shutdown / threads / subscriptions."""

from __future__ import annotations

import gc
import threading

import pytest

import risk
from _util import DEEP_TOML, base_txn

HANDLE, SHUT_DOWN = 10, 6


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


def test_subscription_poll_timeout_zero(shared_engine):
    with shared_engine.subscribe() as s:
        assert s.poll(0) is None
        assert s.poll() is None
    assert s.closed
    with pytest.raises(risk.RiskError) as ei:
        s.poll(0)
    assert ei.value.code == HANDLE
    s.close()  # double close: harmless


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
    # the library answers "empty" at once once the engine is gone (not after the timeout)
    assert s.poll(60_000) is None
    s.close()
