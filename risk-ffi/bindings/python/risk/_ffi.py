"""ctypes declarations of ``risk-ffi/include/risk.h`` and the loader of ``librisk_ffi.so``.

Everything here mirrors the header one to one; the Pythonic layer is in ``risk._engine``.
The library is loaded lazily, on the first call that needs it, from (first match wins):

1. ``RISK_FFI_LIB``: the full path of the shared library;
2. ``RISK_FFI_LIB_DIR``: the directory holding ``librisk_ffi.so``;
3. ``<repo>/target/release`` when this package is used from the source tree;
4. the system loader (``LD_LIBRARY_PATH``, ``ldconfig``).

When 1 or 2 is set and the file is missing, loading fails: no silent fallback.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from ctypes import (
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_double,
    c_float,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path

# ----- constants (risk.h) -----

RISK_MAX_INPUT = 1 << 24
RISK_MAX_REASONS = 8
RISK_MAX_BATCH = 65_536
RISK_MAX_FEATURES = 4096

RISK_ACTION_APPROVE = 0
RISK_ACTION_REVIEW = 1
RISK_ACTION_DECLINE = 2

RISK_TIER_RULES = 0
RISK_TIER_FAST = 1
RISK_TIER_STATIC = 2

RISK_FALLBACK_NONE = 0
RISK_FALLBACK_TIMEOUT = 1
RISK_FALLBACK_ERROR = 2
RISK_FALLBACK_PANIC = 3
RISK_FALLBACK_INVALID_SCORE = 4
RISK_FALLBACK_CIRCUIT_OPEN = 5
RISK_FALLBACK_ABSENT = 6
RISK_FALLBACK_SATURATED = 7

# A tier, fallback, verdict source or failure code this header version does not know
# (written by a newer library): mapped to the name "unknown".
RISK_CODE_UNKNOWN = 255

RISK_ESCALATION_NONE = 0
RISK_ESCALATION_ENQUEUED = 1
RISK_ESCALATION_SHED = 2

# risk_decision.state: what entity state did for the decision (header comment; no
# #define). 2-4: the state store failed and the state features are missing.
RISK_STATE_OFF = 0
RISK_STATE_FRESH = 1
RISK_STATE_TIMEOUT = 2
RISK_STATE_ERROR = 3
RISK_STATE_UNAVAILABLE = 4

RISK_OK = 0
RISK_ERR_NULL = 1
RISK_ERR_UTF8 = 2
RISK_ERR_INVALID = 3
RISK_ERR_CONFIG = 4
RISK_ERR_TRANSACTION = 5
RISK_ERR_SHUT_DOWN = 6
RISK_ERR_PANIC = 7
RISK_ERR_BUFFER_TOO_SMALL = 8
RISK_ERR_JSON = 9
RISK_ERR_HANDLE = 10
RISK_ERR_EMPTY = 11
RISK_ERR_RELOAD = 12
RISK_ERR_CLOSED = 13
RISK_ERR_AUDIT = 14
RISK_ERR_DEPLOY = 15
RISK_ERR_STATE = 16

RESULT_NAMES = {
    RISK_OK: "RISK_OK",
    RISK_ERR_NULL: "RISK_ERR_NULL",
    RISK_ERR_UTF8: "RISK_ERR_UTF8",
    RISK_ERR_INVALID: "RISK_ERR_INVALID",
    RISK_ERR_CONFIG: "RISK_ERR_CONFIG",
    RISK_ERR_TRANSACTION: "RISK_ERR_TRANSACTION",
    RISK_ERR_SHUT_DOWN: "RISK_ERR_SHUT_DOWN",
    RISK_ERR_PANIC: "RISK_ERR_PANIC",
    RISK_ERR_BUFFER_TOO_SMALL: "RISK_ERR_BUFFER_TOO_SMALL",
    RISK_ERR_JSON: "RISK_ERR_JSON",
    RISK_ERR_HANDLE: "RISK_ERR_HANDLE",
    RISK_ERR_EMPTY: "RISK_ERR_EMPTY",
    RISK_ERR_RELOAD: "RISK_ERR_RELOAD",
    RISK_ERR_CLOSED: "RISK_ERR_CLOSED",
    RISK_ERR_AUDIT: "RISK_ERR_AUDIT",
    RISK_ERR_DEPLOY: "RISK_ERR_DEPLOY",
    RISK_ERR_STATE: "RISK_ERR_STATE",
}

# One-line meanings, from the header's comments (used when the library gives no message).
RESULT_DESCRIPTIONS = {
    RISK_OK: "success",
    RISK_ERR_NULL: "a required pointer was NULL",
    RISK_ERR_UTF8: "a string was not valid UTF-8",
    RISK_ERR_INVALID: "an argument was out of range",
    RISK_ERR_CONFIG: "the configuration could not build an engine",
    RISK_ERR_TRANSACTION: "the transaction was rejected",
    RISK_ERR_SHUT_DOWN: "the engine was shut down",
    RISK_ERR_PANIC: "a Rust panic was caught",
    RISK_ERR_BUFFER_TOO_SMALL: "the buffer is too small",
    RISK_ERR_JSON: "malformed JSON input",
    RISK_ERR_HANDLE: "a freed, never-created or foreign handle",
    RISK_ERR_EMPTY: "nothing to return yet (a poll that timed out)",
    RISK_ERR_RELOAD: "rule reload failed",
    RISK_ERR_CLOSED: "no more items will ever come (stop polling)",
    RISK_ERR_AUDIT: "the audit log failed (a flush timed out, the log is closed, or a write failed)",
    RISK_ERR_DEPLOY: "a deploy, promote or rollback was refused; what serves is unchanged",
    RISK_ERR_STATE: "entity state refused the call (a label, a list, a snapshot, or no [state])",
}

# Names of the small enums the header defines only as numbers.
ACTION_NAMES = {RISK_ACTION_APPROVE: "approve", RISK_ACTION_REVIEW: "review", RISK_ACTION_DECLINE: "decline"}
TIER_NAMES = {
    RISK_TIER_RULES: "rules",
    RISK_TIER_FAST: "fast",
    RISK_TIER_STATIC: "static",
    RISK_CODE_UNKNOWN: "unknown",
}
ESCALATION_NAMES = {
    RISK_ESCALATION_NONE: "none",
    RISK_ESCALATION_ENQUEUED: "enqueued",
    RISK_ESCALATION_SHED: "shed",
}
STATE_NAMES = {
    RISK_STATE_OFF: "off",
    RISK_STATE_FRESH: "fresh",
    RISK_STATE_TIMEOUT: "timeout",
    RISK_STATE_ERROR: "error",
    RISK_STATE_UNAVAILABLE: "unavailable",
}
# risk_verdict.source / .failure (header comments; no name function in the ABI).
VERDICT_SOURCE_NAMES = {0: "model", 1: "cached_average", 2: "global_prior", RISK_CODE_UNKNOWN: "unknown"}
VERDICT_FAILURE_NAMES = {0: "none", 1: "timeout", 2: "error", 3: "saturated", 4: "circuit_open", RISK_CODE_UNKNOWN: "unknown"}


def enum_name(table: dict, code: int) -> str:
    """The name of ``code`` in ``table``; ``RISK_CODE_UNKNOWN`` (255) is "unknown", any
    other code the table lacks is "unknown(<code>)"."""
    return table.get(code, f"unknown({code})")


# ----- structs -----


class risk_feature(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("value", c_double),
        ("category", c_char_p),
    ]


class risk_txn(Structure):
    _fields_ = [
        ("id", c_uint64),
        ("entity", c_uint64),
        ("timestamp_ms", c_int64),
        ("amount", c_double),
        ("currency", c_char_p),
        ("mcc", c_uint16),
        ("country", c_char_p),
        ("channel", c_char_p),
        ("device", c_uint64),
        ("features", POINTER(risk_feature)),
        ("n_features", c_size_t),
        ("merchant", c_char_p),
        ("ip", c_char_p),
        ("email", c_char_p),
    ]


class risk_reason(Structure):
    _fields_ = [("code", c_uint32), ("weight", c_float)]


class risk_decision(Structure):
    _fields_ = [
        ("txn", c_uint64),
        ("entity", c_uint64),
        ("action", c_uint8),
        ("tier", c_uint8),
        ("fallback", c_uint8),
        ("escalation", c_uint8),
        ("hard_rule", c_bool),
        ("state", c_uint8),
        ("ticket", c_uint64),
        ("score", c_float),
        ("rule_score", c_float),
        ("model_score", c_float),
        ("threshold_shift", c_float),
        ("rules_ns", c_uint64),
        ("fast_ns", c_uint64),
        ("total_ns", c_uint64),
        ("n_reasons", c_uint32),
        ("reasons", risk_reason * RISK_MAX_REASONS),
    ]


class risk_verdict(Structure):
    _fields_ = [
        ("ticket", c_uint64),
        ("txn", c_uint64),
        ("entity", c_uint64),
        ("score", c_float),
        ("fast_score", c_float),
        ("source", c_uint8),
        ("failure", c_uint8),
        ("latency_ns", c_uint64),
    ]


# Layout checks against the C ABI of x86-64/aarch64 (LP64): a mismatch here would corrupt
# memory silently, so fail at import instead.
if ctypes.sizeof(c_void_p) == 8:
    assert ctypes.sizeof(risk_feature) == 24
    assert ctypes.sizeof(risk_txn) == 112 and risk_txn.n_features.offset == 80
    assert (risk_txn.merchant.offset, risk_txn.ip.offset, risk_txn.email.offset) == (88, 96, 104)
    assert ctypes.sizeof(risk_decision) == 144 and risk_decision.reasons.offset == 76
    assert (risk_decision.state.offset, risk_decision.ticket.offset) == (21, 24)
    assert ctypes.sizeof(risk_verdict) == 48 and risk_verdict.latency_ns.offset == 40

risk_result = c_uint32
risk_engine_p = c_void_p  # opaque
risk_subscription_p = c_void_p  # opaque

# name -> (restype, argtypes)
_PROTOTYPES = {
    "risk_version": (c_char_p, []),
    "risk_last_error": (c_char_p, []),
    "risk_engine_new_from_path": (risk_result, [c_char_p, POINTER(risk_engine_p)]),
    "risk_engine_new_from_toml": (risk_result, [c_char_p, c_size_t, c_char_p, POINTER(risk_engine_p)]),
    "risk_engine_free": (None, [risk_engine_p]),
    "risk_engine_decide": (risk_result, [risk_engine_p, POINTER(risk_txn), POINTER(risk_decision)]),
    "risk_engine_decide_batch": (
        risk_result,
        [risk_engine_p, POINTER(risk_txn), c_size_t, POINTER(risk_decision), POINTER(risk_result)],
    ),
    "risk_engine_decide_json": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(risk_decision)]),
    "risk_reason_name": (risk_result, [c_uint32, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_fallback_name": (c_char_p, [c_uint8]),
    "risk_engine_metrics_json": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_metrics_text": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_reload_rules": (risk_result, [risk_engine_p]),
    "risk_engine_shutdown": (risk_result, [risk_engine_p, c_uint32, POINTER(c_uint64), POINTER(c_uint64)]),
    "risk_engine_subscribe": (risk_result, [risk_engine_p, POINTER(risk_subscription_p)]),
    "risk_subscription_poll": (risk_result, [risk_subscription_p, c_uint32, POINTER(risk_verdict)]),
    "risk_subscription_free": (None, [risk_subscription_p]),
    "risk_audit_query_json": (risk_result, [c_char_p, c_char_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_audit_flush": (risk_result, [risk_engine_p, c_uint32, POINTER(c_uint64)]),
    "risk_engine_audit_stats_json": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_deploy": (
        risk_result,
        [risk_engine_p, c_char_p, c_char_p, c_char_p, c_char_p, POINTER(c_uint64)],
    ),
    "risk_engine_deploy_status_json": (
        risk_result,
        [risk_engine_p, c_char_p, c_char_p, c_size_t, POINTER(c_size_t)],
    ),
    "risk_engine_promote": (risk_result, [risk_engine_p, c_char_p]),
    "risk_engine_rollback": (risk_result, [risk_engine_p, c_char_p, c_char_p]),
    "risk_engine_deploy_tick": (risk_result, [risk_engine_p]),
    "risk_engine_health_json": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_force_open": (risk_result, [risk_engine_p, c_char_p, c_bool]),
    "risk_engine_monitor_json": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_monitor_tick": (risk_result, [risk_engine_p, POINTER(c_uint32)]),
    "risk_engine_drill": (risk_result, [risk_engine_p, c_char_p, c_char_p, c_char_p]),
    "risk_engine_drill_report_json": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_report_label": (risk_result, [risk_engine_p, c_uint64, c_bool, c_int64, POINTER(c_size_t)]),
    "risk_engine_list_add": (risk_result, [risk_engine_p, c_char_p, c_char_p, c_int64]),
    "risk_engine_list_remove": (risk_result, [risk_engine_p, c_char_p, c_char_p, POINTER(c_bool)]),
    "risk_engine_list_contains": (risk_result, [risk_engine_p, c_char_p, c_char_p, POINTER(c_bool)]),
    "risk_engine_lists_reload": (risk_result, [risk_engine_p]),
    "risk_engine_state_snapshot": (risk_result, [risk_engine_p, c_char_p]),
    "risk_engine_state_json": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_rules_json": (risk_result, [risk_engine_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "risk_engine_rules_rollback": (risk_result, [risk_engine_p, c_char_p]),
    "risk_engine_rules_explain": (
        risk_result, [risk_engine_p, POINTER(risk_txn), c_char_p, c_size_t, POINTER(c_size_t)]),
}

LIB_NAME = "librisk_ffi.so" if sys.platform.startswith("linux") else (
    "librisk_ffi.dylib" if sys.platform == "darwin" else "risk_ffi.dll"
)


class RiskLibraryNotFound(OSError):
    """The shared library could not be found or loaded."""


def repo_root() -> Path:
    """``<repo>`` when this package sits at ``<repo>/risk-ffi/bindings/python/risk``."""
    return Path(__file__).resolve().parents[4]


def default_lib_dir() -> Path | None:
    """``<repo>/target/release`` when this package is used from the source tree, else None."""
    root = repo_root()
    if (root / "risk-ffi" / "include" / "risk.h").is_file():
        return root / "target" / "release"
    return None


def library_path() -> str:
    """Where the library will be loaded from (see the module docstring)."""
    explicit = os.environ.get("RISK_FFI_LIB")
    if explicit:
        if not Path(explicit).is_file():
            raise RiskLibraryNotFound(f"RISK_FFI_LIB={explicit!r}: no such file")
        return explicit
    lib_dir = os.environ.get("RISK_FFI_LIB_DIR")
    if lib_dir:
        p = Path(lib_dir) / LIB_NAME
        if not p.is_file():
            raise RiskLibraryNotFound(
                f"RISK_FFI_LIB_DIR={lib_dir!r} holds no {LIB_NAME} "
                "(build it with `cargo build --release -p risk-ffi`)"
            )
        return str(p)
    d = default_lib_dir()
    if d is not None and (d / LIB_NAME).is_file():
        return str(d / LIB_NAME)
    return LIB_NAME  # the system loader's search path


_lib = None
_lib_lock = threading.Lock()


def lib() -> ctypes.CDLL:
    """The loaded library with every prototype declared (loaded once)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            path = library_path()
            try:
                # CDLL (not PyDLL): the GIL is released during each call, so threads decide
                # in parallel.
                dll = ctypes.CDLL(path)
            except OSError as e:
                d = default_lib_dir()
                where = f" (from the source tree: {d})" if d is not None else ""
                raise RiskLibraryNotFound(
                    f"cannot load {path}: {e}. Set RISK_FFI_LIB_DIR to the directory holding "
                    f"{LIB_NAME}{where}, or RISK_FFI_LIB to its path; build it with "
                    "`cargo build --release -p risk-ffi`."
                ) from e
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(dll, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = dll
    return _lib
