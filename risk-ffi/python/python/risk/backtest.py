"""Event-time backtests: replay history through an engine and report what it would have
done, or compare two configurations over the same history.

>>> bt = risk.backtest(engine, frame, label="is_fraud", label_delay=timedelta(days=7),
...                    costs={"approve": ("amount", 0), "review": (5, 5), "decline": (0, 25)})
>>> bt.report["auprc"], bt.report["alert_rate"], bt.rules       # per-rule hits, precision
>>> cmp = risk.compare(frame, "examples/risk.toml", candidate_toml)
>>> cmp.changed, cmp.transitions, cmp.rules, cmp.metrics

The replay (``Engine.replay``) runs a fresh engine on the data's clock: each row decided at
its event time, no deadline expiring, entity state built from scratch (or the configured
snapshot) and fed each label when it became known; the deep tier is skipped (said in
``report["deep"]``) unless ``deep=True``: then each escalated row's verdict is waited for
before the next row, so it moves the entity's next decisions at its event time.
"""

from __future__ import annotations

import datetime as _dt
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import _metrics
from ._errors import InputError, RiskTypeError
from . import _native
from ._native import Engine

#: Cost of a decision by action: (cost when the row is a fraud, cost when legitimate); a
#: cost may be the string "amount" (the row's amount, e.g. a fraud approved).
Costs = Mapping[str, Sequence[Any]]

ACTIONS = ("approve", "review", "decline")


def _table(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "__arrow_c_stream__") or hasattr(data, "__arrow_c_array__") or isinstance(data, dict):
        return pa.table(data)
    raise RiskTypeError(f"a backtest takes Arrow data or a dict of arrays, not {type(data).__name__}")


def _replay(e: Any, data: Any, base_dir: Any = None, **kw: Any) -> Any:
    """``e.replay`` for an engine; for a path or TOML text, the replay engine alone (no
    live engine is built: its audit log, state stores and deep tier never open)."""
    if isinstance(e, Engine):
        return e.replay(data, **kw)
    if isinstance(e, (str, os.PathLike)):
        return _native.replay_toml(e, data, base_dir=base_dir, **kw)
    raise RiskTypeError(f"an engine is a risk.Engine, a path or TOML text, not {type(e).__name__}")


def _delay_ms(d: Any) -> int | None:
    if d is None:
        return None
    if isinstance(d, _dt.timedelta):
        return d // _dt.timedelta(milliseconds=1)  # exact: no float in between
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool):
        return int(d)
    raise RiskTypeError("label_delay is a datetime.timedelta or integer milliseconds")


def _labels_from_column(t: pa.Table, column: str, y: np.ndarray) -> pa.Table:
    """The labels table (``id``, ``time``, ``fraud``) of the frauds whose arrival time
    ``column`` holds (null: never labelled), each at least 1 ms after its row."""
    if column not in t.column_names:
        raise InputError(f"missing label-time column {column!r}")
    col = t.column(column)
    if not pa.types.is_timestamp(col.type):
        raise RiskTypeError(f"label-time column {column!r} has type {col.type}; it needs timestamps")
    known = col.is_valid().to_numpy(zero_copy_only=False) & y
    at = col.cast(pa.timestamp("ms")).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    row = t.column("time").cast(pa.timestamp("ms")).cast(pa.int64()).to_numpy(zero_copy_only=False)
    when = np.maximum(at[known], row[known] + 1)
    return pa.table({
        "id": t.column("id").filter(pa.array(known)),
        "time": pa.array(when, pa.timestamp("ms", tz="UTC")),
        "fraud": pa.array(np.ones(int(known.sum()), dtype=bool)),
    })


def _labels(t: pa.Table, label: str) -> np.ndarray:
    if label not in t.column_names:
        raise InputError(f"missing label column {label!r}: the report needs the truth")
    col = t.column(label)
    if pa.types.is_boolean(col.type):
        return col.fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        return np.nan_to_num(col.to_numpy(zero_copy_only=False).astype(float)) != 0
    raise RiskTypeError(f"label column {label!r} has type {col.type}; it needs booleans or 0/1")


