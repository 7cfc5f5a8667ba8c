"""The Pythonic layer over the C ABI: RiskEngine, Decision, Verdict, Subscription, RiskError,
AuditError, DeployError, StateError."""

from __future__ import annotations

import ctypes
import json
import math
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from . import _ffi as F

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
    "DEPLOY_TARGETS",
    "TXN_FIELDS",
    "FRAME_COLUMNS",
    "version",
]


FRAME_COLUMNS = [
    "txn",
    "action",
    "tier",
    "score",
    "rule_score",
    "model_score",
    "fallback",
    "escalation",
    "threshold_shift",
    "hard_rule",
    "total_ns",
    "reasons",
]


# Transactions per risk_engine_decide_batch call (see RiskEngine.decide_batch).
DEFAULT_BATCH_SIZE = 64

# Longest single library poll (see Subscription.poll).
POLL_SLICE_MS = 20

# The parts of an engine a deploy can replace (RiskEngine.deploy's ``target``).
DEPLOY_TARGETS = ("rules", "fast", "deep", "policy")

# First buffer for a deploy status's JSON (it holds up to 64 history events).
_DEPLOY_STATUS_CAP = 4096


from ._errors import (  # noqa: E402  (re-exported: the mixins import them from here)
    AuditError,
    DeployError,
    RiskError,
    RiskTypeError,
    RiskValueError,
    StateError,
    _check,
    _last_error,
    _read_text,
)
from ._txn import (  # noqa: E402
    _I64_MAX,
    _I64_MIN,
    _U32_MAX,
    _U64_MAX,
    TXN_FIELDS,
    _c_buf,
    _c_str,
    _fill_txn,
    _int,
    _is_missing,
    _txn_args,
)
from ._results import (  # noqa: E402
    Decision,
    Reason,
    ShutdownReport,
    Verdict,
    fallback_name,
    reason_name,
    version,
)


class _Handle:
    """An opaque library handle, freed once. Calls take a use-count so that ``close()`` from
    another thread returns only once the calls in flight on this object have finished.

    That wait is for predictability, not memory safety: the library's handles are
    never-reused tokens, it refuses a freed one with ``RISK_ERR_HANDLE``, and a call in
    flight when the handle is freed finishes safely on its own reference."""

    _kind = "handle"

    def __init__(self, ptr: int, free_fn_name: str):
        self._ptr: int | None = ptr
        self._users = 0
        self._cond = threading.Condition(threading.Lock())
        # Frees the handle if the object is collected without close().
        self._finalizer = weakref.finalize(self, _free_handle, free_fn_name, ptr)

    def _acquire(self) -> int:
        with self._cond:
            if self._ptr is None:
                raise RiskError(F.RISK_ERR_HANDLE, f"the {self._kind} is closed")
            self._users += 1
            return self._ptr

    def _release(self) -> None:
        with self._cond:
            self._users -= 1
            if self._users == 0:
                self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        """Releases the handle (idempotent). Waits for this object's calls in flight (a
        ``Subscription.poll`` waits in short slices, so at most ``POLL_SLICE_MS``)."""
        with self._cond:
            if self._ptr is None:
                return
            self._ptr = None
            while self._users:
                self._cond.wait()
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _free_handle(free_fn_name: str, ptr: int) -> None:
    getattr(F.lib(), free_fn_name)(ptr)


class _Use:
    """``with _Use(handle) as ptr:`` around one library call."""

    __slots__ = ("h", "ptr")

    def __init__(self, h: _Handle):
        self.h = h

    def __enter__(self) -> int:
        self.ptr = self.h._acquire()
        return self.ptr

    def __exit__(self, *exc) -> None:
        self.h._release()


