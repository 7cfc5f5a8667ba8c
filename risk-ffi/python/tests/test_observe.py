"""Operations of a live engine: health and the kill switch (force_open), the monitors
(monitor_report, monitor_tick) and fallback drills (drill, drill_report). (Ported from the
ctypes binding's tests/test_observe.py.)"""

from __future__ import annotations

import json

import pytest

import risk
from _util import load_config

# A constant rule tier (0.1: approve) and a constant fast tier (0.9: decline) with the
# largest deadline the engine allows: every decision is the fast tier's whatever the
# machine's load, unless a switch or a fault takes it out.
OPS_TOML = load_config("fast_constant.toml", FAST_SCORE="0.9")

# The same with monitors judged only on monitor_tick, on every decision: the rules and
# the model never agree.
MONITOR_TOML = OPS_TOML + "[monitor]\nsample_every = 1\nmin_samples = 10\ninterval_ms = 0\n"


def txn(i: int) -> dict:
    return {"id": i, "entity": i % 7, "amount": 10.0 + i, "currency": "USD"}


@pytest.fixture
def eng():
    with risk.Engine.from_toml(OPS_TOML) as e:
        yield e


# ----- health and the kill switch -----


def test_health_ready_with_a_constant_fast_tier(eng):
    h = eng.health()
    assert h["status"] == "ready" and h["reasons"] == []
    assert h["fast"]["present"] is True and h["fast"]["state"] == "closed"
    assert h["fast"]["serving"]["name"] == "constant" and h["fast"]["serving"]["version"] == "0.9"
    assert h["deep"] == {"present": False, "state": "absent", "serving": None}
    assert h["deploying"] == []
    # The gray band serving: the fixed one (no gray.budget).
    assert h["gray_band"] == {
        "lo": 0.3, "hi": 0.7, "source": "fixed", "budget": None, "window_scores": 0.0
    }


def test_force_open_fast_hands_decisions_to_the_rules_and_back(eng):
    d = eng.decide(txn(1))
    assert d.tier == "fast" and d.action == "decline" and d.fallback is None

    eng.force_open("fast")  # open=True by default
    for i in range(2, 6):
        d = eng.decide(txn(i))
        assert d.tier == "rules" and d.fallback == "circuit_open" and d.action == "approve"
        assert d.model_score is None  # the fast tier did not answer
    h = eng.health()
    assert h["status"] == "degraded"
    assert h["fast"]["state"] == "forced_open"
    assert any("fast" in r and "force_open" in r for r in h["reasons"]), h["reasons"]
    m = eng.metrics()
    assert m["by_tier"]["rules"] == 4 and m["fallbacks"]["circuit_open"] == 4

    eng.force_open("fast", False)
    h = eng.health()
    assert h["status"] == "ready" and h["fast"]["state"] == "closed" and h["reasons"] == []
    d = eng.decide(txn(6))
    assert d.tier == "fast" and d.fallback is None


def test_force_open_rejects_an_unknown_tier(eng):
    for bad in ("rules", "FAST", "", "fast "):
        with pytest.raises(risk.InputError) as ei:
            eng.force_open(bad, True)
        assert isinstance(ei.value, ValueError) and "is not fast or deep" in ei.value.message
    assert eng.health()["status"] == "ready"  # nothing was switched
    # Argument types (the extension's argument conversion).
    with pytest.raises(TypeError):
        eng.force_open("fast", 1)
    with pytest.raises(TypeError):
        eng.force_open(None)
    assert eng.health()["status"] == "ready"


def test_health_after_shutdown_and_close(eng):
    assert eng.shutdown() == (0, 0)  # no deep tier: nothing drained or abandoned
    assert eng.health()["status"] == "shut_down"
    eng.close()
    with pytest.raises(risk.ClosedError):
        eng.health()


# ----- monitors -----


def test_monitor_fires_on_model_rules_disagreement():
    with risk.Engine.from_toml(MONITOR_TOML) as e:
        r = e.monitor_report()
        assert r["windows"] == 0 and r["firing"] == [] and r["recent"] == []
        for i in range(1, 51):
            assert e.decide(txn(i)).tier == "fast"
        raised = e.monitor_tick()
        assert raised >= 1
        r = e.monitor_report()
        assert "agreement:agreement" in r["firing"], r["firing"]
        share, samples = r["agreement"]
        assert share < 0.95 and samples >= 10
        alerts = [a for a in r["recent"] if a["subject"] == "agreement"]
        assert alerts and alerts[-1]["firing"] is True and alerts[-1]["kind"] == "agreement"
        assert alerts[-1]["threshold"] == pytest.approx(0.95)
        # Edge-triggered: judging again raises nothing new while it stays bad.
        assert e.monitor_tick() == 0
        assert "agreement:agreement" in e.monitor_report()["firing"]


