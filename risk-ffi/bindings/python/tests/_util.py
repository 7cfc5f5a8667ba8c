"""Helpers shared by the tests."""

from __future__ import annotations

import math

# Constant scorers with a deep tier: every decision lands in the gray zone and is enqueued.
DEEP_TOML = """
[schema]
fields = [{ name = "amount", kind = "numeric", required = true }]
[rules.scorer]
kind = "constant"
probability = 0.1
[fast.scorer]
kind = "constant"
probability = 0.6
[gray]
band = [0.4, 0.65]
queue_capacity = 128
[deep]
budget_ms = 2000
max_batch = 4
max_wait_ms = 1
workers = 1
subscriber_capacity = 16
[deep.scorer]
kind = "constant"
probability = 0.9
"""


def base_txn(i: int = 1, **over) -> dict:
    t = {
        "id": i,
        "entity": 1000 + i % 97,
        "timestamp_ms": 1767571200000 + i * 1000,
        "amount": 42.5,
        "currency": "USD",
        "mcc": 5411,
        "country": "US",
        "channel": "pos",
        "device": 7,
        "features": {"txn_count_1h": 3.0, "hour": 23.0, "device_new": 1.0},
    }
    t.update(over)
    return t


def is_nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)
