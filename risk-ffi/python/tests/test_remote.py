"""A remote fast tier (risk.toml ``kind = "kserve"``, issue [14]): the engine built from the
file scores on a real MLServer (``tools/servers.sh start mlserver``; ``RISK_MLSERVER_URL``,
default http://127.0.0.1:8085) exactly as the native XGBoost tier. Without the server the
test fails (it never skips). (Ported from the ctypes binding's tests/test_remote.py.)"""

from __future__ import annotations

import os

import pytest

import risk
from _util import EXAMPLES, base_txn, no_deadline_toml

URL = os.environ.get("RISK_MLSERVER_URL", "http://127.0.0.1:8085")


def remote_toml() -> str:
    """examples/risk.toml (no deadline) with its fast tier on MLServer's model xgb-fraud."""
    text = no_deadline_toml()
    start = text.index("[fast.scorer]")
    end = text.index("\n[thresholds]")
    fast = (
        "[fast.scorer]\n"
        'kind = "kserve"\n'
        f'endpoints = ["{URL}"]\n'
        'model = "xgb-fraud"\n'
        'output = "predict_proba"\n'
        "warmup_requests = 2\n"
    )
    return text[:start] + fast + text[end:]


@pytest.fixture
def native():
    """The example engine with its native XGBoost fast tier (no deadline)."""
    with risk.Engine.from_toml(no_deadline_toml(), base_dir=EXAMPLES) as e:
        yield e


def remote_engine() -> risk.Engine:
    """The engine on MLServer; fails the test (never skips) when no server answers."""
    try:
        return risk.Engine.from_toml(remote_toml(), base_dir=EXAMPLES)
    except risk.ConfigError as err:
        pytest.fail(
            f"no MLServer serving xgb-fraud at {URL} (start it: tools/servers.sh start mlserver; "
            f"or set RISK_MLSERVER_URL): {err}"
        )


def test_remote_fast_tier_scores_as_the_native_one(native):
    with remote_engine() as remote:
        assert remote.health()["fast"]["serving"]["name"] != native.health()["fast"]["serving"]["name"]
        for i in range(1, 41):
            txn = base_txn(i, amount=20.0 + 37.0 * i, txn_count_1h=float(i % 7))
            want = native.decide(txn)
            got = remote.decide(txn)
            assert got.fallback is None, got
            assert got.tier == want.tier
            assert got.model_score is not None and want.model_score is not None
            assert abs(got.model_score - want.model_score) <= 1e-6, (got.model_score, want.model_score)
            assert got.action == want.action