def test_monitor_report_needs_a_monitor_table(eng):
    with pytest.raises(risk.NotConfiguredError) as ei:
        eng.monitor_report()
    assert isinstance(ei.value, LookupError) and "[monitor]" in ei.value.message
    assert eng.monitor_tick() == 0  # nothing to judge, nothing raised


# ----- drills -----


def test_drill_fast_down_hands_every_decision_to_the_rules(eng):
    r = eng.drill("fast_down", [txn(1), txn(2)], [False, True])
    assert r["fault"] == {"kind": "fast_down"}
    assert r["decisions"] == 2 and r["errors"] == 0
    assert r["by_tier"] == {"rules": 2, "fast": 0, "static": 0}
    assert r["fallbacks"] == {"error": 2}
    assert set(r["switch_time"]) == {"p50_us", "p99_us", "max_us"}
    assert r["switch_time"]["max_us"] >= r["switch_time"]["p50_us"] >= 0
    # Labelled: the model (decline both) against the rules (approve both).
    assert r["model_quality"]["recall"] == pytest.approx(1.0)
    assert r["drill_quality"]["recall"] == pytest.approx(0.0)
    assert r["circuit_after"] in ("closed", "open", "half_open")
    assert r["deep_verdicts"] == [0, 0] and r["duration_ms"] >= 0
    # The report is kept.
    assert eng.drill_report() == r


def test_drill_fast_nan(eng):
    # Transactions are mappings (JSON text is parsed by the caller: json.loads).
    r = eng.drill("fast_nan", json.loads(json.dumps([txn(1), txn(2), txn(3)])))
    assert r["fault"] == {"kind": "fast_nan"}
    assert r["by_tier"]["rules"] == 3 and r["fallbacks"] == {"invalid_score": 3}
    assert r["model_quality"] is None and r["drill_quality"] is None
    # Any iterable of mappings will do.
    r = eng.drill("fast_nan", (t for t in [txn(4)]))
    assert r["decisions"] == 1 and r["fallbacks"] == {"invalid_score": 1}
    assert eng.drill_report() == r


def test_drill_fast_slow_within_the_deadline(eng):
    r = eng.drill("fast_slow:1", [txn(1)])
    assert r["fault"] == {"kind": "fast_slow", "delay_ms": 1}
    assert r["by_tier"]["fast"] == 1 and r["fallbacks"] == {}


def test_drill_refuses_bad_arguments(eng):
    assert eng.drill_report() is None  # no drill yet
    for fault in ("fast_up", "fast_slow", "fast_slow:abc", ""):
        with pytest.raises(risk.InputError) as ei:
            eng.drill(fault, [txn(1)])
        assert "fault" in ei.value.message, fault
    with pytest.raises(risk.InputError) as ei:
        eng.drill("fast_down", [txn(1), txn(2)], [True])
    assert "labels" in ei.value.message
    with pytest.raises(risk.RiskError) as ei:
        eng.drill("fast_down", [{"id": 1, "currency": "USD"}])  # no amount
    assert isinstance(ei.value, ValueError) and "transactions[0]" in ei.value.message
    assert "amount" in ei.value.message
    # JSON text is not transactions: a str is not an iterable of mappings.
    with pytest.raises(risk.RiskTypeError) as ei:
        eng.drill("fast_down", "[{")
    assert "transactions[0]" in ei.value.message
    with pytest.raises(TypeError):
        eng.drill("fast_down", [txn(1)], [1])
    with pytest.raises(TypeError):
        eng.drill("fast_down", [txn(1)], "[true]")
    with pytest.raises(risk.RiskTypeError) as ei:
        eng.drill("fast_down", [1, 2])
    assert "transactions[0]" in ei.value.message
    with pytest.raises(risk.DecideError) as ei:
        eng.drill("fast_down", [{**txn(1), "amount": float("nan")}])
    assert isinstance(ei.value, ValueError) and "transactions[0]" in ei.value.message
    assert ei.value.code == 201  # DecideError::InvalidField
    # None of these ran a drill.
    assert eng.drill_report() is None
    # After a drill the fault is cleared: the fast tier decides again (one failed call is
    # far below the circuit's min_calls, so the circuit stays closed).
    eng.drill("fast_down", [txn(1)])
    assert eng.health()["fast"]["state"] == "closed"
    assert eng.decide(txn(9)).tier == "fast"