class Subscription(_Handle):
    """Deep-tier verdicts from the moment of :meth:`RiskEngine.subscribe` (bounded: a slow
    reader loses verdicts rather than blocking the engine). Close it, or use ``with``.

    :meth:`poll` returns a Verdict, or None when none came in time (try again), and raises
    ``RiskError`` with code ``RISK_ERR_CLOSED`` (13) when none ever will: the engine has no
    deep tier, or was freed (verdicts already buffered are returned first). Typical loop::

        with engine.subscribe() as sub:
            try:
                while True:
                    v = sub.poll(1000)
                    if v is not None:
                        handle(v)
            except RiskError as e:
                if e.code != risk.RISK_ERR_CLOSED:
                    raise

    ``closed`` is about this object (``close()`` was called), not the verdict stream."""

    _kind = "subscription"

    def __init__(self, ptr: int):
        super().__init__(ptr, "risk_subscription_free")

    def poll(self, timeout_ms: int = 0) -> Verdict | None:
        """The next verdict, waiting up to ``timeout_ms`` (0: only look).

        Returns None when none came in time (``RISK_ERR_EMPTY``: poll again). Raises
        RiskError(``RISK_ERR_CLOSED``) at once when no verdict will ever come (no deep
        tier, or the engine was freed), and RiskError(``RISK_ERR_HANDLE``) once this
        subscription is closed.

        The wait is made of library polls of at most ``POLL_SLICE_MS`` each. The library
        itself blocks nothing else during a poll; the slices only keep ``close()`` from
        another thread (which waits for this object's calls in flight) prompt."""
        timeout_ms = _int(timeout_ms, "timeout_ms", 0, _U32_MAX)
        out = F.risk_verdict()
        L = F.lib()
        deadline = time.monotonic() + timeout_ms / 1000
        remaining = timeout_ms
        while True:
            step = min(remaining, POLL_SLICE_MS)
            with _Use(self) as p:
                r = L.risk_subscription_poll(p, step, ctypes.byref(out))
                if r == F.RISK_OK:
                    return Verdict._from_c(out)
                if r != F.RISK_ERR_EMPTY:  # RISK_ERR_CLOSED included: stop polling
                    raise _last_error(r)
            # Rounded up: truncating would end the wait up to 1 ms before the timeout.
            remaining = math.ceil((deadline - time.monotonic()) * 1000)
            if step == 0 or remaining <= 0:
                return None

    def __repr__(self) -> str:
        return f"<risk.Subscription {'closed' if self.closed else 'open'}>"


# Imported here, not at the top: the mixins use the helpers defined above.
from ._observe import ObserveMixin  # noqa: E402
from ._rules import RulesMixin  # noqa: E402
from ._state import StateMixin  # noqa: E402