def _f(a: pa.ChunkedArray) -> np.ndarray:
    return a.to_numpy(zero_copy_only=False).astype(float)


@dataclass
class Backtest:
    """A replay's decisions (``decisions``, a pyarrow Table aligned with the input rows)
    and what they achieved (``report``; ``rules``: per-rule hits and precision)."""

    decisions: pa.Table
    report: dict
    rules: list[dict] = field(default_factory=list)

    def summary(self):
        """The report's scalar figures as a one-column pandas DataFrame."""
        import pandas as pd

        flat = {k: v for k, v in self.report.items() if not isinstance(v, (dict, list))}
        for k, v in self.report.items():
            if isinstance(v, dict):
                flat.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        return pd.DataFrame({"value": flat})

    def rules_frame(self):
        """``rules`` as a pandas DataFrame, most hits first."""
        import pandas as pd

        return pd.DataFrame(self.rules, columns=["rule", "hits", "frauds", "precision", "recall"])


def report(decisions: pa.Table, y: np.ndarray, amount: np.ndarray | None = None, *,
           costs: Costs | None = None, fpr: Sequence[float] = (0.001, 0.01, 0.05)) -> dict:
    """The figures of a backtest from its decisions and the truth ``y`` (see ``backtest``)."""
    n = decisions.num_rows
    if len(y) != n:
        raise InputError(f"{len(y)} labels for {n} decisions")
    action = decisions.column("action").cast(pa.string()).to_numpy(zero_copy_only=False)
    score, rule_score, model_score = (_f(decisions.column(c)) for c in ("score", "rule_score", "model_score"))
    out: dict[str, Any] = {"rows": n, "frauds": int(y.sum()),
                           "fraud_rate": float(y.mean()) if n else float("nan")}
    out["actions"] = {a: int(np.sum(action == a)) for a in ACTIONS}
    flagged = (action == "review") | (action == "decline")
    out["alert_rate"] = float(flagged.mean()) if n else float("nan")
    out["decline_rate"] = float(np.mean(action == "decline")) if n else float("nan")
    for name, f in (("flagged", flagged), ("declined", action == "decline")):
        p, r = _metrics.precision_recall(y, f)
        out[f"precision_{name}"], out[f"recall_{name}"] = p, r
    out["auprc"] = _metrics.average_precision(y, score)
    out["auprc_rules"] = _metrics.average_precision(y, rule_score)
    out["auprc_model"] = _metrics.average_precision(y, model_score)
    out["recall_at_fpr"] = {str(f): _metrics.recall_at_fpr(y, score, f)[0] for f in fpr}
    counts = lambda c: {str(v["values"]): int(v["counts"]) for v in
                        pc.value_counts(decisions.column(c).cast(pa.string()).drop_null()).to_pylist()}
    out["tiers"] = dict(sorted(counts("tier").items()))
    out["fallbacks"] = dict(sorted(counts("fallback").items()))
    if costs is not None:
        total = 0.0
        for a in ACTIONS:
            if a not in costs:
                continue
            c = costs[a]
            if len(c) != 2:
                raise InputError(f"costs[{a!r}] is (cost if fraud, cost if legitimate)")
            sel = action == a
            for is_fraud, cost in ((True, c[0]), (False, c[1])):
                rows = sel & (y == is_fraud)
                if isinstance(cost, str):
                    if cost != "amount" or amount is None:
                        raise InputError(f"a cost is a number or 'amount', not {cost!r}")
                    total += float(np.nansum(amount[rows]))
                else:
                    total += float(cost) * int(rows.sum())
        out["cost"] = total
    return out


