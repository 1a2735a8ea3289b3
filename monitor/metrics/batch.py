"""Stacked fairness results: every (window, attribute set) of a closed bucket in one pass.

Why: the alert evaluator needs one result per window × attribute set at every closed bucket
(9 for 3 windows × 3 sets). One at a time (:func:`~monitor.metrics.fairness.group_metrics`,
:func:`~monitor.metrics.fairness.disparities`), each costs ~150 small numpy calls, most of it
per-call overhead. Here the count arrays are stacked as ``counts[result, group, cell]``,
zero-padded to the widest set (an empty group is never eligible and its rates are NaN), and
every rate, Wilson bound, choice of groups and pair interval is one array operation over all
results.

The numbers are the reference functions' bit for bit: the same elementwise float operations in
the same order, and the same tie-breaking (``ties.py``: the most decisions, then the label that
sorts first). ``tests/metrics/test_batch.py`` checks it on random counts with empty groups,
single groups, undefined rates and configured reference groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.metrics.disparities import NAN_DISPARITY, AttributeDisparities, Disparity
from monitor.metrics.fairness import GroupMetrics, eod_interval
from monitor.metrics.intervals import (
    compared_z,
    comparisons,
    mover_from_limits,
    newcombe_from_limits,
    ratio,
    spread_limits,
    wilson,
    wilson_z,
)
from monitor.metrics.registry import FOUR_FIFTHS
from monitor.metrics.score_parity import parity, worst_distances
from monitor.metrics.score_parity import references as score_references
from monitor.metrics.ties import extreme
from monitor.state.windows import CAL, FAV, FN, FP, SCORE_SCALE, TN, TP, N, hist_cell

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]

# the across-group gaps, in the order of the bounded rates (selection rate, TPR, FPR, PPV)
_GAPS = ("statistical_parity_difference", "tpr_gap", "fpr_gap", "ppv_gap")
_BOUNDED = ("selection_rate", "tpr", "fpr", "ppv")
_SCORE_FIELDS = ("score_reference", "score_ks", "score_wasserstein", "score_margin",
                 "score_ks_distance", "score_wasserstein_distance")  # fmt: skip


def _fractions(favourable: int) -> F64:
    """``[cell, fraction]``: the numerator then the denominator of each GroupMetrics rate (in
    field order) as a sum of the N, FAV, TP, FP, FN, TN cells, so one product of the counts with
    this matrix gives them all (exactly: integer sums far below 2⁵³)."""
    cell = {"n": N, "fav": FAV, "tp": TP, "fp": FP, "fn": FN, "tn": TN}
    pp = "fav" if favourable == 1 else "n-fav"  # predicted positive (class 1)
    pn = "n-fav" if favourable == 1 else "fav"
    terms = [
        ("fav", "n"),  # selection rate
        ("tp", "tp+fn"),  # TPR
        ("fp", "fp+tn"),  # FPR
        ("fn", "tp+fn"),  # FNR
        ("tn", "fp+tn"),  # TNR
        ("tp", "tp+fp"),  # PPV
        ("tn", "tn+fn"),  # NPV
        ("fp", "tp+fp"),  # FDR
        ("fn", "tn+fn"),  # false omission rate
        ("tp+tn", "tp+fp+fn+tn"),  # accuracy
        ("tp+fn", "tp+fp+fn+tn"),  # prevalence
        ("tp+fp+fn+tn", "n"),  # label coverage
        ("tp+fp", pp),  # label coverage of predicted positives
        ("tn+fn", pn),  # ... and of predicted negatives
    ]
    m = np.zeros((6, 2 * len(terms)))
    for j, expr in enumerate([t[0] for t in terms] + [t[1] for t in terms]):
        for part in expr.replace("-", "+-").split("+"):
            sign = -1.0 if part.startswith("-") else 1.0
            m[cell[part.lstrip("-")], j] += sign
    return m


_MATRIX = {f: _fractions(f) for f in (0, 1)}
_RATES = 14
_BOUNDED_AT = np.array([0, 1, 2, 5])  # _BOUNDED's places among the rates


def stacked_results(
    counts: I64,
    sizes: Sequence[int],
    references: Sequence[int | None],
    *,
    min_samples: int,
    score_bins: int,
    confidence: float = 0.95,
    favourable: int = 1,
    scores: bool = True,
    ranks: I64,
) -> list[tuple[GroupMetrics, AttributeDisparities]]:
    """:func:`~monitor.metrics.fairness.group_metrics` and
    :func:`~monitor.metrics.fairness.disparities` (MOVER-R ratio interval) of every result of
    ``counts[result, group, cell]``: result ``r`` has ``sizes[r]`` groups (the rest is zero
    padding) and the configured reference group ``references[r]``; ``ranks[result, group]``:
    each group's place in label order, which decides ties (``ties.label_ranks``)."""
    c = counts.transpose(2, 0, 1)  # c[cell] is [result, group]
    n, fav, tp, fp, fn, tn = c[N], c[FAV], c[TP], c[FP], c[FN], c[TN]
    # the integer fields of GroupMetrics in field order, [field, result, group]
    ints = np.concatenate([c[:6], (tp + fn + fp + tn)[None]])  # N … TN are cells 0–5
    # every rate in one ratio() call and the bounded rates' Wilson limits in one wilson() call:
    # elementwise, so the numbers are those of the one-at-a-time calls
    frac = (counts[..., :6].astype(np.float64) @ _MATRIX[favourable]).transpose(2, 0, 1)
    x, d = frac[:_RATES], frac[_RATES:]
    rates = ratio(x, d)
    bounded = _BOUNDED_AT  # selection rate, TPR, FPR, PPV
    lo, hi = wilson(x[bounded], d[bounded], confidence)
    cal = counts[..., CAL : CAL + 3 * score_bins].reshape(*counts.shape[:-1], score_bins, 3)
    gap = np.add.reduce(np.abs(cal[..., 1] - cal[..., 2] / SCORE_SCALE), axis=-1)
    ece = ratio(gap, np.add.reduce(cal[..., 0], axis=-1))
    h = hist_cell(score_bins)
    hist = counts[..., h : h + score_bins]
    scored = np.add.reduce(hist, axis=-1)
    if scores:
        scored_ok = scored >= max(min_samples, 1)
        score_ref = score_references(scored, references, scored_ok, ranks)
        ks, w1, margin = parity(hist, score_ref, scored_ok, confidence)
        worst = worst_distances(ks, w1, margin, score_ref, score_bins, ranks, confidence)
    else:  # not asked for (the alert evaluator without score rules): undefined
        score_ref = np.full(len(sizes), -1)
        ks = w1 = margin = np.full(scored.shape, np.nan)
        worst = [(NAN_DISPARITY, NAN_DISPARITY)] * len(sizes)
    score_rows = [
        (int(r) if r >= 0 else None, ks[i, :z], w1[i, :z], margin[i, :z], *worst[i])
        for i, (r, z) in enumerate(zip(score_ref.tolist(), sizes, strict=True))
    ]
    ds = _disparities(
        n, fav, rates[bounded], x[bounded], d[bounded], references, sizes, min_samples,
        score_rows, ranks, confidence,
    )  # fmt: skip
    out = []
    for i, (size, dis) in enumerate(zip(sizes, ds, strict=True)):
        limits = zip(lo[:, i, :size], hi[:, i, :size], strict=True)
        bounds = dict(zip(_BOUNDED, limits, strict=True))
        fields: list[Any] = [*ints[:, i, :size], *rates[:, i, :size]]
        gm = GroupMetrics(*fields, *[ece[i, :size], bounds, scored[i, :size], hist[i, :size]])
        out.append((gm, dis))
    return out


