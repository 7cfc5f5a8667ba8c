"""Matplotlib views of an engine's metrics and of decisions.

matplotlib is imported on first use; pick a backend first where there is no display
(``matplotlib.use("Agg")`` or ``MPLBACKEND=Agg``).

>>> risk.plot.plot_latency(engine)
>>> risk.plot.plot_decisions_by_tier(engine.decide_batch(frame))
"""

from __future__ import annotations

from typing import Any

__all__ = ["plot_latency", "plot_decisions_by_tier", "LATENCY_STAGES", "PERCENTILES"]

LATENCY_STAGES = ("rules", "fast", "deep", "total")
PERCENTILES = (("p50", "p50_ns"), ("p99", "p99_ns"), ("p99.9", "p999_ns"))


def _axes(ax: Any) -> Any:
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(8, 4.5))
    return ax


def plot_latency(metrics_or_engine: Any, ax: Any = None) -> Any:
    """Grouped bars of p50 / p99 / p99.9 latency (µs, log scale) per stage, from
    ``metrics()["latency"]``. Takes a metrics dict or anything with ``.metrics()`` (an
    Engine). Stages without samples are labelled "no samples". Returns the Axes."""
    m = metrics_or_engine.metrics() if hasattr(metrics_or_engine, "metrics") else metrics_or_engine
    try:
        lat = m["latency"]
    except (TypeError, KeyError):
        raise ValueError("expected a metrics dict with a 'latency' section, or an Engine") from None
    stages = [s for s in LATENCY_STAGES if s in lat] + [s for s in lat if s not in LATENCY_STAGES]
    ax = _axes(ax)
    width = 0.8 / len(PERCENTILES)
    positive = []
    for k, (label, key) in enumerate(PERCENTILES):
        xs = [i + (k - (len(PERCENTILES) - 1) / 2) * width for i in range(len(stages))]
        ys = [lat[s].get(key, 0) / 1e3 for s in stages]
        positive += [y for y in ys if y > 0]
        ax.bar(xs, ys, width=width, label=label)
    labels = [
        f"{s}\n(n={lat[s].get('count', 0)})" if lat[s].get("count", 0) else f"{s}\n(no samples)"
        for s in stages
    ]
    ax.set_xticks(range(len(stages)))
    ax.set_xticklabels(labels)
    if positive:
        ax.set_yscale("log")
    ax.set_ylabel("latency (µs)")
    ax.set_title("decision latency by stage")
    ax.legend(title="percentile")
    ax.grid(axis="y", alpha=0.3)
    return ax


def plot_decisions_by_tier(decisions: Any, ax: Any = None) -> Any:
    """Stacked bars: decisions per tier, split by action, from ``decide_batch``'s table
    (a pyarrow Table) or any DataFrame with ``tier`` and ``action`` columns (rows whose
    decision failed, null there, are left out). Returns the Axes."""
    import pandas as pd

    frame = decisions.to_pandas() if hasattr(decisions, "to_pandas") else decisions
    missing = {"tier", "action"} - set(frame.columns)
    if missing:
        raise ValueError(f"decisions lack column(s) {sorted(missing)}")
    f = frame.dropna(subset=["tier", "action"])
    counts = pd.crosstab(f["tier"].astype(str), f["action"].astype(str))
    tiers = [t for t in ("rules", "fast", "static") if t in counts.index] + [
        t for t in counts.index if t not in ("rules", "fast", "static")
    ]
    actions = [a for a in ("approve", "review", "decline") if a in counts.columns] + [
        a for a in counts.columns if a not in ("approve", "review", "decline")
    ]
    counts = counts.reindex(index=tiers, columns=actions, fill_value=0)
    colors = {"approve": "tab:green", "review": "tab:orange", "decline": "tab:red"}
    ax = _axes(ax)
    bottom = [0] * len(tiers)
    for a in actions:
        ys = [int(v) for v in counts[a]]
        bars = ax.bar(tiers, ys, bottom=bottom, label=a, color=colors.get(a))
        ax.bar_label(bars, labels=[str(y) if y else "" for y in ys], label_type="center")
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xlabel("tier")
    ax.set_ylabel("decisions")
    ax.set_title(f"decisions by tier and action (n={int(sum(bottom))})")
    if actions:
        ax.legend(title="action")
    return ax
