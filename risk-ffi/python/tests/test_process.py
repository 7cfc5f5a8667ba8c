"""Engines across processes: pickling, fork, the context manager; exceptions pickle."""

from __future__ import annotations

import os
import pickle

import pytest

import risk
from conftest import EXAMPLES

TXN = {"id": 1, "entity": 9, "amount": 420.0, "country": "NG", "channel": "ecom"}


def test_an_engine_pickles_as_its_configuration(engine):
    clone = pickle.loads(pickle.dumps(engine))
    assert clone is not engine
    a, b = engine.decide(TXN), clone.decide(TXN)
    assert (a.action, a.score, a.versions["fast"]) == (b.action, b.score, b.versions["fast"])
    clone.close()


def test_a_text_configuration_pickles_with_its_base_dir():
    text = (EXAMPLES / "risk.toml").read_text()
    with risk.Engine.from_toml(text, base_dir=EXAMPLES) as e:
        clone = pickle.loads(pickle.dumps(e))
        assert clone.decide(TXN).score == e.decide(TXN).score
        clone.close()


def test_closed_engines_raise(engine):
    with risk.Engine.from_toml(EXAMPLES / "risk.toml") as e:
        e.decide(TXN)
    with pytest.raises(risk.ClosedError):
        e.decide(TXN)
    e.close()  # twice is harmless


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_an_engine_from_before_fork_refuses_in_the_child(engine):
    engine.decide(TXN)
    pid = os.fork()
    if pid == 0:  # child: exit code says what happened
        code = 3
        try:
            engine.decide(TXN)
            code = 1
        except risk.ClosedError as err:
            code = 0 if "fork" in str(err) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert engine.decide(TXN).action  # the parent's engine still works


def test_exceptions_pickle_with_kind_and_code(engine):
    with pytest.raises(risk.DecideError) as info:
        engine.decide(dict(TXN, amount=-3.0))
    e = pickle.loads(pickle.dumps(info.value))
    assert type(e) is risk.DecideError and e.code == info.value.code and str(e) == str(info.value)
