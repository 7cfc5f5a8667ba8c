"""The risk SDK for Python: tiered fraud and risk decisions over rows or Arrow tables.

>>> import risk
>>> engine = risk.Engine.from_toml("examples/risk.toml")
>>> d = engine.decide({"id": 1, "entity": 42, "amount": 25.0, "currency": "USD",
...                    "country": "GB", "channel": "ecom", "txn_count_1h": 3})
>>> d.action, d.score, d.tier
>>> table = engine.decide_batch(frame)        # pyarrow / polars / pandas in, pyarrow out
>>> bt = risk.backtest(engine, risk.synth(1_000_000, raw=True), label_delay=7 * 86_400_000)
>>> bt.report["auprc"], bt.rules_frame()      # event-time replay: metrics, per-rule precision
>>> engine.deploy("fast", candidate_toml)    # gate, shadow, canary; deploy_status, rollback
>>> engine.metrics(), engine.health(), risk.read_audit("audit")

The engine is the Rust engine itself (``risk._native``, a PyO3 extension): no C ABI in
between, the GIL released while it decides. Engines pickle as their configuration and
refuse to work in the child of a ``fork`` (build one there).
"""

from __future__ import annotations

import os as _os

from . import _native
from . import plot
from ._errors import (
    AuditError,
    ClosedError,
    ConfigError,
    DecideError,
    DeployError,
    InputError,
    NotConfiguredError,
    RiskError,
    RiskTypeError,
    StateError,
)
from ._native import Decision, Engine, Subscription, Verdict, synth
from .audit import AUDIT_KINDS, flatten_record, read_audit, read_audit_records
from .backtest import Backtest, Comparison, LabelsRefusedWarning, backtest, compare

__version__ = _native.__version__
#: Transaction fields a mapping key or a column may name (every other name is a feature).
TXN_FIELDS: tuple[str, ...] = tuple(_native.TXN_FIELDS)

# An engine's threads do not survive fork(): engines made before it refuse to work in the
# child (risk.ClosedError) instead of hanging on a lock a vanished thread held.
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_native._after_fork_in_child)

__all__ = [
    "Engine",
    "Decision",
    "Verdict",
    "Subscription",
    "RiskError",
    "ConfigError",
    "DecideError",
    "InputError",
    "RiskTypeError",
    "ClosedError",
    "StateError",
    "DeployError",
    "AuditError",
    "NotConfiguredError",
    "TXN_FIELDS",
    "read_audit",
    "read_audit_records",
    "flatten_record",
    "AUDIT_KINDS",
    "plot",
    "synth",
    "backtest",
    "compare",
    "Backtest",
    "Comparison",
    "LabelsRefusedWarning",
]