class RiskEngine(ObserveMixin, StateMixin, RulesMixin, _Handle):
    """An engine built from a ``risk.toml``. Thread-safe: share one across threads.

    Besides deciding: :meth:`metrics`, the model lifecycle (:meth:`deploy` ...), the
    operations of :class:`risk._observe.ObserveMixin` (:meth:`health`, :meth:`force_open`,
    :meth:`monitor_report`, :meth:`monitor_tick`, :meth:`drill`, :meth:`drill_report`), and
    the entity state of :class:`risk._state.StateMixin` (:meth:`report_label`,
    :meth:`list_add`, :meth:`list_remove`, :meth:`list_contains`, :meth:`lists_reload`,
    :meth:`state_snapshot`, :meth:`state_report`).

    >>> with RiskEngine.from_path("examples/risk.toml") as eng:
    ...     d = eng.decide(amount=42.5, currency="USD", country="US", channel="pos")
    """

    _kind = "engine"

    def __init__(self, path: str | os.PathLike):
        """Same as :meth:`from_path`."""
        p = _c_str(path, "path", path=True)
        out = F.risk_engine_p()
        _check(F.lib().risk_engine_new_from_path(p, ctypes.byref(out)))
        super().__init__(out.value, "risk_engine_free")

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> "RiskEngine":
        """Builds an engine from a ``risk.toml`` file (relative paths inside resolve against
        its directory). Raises RiskError(RISK_ERR_CONFIG) naming the file or key."""
        return cls(path)

    @classmethod
    def from_toml(cls, text: str | bytes, base_dir: str | os.PathLike | None = None) -> "RiskEngine":
        """Builds an engine from ``risk.toml`` text; relative paths resolve against
        ``base_dir`` (None: the process's current directory)."""
        b = _c_buf(text, "toml")
        d = None if base_dir is None else _c_str(base_dir, "base_dir", path=True)
        out = F.risk_engine_p()
        _check(F.lib().risk_engine_new_from_toml(b, len(b), d, ctypes.byref(out)))
        self = cls.__new__(cls)
        _Handle.__init__(self, out.value, "risk_engine_free")
        return self

    def __repr__(self) -> str:
        return f"<risk.RiskEngine {'closed' if self.closed else 'open'}>"

    # ----- decisions -----

    def decide(self, txn: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Decision:
        """Decides one transaction given as a mapping and/or keywords: ``id``, ``entity``,
        ``timestamp_ms``, ``amount``, ``currency``, ``mcc``, ``country``, ``channel``,
        ``device``, ``merchant``, ``ip``, ``email`` (str or None: entity-state keys, hashed
        by the library), ``features`` ({name: float | str | None}; None or NaN =
        missing). The mapping is read, never modified (the engine computes its state
        features on its own copy)."""
        a = _txn_args(txn, kwargs)
        out = F.risk_decision()
        with _Use(self) as p:
            _check(F.lib().risk_engine_decide(p, ctypes.byref(a.txn), ctypes.byref(out)))
        return Decision._from_c(out)

    def decide_json(self, text: str | bytes | Mapping[str, Any]) -> Decision:
        """Decides a transaction given as JSON text (str or bytes, passed as is) or as a
        mapping (serialised with ``json.dumps``)."""
        if isinstance(text, Mapping):
            try:
                text = json.dumps(text, allow_nan=False)
            except (TypeError, ValueError) as e:  # NaN/inf or an object JSON cannot hold
                raise RiskValueError(f"transaction JSON: {e}", code=F.RISK_ERR_JSON) from e
        b = _c_buf(text, "json")
        out = F.risk_decision()
        with _Use(self) as p:
            _check(F.lib().risk_engine_decide_json(p, b, len(b), ctypes.byref(out)))
        return Decision._from_c(out)

    def decide_batch(
        self, txns: Iterable[Mapping[str, Any]], *, batch_size: int = DEFAULT_BATCH_SIZE,
        _lenient: bool = False,
    ) -> list:
        """Decides many transactions with ``risk_engine_decide_batch``, ``batch_size`` per
        call (1..65,536). Returns, in order, a Decision or a RiskError for each (items that
        fail Python-side checks are not sent).

        Why the default is small: the engine gives one library batch a single fast-tier
        deadline (``[fast] deadline_ms``, from the start of the call), all or nothing. A
        batch whose model time exceeds it falls back to the rule tier for every item
        (``fallback == "timeout"``): with examples/risk.toml on a 2-core machine that
        happens from ~150-300 items. Each item's ``total_ns`` is also the time since the
        start of its batch, not its own."""
        batch_size = _int(batch_size, "batch_size", 1, F.RISK_MAX_BATCH)
        txns = list(txns)
        results: list = [None] * len(txns)
        arr = (F.risk_txn * len(txns))()
        keep: list = []
        sent: list[int] = []
        for i, t in enumerate(txns):
            if not isinstance(t, Mapping):
                results[i] = RiskTypeError(f"item {i}: a transaction is a mapping, not {type(t).__name__}")
                continue
            try:
                _fill_txn(arr[len(sent)], keep, t, lenient=_lenient)
            except RiskError as e:
                results[i] = e
                arr[len(sent)] = F.risk_txn()
                continue
            sent.append(i)
        with _Use(self) as p:
            L = F.lib()
            for lo in range(0, len(sent), batch_size):
                n = min(batch_size, len(sent) - lo)
                base = ctypes.cast(
                    ctypes.addressof(arr) + lo * ctypes.sizeof(F.risk_txn), ctypes.POINTER(F.risk_txn)
                )
                out = (F.risk_decision * n)()
                codes = (F.risk_result * n)()
                _check(L.risk_engine_decide_batch(p, base, n, out, codes))
                failed = [j for j in range(n) if codes[j] != F.RISK_OK]
                # The ABI keeps one message per thread: it is exact only when one item failed.
                last = L.risk_last_error().decode("utf-8", "replace") if failed else ""
                for j in range(n):
                    i = sent[lo + j]
                    c = codes[j]
                    if c == F.RISK_OK:
                        results[i] = Decision._from_c(out[j])
                    elif len(failed) == 1:
                        results[i] = RiskError(c, f"item {i}: {last}")
                    else:
                        results[i] = RiskError(
                            c,
                            f"item {i}: {F.RESULT_DESCRIPTIONS.get(c, 'failed')} (the C ABI keeps "
                            f"one message per batch call; last: {last})",
                        )
        return results

    def decide_frame(self, frame, *, errors: str = "raise", batch_size: int = DEFAULT_BATCH_SIZE):
        """Decides every row of a pandas DataFrame and returns a DataFrame of decisions
        (columns FRAME_COLUMNS, same index). Columns named like a transaction field
        (``id``, ``amount``, ``currency``, ...) fill that field; every other column is a
        schema feature (numbers numeric, strings categorical, NaN/None missing).

        ``errors="raise"``: the first failing row raises its RiskError (message names the
        row). ``errors="keep"``: failing rows get NaN/None decisions and an ``error`` column
        holds the RiskError (None for rows that succeeded). ``batch_size``: as in
        :meth:`decide_batch`."""
        import pandas as pd

        if errors not in ("raise", "keep"):
            raise RiskValueError(f"errors must be 'raise' or 'keep', not {errors!r}")
        if not isinstance(frame, pd.DataFrame):
            raise RiskTypeError(f"decide_frame takes a pandas DataFrame, not {type(frame).__name__}")
        cols = [str(c) for c in frame.columns]
        if len(set(cols)) != len(cols):
            raise RiskValueError("DataFrame column names must be unique")
        if "features" in cols:
            raise RiskValueError("a 'features' column is not supported: give each feature its own column")
        std = [c for c in cols if c in TXN_FIELDS]
        feat = [c for c in cols if c not in TXN_FIELDS]
        txns = []
        for row in frame.itertuples(index=False, name=None):
            d = {}
            fs = {}
            for c, v in zip(cols, row):
                if c in std:
                    if not _is_missing(v):  # missing: unset (amount: NaN, which the library refuses)
                        d[c] = v
                else:
                    fs[c] = None if _is_missing(v) else v
            if feat:
                d["features"] = fs
            txns.append(d)
        results = self.decide_batch(txns, batch_size=batch_size, _lenient=True)
        rows = []
        errs = []
        for label, r in zip(frame.index, results):
            if isinstance(r, Decision):
                rows.append(r.to_row())
                errs.append(None)
            else:
                if errors == "raise":
                    raise RiskError(r.code, f"row {label!r}: {r.message}")
                rows.append({c: None for c in FRAME_COLUMNS})
                errs.append(r)
        out = pd.DataFrame(rows, index=frame.index, columns=FRAME_COLUMNS)
        for c in ("score", "rule_score", "model_score", "threshold_shift"):
            out[c] = out[c].astype("float64")
        if any(e is not None for e in errs):  # nullable dtypes for the failed rows
            out = out.astype({"txn": "UInt64", "total_ns": "UInt64", "hard_rule": "boolean"})
        else:
            out = out.astype({"txn": "uint64", "total_ns": "uint64", "hard_rule": "bool"})
        if errors == "keep":
            out["error"] = errs
        return out

    # ----- operations -----

    def metrics(self) -> dict:
        """Every metric (``risk_engine_metrics_json``) as a dict: decisions, by_action,
        by_tier, fallbacks, latency {rules, fast, total, deep: {count, p50_ns, p99_ns,
        p999_ns, max_ns}}, gray, fast_circuit, ..."""
        n = ctypes.c_size_t(0)
        cap = 4096
        with _Use(self) as p:
            L = F.lib()
            # The size can grow between a size query and the copy (decides run concurrently),
            # so retry with slack.
            for _ in range(16):
                buf = ctypes.create_string_buffer(cap)
                r = L.risk_engine_metrics_json(p, buf, cap, ctypes.byref(n))
                if r == F.RISK_ERR_BUFFER_TOO_SMALL:
                    cap = n.value + 1 + 256
                    continue
                _check(r)
                return json.loads(buf.raw[: n.value])
        raise RiskError(F.RISK_ERR_BUFFER_TOO_SMALL, "metrics kept growing while being read")

    def metrics_text(self) -> str:
        """Every metric in the Prometheus/OpenMetrics text exposition format
        (``risk_engine_metrics_text``), names prefixed ``risk_``, ending with ``# EOF``:
        what a ``/metrics`` endpoint serves to Prometheus (the library starts no server)."""
        with _Use(self) as p:
            L = F.lib()
            return _read_text(lambda buf, cap, n: L.risk_engine_metrics_text(p, buf, cap, n),
                              16384, "metrics text").decode()

    def audit_flush(self, timeout_ms: int = 30_000) -> int:
        """Waits up to ``timeout_ms`` until every record the engine's audit log (``[audit]``
        in its TOML) accepted is durable, and returns the durable sequence number
        (``risk_engine_audit_flush``). Call it before reading the log of a live engine, and
        before ``close()``: closing does not wait for the log's writer.

        Raises RiskError(``RISK_ERR_INVALID``) when the engine has no ``[audit]`` log, and
        :class:`AuditError` (``RISK_ERR_AUDIT``) when the wait timed out or the log failed
        or is closed (after :meth:`shutdown`)."""
        timeout_ms = _int(timeout_ms, "timeout_ms", 0, _U32_MAX)
        seq = ctypes.c_uint64(0)
        with _Use(self) as p:
            _check(F.lib().risk_engine_audit_flush(p, timeout_ms, ctypes.byref(seq)))
        return seq.value

    def audit_stats(self) -> dict:
        """The audit log's counters (``risk_engine_audit_stats_json``): accepted, shed_full,
        shed_closed, written_seq, durable_seq, batches, io_errors, last_error,
        segments_deleted, recovery {segment, truncated_bytes, corrupt, last_seq}. Raises
        RiskError(``RISK_ERR_INVALID``) when the engine has no ``[audit]`` log."""
        with _Use(self) as p:
            L = F.lib()
            return json.loads(_read_text(lambda buf, cap, n: L.risk_engine_audit_stats_json(p, buf, cap, n),
                                         512, "audit stats"))

    # ----- model lifecycle -----

    def deploy(
        self,
        target: str,
        candidate_toml: str,
        plan_toml: str | None = None,
        base_dir: str | os.PathLike | None = None,
    ) -> int:
        """Deploys a candidate to ``target`` (one of DEPLOY_TARGETS: ``"rules"``, ``"fast"``,
        ``"deep"``, ``"policy"``) and returns the deploy id (``risk_engine_deploy``).

        ``candidate_toml``: a ``[scorer]`` table as in ``risk.toml``'s ``[fast.scorer]``
        (optionally with ``[calibration]``: ``method = "platt"``, ``a``, ``b``), a
        ``[policy]`` table (``approve_below``, ``decline_at``), or ``stored = "<key>"`` (a
        version in the model directory). ``plan_toml``: ``by``, ``[gate]``, ``[shadow]``,
        ``[[canary]]``, ``[guards]``; None is the standard plan (shadow, then canary 1% ->
        10% -> 50% -> 100%, a minute each); a plan without stages promotes at once once the
        gate passes. Relative paths in the candidate resolve against ``base_dir`` (None: the
        process's current directory).

        The validation gate runs on this thread, on a sample of recent live decisions (by
        default it needs 32: let traffic run first, or set ``[gate] min_sample``). Returns
        once the candidate shadows, is in canary or serves (see :meth:`deploy_status`).

        Raises :class:`DeployError` (``RISK_ERR_DEPLOY``) when refused (the gate, a
        candidate that does not load, a deploy of ``target`` in progress): what serves is
        unchanged. RiskError(``RISK_ERR_INVALID``) for an unknown target or a malformed
        plan."""
        t = _c_str(target, "target")
        c = _c_str(candidate_toml, "candidate_toml")
        p = None if plan_toml is None else _c_str(plan_toml, "plan_toml")
        d = None if base_dir is None else _c_str(base_dir, "base_dir", path=True)
        out = ctypes.c_uint64(0)
        with _Use(self) as h:
            _check(F.lib().risk_engine_deploy(h, t, c, p, d, ctypes.byref(out)))
        return out.value

    def deploy_status(self, target: str) -> dict:
        """``target``'s deploy status (``risk_engine_deploy_status_json``) as a dict:
        ``target``, ``epoch``, ``serving`` ({id, name, version, hash}, None when the target
        has no tier), ``previous`` (what a rollback returns to, most recent first),
        ``active`` (the deploy in progress, None when none: {id, candidate, phase
        ("shadow" / "canary"), stage, share, started_ms, gate, candidate_stats,
        serving_stats, shadow_shed}) and ``history`` (the latest events, oldest first:
        {kind ("started" / "refused" / "stage" / "promoted" / "rolled_back"), deploy,
        version, detail, share, ...}). RiskError(``RISK_ERR_INVALID``) for an unknown
        target."""
        t = _c_str(target, "target")
        with _Use(self) as h:
            L = F.lib()
            text = _read_text(lambda buf, cap, n: L.risk_engine_deploy_status_json(h, t, buf, cap, n),
                              _DEPLOY_STATUS_CAP, "deploy status")
        return json.loads(text)

    def promote(self, target: str) -> None:
        """Promotes the candidate of ``target``'s deploy in progress now, skipping its
        remaining stages (``risk_engine_promote``). :class:`DeployError` when none is in
        progress."""
        t = _c_str(target, "target")
        with _Use(self) as h:
            _check(F.lib().risk_engine_promote(h, t))

    def rollback(self, target: str, reason: str | None = None) -> None:
        """Ends ``target``'s deploy in progress (what serves stays), or, with none in
        progress, restores the version that served before the current one
        (``risk_engine_rollback``). ``reason`` (None: none given) is recorded in the
        history. :class:`DeployError` when there is nothing to roll back to."""
        t = _c_str(target, "target")
        r = None if reason is None else _c_str(reason, "reason")
        with _Use(self) as h:
            _check(F.lib().risk_engine_rollback(h, t, r))

    def deploy_tick(self) -> None:
        """Judges every deploy's guards and stages now (``risk_engine_deploy_tick``; the
        engine's supervisor also does, every ``[deploy] check_interval_ms``)."""
        with _Use(self) as h:
            _check(F.lib().risk_engine_deploy_tick(h))

    def reload_rules(self) -> None:
        """Reloads the rule file; on a compile error the serving rules stay and
        RiskError(RISK_ERR_RELOAD) is raised."""
        with _Use(self) as p:
            _check(F.lib().risk_engine_reload_rules(p))

    def shutdown(self, drain_ms: int = 0) -> ShutdownReport:
        """Stops the engine: later decides raise RiskError(RISK_ERR_SHUT_DOWN). ``drain_ms``
        > 0 waits that long for queued deep-tier work, 0 abandons it. The engine stays open
        (metrics still work) until :meth:`close`."""
        drain_ms = _int(drain_ms, "drain_ms", 0, _U32_MAX)
        drained = ctypes.c_uint64(0)
        abandoned = ctypes.c_uint64(0)
        with _Use(self) as p:
            _check(F.lib().risk_engine_shutdown(p, drain_ms, ctypes.byref(drained), ctypes.byref(abandoned)))
        return ShutdownReport(drained.value, abandoned.value)

    def subscribe(self) -> Subscription:
        """A subscription to deep-tier verdicts from now on."""
        out = F.risk_subscription_p()
        with _Use(self) as p:
            _check(F.lib().risk_engine_subscribe(p, ctypes.byref(out)))
        return Subscription(out.value)