def _disparities(
    n: I64,
    fav: I64,
    rate: F64,
    num: F64,
    den: F64,
    references: Sequence[int | None],
    sizes: Sequence[int],
    min_samples: int,
    score_rows: list[tuple[Any, ...]],
    ranks: I64,
    confidence: float,
) -> list[AttributeDisparities]:
    """The across-group comparison of each row; ``rate``, ``num``, ``den``:
    ``[4, result, group]`` selection rate, TPR, FPR, PPV, their numerators and denominators
    (the intervals' ingredients: each compared pair's Wilson limits at the level that holds
    over every pair it was chosen from, ``intervals.adjusted``)."""
    rows = np.arange(n.shape[0])
    eligible = n >= max(min_samples, 1)
    sr = rate[0]
    ok = eligible & np.isfinite(sr)
    cfg = np.array([-1 if r is None else r for r in references], dtype=np.intp)
    cfg_ok = (cfg >= 0) & ok[rows, np.maximum(cfg, 0)]
    fallback = (cfg == -1) & np.logical_or.reduce(
        ok, axis=-1
    )  # none configured: the highest-rate group
    # the highest selection rate and each bounded rate's top (see fairness._gap) in one
    # tie-broken pass; the bottoms below, with the AOD's and the DIR's, never their top
    floor = max(min_samples, 1)
    gap_ok = eligible & np.isfinite(rate) & (den >= floor)
    picked = extreme(
        np.concatenate([sr[None], rate]),
        np.concatenate([ok[None], gap_ok]),
        ranks,
        lowest=False,
        weight=np.concatenate([n[None], den]),
    )
    highest, top = picked[0], picked[1:]
    ref = np.where(cfg_ok, cfg, np.where(fallback, highest, -1))
    ri = np.maximum(ref, 0)
    sr_ref = sr[rows, ri]
    positive = (ref >= 0) & (sr_ref > 0)
    impact = np.where(ok & positive[:, None], sr / np.where(positive, sr_ref, 1.0)[:, None], np.nan)
    others = ok.copy()
    others[rows, ri] = False  # the worst group is never the reference itself
    # average odds difference vs the reference: the group with the largest |.|
    tpr, fpr = rate[1], rate[2]
    per_group = 0.5 * ((fpr - fpr[rows, ri][:, None]) + (tpr - tpr[rows, ri][:, None]))
    aod_ok = eligible & np.isfinite(per_group) & (ref >= 0)[:, None]
    aod_ok[rows, ri] = False
    # the lowest impact ratio (most decisions on a tie), the largest |AOD| (a weight of 0 for
    # all: ties by label) and each rate's bottom, another group than its top even when all
    # are equal (a bottom is the top of the negated rates, ties broken alike), in one pass
    weight = np.zeros((6, *n.shape))
    weight[0], weight[2:] = n, den
    not_top = gap_ok & (np.arange(n.shape[-1]) != top[..., None])
    worst, aod_g, *bottoms = extreme(
        np.concatenate([-impact[None], np.abs(per_group)[None], -rate]),
        np.concatenate([others[None], aod_ok[None], not_top]),
        ranks,
        lowest=False,
        weight=weight,
    )
    bottom = np.stack(bottoms)
    has_dir = positive & (np.add.reduce(ok, axis=-1) >= 2)
    # the gaps (max − min over eligible groups with the rate defined) and the DIR's pair, at once
    k = np.arange(4)[:, None]
    pick = np.empty((4, 4, len(rows)), dtype=np.intp)  # [4 picks, 4 rates, R]
    pick[0], pick[1], pick[2], pick[3] = top, bottom, worst, ri
    p, xp, dp = (a[k, rows, pick] for a in (rate, num, den))
    # each pair's level: a gap's pair is the extreme one of its judged groups' G(G − 1)/2, the
    # DIR's of G(G − 1)/2 (or G − 1 against a configured reference); two groups: the level
    judged, compared = np.add.reduce(gap_ok, axis=-1).tolist(), np.add.reduce(ok, axis=-1).tolist()
    gap_pairs = [[comparisons(g, reference=False) for g in per_rate] for per_rate in judged]
    dir_pairs = [
        comparisons(g, reference=c) for g, c in zip(compared, cfg_ok.tolist(), strict=True)
    ]
    z = np.empty((4, 4, len(rows)))
    z[0] = z[1] = [[compared_z(confidence, m) for m in per_rate] for per_rate in gap_pairs]
    z[2] = z[3] = [compared_z(confidence, m) for m in dir_pairs]
    lp, up = wilson_z(xp, dp, z)
    gap_value = p[0] - p[1]
    gap_lo, gap_hi = spread_limits(*newcombe_from_limits(p[0], lp[0], up[0], p[1], lp[1], up[1]))
    # the equalized-odds difference: the TPR and FPR gaps again, at the level over both
    eod_pairs = [t + f for t, f in zip(gap_pairs[1], gap_pairs[2], strict=True)]
    z_eod = np.array([compared_z(confidence, m) for m in eod_pairs])
    le, ue = wilson_z(xp[:2, 1:3], dp[:2, 1:3], z_eod)
    eod_lo, eod_hi = spread_limits(
        *newcombe_from_limits(p[0, 1:3], le[0], ue[0], p[1, 1:3], le[1], ue[1])
    )
    dir_lo, dir_hi = mover_from_limits(p[2, 0], lp[2, 0], up[2, 0], p[3, 0], lp[3, 0], up[3, 0])
    dir_value = impact[rows, worst]
    aod_value = per_group[rows, aod_g]
    dfair = _differential_fairness(fav, n, eligible)

    gap_rows = [
        a.T.tolist()
        for a in (np.add.reduce(gap_ok, axis=-1) >= 2, gap_value, gap_lo, gap_hi, bottom, top)
    ]
    per_row = zip(
        sizes,
        ref.tolist(),
        has_dir.tolist(),
        worst.tolist(),
        dir_value.tolist(),
        dir_lo.tolist(),
        dir_hi.tolist(),
        np.logical_or.reduce(aod_ok, axis=-1).tolist(),
        aod_g.tolist(),
        aod_value.tolist(),
        dfair.tolist(),
        dir_pairs,
        list(zip(*gap_pairs, strict=True)),
        eod_pairs,
        eod_lo.T.tolist(),
        eod_hi.T.tolist(),
        *gap_rows,
        strict=True,
    )
    out = []
    for i, row in enumerate(per_row):
        size, r, h_dir, w, dv, dl, du, h_aod, g, av, df, dm, gm, em, el, eu, *gaps = row
        h, v, l_, u, g_lo, g_hi = gaps
        spd, tpr_gap, fpr_gap, ppv_gap = (
            Disparity(v[j], l_[j], u[j], g_lo[j], g_hi[j], basis, gm[j]) if h[j] else NAN_DISPARITY
            for j, basis in enumerate(_GAPS)
        )
        basis = "disparate_impact_ratio"
        dir_ = Disparity(dv, dl, du, w, r, basis, dm) if h_dir else NAN_DISPARITY
        if h[1] and h[2]:  # the larger gap (the TPR gap on a tie), a maximum's interval
            eod = eod_interval(fpr_gap if fpr_gap.value > tpr_gap.value else tpr_gap, el, eu, em)
        else:
            eod = tpr_gap if h[1] else fpr_gap if h[2] else NAN_DISPARITY
        aod = (
            Disparity(av, np.nan, np.nan, g, r, "average_odds_difference")
            if h_aod
            else NAN_DISPARITY
        )
        out.append(
            AttributeDisparities(
                eligible=eligible[i, :size],
                reference=r if r >= 0 else None,
                impact_ratios=impact[i, :size],
                disparate_impact=dir_,
                four_fifths_violation=dir_.value < FOUR_FIFTHS,
                four_fifths_significant=dir_.upper < FOUR_FIFTHS,
                statistical_parity_difference=spd,
                tpr_gap=tpr_gap,
                fpr_gap=fpr_gap,
                ppv_gap=ppv_gap,
                equalized_odds_difference=eod,
                average_odds_difference=aod,
                differential_fairness=df,
                **dict(zip(_SCORE_FIELDS, score_rows[i], strict=True)),
                floor=max(min_samples, 1),
            )
        )
    return out


def _differential_fairness(favourable: I64, n: I64, eligible: Bool) -> F64:
    """:func:`~monitor.metrics.fairness.differential_fairness` (α = 1) over each row's eligible
    groups: max over outcomes of max − min of ln P(y | g); NaN with fewer than two groups."""
    f, t = favourable.astype(np.float64), n.astype(np.float64)
    a = 0.5
    lp = np.log(np.concatenate([((f + a) / (t + 2 * a))[None], ((t - f + a) / (t + 2 * a))[None]]))
    top = np.maximum.reduce(np.where(eligible, lp, -np.inf), axis=-1)
    spread = top - np.minimum.reduce(np.where(eligible, lp, np.inf), axis=-1)
    eps = np.maximum(np.maximum(spread[0], spread[1]), 0.0)
    return np.where(np.add.reduce(eligible, axis=-1) >= 2, eps, np.nan)
