"""Per-group thresholds as a remedy: what it takes to meet the four-fifths rule or equal
opportunity, and what it costs in accuracy (seed 000; fairlearn's ``ThresholdOptimizer``
computes the randomized version in batch).

Input: one window's ``counts[group, cell]``; its calibration cells hold, per score bin ``b``
(``[b/B, (b+1)/B)``), the labelled, scored decisions ``n_b`` and their positive labels
``y_b`` — a score × label histogram per group. A threshold ``t`` (a bin edge) predicts class 1
for scores at or above ``t/B``. Per group and threshold, from suffix sums:

    P = Σ_{b≥t} n_b,  TP = Σ_{b≥t} y_b,  correct = TP + (N − P) − (Y − TP),  TPR = TP / Y

and the favourable rate is ``P/N`` (favourable class 1) or ``(N − P)/N`` (class 0).

* ``four_fifths``: every judged group's favourable rate at least ``bound`` × the reference's —
  the configured reference group (the monitor's DIR), else the highest rate (min/max ≥ bound).
* ``equal_opportunity``: every judged group's TPR within ``bound`` (0.02) of the others.

Deterministic (the default: one threshold per group, what a lender can deploy) or randomized
(``ThresholdOptimizer``'s kind: scores between two thresholds get class 1 with a probability,
so any point of the convex hull of a group's (rate, correct) points is reachable). Either way,
once one level is fixed (the reference's rate, the top rate, the lowest TPR) the groups are
independent, each taking its most accurate admissible point; the best level is among finitely
many (the points' rates, and those divided by the bound or less the tolerance), so the search
is exact (``tests/metrics/test_remedies.py``: brute force, and ``ThresholdOptimizer``).
Groups below ``min_samples`` (decisions; labelled positives for equal opportunity) are not
held to the constraint and keep their most accurate threshold. All of it is on the labelled,
scored decisions: the histogram's population.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.metrics.registry import FOUR_FIFTHS
from monitor.state.windows import CAL, FN, FP, TN, TP

Constraint = Literal["four_fifths", "equal_opportunity"]
EQUAL_OPPORTUNITY_GAP = 0.02
EPS = 1e-12  # float slack of the comparisons (rates are ratios of integers)
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Threshold:
    """Class 1 for scores at or above ``at`` (None: for none); with ``p`` > 0, also for
    scores in ``[lower, at)`` with probability ``p`` (a randomized remedy)."""

    at: float | None
    lower: float | None = None
    p: float = 0.0


@dataclass(frozen=True)
class Remedy:
    """The most accurate per-group thresholds meeting one constraint (``feasible`` False: none
    on these bins meet it; each group then keeps its most accurate threshold)."""

    constraint: Constraint
    bound: float
    randomized: bool
    feasible: bool
    thresholds: tuple[Threshold, ...]  # per group
    judged: tuple[bool, ...]  # per group: enough samples to be held to the constraint
    accuracy_before: float  # the deployed predictions, on the labelled decisions
    accuracy_after: float  # expected, with the thresholds, on the labelled, scored decisions
    value_after: float  # the constrained quantity: the lowest ratio, or max − min TPR


def curves(counts: I64, score_bins: int, favourable: int) -> tuple[I64, F64, F64, I64, I64]:
    """Per group and threshold ``0..B``: (correct, favourable rate, TPR), and per group the
    labelled, scored decisions and their positives."""
    cal = counts[:, CAL : CAL + 3 * score_bins].reshape(len(counts), score_bins, 3)
    n_b, y_b = cal[..., 0], cal[..., 1]
    zero = np.zeros((len(counts), 1), np.int64)
    # suffix sums: column t sums bins t..B-1 (t = B: none)
    p = np.concatenate([np.cumsum(n_b[:, ::-1], axis=1)[:, ::-1], zero], axis=1)
    tp = np.concatenate([np.cumsum(y_b[:, ::-1], axis=1)[:, ::-1], zero], axis=1)
    n, y = n_b.sum(axis=1), y_b.sum(axis=1)
    correct = tp + (n[:, None] - p) - (y[:, None] - tp)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = p / n[:, None]
        rate = share if favourable == 1 else 1.0 - share
        tpr = tp / y[:, None]
    return correct, rate, tpr, n, y


def _hull(x: F64, y: F64) -> tuple[F64, F64, I64]:
    """Upper concave envelope of the points (x, y): its vertices (ascending x) and which
    point each is."""
    order = sorted(range(len(x)), key=lambda i: (x[i], -y[i]))
    keep: list[int] = []
    for i in order:
        if keep and x[keep[-1]] == x[i]:
            continue  # same x, lower y
        while len(keep) >= 2:
            a, b = keep[-2], keep[-1]
            if (x[b] - x[a]) * (y[i] - y[a]) - (y[b] - y[a]) * (x[i] - x[a]) >= 0:
                keep.pop()  # b lies on or under the chord from a to i
            else:
                break
        keep.append(i)
    idx = np.array(keep, np.int64)
    return x[idx], y[idx], idx


@dataclass(frozen=True)
class _Group:
    """One group's reachable (metric, correct): its points, or their hull when randomized."""

    x: F64
    y: F64
    point: I64  # threshold of each vertex
    randomized: bool

    def best(self, lo: float, hi: float) -> tuple[float, float] | None:
        """The most accurate reachable (metric, correct) with ``lo ≤ metric ≤ hi``."""
        if not self.randomized:
            ok = (self.x >= lo - EPS) & (self.x <= hi + EPS)
            if not ok.any():
                return None
            i = int(np.argmax(np.where(ok, self.y, -np.inf)))
            return float(self.x[i]), float(self.y[i])
        lo, hi = max(lo, float(self.x[0])), min(hi, float(self.x[-1]))
        if lo > hi + EPS:
            return None
        top = float(self.x[int(np.argmax(self.y))])  # concave: the best is the clamped peak
        v = min(max(top, lo), hi)
        return v, float(np.interp(v, self.x, self.y))

    def threshold(self, v: float, bins: int) -> Threshold:
        """The threshold (or the mix of two) that reaches metric ``v``."""

        def edge(t: int) -> float | None:
            return None if t == bins else t / bins

        if not self.randomized:  # the most accurate point at v (as best() chose it)
            at = np.abs(self.x - v) <= EPS
            return Threshold(edge(int(self.point[int(np.argmax(np.where(at, self.y, -np.inf)))])))
        j = min(int(np.searchsorted(self.x, v - EPS)), len(self.x) - 1)
        if abs(self.x[j] - v) <= EPS or j == 0:
            return Threshold(edge(int(self.point[j])))
        a, b = int(self.point[j - 1]), int(self.point[j])
        w = (v - self.x[j - 1]) / (self.x[j] - self.x[j - 1])  # weight of point b
        low_t, high_t = min(a, b), max(a, b)
        p = w if b == low_t else 1.0 - w  # the probability of using the lower threshold
        return Threshold(edge(high_t), edge(low_t), float(p))


