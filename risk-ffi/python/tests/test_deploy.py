"""Model lifecycle: deploy gates a candidate on recent traffic and promotes, canaries or
refuses it; deploy_status reports it; promote and rollback end a deploy; risk.DeployError
carries the engine's reason. (Ported from the ctypes binding's tests/test_deploy.py.)"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import risk
from _util import load_config

# A constant rule tier (0.1) and a constant fast tier (0.05) with the largest deadline the
# engine allows: every decision is the fast tier's, whatever the machine's load.
DEPLOY_TOML = load_config("fast_constant.toml", FAST_SCORE="0.05")

# The deploy targets (the stubs' Literal["rules", "fast", "deep", "policy"]).
TARGETS = ("rules", "fast", "deep", "policy")

# Decisions made before a deploy. The gate validates on the recent sample (every 16th
# decision, by a hash of the txn id) and by default needs 32 of them: 1500 leave ~94.
WARM_DECISIONS = 1500

# A plan without stages: the gate (defaults), then promoted at once.
IMMEDIATE = 'by = "test"'
# One canary stage that never ends by itself during a test.
CANARY = 'by = "test"\n[gate]\nmin_sample = 0\n[[canary]]\nshare = 0.5\nmin_decisions = 1000000\n'
# No gate sample needed (for tests not about the gate).
NO_SAMPLE = 'by = "test"\n[gate]\nmin_sample = 0\n'


def fast(p: float) -> str:
    return f'[scorer]\nkind = "constant"\nprobability = {p}\n'


def f32(x) -> float:
    return float(np.float32(x))


def decide_some(e, n: int = WARM_DECISIONS, start: int = 1) -> None:
    for i in range(start, start + n):
        d = e.decide({"id": i, "entity": i % 53, "amount": 5.0 + (i % 400) * 1.25, "currency": "USD"})
        assert d.tier == "fast"


@pytest.fixture
def eng():
    """A fresh engine with WARM_DECISIONS decided (the gate has its sample)."""
    with risk.Engine.from_toml(DEPLOY_TOML) as e:
        decide_some(e)
        yield e


def serving_version(e, target: str = "fast") -> str:
    return e.deploy_status(target)["serving"]["version"]


def model_score(e, i: int) -> float:
    d = e.decide({"id": i, "entity": 7, "amount": 42.0, "currency": "USD"})
    assert d.tier == "fast"
    assert d.model_score is not None
    return d.model_score


def test_deploy_promotes_then_rollback_restores(eng):
    st = eng.deploy_status("fast")
    assert st["target"] == "fast"
    assert st["serving"]["version"] == "0.05" and st["serving"]["name"] == "constant"
    assert st["active"] is None and st["previous"] == [] and st["history"] == []
    epoch = st["epoch"]

    dep = eng.deploy("fast", fast(0.06), IMMEDIATE)
    assert isinstance(dep, int) and dep > 0
    st = eng.deploy_status("fast")
    assert st["serving"]["version"] == "0.06"
    assert len(st["serving"]["hash"]) == 16
    assert st["serving"]["id"] == f"constant@0.06#{st['serving']['hash']}"
    assert [v["version"] for v in st["previous"]] == ["0.05"]
    assert st["active"] is None
    assert st["epoch"] > epoch
    last = st["history"][-1]
    assert last["kind"] == "promoted" and last["deploy"] == dep
    assert last["version"]["version"] == "0.06"
    # Decisions now get the candidate's score.
    assert model_score(eng, 10_001) == f32(0.06)

    eng.rollback("fast", "test rollback")
    st = eng.deploy_status("fast")
    assert st["serving"]["version"] == "0.05"
    assert st["previous"] == []
    assert st["history"][-1]["kind"] == "rolled_back"
    assert st["history"][-1]["detail"] == "test rollback"
    assert model_score(eng, 10_002) == f32(0.05)

    # Nothing left to roll back to.
    with pytest.raises(risk.DeployError) as ei:
        eng.rollback("fast")
    err = ei.value
    assert isinstance(err, risk.RiskError)
    assert err.kind == "deploy" and err.code == 0  # a refused deploy has no numeric code
    assert "no previous version" in err.message
    assert serving_version(eng) == "0.05"


def test_rollback_without_reason_records_the_default(eng):
    eng.deploy("fast", fast(0.06), IMMEDIATE)
    eng.rollback("fast")  # reason None
    last = eng.deploy_status("fast")["history"][-1]
    assert last["kind"] == "rolled_back" and last["detail"] == "rollback requested"


def test_each_deploy_gets_a_new_id(eng):
    a = eng.deploy("fast", fast(0.06), IMMEDIATE)
    b = eng.deploy("fast", fast(0.07), IMMEDIATE)
    assert b > a > 0
    st = eng.deploy_status("fast")
    assert st["serving"]["version"] == "0.07"
    assert [v["version"] for v in st["previous"]] == ["0.06", "0.05"]


def test_the_gate_refuses_a_wildly_different_candidate(eng):
    with pytest.raises(risk.DeployError) as ei:
        eng.deploy("fast", fast(0.95), IMMEDIATE)
    err = ei.value
    assert err.kind == "deploy" and err.code == 0
    assert "gate" in err.message and "Disagreement" in err.message
    assert str(err) == err.message
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is risk.DeployError
    assert (back.message, back.code) == (err.message, err.code)
    st = eng.deploy_status("fast")
    assert st["serving"]["version"] == "0.05"  # a refused candidate never serves
    assert st["active"] is None
    last = st["history"][-1]
    assert last["kind"] == "refused" and last["version"]["version"] == "0.95"
    assert "gate" in last["detail"]
    assert model_score(eng, 10_003) == f32(0.05)


def test_the_gate_needs_a_sample_of_recent_traffic():
    with risk.Engine.from_toml(DEPLOY_TOML) as e:
        with pytest.raises(risk.DeployError) as ei:
            e.deploy("fast", fast(0.06), IMMEDIATE)  # no decisions yet
        assert "gate" in ei.value.message and "32" in ei.value.message
        assert serving_version(e) == "0.05"
        # min_sample = 0: validated on what there is (nothing), promoted.
        assert e.deploy("fast", fast(0.06), NO_SAMPLE) > 0
        assert serving_version(e) == "0.06"


def test_a_canary_stays_active_until_promoted(eng):
    dep = eng.deploy("fast", fast(0.06), CANARY)
    assert dep > 0
    st = eng.deploy_status("fast")
    a = st["active"]
    assert a is not None and a["id"] == dep
    assert a["phase"] == "canary" and a["stage"] == 0 and a["share"] == 0.5
    assert a["candidate"]["version"] == "0.06"
    assert a["gate"]["sample"] >= 0 and a["gate"]["invalid"] == 0
    assert st["serving"]["version"] == "0.05"  # the candidate decides for a share only
    assert st["history"][-1]["kind"] == "started"

    # One deploy per target at a time.
    with pytest.raises(risk.DeployError) as ei:
        eng.deploy("fast", fast(0.07), NO_SAMPLE)
    assert "in progress" in ei.value.message
    # A tick does not end a stage short of its min_decisions.
    eng.deploy_tick()
    assert eng.deploy_status("fast")["active"]["phase"] == "canary"

    eng.promote("fast")
    st = eng.deploy_status("fast")
    assert st["serving"]["version"] == "0.06"
    assert st["active"] is None
    assert [v["version"] for v in st["previous"]] == ["0.05"]
    assert st["history"][-1]["kind"] == "promoted"
    assert model_score(eng, 10_004) == f32(0.06)

    with pytest.raises(risk.DeployError) as ei:
        eng.promote("fast")
    assert "no deploy in progress" in ei.value.message


def test_rollback_ends_a_canary_and_keeps_what_serves(eng):
    eng.deploy("fast", fast(0.06), CANARY)
    eng.rollback("fast", "abandoned")
    st = eng.deploy_status("fast")
    assert st["active"] is None
    assert st["serving"]["version"] == "0.05"
    assert st["history"][-1]["kind"] == "rolled_back" and st["history"][-1]["detail"] == "abandoned"
    # The target is free again.
    assert eng.deploy("fast", fast(0.07), IMMEDIATE) > 0
    assert serving_version(eng) == "0.07"


def test_a_policy_deploy_changes_the_thresholds(eng):
    assert eng.decide({"id": 20_001, "amount": 1.0, "currency": "USD"}).action == "approve"
    # Every recent decision would change action, so the default agreement check refuses it.
    with pytest.raises(risk.DeployError) as ei:
        eng.deploy("policy", "[policy]\napprove_below = 0.02\ndecline_at = 0.04\n", IMMEDIATE)
    assert "gate" in ei.value.message
    plan = 'by = "test"\n[gate]\nmin_action_agreement = 0.0\n'
    eng.deploy("policy", "[policy]\napprove_below = 0.02\ndecline_at = 0.04\n", plan)
    assert "0.04" in serving_version(eng, "policy")
    assert eng.decide({"id": 20_002, "amount": 1.0, "currency": "USD"}).action == "decline"


def test_candidate_paths_resolve_against_base_dir(eng, tmp_path, monkeypatch):
    (tmp_path / "cand.rules").write_text('version "v2"\nrule BIG { when amount > 100 score 0.3 reason "BIG" }\n')
    cand = '[scorer]\nkind = "rules"\npath = "cand.rules"\n'
    # Not about the gate: BIG changes many recent actions, so the gate lets anything pass.
    plan = NO_SAMPLE + "max_mean_abs_diff = 1.0\nmin_action_agreement = 0.0\n"
    monkeypatch.chdir(tmp_path.parent)  # the working directory has no cand.rules
    with pytest.raises(risk.DeployError) as ei:
        eng.deploy("rules", cand, plan)  # base_dir None: the working directory
    assert "cand.rules" in ei.value.message and "failed to load" in ei.value.message
    assert serving_version(eng, "rules") == "0.1"
    eng.deploy("rules", cand, plan, base_dir=tmp_path)
    assert serving_version(eng, "rules") == "v2"
    d = eng.decide({"id": 20_003, "amount": 500.0, "currency": "USD"})
    assert d.rule_score == f32(0.3) and [code for code, _ in d.reasons] == ["BIG"]


def test_every_target_has_a_status(eng):
    for t in TARGETS:
        st = eng.deploy_status(t)
        assert st["target"] == t and st["active"] is None
    assert eng.deploy_status("rules")["serving"]["version"] == "0.1"
    assert eng.deploy_status("deep")["serving"] is None  # no deep tier
    with pytest.raises(risk.DeployError) as ei:
        eng.deploy("deep", fast(0.5), NO_SAMPLE)
    assert "no deep tier" in ei.value.message


def test_bad_arguments(eng):
    # An unknown target is an input error (a ValueError), not a refused deploy.
    for call in (
        lambda: eng.deploy("nope", fast(0.06), IMMEDIATE),
        lambda: eng.deploy("", fast(0.06), IMMEDIATE),
        lambda: eng.deploy_status("nope"),
        lambda: eng.promote("nope"),
        lambda: eng.rollback("Fast", "reason"),
    ):
        with pytest.raises(risk.InputError) as ei:
            call()
        assert isinstance(ei.value, ValueError) and not isinstance(ei.value, risk.DeployError)
        assert "is not rules, fast, deep or policy" in ei.value.message
    # A candidate that does not parse, or gives no table: refused (DeployError).
    for cand in ("[scorer", "", 'probability = 0.06\n', fast(0.06) + '[policy]\napprove_below = 0.1\ndecline_at = 0.9\n',
                 '[scorer]\nkind = "nope"\n', fast(0.06) + "\0"):
        with pytest.raises(risk.DeployError) as ei:
            eng.deploy("fast", cand, NO_SAMPLE)
        assert "candidate failed to load" in ei.value.message
    # A malformed plan: an input error.
    for plan in ("[gate]\nbogus = 1\n", "[[canary]]\nshare = 1.5\n", "by = "):
        with pytest.raises(risk.InputError) as ei:
            eng.deploy("fast", fast(0.06), plan)
        assert not isinstance(ei.value, risk.DeployError)
        assert "rollout plan" in ei.value.message
    assert serving_version(eng) == "0.05"
    assert eng.deploy_status("fast")["active"] is None
    # Argument types (the extension's argument conversion).
    with pytest.raises(TypeError):
        eng.deploy(None, fast(0.06))
    with pytest.raises(TypeError):
        eng.deploy("fast", None)
    with pytest.raises(TypeError):
        eng.deploy("fast", fast(0.06), plan=b'by = "x"')
    with pytest.raises(TypeError):
        eng.rollback("fast", reason=3)
    with pytest.raises(risk.InputError):
        eng.deploy_status("fast\0")
    assert serving_version(eng) == "0.05"


def test_a_closed_or_shut_down_engine():
    e = risk.Engine.from_toml(DEPLOY_TOML)
    assert e.shutdown() == (0, 0)
    with pytest.raises(risk.ClosedError) as ei:
        e.deploy("fast", fast(0.06), NO_SAMPLE)
    assert "shut down" in ei.value.message
    assert e.deploy_status("fast")["serving"]["version"] == "0.05"
    e.close()
    for call in (
        lambda: e.deploy("fast", fast(0.06), NO_SAMPLE),
        lambda: e.deploy_status("fast"),
        lambda: e.promote("fast"),
        lambda: e.rollback("fast"),
        e.deploy_tick,
    ):
        with pytest.raises(risk.ClosedError):
            call()


def test_deploy_error_class():
    """DeployError, AuditError and StateError are RiskErrors of their own kind; an error
    carries its message and code, and pickles as itself."""
    for cls, kind in ((risk.DeployError, "deploy"), (risk.AuditError, "audit"), (risk.StateError, "state")):
        assert issubclass(cls, risk.RiskError) and cls.kind == kind
        err = cls("why")
        assert err.message == "why" and str(err) == "why" and err.code == 0
        back = pickle.loads(pickle.dumps(cls("why", 7)))
        assert type(back) is cls and (back.message, back.code) == ("why", 7)
    assert not issubclass(risk.DeployError, (risk.AuditError, risk.StateError, ValueError))