def _fired(decisions: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The (row, rule name) pairs of ``rules_fired``, vectorised: row indices and names."""
    col = decisions.column("rules_fired")
    rows = pc.list_parent_indices(col).to_numpy(zero_copy_only=False).astype(np.int64)
    names = pc.list_flatten(col).to_numpy(zero_copy_only=False)
    return rows, names


def rule_table(decisions: pa.Table, y: np.ndarray) -> list[dict]:
    """Per rule that fired: hits, frauds among them, precision, recall (share of frauds)."""
    rows, names = _fired(decisions)
    if len(rows) == 0:
        return []
    uniq, idx = np.unique(names, return_inverse=True)
    hits = np.bincount(idx, minlength=len(uniq))
    frauds = np.bincount(idx, weights=y[rows].astype(float), minlength=len(uniq))
    total = max(int(y.sum()), 1)
    out = [{"rule": str(r), "hits": int(h), "frauds": int(f), "precision": float(f / h),
            "recall": float(f / total)} for r, h, f in zip(uniq, hits, frauds)]
    out.sort(key=lambda d: (-d["hits"], d["rule"]))
    return out


def backtest(engine: Any, data: Any, *, label: str = "is_fraud", label_delay: Any = None,
             labels: Any = None, costs: Costs | None = None,
             fpr: Sequence[float] = (0.001, 0.01, 0.05), base_dir: Any = None,
             deep: bool = False) -> Backtest:
    """Replays ``data`` (rows in event-time order, with ``id`` and ``time``) through
    ``engine`` (a ``risk.Engine``, a path or TOML text) in event time, and reports:
    rows, frauds, actions, alert and decline rates, precision and recall of the flagged
    (review + decline) and declined rows, AUPRC of the final score, of the rules and of
    the model (``auprc_model`` over the rows the model scored only), recall at each false-positive rate of ``fpr``, tiers and fallbacks, the
    total ``cost`` with ``costs`` (per action: cost if fraud, cost if legitimate, numbers
    or "amount"), and per-rule hits and precision (``Backtest.rules``).

    Labels reach entity state (``fraud_count`` / ``fraud_rate`` features) ``label_delay``
    after their transaction (a ``timedelta`` or ms), or at the times of ``labels``: a table
    of ``id``, ``time``, ``fraud``, or the name of a timestamp column of ``data`` holding
    when each row's fraud label arrived (null: never; ``risk.synth``'s ``label_time``);
    without either, none does. The report's truth is the
    ``label`` column either way. Labels entity state refused (no ``[state]``, no label
    feature) are counted in ``labels_refused`` with the first reason, and warned about.

    ``deep=True`` keeps the configuration's deep tier: every escalated row's verdict is
    waited for before the next row (verdicts then reach the entity's feedback at the
    row's event time); ``report["deep_verdicts"]``, ``deep_lost`` and the verdicts'
    measured latency (``deep_latency_p50_us``, ``deep_latency_p99_us``) say what it did.

    ``engine`` as TOML text resolves its relative paths against ``base_dir`` (default: the
    current directory). The replay builds a fresh engine from the configuration: its
    files (rules, models) as they are on disk now."""
    t = _table(data)
    y = _labels(t, label)
    if isinstance(labels, str):
        labels = _labels_from_column(t, labels, y)
    decisions = _replay(engine, t, base_dir, label=label, label_delay_ms=_delay_ms(label_delay),
                        labels=labels, deep=deep)
    amount = _f(t.column("amount")) if "amount" in t.column_names else None
    rep = report(decisions, y, amount, costs=costs, fpr=fpr)
    meta = {k.decode(): v.decode() for k, v in (decisions.schema.metadata or {}).items()}
    rep["labels_fed"] = int(meta.get("risk.replay.labels_fed", 0))
    rep["labels_after_end"] = int(meta.get("risk.replay.labels_after_end", 0))
    rep["labels_refused"] = int(meta.get("risk.replay.labels_refused", 0))
    if rep["labels_refused"]:
        rep["labels_refused_reason"] = meta.get("risk.replay.labels_refused_reason", "")
        warnings.warn(
            f"{rep['labels_refused']} labels were not fed to entity state: "
            f"{rep['labels_refused_reason']}",
            LabelsRefusedWarning,
            stacklevel=2,
        )
    rep["deep"] = meta.get("risk.replay.deep", "skipped")
    for k in ("deep_verdicts", "deep_lost", "deep_latency_p50_us", "deep_latency_p99_us"):
        if f"risk.replay.{k}" in meta:
            rep[k] = int(meta[f"risk.replay.{k}"])
    return Backtest(decisions=decisions, report=rep, rules=rule_table(decisions, y))


@dataclass
class Comparison:
    """Two configurations over the same replay: ``a`` and ``b`` (their ``Backtest``s),
    ``changed`` (row indices whose action differs), ``transitions`` ((a's action, b's
    action) -> count), ``rules`` (per rule: fired under a, under b, started, stopped),
    ``model`` (rows both models scored, mean and max |score difference|, actions changed
    among them), ``metrics`` (the two reports' scalar figures side by side)."""

    a: Backtest
    b: Backtest
    changed: np.ndarray
    transitions: dict
    rules: list[dict]
    model: dict
    metrics: dict

    def metrics_frame(self):
        """``metrics`` as a pandas DataFrame (columns a, b)."""
        import pandas as pd

        return pd.DataFrame(self.metrics)


class LabelsRefusedWarning(UserWarning):
    """Labels given to a backtest that entity state did not take (no ``[state]``, no
    ``fraud_count`` / ``fraud_rate`` feature, an unknown transaction)."""


def compare(data: Any, a: Any, b: Any, **kwargs: Any) -> Comparison:
    """Backtests configurations ``a`` and ``b`` (engines, paths or TOML text) over the same
    ``data`` (same arguments as ``backtest``) and reports what changed, by rule and by
    model, with the metrics side by side."""
    t = _table(data)
    ra, rb = backtest(a, t, **kwargs), backtest(b, t, **kwargs)
    da, db = ra.decisions, rb.decisions
    act_a = da.column("action").cast(pa.string()).to_numpy(zero_copy_only=False)
    act_b = db.column("action").cast(pa.string()).to_numpy(zero_copy_only=False)
    changed = np.flatnonzero(act_a != act_b)
    trans: dict[tuple[str, str], int] = {}
    for i in changed:
        k = (act_a[i], act_b[i])
        trans[k] = trans.get(k, 0) + 1
    (ra_rows, ra_names), (rb_rows, rb_names) = _fired(da), _fired(db)
    names, idx = np.unique(np.concatenate([ra_names, rb_names]), return_inverse=True)
    ia, ib = idx[: len(ra_names)], idx[len(ra_names):]
    k = len(names)
    # a (row, rule) pair as one integer: fired under a, under b, or both
    pa_, pb_ = ra_rows * k + ia, rb_rows * k + ib
    only_a = ia[~np.isin(pa_, pb_)]
    only_b = ib[~np.isin(pb_, pa_)]
    cnt = lambda v: np.bincount(v, minlength=k)
    ca, cb, stopped, started = cnt(ia), cnt(ib), cnt(only_a), cnt(only_b)
    rules = [{"rule": str(names[j]), "a": int(ca[j]), "b": int(cb[j]), "started": int(started[j]),
              "stopped": int(stopped[j])} for j in range(k)]
    ma, mb = _f(da.column("model_score")), _f(db.column("model_score"))
    both = ~np.isnan(ma) & ~np.isnan(mb)
    delta = np.abs(ma[both] - mb[both])
    first = lambda t: next(iter(t.column("fast_version").drop_null().cast(pa.string()).to_pylist()), None)
    model = {
        "a": first(da),
        "b": first(db),
        "scored_both": int(both.sum()),
        "mean_abs_delta": float(delta.mean()) if len(delta) else float("nan"),
        "max_abs_delta": float(delta.max()) if len(delta) else float("nan"),
        "action_changed": int(np.sum(both & (act_a != act_b))),
    }
    scal = lambda rep: {k: v for k, v in rep.items() if not isinstance(v, (dict, list))}
    metrics = {"a": scal(ra.report), "b": scal(rb.report)}
    return Comparison(a=ra, b=rb, changed=changed, transitions=trans, rules=rules, model=model,
                      metrics=metrics)
