#!/usr/bin/env python3
"""Reference values for exact windows (`exact = true`), computed with pandas (dev-time tool).

Writes testdata/state/exact_windows.csv: a generated stream of card transactions in
arrival order (10% out of order, by up to 50 s: within the engine's 60 s lateness bound,
so every event counts at its own time) and, for each, the features as pandas computes
them over the transactions seen so far:

  c_count_1h   count over (t - 1h, t], the transaction itself excluded
  c_sum_1h     sum of amount, same window (0 when empty)
  c_avg_24h    mean amount over (t - 24h, t], itself excluded (empty: missing)
  c_min_24h    least amount, same window
  c_max_24h    greatest amount over (t - 24h, t], itself included
  c_std_24h    population standard deviation (ddof=0) over (t - 24h, t], itself included
  c_sum_7d     sum over (t - 7d, t], itself included

For each transaction: the card's transactions seen before it, plus itself (its amount
blanked when it is excluded: pandas' rolling aggregates skip NaN), sorted by time with
ties in arrival order, `rolling(W, closed="right")` over that frame, read at its row.
tests/state/exact.rs checks the engine's exact windows against every value.

    python3 -m venv /tmp/pd && /tmp/pd/bin/pip install pandas numpy
    /tmp/pd/bin/python tools/exact_windows.py
"""
import pathlib

import numpy as np
import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "state" / "exact_windows.csv"
T0 = 1_767_571_200_000  # 2026-01-05T00:00Z, ms
N, CARDS = 3_000, 25

# (name, window, current included, aggregate)
FEATURES = [
    ("c_count_1h", "1h", False, "count"),
    ("c_sum_1h", "1h", False, "sum"),
    ("c_avg_24h", "24h", False, "mean"),
    ("c_min_24h", "24h", False, "min"),
    ("c_max_24h", "24h", True, "max"),
    ("c_std_24h", "24h", True, "std"),
    ("c_sum_7d", "7D", True, "sum"),
]


def stream(rng):
    t = T0
    rows = []
    for i in range(N):
        r = rng.random()
        if r < 0.6:
            t += int(rng.integers(0, 120_000))
        elif r < 0.95:
            t += int(rng.integers(0, 40 * 60_000))
        elif r < 0.99:
            t += int(rng.integers(0, 6 * 3_600_000))
        else:
            t += 86_400_000 + int(rng.integers(0, 86_400_000))
        ts = t - int(rng.integers(0, 50_000)) if rng.random() < 0.1 else t
        # Amounts as the engine holds them: f32.
        amount = float(np.float32(rng.integers(100, 50_000) / 100))
        rows.append((i + 1, int(rng.integers(1, CARDS + 1)), ts, amount))
    return pd.DataFrame(rows, columns=["id", "card", "ts", "amount"])


def value(frame, window, agg):
    series = frame.set_index("time")["amount"]
    if agg in ("count", "sum"):
        # An empty window counts and sums to 0 (min_periods=0), as the engine says.
        return getattr(series.rolling(window, closed="right", min_periods=0), agg)().iloc[-1]
    roll = series.rolling(window, closed="right")
    if agg == "std":
        return roll.std(ddof=0).iloc[-1]
    return getattr(roll, agg)().iloc[-1]


def main():
    df = stream(np.random.default_rng(2026))
    out = {name: [] for name, *_ in FEATURES}
    for i in range(len(df)):
        cur = df.iloc[i]
        seen = df.iloc[:i]
        prior = seen[seen.card == cur.card]
        for name, window, include, agg in FEATURES:
            me = pd.DataFrame(
                {"ts": [cur.ts], "amount": [cur.amount if include else np.nan]}
            )
            frame = pd.concat([prior[["ts", "amount"]], me], ignore_index=True)
            frame["order"] = range(len(frame))
            # Sorted by time, ties in arrival order: the transaction itself is the last
            # of its time, so reading its row is reading the frame at it.
            frame = frame.sort_values(["ts", "order"], kind="stable")
            frame["time"] = pd.to_datetime(frame["ts"], unit="ms")
            pos = frame["order"].tolist().index(len(frame) - 1)
            out[name].append(value(frame.iloc[: pos + 1], window, agg))
    for name, *_ in FEATURES:
        df[name] = out[name]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(OUT, index=False, float_format="%.12g", na_rep="nan")
    print(f"wrote {OUT} ({len(df)} transactions, {df.card.nunique()} cards)")


if __name__ == "__main__":
    main()
