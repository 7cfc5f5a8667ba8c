"""Python binding of the risk SDK's C ABI (``risk-ffi/include/risk.h``), via ctypes.

    from risk import RiskEngine
    with RiskEngine.from_path("examples/risk.toml") as engine:
        d = engine.decide(amount=42.5, currency="USD", country="US", channel="pos",
                          features={"txn_count_1h": 3, "hour": 23})
        print(d.action, d.tier, d.score, d.reason_names)

The audit trail (an engine with ``[audit]`` in its TOML) reads back with
``risk.read_audit(dir, txn=..., rule=...)`` (a DataFrame) or ``risk.read_audit_records``
(dicts); ``engine.audit_flush()`` makes what was logged durable first.

Model lifecycle: ``engine.deploy("fast", candidate_toml, plan_toml)`` gates a candidate on
recent traffic and shadows, canaries or promotes it; ``engine.deploy_status(target)``,
``engine.promote(target)``, ``engine.rollback(target, reason)``; a refusal raises
``risk.DeployError``.

Operations: ``engine.health()`` (ready / degraded / shut_down, each tier's state),
``engine.force_open("fast")`` (the kill switch; ``force_open("fast", False)`` clears it),
``engine.monitor_report()`` and ``engine.monitor_tick()`` (an engine with ``[monitor]``),
``engine.drill("fast_down", transactions, labels)`` (a fallback drill's report).

Entity state (an engine with ``[state]``): transactions carry ``merchant``, ``ip`` and
``email`` keys besides ``entity`` and ``device``; ``engine.report_label(txn_id, fraud,
at_ms)``, ``engine.list_add(list_name, value, expires_at_ms)``, ``list_remove``,
``list_contains``, ``lists_reload()``, ``state_snapshot(path)``, ``state_report()``; a
refusal raises ``risk.StateError``.

The shared library is found through ``RISK_FFI_LIB`` (a file), ``RISK_FFI_LIB_DIR`` (a
directory), ``<repo>/target/release``, then the system loader; see ``risk._ffi``.
"""

from ._audit import AUDIT_KINDS, flatten_record, read_audit, read_audit_records
from ._engine import (
    DEFAULT_BATCH_SIZE,
    AuditError,
    DEPLOY_TARGETS,
    DeployError,
    FRAME_COLUMNS,
    TXN_FIELDS,
    Decision,
    Reason,
    RiskEngine,
    RiskError,
    RiskTypeError,
    RiskValueError,
    ShutdownReport,
    StateError,
    Subscription,
    Verdict,
    fallback_name,
    reason_name,
    version,
)
from ._observe import DRILL_FAULTS, KILL_SWITCH_TIERS
from ._ffi import (
    RESULT_NAMES,
    RISK_CODE_UNKNOWN,
    RISK_ERR_AUDIT,
    RISK_ERR_CLOSED,
    RISK_ERR_DEPLOY,
    RISK_ERR_EMPTY,
    RISK_ERR_HANDLE,
    RISK_ERR_STATE,
    RiskLibraryNotFound,
    library_path,
)

__all__ = [
    "RiskEngine",
    "Decision",
    "Reason",
    "Verdict",
    "Subscription",
    "ShutdownReport",
    "RiskError",
    "RiskTypeError",
    "RiskValueError",
    "AuditError",
    "DeployError",
    "StateError",
    "RiskLibraryNotFound",
    "RESULT_NAMES",
    "RISK_ERR_AUDIT",
    "RISK_ERR_CLOSED",
    "RISK_ERR_DEPLOY",
    "RISK_ERR_EMPTY",
    "RISK_ERR_HANDLE",
    "RISK_ERR_STATE",
    "RISK_CODE_UNKNOWN",
    "TXN_FIELDS",
    "FRAME_COLUMNS",
    "DEFAULT_BATCH_SIZE",
    "fallback_name",
    "reason_name",
    "version",
    "library_path",
    "read_audit",
    "read_audit_records",
    "flatten_record",
    "AUDIT_KINDS",
    "DEPLOY_TARGETS",
    "DRILL_FAULTS",
    "KILL_SWITCH_TIERS",
]

__version__ = "0.1.0"
