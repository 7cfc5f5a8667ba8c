"""Health, the kill switch, monitors and fallback drills: the ``RiskEngine`` methods over
``risk_engine_health_json``, ``risk_engine_force_open``, ``risk_engine_monitor_json``,
``risk_engine_monitor_tick``, ``risk_engine_drill`` and ``risk_engine_drill_report_json``
(a mixin, so that ``_engine.py`` stays readable)."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Iterable, Mapping
from typing import Any

from . import _ffi as F
from ._engine import RiskTypeError, RiskValueError, _c_str, _check, _read_text, _Use

__all__ = ["ObserveMixin", "KILL_SWITCH_TIERS", "DRILL_FAULTS"]

# The tiers ``force_open`` switches (the rules always run).
KILL_SWITCH_TIERS = ("fast", "deep")

# The faults ``drill`` injects; ``"fast_slow:<ms>"`` adds <ms> to every fast-tier call.
DRILL_FAULTS = ("fast_down", "fast_nan", "deep_down", "fast_slow:<ms>")

# First buffers: a health answer is small; a monitor report holds up to 32 recent alerts
# and a drift row per feature.
_HEALTH_CAP = 1024
_MONITOR_CAP = 4096
_DRILL_CAP = 1024


def _txns_json(transactions: Any) -> bytes:
    """JSON text (str or bytes, passed as is) or an iterable of transaction mappings (as
    ``decide`` and ``decide_json`` take them), as one NUL-terminated JSON array."""
    if isinstance(transactions, bytes):
        text = transactions.decode("utf-8", "surrogateescape")
    elif isinstance(transactions, str):
        text = transactions
    elif isinstance(transactions, Iterable) and not isinstance(transactions, Mapping):
        rows = list(transactions)
        for k, t in enumerate(rows):
            if not isinstance(t, Mapping):
                raise RiskTypeError(f"transactions[{k}] must be a mapping, not {type(t).__name__}")
        try:
            text = json.dumps([dict(t) for t in rows], allow_nan=False)
        except (TypeError, ValueError) as e:  # NaN/inf or an object JSON cannot hold
            raise RiskValueError(f"transactions JSON: {e}", code=F.RISK_ERR_JSON) from e
    else:
        raise RiskTypeError(
            f"transactions must be a list of mappings or JSON text, not {type(transactions).__name__}"
        )
    return _c_str(text, "transactions")


def _labels_json(labels: Any) -> bytes | None:
    if labels is None:
        return None
    if isinstance(labels, (str, bytes, Mapping)) or not isinstance(labels, Iterable):
        raise RiskTypeError(f"labels must be a list of bools or None, not {type(labels).__name__}")
    out = []
    for k, v in enumerate(labels):
        # bool, or numpy's bool_ (a column of a DataFrame), never an int posing as one.
        if not (isinstance(v, bool) or type(v).__name__ == "bool_"):
            raise RiskTypeError(f"labels[{k}] must be a bool, not {type(v).__name__}")
        out.append(bool(v))
    return json.dumps(out).encode()


class ObserveMixin:
    """Operations of a live engine: health, the kill switch, monitors, fallback drills."""

    def health(self) -> dict:
        """The engine's health (``risk_engine_health_json``) as a dict: ``status``
        (``"ready"``, ``"degraded"`` or ``"shut_down"``), ``reasons`` (why degraded),
        ``fast`` and ``deep`` ({``present``, ``state`` (``"closed"``, ``"open"``,
        ``"half_open"``, ``"forced_open"``, ``"absent"``), ``serving`` ({id, name,
        version, hash} or None)}) and ``deploying`` (targets with a deploy in progress)."""
        with _Use(self) as h:
            L = F.lib()
            return json.loads(_read_text(lambda buf, cap, n: L.risk_engine_health_json(h, buf, cap, n),
                                         _HEALTH_CAP, "health"))

    def force_open(self, tier: str, open: bool = True) -> None:  # noqa: A002 - the C name
        """Sets (``open=True``) or clears the kill switch of ``tier`` (``"fast"`` or
        ``"deep"``, ``risk_engine_force_open``): while set, the fast tier is not called
        and the rules decide (fallback ``"circuit_open"``), or the deep tier is not called
        and gray-zone verdicts come from its fallback. Effective on the next decision;
        :meth:`health` reports the tier ``"forced_open"``. RiskError(``RISK_ERR_INVALID``)
        for another tier name."""
        t = _c_str(tier, "tier")
        if not isinstance(open, bool):
            raise RiskTypeError(f"open must be a bool, not {type(open).__name__}")
        with _Use(self) as h:
            _check(F.lib().risk_engine_force_open(h, t, open))

    def monitor_report(self) -> dict:
        """The monitors' latest values (``risk_engine_monitor_json``) as a dict:
        ``windows`` (judged so far), ``agreement`` ([share, samples] or None), ``drift``
        ([{subject, ks, psi, n}]), ``deep_fallback_share`` (or None), ``firing`` (alerts
        firing now, as ``"kind:subject"``, e.g. ``"agreement:agreement"``), ``baseline``
        (whether a drift baseline is in force) and ``recent`` (the latest alerts, oldest
        first: {kind, subject, value, threshold, firing, at_ms, detail}).
        RiskError(``RISK_ERR_INVALID``) when the engine has no ``[monitor]`` table."""
        with _Use(self) as h:
            L = F.lib()
            return json.loads(_read_text(lambda buf, cap, n: L.risk_engine_monitor_json(h, buf, cap, n),
                                         _MONITOR_CAP, "monitor report"))

    def monitor_tick(self) -> int:
        """Judges every monitor now and returns how many alerts that raised
        (``risk_engine_monitor_tick``; the engine's monitor thread does so every
        ``[monitor] interval_ms``, 0: only on these calls). Alerts are edge-triggered: one
        when a monitor goes bad, one when it recovers; they appear in
        :meth:`monitor_report`'s ``recent``. An engine without ``[monitor]`` raises none."""
        raised = ctypes.c_uint32(0)
        with _Use(self) as h:
            _check(F.lib().risk_engine_monitor_tick(h, ctypes.byref(raised)))
        return raised.value

    def drill(
        self,
        fault: str,
        transactions: Iterable[Mapping[str, Any]] | str | bytes,
        labels: Iterable[bool] | None = None,
    ) -> dict:
        """Runs a fallback drill and returns its report (``risk_engine_drill``, then
        ``risk_engine_drill_report_json``).

        ``fault``: ``"fast_down"``, ``"fast_nan"``, ``"deep_down"`` or
        ``"fast_slow:<ms>"``. ``transactions``: a list of transaction mappings (as
        :meth:`decide_json` takes them) or a JSON array text, replayed under the fault.
        ``labels``: None, or one bool (fraud) per transaction for the quality comparison.
        Live traffic on the engine is affected while the drill runs.

        The report: ``fault`` ({kind, ...}), ``decisions``, ``by_tier`` and ``fallbacks``
        (dicts {name: count}; the library's [name, count] pairs), ``errors``,
        ``switch_time`` {p50_us, p99_us, max_us}, ``circuit_after``, ``model_quality`` and
        ``drill_quality`` ({recall, precision, auprc}, None without labels),
        ``deep_verdicts`` ([delivered, fallbacks]), ``duration_ms``.

        RiskError(``RISK_ERR_INVALID``) for an unknown fault or a label count that does
        not match; ``RISK_ERR_JSON`` / ``RISK_ERR_TRANSACTION`` for a transaction the
        library refuses (the message names its index)."""
        f = _c_str(fault, "fault")
        t = _txns_json(transactions)
        lab = _labels_json(labels)
        with _Use(self) as h:
            L = F.lib()
            _check(L.risk_engine_drill(h, f, t, lab))
            # Read back in the same use (a drill by another thread may still replace it).
            text = _read_text(lambda buf, cap, n: L.risk_engine_drill_report_json(h, buf, cap, n),
                              _DRILL_CAP, "drill report")
        return _drill_report(text)

    def drill_report(self) -> dict:
        """The last drill's report (``risk_engine_drill_report_json``), as :meth:`drill`
        returns it. RiskError(``RISK_ERR_EMPTY``) before any drill on this engine."""
        with _Use(self) as h:
            L = F.lib()
            text = _read_text(lambda buf, cap, n: L.risk_engine_drill_report_json(h, buf, cap, n),
                              _DRILL_CAP, "drill report")
        return _drill_report(text)


def _drill_report(text: bytes) -> dict:
    r = json.loads(text)
    for k in ("by_tier", "fallbacks"):
        if isinstance(r.get(k), list):
            r[k] = {name: count for name, count in r[k]}
    return r
