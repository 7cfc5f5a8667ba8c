"""Classification metrics of a backtest, on numpy arrays (no scikit-learn needed).

Scores are "higher is riskier"; labels are booleans (fraud). Ties are handled as
scikit-learn does: every distinct score is one threshold.
"""

from __future__ import annotations

import numpy as np


def average_precision(y: np.ndarray, s: np.ndarray) -> float:
    """The area under the precision-recall curve as average precision: the mean, over
    the frauds, of the precision at the threshold of each distinct score (NaN scores are
    left out; NaN when there is no fraud)."""
    ok = ~np.isnan(s)
    y, s = y[ok].astype(bool), s[ok]
    pos = int(y.sum())
    if pos == 0:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    # the last index of each run of equal scores: one threshold per distinct score
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]
    tp = np.cumsum(y)[last]
    fp = (last + 1) - tp
    precision = tp / (tp + fp)
    recall = tp / pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def pr_curve(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(precision, recall, threshold) at each distinct score, highest threshold first."""
    ok = ~np.isnan(s)
    y, s = y[ok].astype(bool), s[ok]
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1] if len(s) else np.array([], int)
    tp = np.cumsum(y)[last] if len(s) else np.array([])
    fp = (last + 1) - tp
    pos = max(int(y.sum()), 1)
    return tp / np.maximum(tp + fp, 1), tp / pos, s[last] if len(s) else np.array([])


def recall_at_fpr(y: np.ndarray, s: np.ndarray, fpr: float) -> tuple[float, float]:
    """(recall, threshold): flagging every score >= the threshold, the largest recall whose
    false-positive rate (among the legitimate rows) is at most ``fpr``."""
    ok = ~np.isnan(s)
    y, s = y[ok].astype(bool), s[ok]
    neg, pos = s[~y], s[y]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan"), float("nan")
    cands = np.unique(s)[::-1]  # thresholds, highest first
    fp = np.searchsorted(np.sort(neg), cands, side="left")
    fp = len(neg) - fp  # legit rows with score >= threshold
    good = np.flatnonzero(fp / len(neg) <= fpr)
    if len(good) == 0:
        return 0.0, float("inf")
    thr = float(cands[good[-1]])
    return float(np.mean(pos >= thr)), thr


def precision_recall(y: np.ndarray, flagged: np.ndarray) -> tuple[float, float]:
    """Precision and recall of a boolean flag (NaN where undefined)."""
    y = y.astype(bool)
    tp = int(np.sum(flagged & y))
    n_flag, n_pos = int(flagged.sum()), int(y.sum())
    return (tp / n_flag if n_flag else float("nan"), tp / n_pos if n_pos else float("nan"))
