"""What the library returns, as Python values: Decision (with its Reasons), Verdict,
ShutdownReport; reason and fallback names."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import NamedTuple

from . import _ffi as F
from ._errors import _check

# ----- results -----

_reason_names: dict[int, str] = {}


def reason_name(code: int) -> str:
    """The name of an interned reason code (``risk_reason_name``), cached."""
    name = _reason_names.get(code)
    if name is not None:
        return name
    L = F.lib()
    n = ctypes.c_size_t(0)
    cap = 64
    while True:
        buf = ctypes.create_string_buffer(cap)
        r = L.risk_reason_name(code, buf, cap, ctypes.byref(n))
        if r == F.RISK_ERR_BUFFER_TOO_SMALL:
            cap = n.value + 1
            continue
        _check(r)
        name = buf.raw[: n.value].decode("utf-8", "replace")
        _reason_names[code] = name
        return name


_fallback_names: dict[int, str] = {}


def fallback_name(code: int) -> str:
    """The name of a ``risk_decision.fallback`` code (``risk_fallback_name``)."""
    name = _fallback_names.get(code)
    if name is None:
        name = F.lib().risk_fallback_name(code).decode("utf-8", "replace")
        _fallback_names[code] = name
    return name


def version() -> str:
    """The library version (``risk_version``)."""
    return F.lib().risk_version().decode()


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason carried by a decision: its name, interned code and weight."""

    name: str
    weight: float
    code: int


@dataclass(frozen=True, slots=True)
class Decision:
    """Every field of ``risk_decision``, with names instead of codes.

    ``action``: approve / review / decline; ``tier``: rules / fast / static / unknown;
    ``fallback``: none / timeout / error / panic / invalid_score / circuit_open / absent /
    saturated / unknown; ``escalation``: none / enqueued / shed. "unknown" is
    ``RISK_CODE_UNKNOWN`` (255): a tier or fallback cause newer than this binding. ``rule_score`` and ``model_score``
    are NaN when that tier gave no valid score. ``state``: what entity state did for the
    decision: off (no ``[state]``, or no ``timestamp_ms``) / fresh (features computed) /
    timeout / error / unavailable (the state store failed: the state features are
    missing); "unknown(<code>)" for a code newer than this binding."""

    txn: int
    entity: int
    action: str
    tier: str
    fallback: str
    escalation: str
    hard_rule: bool
    state: str
    ticket: int
    score: float
    rule_score: float
    model_score: float
    threshold_shift: float
    rules_ns: int
    fast_ns: int
    total_ns: int
    reasons: tuple[Reason, ...] = field(default=())

    @property
    def reason_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.reasons)

    @classmethod
    def _from_c(cls, d: F.risk_decision) -> "Decision":
        n = min(d.n_reasons, F.RISK_MAX_REASONS)
        reasons = tuple(
            Reason(reason_name(r.code), float(r.weight), int(r.code)) for r in d.reasons[:n]
        )
        return cls(
            txn=d.txn,
            entity=d.entity,
            action=F.enum_name(F.ACTION_NAMES, d.action),
            tier=F.enum_name(F.TIER_NAMES, d.tier),
            fallback=fallback_name(d.fallback),
            escalation=F.enum_name(F.ESCALATION_NAMES, d.escalation),
            hard_rule=bool(d.hard_rule),
            state=F.enum_name(F.STATE_NAMES, d.state),
            ticket=d.ticket,
            score=float(d.score),
            rule_score=float(d.rule_score),
            model_score=float(d.model_score),
            threshold_shift=float(d.threshold_shift),
            rules_ns=d.rules_ns,
            fast_ns=d.fast_ns,
            total_ns=d.total_ns,
            reasons=reasons,
        )

    def to_row(self) -> dict:
        """The row of :meth:`RiskEngine.decide_frame` (FRAME_COLUMNS)."""
        return {
            "txn": self.txn,
            "action": self.action,
            "tier": self.tier,
            "score": self.score,
            "rule_score": self.rule_score,
            "model_score": self.model_score,
            "fallback": self.fallback,
            "escalation": self.escalation,
            "threshold_shift": self.threshold_shift,
            "hard_rule": self.hard_rule,
            "total_ns": self.total_ns,
            "reasons": list(self.reason_names),
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """A deep-tier verdict (``risk_verdict``). ``source``: model / cached_average /
    global_prior / unknown; ``failure``: none / timeout / error / saturated / circuit_open / unknown
    ("unknown": ``RISK_CODE_UNKNOWN``, a code newer than this binding)."""

    ticket: int
    txn: int
    entity: int
    score: float
    fast_score: float
    source: str
    failure: str
    latency_ns: int

    @classmethod
    def _from_c(cls, v: F.risk_verdict) -> "Verdict":
        return cls(
            ticket=v.ticket,
            txn=v.txn,
            entity=v.entity,
            score=float(v.score),
            fast_score=float(v.fast_score),
            source=F.enum_name(F.VERDICT_SOURCE_NAMES, v.source),
            failure=F.enum_name(F.VERDICT_FAILURE_NAMES, v.failure),
            latency_ns=v.latency_ns,
        )


class ShutdownReport(NamedTuple):
    drained: int
    abandoned: int


# ----- handles -----
