"""Every compared pair of one disparity, for a significant rule: is any pair beyond the bound?

Why: a disparity reports the pair with the most extreme point estimate (the lowest impact
ratio, the widest gap) with that pair's interval. With three or more groups that pair is
often the smallest, noisiest group, whose interval reaches back past the bound while a larger
group's pair is wholly beyond it, and a significant rule (one that fires on the interval)
missed the breach. Found by a review: a 0.50 of 5,000, b 0.35 of 5,000, c 0.30 of 40; c vs a
0.60 [0.32, 0.98] is the lowest ratio, b vs a 0.70 [0.67, 0.73] went unpaged.

Each pair's interval here is at the level of the reported one, which already holds over every
pair the disparity was chosen from (``intervals.adjusted``, Bonferroni 1936): on a fair model
the chance that any of them lies wholly beyond the bound is what the extreme pair's was
allowed to be, so paging on any of them keeps the guarantee. The numbers are those of
``batch.py`` (the same Wilson limits, MOVER-R and Newcombe functions): for the extreme pair
they are the disparity's own.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from monitor.metrics.disparities import Disparity
from monitor.metrics.intervals import (
    compared_z,
    mover_from_limits,
    newcombe_from_limits,
    spread_limits,
    wilson_z,
)
from monitor.metrics.registry import METRICS, RATE_FAMILY
from monitor.metrics.results import AttributeResult
from monitor.metrics.ties import label_ranks

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]


class _Pairs(NamedTuple):
    """Every compared pair of one disparity: its value and interval, its low and high group."""

    value: F64
    lower: F64
    upper: F64
    low: Index
    high: Index
    weight: I64  # the smaller denominator of the two: ties go to the pair with more behind it


def _every_pair(
    r: AttributeResult, metric: str, min_samples: int, confidence: float, past: float | None
) -> _Pairs:
    """The impact ratio: each compared group against the reference; a one-rate gap: every two
    compared groups, the higher rate first (Newcombe's interval as a spread). A compared group
    has ``min_samples`` (at least the model's) in the rate's denominator. ``past``: only the
    pairs whose point estimate is past this bound (no other can be wholly past it; the
    intervals are computed for those alone: the search runs at many boundaries), other than
    the reported one. ``confidence``: the one ``r`` was computed at."""
    spec, d, gm = METRICS[metric], r.disparity(metric), r.groups
    p: F64 = getattr(gm, spec.rate)
    n: I64 = sum((getattr(gm, c) for c in spec.counts[1:]), getattr(gm, spec.counts[0]))
    ok = r.disparities.eligible & (n >= max(min_samples, r.disparities.floor)) & (p == p)
    if spec.ratio:
        ref = r.disparities.reference
        if ref is None or not ok[ref] or not p[ref] > 0:
            return _NONE
        value = p / p[ref]  # p[ref] > 0: no division by 0 (a NaN rate stays NaN, unwarned)
        ok[ref] = False
        if past is not None:
            if d.low_group is not None:  # the reported pair: judged already
                ok[d.low_group] = False
            # necessary, and cheap: MOVER's upper limit is at least u₁/p₂ and p₁/l₂ (equal
            # when the other side is exact) at any level, so at least the result's own
            # Wilson limits' (narrower than the pair's level); at ~20 groups most boundaries
            # end here (the search costs ~0.05 ms where it goes on)
            pl, pu = gm.bounds[spec.rate]
            ok &= (value < past) & (pu < past * p[ref] * _SLACK) & (p < past * pl[ref] * _SLACK)
        low = np.flatnonzero(ok)
        high = np.full(len(low), ref)
    else:
        diff = p[:, None] - p[None, :]
        pair = ok[:, None] & ok[None, :] & (diff >= 0 if past is None else diff > past)
        if past is not None:  # necessary: Newcombe's lower limit d − √(a² + b²) is past the
            # bound only if d − a and d − b are, a and b at least the result's own Wilson
            # distances (narrower than the pair's level)
            pl, pu = gm.bounds[spec.rate]
            room = (diff - past) * _SLACK
            pair &= ((p - pl)[:, None] < room) & ((pu - p)[None, :] < room)
        if past is None or past < 0:  # (a group against itself: a difference of 0)
            np.fill_diagonal(pair, False)
        if past is not None and d.low_group is not None and d.high_group is not None:
            pair[d.high_group, d.low_group] = False  # the reported pair: judged already
        high, low = np.nonzero(pair)
    if not len(low):
        return _NONE
    x = getattr(gm, RATE_FAMILY[spec.rate].numerator[0]).astype(np.float64)
    lo, hi = wilson_z(x, n.astype(np.float64), compared_z(confidence, d.pairs))
    if spec.ratio:
        lower, upper = mover_from_limits(p[low], lo[low], hi[low], p[ref], lo[ref], hi[ref])
        value = value[low]
    else:
        d_lo, d_hi = newcombe_from_limits(p[high], lo[high], hi[high], p[low], lo[low], hi[low])
        (lower, upper), value = spread_limits(d_lo, d_hi), p[high] - p[low]
    return _Pairs(value, lower, upper, low, high, np.minimum(n[low], n[high]))


_SLACK = 1.0 + 1e-9  # the necessary tests above never drop a pair on a rounding
_EMPTY_F, _EMPTY_I = np.zeros(0), np.zeros(0, dtype=np.intp)
_NONE = _Pairs(_EMPTY_F, _EMPTY_F, _EMPTY_F, _EMPTY_I, _EMPTY_I, np.zeros(0, dtype=np.int64))


def _judged(spec_metric: str) -> bool:
    spec = METRICS[spec_metric]
    return not spec.max_of and spec.rate in RATE_FAMILY


def _disparity(ps: _Pairs, i: int, d: Disparity, metric: str) -> Disparity:
    return Disparity(float(ps.value[i]), float(ps.lower[i]), float(ps.upper[i]),
                     int(ps.low[i]), int(ps.high[i]), d.basis or metric, d.pairs)  # fmt: skip


def significant_pair(
    r: AttributeResult,
    metric: str,
    *,
    op: str,
    bound: float,
    min_samples: int,
    confidence: float,
) -> Disparity | None:
    """The most extreme pair of ``metric``, other than the one the disparity reports (asked
    when that one is not significant), whose whole interval is beyond ``bound`` (below it
    for the impact ratio, above it for a one-rate gap), each group with ``min_samples`` in the
    rate's denominator; ``None``: no such pair, a rule ``op`` the other way, or another kind
    of metric (the equalized-odds difference, score distances: judged on the reported pair).
    Ties: the most decisions, then the label that sorts first (``ties.py``)."""
    d = r.disparity(metric)
    if not d.defined or not _judged(metric) or op != ("<" if METRICS[metric].ratio else ">"):
        return None
    ps = _every_pair(r, metric, min_samples, confidence, bound)
    if not len(ps.low):
        return None
    ratio = METRICS[metric].ratio
    hits = np.flatnonzero(ps.upper < bound if ratio else ps.lower > bound).tolist()
    if not hits:
        return None
    ranks, sign = label_ranks(r.labels), 1.0 if ratio else -1.0
    i = min(hits, key=lambda i: (sign * ps.value[i], -ps.weight[i], ranks[ps.low[i]],
                                 ranks[ps.high[i]]))  # fmt: skip
    return _disparity(ps, i, d, metric)
