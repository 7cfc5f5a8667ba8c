"""The audit trail: reading a log directory back (``risk_audit_query_json``).

An engine whose TOML has an ``[audit]`` table (``dir = "audit"``, relative to its base
directory) writes one record per decision and per deep-tier verdict. Reading needs no
engine: any log directory, copied off a host or still being written, reads the same.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from . import _ffi as F
from ._engine import _I64_MAX, _I64_MIN, _U64_MAX, RiskTypeError, _c_str, _int, _read_text

__all__ = ["AUDIT_KINDS", "read_audit", "read_audit_records", "flatten_record"]

# The record kinds a query can ask for (``kinds``); ``"damaged"`` elements come regardless.
AUDIT_KINDS = ("decision", "verdict", "schema")

# First buffer for a query's JSON; a larger answer costs one more read of the log.
_QUERY_CAP = 1 << 16


def _query_json(txn, entity, from_ms, to_ms, rule, kinds, limit) -> bytes:
    q: dict[str, Any] = {}
    if txn is not None:
        q["txn"] = _int(txn, "txn", 0, _U64_MAX)
    if entity is not None:
        q["entity"] = _int(entity, "entity", 0, _U64_MAX)
    if from_ms is not None:
        q["from_ms"] = _int(from_ms, "from_ms", _I64_MIN, _I64_MAX)
    if to_ms is not None:
        q["to_ms"] = _int(to_ms, "to_ms", _I64_MIN, _I64_MAX)
    if rule is not None:
        if not isinstance(rule, str):
            raise RiskTypeError(f"rule must be a str, not {type(rule).__name__}")
        q["rule"] = rule
    if kinds is not None:
        if isinstance(kinds, (str, bytes)) or not isinstance(kinds, Iterable):
            raise RiskTypeError(f"kinds must be a list of str (of {', '.join(AUDIT_KINDS)}), not {type(kinds).__name__}")
        kinds = list(kinds)
        for k in kinds:
            if not isinstance(k, str):
                raise RiskTypeError(f"kinds must be a list of str, not holding {type(k).__name__}")
        q["kinds"] = kinds  # the library names a kind it does not know (RISK_ERR_INVALID)
    if limit is not None:
        q["limit"] = _int(limit, "limit", 0, _U64_MAX)
    return _c_str(json.dumps(q), "query")


def read_audit_records(
    dir: str | os.PathLike,
    *,
    txn: int | None = None,
    entity: int | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
    rule: str | None = None,
    kinds: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[dict]:
    """The records of the audit log in ``dir`` matching the query, in log order, as the
    library's JSON views (``risk_audit_query_json``). Every argument is optional:

    - ``txn``, ``entity``: only that transaction id / entity;
    - ``from_ms``, ``to_ms``: decision (or verdict) time in ``[from_ms, to_ms)``, ms since
      the Unix epoch;
    - ``rule``: only decisions on which that rule fired;
    - ``kinds``: any of ``"decision"``, ``"verdict"``, ``"schema"`` (default: decisions
      and verdicts);
    - ``limit``: at most that many records.

    A decision is ``{"seq", "kind": "decision", "txn_id", "entity", "event_time_ms",
    "decided_at_ms", "action", "score", "tier", "fallback", "hard_rule", "rule_score",
    "model_score", "rules_fired", "rules_fired_total", "reasons": [{"code", "weight"}],
    "thresholds": {...}, "versions": {"rules": {"name", "version", "hash"}, "fast",
    "deep", "config", "schema"}, "timings_ns": {...}, "escalation", "ticket" (when
    enqueued), "amount", "currency", "features": {name: value}}`` (NaN and missing values
    are None, categorical features their text). A damaged record is ``{"kind":
    "damaged", "error": "..."}``: reported, never skipped silently.

    Raises RiskError: ``RISK_ERR_INVALID`` for a directory that cannot be read or a kind
    the library does not know, RiskTypeError/RiskValueError for arguments of the wrong
    type or range. The records of a live engine are there once :meth:`RiskEngine.audit_flush`
    returned."""
    d = _c_str(dir, "dir", path=True)
    q = _query_json(txn, entity, from_ms, to_ms, rule, kinds, limit)
    L = F.lib()
    text = _read_text(lambda buf, cap, n: L.risk_audit_query_json(d, q, buf, cap, n), _QUERY_CAP, "the audit query")
    return json.loads(text)


def flatten_record(record: dict, prefix: str = "") -> dict:
    """One record as a flat dict: nested objects become dotted keys (``versions.rules.name``,
    ``thresholds.decline_at``, ``features.hour``); lists (``rules_fired``, ``reasons``)
    and None stay as they are."""
    out: dict = {}
    for k, v in record.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten_record(v, key + "."))
        else:
            out[key] = v
    return out


def read_audit(
    dir: str | os.PathLike,
    *,
    txn: int | None = None,
    entity: int | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
    rule: str | None = None,
    kinds: Iterable[str] | None = None,
    limit: int | None = None,
):
    """:func:`read_audit_records` as a pandas DataFrame, one row per record (decisions,
    verdicts, schema and damaged records alike: filter on ``kind``), with the nested
    objects flattened into dotted columns by :func:`flatten_record`: ``versions.rules.name``,
    ``versions.rules.version``, ``versions.fast.name``, ``thresholds.approve_below``,
    ``timings_ns.total``, ``features.<name>`` (a missing value: pandas' missing value of
    the column, NaN for numbers) ... ``rules_fired`` and ``reasons`` stay list columns.
    A column a record lacks is missing in its row (a verdict has no ``action``). With no record, the frame has the columns ``seq`` and
    ``kind`` and no row. Needs pandas."""
    import pandas as pd

    records = read_audit_records(
        dir, txn=txn, entity=entity, from_ms=from_ms, to_ms=to_ms, rule=rule, kinds=kinds, limit=limit
    )
    if not records:
        return pd.DataFrame(columns=["seq", "kind"])
    return pd.DataFrame([flatten_record(r) for r in records])
