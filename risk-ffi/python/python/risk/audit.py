"""The audit trail read back: any log directory (copied off a host or still being
written) as records or as a pandas DataFrame. No engine is needed.

An engine whose TOML has an ``[audit]`` table (``dir = "audit"``, relative to its base
directory) writes one record per decision and per deep-tier verdict;
:meth:`risk.Engine.audit_flush` returns once those accepted so far are durable.

>>> engine.audit_flush()
>>> frame = risk.read_audit("audit", rule="velocity_burst")
>>> frame[["txn_id", "action", "score", "versions.rules.version"]]
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ._native import read_audit_records

__all__ = ["AUDIT_KINDS", "read_audit", "read_audit_records", "flatten_record"]

#: The record kinds a query can ask for (``kinds``); ``"damaged"`` records come regardless.
AUDIT_KINDS = ("decision", "verdict", "schema", "alert")


def flatten_record(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """One record as a flat dict: nested objects become dotted keys (``versions.rules.name``,
    ``thresholds.decline_at``, ``features.hour``); lists (``rules_fired``, ``reasons``)
    and None stay as they are."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten_record(v, key + "."))
        else:
            out[key] = v
    return out


def read_audit(
    dir: str | os.PathLike[str],
    *,
    txn: int | None = None,
    entity: int | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
    rule: str | None = None,
    kinds: str | Iterable[str] | None = None,
    limit: int | None = None,
) -> Any:
    """:func:`read_audit_records` as a pandas DataFrame, one row per record (decisions,
    verdicts, schema and damaged records alike: filter on ``kind``), nested objects
    flattened into dotted columns (``versions.rules.version``, ``thresholds.decline_at``,
    ``timings_ns.total``, ``features.<name>``); ``rules_fired`` and ``reasons`` stay list
    columns. A column a record lacks is missing in its row (a verdict has no ``action``).
    With no record: the columns ``seq`` and ``kind`` and no row. Needs pandas."""
    import pandas as pd

    records = read_audit_records(
        dir,
        txn=txn,
        entity=entity,
        from_ms=from_ms,
        to_ms=to_ms,
        rule=rule,
        kinds=None if kinds is None else [kinds] if isinstance(kinds, str) else list(kinds),
        limit=limit,
    )
    if not records:
        return pd.DataFrame(columns=["seq", "kind"])
    return pd.DataFrame([flatten_record(r) for r in records])
