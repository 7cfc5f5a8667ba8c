"""Entity state: delayed labels, block / allow lists, snapshots and counters: the
``RiskEngine`` methods over ``risk_engine_report_label``, ``risk_engine_list_add``,
``risk_engine_list_remove``, ``risk_engine_list_contains``, ``risk_engine_lists_reload``,
``risk_engine_state_snapshot`` and ``risk_engine_state_json`` (a mixin, so that
``_engine.py`` stays readable).

An engine whose ``risk.toml`` has a ``[state]`` section computes velocity features
(``[[state.features]]``, e.g. a card's transactions in the hour before) from the raw
transactions it decides, before the rules run, and keeps lists (``[state.lists.<name>]``)
that rules read as ``device in list.blocked_devices``. Every refusal raises
:class:`risk.StateError` (``RISK_ERR_STATE``), on an engine without ``[state]`` too.
"""

from __future__ import annotations

import ctypes
import json
import os
from typing import Any

from . import _ffi as F
from ._engine import (
    _I64_MAX,
    _I64_MIN,
    _U64_MAX,
    RiskTypeError,
    _c_str,
    _check,
    _int,
    _read_text,
    _Use,
)

__all__ = ["StateMixin"]

# First buffer for the state report (a few counters, a row per key source, a count per
# list).
_STATE_CAP = 1024


def _list_value(value: Any) -> bytes:
    """A list entry as the library takes it: a str as is, an int (a device or card id) as
    its decimal digits."""
    if isinstance(value, str):
        return _c_str(value, "value")
    if isinstance(value, bool):
        raise RiskTypeError("value must be a str or an int, not bool")
    try:
        i = _int(value, "value", 0, _U64_MAX)
    except RiskTypeError:
        raise RiskTypeError(f"value must be a str or an int, not {type(value).__name__}") from None
    return str(i).encode()


class StateMixin:
    """Entity state of a live engine: labels, lists, snapshots, counters."""

    def report_label(self, txn_id: int, fraud: bool, at_ms: int) -> int:
        """Reports the label of transaction ``txn_id`` (the ``id`` it was decided with):
        ``fraud=True`` for a chargeback or a confirmed fraud, ``False`` to retract an
        earlier ``True``; ``at_ms`` (ms since the epoch) is when it became known, not
        before the transaction (``risk_engine_report_label``). Label features
        (``agg = "fraud_count"`` / ``"fraud_rate"`` with a ``delay``) count it once the
        delay has passed. Returns how many label windows it reached (0 when the
        transaction's bucket has already left every window).

        Raises :class:`risk.StateError` for a transaction the engine does not remember
        (never decided, decided with id 0, or evicted), a label dated before its
        transaction, an engine without a label feature or without ``[state]``."""
        txn_id = _int(txn_id, "txn_id", 0, _U64_MAX)
        if not isinstance(fraud, bool):
            raise RiskTypeError(f"fraud must be a bool, not {type(fraud).__name__}")
        at_ms = _int(at_ms, "at_ms", _I64_MIN, _I64_MAX)
        reached = ctypes.c_size_t(0)
        with _Use(self) as h:
            _check(F.lib().risk_engine_report_label(h, txn_id, fraud, at_ms, ctypes.byref(reached)))
        return reached.value

    def list_add(self, list_name: str, value: str | int, expires_at_ms: int = 0) -> None:
        """Adds ``value`` to the list ``list_name`` (``[state.lists.<name>]``), or re-dates
        it, live until ``expires_at_ms`` (ms since the epoch; 0 or negative: never
        expires) (``risk_engine_list_add``). ``value`` is a str, or an int for the decimal
        id of a device or card list. Effective on the next decision; journalled and
        synced before this returns when ``[state] dir`` is set.

        Raises :class:`risk.StateError` for an unknown list, a value that cannot be one of
        its keys (e.g. not a number for a device list), or an engine without
        ``[state]``."""
        name = _c_str(list_name, "list_name")
        v = _list_value(value)
        expires_at_ms = _int(expires_at_ms, "expires_at_ms", _I64_MIN, _I64_MAX)
        with _Use(self) as h:
            _check(F.lib().risk_engine_list_add(h, name, v, expires_at_ms))

    def list_remove(self, list_name: str, value: str | int) -> bool:
        """Removes ``value`` from the list ``list_name`` and returns whether it was there
        (``risk_engine_list_remove``). :class:`risk.StateError` as for :meth:`list_add`."""
        name = _c_str(list_name, "list_name")
        v = _list_value(value)
        removed = ctypes.c_bool(False)
        with _Use(self) as h:
            _check(F.lib().risk_engine_list_remove(h, name, v, ctypes.byref(removed)))
        return removed.value

    def list_contains(self, list_name: str, value: str | int) -> bool:
        """Whether ``value`` is a live (not expired) entry of the list ``list_name`` now
        (``risk_engine_list_contains``). :class:`risk.StateError` as for
        :meth:`list_add`."""
        name = _c_str(list_name, "list_name")
        v = _list_value(value)
        out = ctypes.c_bool(False)
        with _Use(self) as h:
            _check(F.lib().risk_engine_list_contains(h, name, v, ctypes.byref(out)))
        return out.value

    def lists_reload(self) -> None:
        """Re-reads every list's file (``file`` of ``[state.lists.<name>]``, lines
        ``value[,expires_at_ms]``) and journal (``risk_engine_lists_reload``). A bad file
        raises :class:`risk.StateError` naming ``file:line``, and its list keeps serving
        what it had; the other lists are reloaded."""
        with _Use(self) as h:
            _check(F.lib().risk_engine_lists_reload(h))

    def state_snapshot(self, path: str | os.PathLike | None = None) -> None:
        """Writes the entity state to ``path`` atomically (None: the configured
        ``[state] snapshot``) (``risk_engine_state_snapshot``); a later engine with the
        same ``[state]`` restores it at start. :class:`risk.StateError` when it cannot be
        written, or with no path given and none configured."""
        p = None if path is None else _c_str(path, "path", path=True)
        with _Use(self) as h:
            _check(F.lib().risk_engine_state_snapshot(h, p))

    def state_report(self) -> dict:
        """The entity state's counters (``risk_engine_state_json``) as a dict: ``stats``
        {``updates`` (transactions that read and wrote state), ``no_time`` (without an
        event time: no state), ``late``, ``labels``, ``labels_unknown``, ``list_hits``, and
        a store's counters where the library has them: ``degraded``, ``store_timeouts``,
        ``store_errors``, ``store_skipped``, ``store_shed``},
        ``memory`` (one {``source``, ``keys``, ``bytes_per_key``} per key source),
        ``pending_labels`` (transactions remembered for labels) and ``lists`` ({name:
        live entries}). :class:`risk.StateError` on an engine without ``[state]``."""
        with _Use(self) as h:
            L = F.lib()
            return json.loads(_read_text(lambda buf, cap, n: L.risk_engine_state_json(h, buf, cap, n),
                                         _STATE_CAP, "state report"))
