"""Fixtures: the example engine (rules + XGBoost), the same engine with entity state, and
synthetic frames from ``risk.synth``."""

from __future__ import annotations

import pathlib

import pytest

import risk

REPO = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


def state_toml() -> str:
    """``examples/risk.toml`` plus the ``[state]`` features of ``risk_sequence.toml``
    (without its sequences): the example engine computing its own velocity features.
    Its fast tier's deadline is 10 s, not 15 ms: the tests that use it compare engines
    decision by decision, and a deadline missed on a loaded machine (CI failed on a
    first decision that fell back to the rules) is the wall clock, not what they test."""
    base = (EXAMPLES / "risk.toml").read_text()
    assert "deadline_ms = 15\n" in base
    base = base.replace("deadline_ms = 15\n", "deadline_ms = 10000\n", 1)
    seq = (EXAMPLES / "risk_sequence.toml").read_text()
    state = seq[seq.index("[state]") : seq.index("[[state.sequences]]")]
    return base + "\n" + state


@pytest.fixture
def engine():
    with risk.Engine.from_toml(EXAMPLES / "risk.toml") as e:
        yield e


@pytest.fixture
def state_engine():
    with risk.Engine.from_toml(state_toml(), base_dir=EXAMPLES) as e:
        yield e


@pytest.fixture(scope="session")
def frame():
    """2,000 synthetic rows, velocity features filled."""
    return risk.synth(2_000, seed=11)


@pytest.fixture(scope="session")
def raw_frame():
    """3,000 synthetic rows without velocity features (entity state computes them)."""
    return risk.synth(3_000, seed=5, raw=True)