def remedy(
    counts: I64,
    *,
    constraint: Constraint,
    score_bins: int,
    favourable: int,
    min_samples: int,
    reference: int | None = None,
    bound: float | None = None,
    randomized: bool = False,
) -> Remedy:
    """The most accurate per-group thresholds that meet ``constraint`` on ``counts``."""
    correct, rate, tpr, n, positives = curves(counts, score_bins, favourable)
    if bound is None:
        bound = FOUR_FIFTHS if constraint == "four_fifths" else EQUAL_OPPORTUNITY_GAP
    metric = rate if constraint == "four_fifths" else tpr
    judged = (n if constraint == "four_fifths" else positives) >= max(min_samples, 1)
    if constraint == "equal_opportunity" or (reference is not None and not judged[reference]):
        reference = None  # equal opportunity compares every pair; an unjudged one compares none
    groups: list[_Group | None] = []
    for g in range(len(counts)):
        ok = np.isfinite(metric[g])
        if not ok.any():
            groups.append(None)
            continue
        x, y, t = metric[g][ok], correct[g][ok].astype(np.float64), np.flatnonzero(ok)
        if randomized:
            x, y, i = _hull(x, y)
            t = t[i]
        groups.append(_Group(x, y, t, randomized))
    best: tuple[float, list[tuple[float, float]]] | None = None
    for level in _levels(groups, judged, reference, constraint, bound):
        lo, hi = _window(level, constraint, bound, reference)
        total, chosen = 0.0, []
        for g, grp in enumerate(groups):
            if grp is None:
                chosen.append((np.nan, 0.0))
                continue
            if not judged[g]:
                got = grp.best(-np.inf, np.inf)
            elif g == reference:
                got = grp.best(level, level)
            else:
                got = grp.best(lo, hi)
            if got is None:
                break
            chosen.append(got)
            total += got[1]
        else:
            if best is None or total > best[0] + EPS:
                best = (total, chosen)
    free = [
        (np.nan, 0.0) if g is None else g.best(-np.inf, np.inf) or (np.nan, 0.0) for g in groups
    ]
    picked = best[1] if best is not None else free
    thresholds = tuple(
        Threshold(None) if g is None else g.threshold(v, score_bins)
        for g, (v, _) in zip(groups, picked, strict=True)
    )
    labelled = counts[:, [TP, FP, FN, TN]].sum()
    levels = np.array([v for v, _ in picked])
    return Remedy(
        constraint=constraint,
        bound=bound,
        randomized=randomized,
        feasible=best is not None,
        thresholds=thresholds,
        judged=tuple(judged.tolist()),
        accuracy_before=float(counts[:, [TP, TN]].sum() / labelled) if labelled else np.nan,
        accuracy_after=float(sum(y for _, y in picked) / n.sum()) if n.sum() else np.nan,
        value_after=_value(levels[judged], constraint, reference, judged),
    )


def _levels(
    groups: list[_Group | None],
    judged: npt.NDArray[np.bool_],
    reference: int | None,
    constraint: Constraint,
    bound: float,
) -> list[float]:
    """The levels at which the best total can sit (the search is over these only)."""
    if reference is not None:
        ref = groups[reference]
        assert ref is not None
        pts = {float(v) for v in ref.x}
        # where another group's point becomes admissible: level = point / bound
        pts |= {
            float(v) / bound for g, grp in enumerate(groups) if grp and judged[g] for v in grp.x
        }
        low, high = float(ref.x.min()), float(ref.x.max())
        return sorted(v for v in pts if low - EPS <= v <= high + EPS and v > 0)
    xs = {float(v) for g, grp in enumerate(groups) if grp and judged[g] for v in grp.x}
    if constraint == "four_fifths":
        return sorted(v for v in xs | {v / bound for v in xs} if v > 0)
    return sorted(xs | {v - bound for v in xs})


def _window(
    level: float, constraint: Constraint, bound: float, reference: int | None
) -> tuple[float, float]:
    if constraint == "equal_opportunity":
        return level, level + bound
    return bound * level, (np.inf if reference is not None else level)


def _value(
    v: F64, constraint: Constraint, reference: int | None, judged: npt.NDArray[np.bool_]
) -> float:
    if len(v) == 0:
        return float("nan")
    if constraint == "equal_opportunity":
        return float(v.max() - v.min())
    if reference is not None:
        top = v[int(np.flatnonzero(judged).tolist().index(reference))]
    else:
        top = v.max()
    return float(v.min() / top) if top > 0 else float("nan")
