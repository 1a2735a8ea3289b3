"""Fairness metrics from count arrays: pure functions, no I/O, no clocks.

Input is the ``counts[group, cell]`` array of one attribute set in one window (cells from
``windows.py``). Output is per-group rates with Wilson intervals and across-group disparities
with intervals.

Conventions (see docs/metrics.md):

* Rates with a zero denominator are NaN ("insufficient data"), never 0. fairlearn returns 0
  in that case; our tests assert that difference explicitly.
* Disparities compare *eligible* groups only: ``n >= min_samples`` and the rate defined; a
  gap also needs the rate's own denominator (labelled positives for TPR, …) ``>= min_samples``.
* Differences follow fairlearn's ``between_groups`` (max − min over groups); the disparate
  impact ratio follows the EEOC reading of 29 CFR 1607.4(D): each group's selection rate over
  the highest group's rate (or over a configured reference group's rate), and the reported DIR
  is the smallest of those ratios.
* The *selection rate* is the rate of the **favourable** prediction (configured per model);
  TPR/FPR/PPV… use class 1 as positive for prediction and label, as fairlearn and AIF360 do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from monitor.metrics.disparities import NAN_DISPARITY, AttributeDisparities, Disparity
from monitor.metrics.intervals import (
    adjusted,
    comparisons,
    katz_log_ratio,
    mover_ratio,
    newcombe_diff,
    ratio,
    spread_limits,
    wilson,
)
from monitor.metrics.registry import FOUR_FIFTHS
from monitor.metrics.score_parity import parity, references, worst_distances
from monitor.metrics.ties import extreme, label_ranks
from monitor.state.windows import CAL, FAV, FN, FP, SCORE_SCALE, TN, TP, N, hist_cell

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
RatioMethod = Literal["mover-wilson", "katz-log"]
__all__ = ["FOUR_FIFTHS", "AttributeDisparities", "Disparity", "disparities", "group_metrics"]


class GroupMetrics(msgspec.Struct, frozen=True):
    """Per-group counts and rates (arrays over groups)."""

    n: I64
    favourable: I64
    tp: I64
    fp: I64
    fn: I64
    tn: I64
    labelled: I64
    selection_rate: F64
    tpr: F64
    fpr: F64
    fnr: F64
    tnr: F64
    ppv: F64
    npv: F64
    fdr: F64
    false_omission_rate: F64
    accuracy: F64
    prevalence: F64
    label_coverage: F64
    # labelled / predictions, within each predicted class: with selective labels (only approved
    # applicants ever show an outcome) one class has none, and TPR and FPR are then 1 or 0 by
    # construction, describing the labelled cases only
    label_coverage_predicted_positive: F64
    label_coverage_predicted_negative: F64
    calibration_error: F64
    bounds: dict[str, tuple[F64, F64]]  # Wilson bounds of selection_rate, tpr, fpr, ppv
    scored: I64  # predictions with a score
    score_histogram: I64  # [group, bin]: every scored prediction (score_parity.py)


def expected_calibration_error(counts: I64, score_bins: int) -> F64:
    """ECE = Σ_b (n_b / N) · |mean label_b − mean score_b| = Σ_b |Σy_b − Σs_b| / N.

    (Naeini, Cooper & Hauskrecht 2015; Guo et al. 2017), over labelled, scored events in
    ``score_bins`` equal-width bins of [0, 1].
    """
    cal = counts[:, CAL : CAL + 3 * score_bins].reshape(len(counts), score_bins, 3)
    n_b = cal[:, :, 0]
    gap = np.abs(cal[:, :, 1] - cal[:, :, 2] / SCORE_SCALE).sum(axis=1)
    return ratio(gap, n_b.sum(axis=1))


def group_metrics(
    counts: I64, *, score_bins: int, confidence: float = 0.95, favourable: int = 1
) -> GroupMetrics:
    """All per-group metrics of one attribute set from its ``counts[group, cell]``
    (``favourable``: the prediction class counted in ``FAV``)."""
    n, fav = counts[:, N], counts[:, FAV]
    tp, fp, fn, tn = counts[:, TP], counts[:, FP], counts[:, FN], counts[:, TN]
    pos, neg = tp + fn, fp + tn
    ppos, pneg = tp + fp, tn + fn
    labelled = pos + neg
    predicted_positive = fav if favourable == 1 else n - fav
    hist = counts[:, hist_cell(score_bins) : hist_cell(score_bins) + score_bins]
    return GroupMetrics(
        n=n,
        favourable=fav,
        tp=tp,
        fp=fp,
        fn=fn,
        tn=tn,
        labelled=labelled,
        selection_rate=ratio(fav, n),
        tpr=ratio(tp, pos),
        fpr=ratio(fp, neg),
        fnr=ratio(fn, pos),
        tnr=ratio(tn, neg),
        ppv=ratio(tp, ppos),
        npv=ratio(tn, pneg),
        fdr=ratio(fp, ppos),
        false_omission_rate=ratio(fn, pneg),
        accuracy=ratio(tp + tn, labelled),
        prevalence=ratio(pos, labelled),
        label_coverage=ratio(labelled, n),
        label_coverage_predicted_positive=ratio(ppos, predicted_positive),
        label_coverage_predicted_negative=ratio(pneg, n - predicted_positive),
        calibration_error=expected_calibration_error(counts, score_bins),
        scored=hist.sum(axis=1),
        score_histogram=hist,
        bounds={
            "selection_rate": wilson(fav, n, confidence),
            "tpr": wilson(tp, pos, confidence),
            "fpr": wilson(fp, neg, confidence),
            "ppv": wilson(tp, ppos, confidence),
        },
    )


def _pick(
    values: F64, mask: npt.NDArray[np.bool_], rank: I64, *, lowest: bool, weight: Any = None
) -> int:
    """The index of the max (min) of ``values`` where ``mask``: on a tie, the largest
    ``weight``, then the lowest rank (``ties.py``)."""
    w = None if weight is None else np.asarray(weight)[None]
    return int(extreme(values[None], mask[None], rank[None], lowest=lowest, weight=w)[0])


def _gap(
    basis: str,
    rate: F64,
    num: I64,
    den: I64,
    eligible: npt.NDArray[np.bool_],
    confidence: float,
    floor: int,
    rank: I64,
) -> Disparity:
    """max − min of ``rate`` over eligible groups whose own denominator reaches ``floor``
    (min_samples: a group of many decisions and three labelled positives has a TPR of 0 or 1,
    would be one end of every TPR gap, and its pair could never be judged), Newcombe interval
    for that pair at the level that holds over every pair it was chosen from
    (:func:`~monitor.metrics.intervals.adjusted`)."""
    ok = eligible & np.isfinite(rate) & (den >= floor)
    if ok.sum() < 2:
        return NAN_DISPARITY
    hi = _pick(rate, ok, rank, lowest=False, weight=den)
    # the lowest is another group, even when every rate is equal: a group against itself had
    # an interval of ±(its own width) and a page naming "a vs a" (found by a review)
    others = ok.copy()
    others[hi] = False
    lo = _pick(rate, others, rank, lowest=True, weight=den)
    value = float(rate[hi] - rate[lo])
    pairs = comparisons(int(ok.sum()), reference=False)
    level = adjusted(confidence, pairs)
    return Disparity(value, *_pair_diff(num, den, hi, lo, level), lo, hi, basis, pairs)


def eod_interval(
    eod: Disparity, lower: tuple[float, float], upper: tuple[float, float], pairs: int
) -> Disparity:
    """The equalized-odds difference max(TPR gap, FPR gap) with the interval of a maximum:
    [max of the lower limits, max of the upper limits] of the two gaps' intervals, each taken
    at the level that holds over both gaps' pairs (``pairs``: theirs added up). Why both: the
    lower limit is wrong if either gap's lower limit is above its truth (a union of the two
    gaps' errors): at each gap's own level, with two equal gaps at a rule's bound, a
    significant rule on the maximum fired in 4.4 % of draws, now 2.4 %, as one on either gap
    (α/2: ``tests/metrics/test_compared_pairs.py``). Before any of this, the larger point's
    own interval: a precise FPR gap of 0.25 [0.23, 0.27] beside a noisy TPR gap of 0.30
    [0.06, 0.49] never paged a significant rule at 0.1."""
    return msgspec.structs.replace(eod, lower=max(lower), upper=max(upper), pairs=pairs)


def error_gap_limits(m: GroupMetrics, gap: Disparity, level: float) -> tuple[float, float]:
    """The Newcombe limits of a TPR or FPR gap's pair (``gap.basis``) at ``level``: the
    equalized-odds difference takes both gaps' at the level over both gaps' pairs, and its
    page shows them."""
    hi, lo = gap.high_group, gap.low_group
    assert hi is not None and lo is not None
    num, den = (m.tp, m.tp + m.fn) if gap.basis == "tpr_gap" else (m.fp, m.fp + m.tn)
    return _pair_diff(num, den, hi, lo, level)


def _pair_diff(num: I64, den: I64, a: int, b: int, confidence: float) -> tuple[float, float]:
    """A gap's limits: Newcombe's for ``a`` − ``b`` as a spread (``intervals.spread_limits``)."""
    lo, hi = spread_limits(*newcombe_diff(num[a], den[a], num[b], den[b], confidence))
    return float(lo), float(hi)


def differential_fairness(favourable: I64, n: I64, *, concentration: float = 1.0) -> float:
    """Smoothed empirical differential fairness ε (Foulds, Islam, Keya & Pan 2020).

    P(y | g) = (N_{y,g} + α/2) / (N_g + α) for y ∈ {favourable, not}, with α the total
    Dirichlet ``concentration`` split over the two outcomes (AIF360's parametrisation); ε is
    the largest |ln P(y | i) − ln P(y | j)| over outcomes and pairs of groups with data.
    ε = 0 is perfect parity; e^ε bounds the ratio of any two groups' outcome probabilities.
    """
    has = n > 0
    if has.sum() < 2:
        return float("nan")
    f, t = favourable[has].astype(np.float64), n[has].astype(np.float64)
    a = concentration / 2.0
    p_yes = (f + a) / (t + 2 * a)
    p_no = (t - f + a) / (t + 2 * a)
    eps = 0.0
    for p in (p_yes, p_no):
        lp = np.log(p)
        eps = max(eps, float(lp.max() - lp.min()))
    return eps


def disparities(
    m: GroupMetrics,
    *,
    min_samples: int,
    reference: int | None = None,
    confidence: float = 0.95,
    ratio_method: RatioMethod = "mover-wilson",
    labels: Sequence[str] | None = None,
) -> AttributeDisparities:
    """Across-group disparities of one attribute set (groups below ``min_samples`` excluded).
    On a tie the group whose label sorts first is the extreme one (``ties.py``; without
    ``labels``, the first index)."""
    eligible = m.n >= max(min_samples, 1)
    rank = np.arange(len(m.n), dtype=np.int64) if labels is None else label_ranks(labels)
    sr = m.selection_rate
    ok = eligible & np.isfinite(sr)
    ref: int | None = None
    if reference is not None and reference >= 0 and ok[reference]:
        ref = reference
    elif reference is None and ok.any():  # none configured: the highest-rate group
        ref = _pick(sr, ok, rank, lowest=False, weight=m.n)
    impact = np.full(len(sr), np.nan)
    dir_ = NAN_DISPARITY
    if ref is not None and sr[ref] > 0:
        impact[ok] = sr[ok] / sr[ref]
        others = np.flatnonzero(ok)
        if len(others) >= 2:
            worst = _pick(impact, ok, rank, lowest=True, weight=m.n)
            if worst == ref:  # a configured reference may itself be the lowest
                others = ok & (np.arange(len(ok)) != ref)
                worst = _pick(impact, others, rank, lowest=True, weight=m.n)
            ci = katz_log_ratio if ratio_method == "katz-log" else mover_ratio
            # the lowest of G groups against a configured reference: one of G − 1 pairs; against
            # the highest rate: the extreme pair of all G(G − 1)/2
            pairs = comparisons(int(ok.sum()), reference=reference is not None)
            level = adjusted(confidence, pairs)
            lo, hi = ci(m.favourable[worst], m.n[worst], m.favourable[ref], m.n[ref], level)
            basis = "disparate_impact_ratio"
            dir_ = Disparity(float(impact[worst]), float(lo), float(hi), worst, ref, basis, pairs)
    floor = max(min_samples, 1)
    tpr_gap = _gap("tpr_gap", m.tpr, m.tp, m.tp + m.fn, eligible, confidence, floor, rank)
    fpr_gap = _gap("fpr_gap", m.fpr, m.fp, m.fp + m.tn, eligible, confidence, floor, rank)
    defined = [d for d in (tpr_gap, fpr_gap) if not np.isnan(d.value)]
    # the worst case; it keeps the basis of the gap it is (tpr_gap on a tie)
    eod = max(defined, key=lambda d: d.value) if defined else NAN_DISPARITY
    if len(defined) == 2:  # each gap's pair again at the level over both gaps' pairs
        both = tpr_gap.pairs + fpr_gap.pairs
        (tl, tu), (fl, fu) = (error_gap_limits(m, g, adjusted(confidence, both))
                              for g in (tpr_gap, fpr_gap))  # fmt: skip
        eod = eod_interval(eod, (tl, fl), (tu, fu), both)
    aod = NAN_DISPARITY
    if ref is not None:
        per_group = 0.5 * ((m.fpr - m.fpr[ref]) + (m.tpr - m.tpr[ref]))
        valid = eligible & np.isfinite(per_group) & (np.arange(len(eligible)) != ref)
        if valid.any():
            g = _pick(np.abs(per_group), valid, rank, lowest=False)
            aod = Disparity(float(per_group[g]), np.nan, np.nan, g, ref, "average_odds_difference")
    scored_ok = m.scored >= max(min_samples, 1)
    score_ref = references(m.scored[None], [reference], scored_ok[None], rank[None])
    ks, w1, margin = parity(m.score_histogram[None], score_ref, scored_ok[None], confidence)
    bins = m.score_histogram.shape[1]
    worst_ks, worst_w1 = worst_distances(ks, w1, margin, score_ref, bins, rank[None], confidence)[0]
    return AttributeDisparities(
        eligible=eligible,
        reference=ref,
        impact_ratios=impact,
        disparate_impact=dir_,
        four_fifths_violation=bool(dir_.value < FOUR_FIFTHS),
        four_fifths_significant=bool(dir_.upper < FOUR_FIFTHS),
        statistical_parity_difference=_gap(
            "statistical_parity_difference",
            sr,
            m.favourable,
            m.n,
            eligible,
            confidence,
            floor,
            rank,
        ),
        tpr_gap=tpr_gap,
        fpr_gap=fpr_gap,
        ppv_gap=_gap("ppv_gap", m.ppv, m.tp, m.tp + m.fp, eligible, confidence, floor, rank),
        equalized_odds_difference=eod,
        average_odds_difference=aod,
        differential_fairness=differential_fairness(m.favourable[eligible], m.n[eligible]),
        score_reference=int(score_ref[0]) if score_ref[0] >= 0 else None,
        score_ks=ks[0],
        score_wasserstein=w1[0],
        score_margin=margin[0],
        score_ks_distance=worst_ks,
        score_wasserstein_distance=worst_w1,
        floor=floor,
    )


def within_range(value: float, *, tau: float = FOUR_FIFTHS) -> bool:
    """Aequitas-style fairness range for a ratio: ``tau <= value <= 1/tau``."""
    return bool(tau <= value <= 1.0 / tau)
