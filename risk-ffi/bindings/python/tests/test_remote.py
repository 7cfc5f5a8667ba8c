"""A remote fast tier (risk.toml ``kind = "kserve"``, issue [14]) through the C ABI: the
engine built from the file scores on a real MLServer (``tools/servers.sh start mlserver``;
``RISK_MLSERVER_URL``, default http://127.0.0.1:8085) exactly as the native XGBoost tier."""

from __future__ import annotations

import os

import risk
from _util import base_txn, no_deadline_toml


def remote_toml(example_toml) -> str:
    text = no_deadline_toml(example_toml)
    start = text.index("[fast.scorer]")
    end = text.index("\n[thresholds]")
    url = os.environ.get("RISK_MLSERVER_URL", "http://127.0.0.1:8085")
    fast = (
        "[fast.scorer]\n"
        'kind = "kserve"\n'
        f'endpoints = ["{url}"]\n'
        'model = "xgb-fraud"\n'
        'output = "predict_proba"\n'
        "warmup_requests = 2\n"
    )
    return text[:start] + fast + text[end:]


def test_remote_fast_tier_scores_as_the_native_one(example_toml, shared_engine):
    remote = risk.RiskEngine.from_toml(remote_toml(example_toml), base_dir=example_toml.parent)
    try:
        for i in range(1, 41):
            txn = base_txn(i, amount=20.0 + 37.0 * i, features={"txn_count_1h": float(i % 7)})
            want = shared_engine.decide(txn)
            got = remote.decide(txn)
            assert got.fallback == "none", got
            assert got.tier == want.tier
            assert abs(got.model_score - want.model_score) <= 1e-6, (got.model_score, want.model_score)
            assert got.action == want.action
    finally:
        remote.close()
