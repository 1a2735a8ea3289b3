"""A disparity's interval holds over every pair it was chosen from (``intervals.adjusted``).

The gap and the disparate impact ratio report the most extreme pair of G groups; at the plain
level that pair's interval misses the truth far more often than 1 − confidence (six groups of
equal rates: the default rules paged ~10 times per 90 days on fair streams). Checked here
against statsmodels' Newcombe and Wilson intervals at the Bonferroni level (computed in the
test from the groups' counts, not from the monitor), and by coverage over many draws.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from monitor.metrics.fairness import disparities, group_metrics
from monitor.metrics.intervals import ci_text, newcombe_diff
from monitor.state.windows import FAV, FN, FP, TN, TP, N, n_cells
from tests.metrics.test_fairness_reference import counts_of, random_dataset

MIN_SAMPLES = 5


def _mover_limits(p1: float, w1: tuple[float, float], p2: float, w2: tuple[float, float]) -> list[float]:  # fmt: skip
    """MOVER-R limits of p1/p2 as the roots of the MOVER-D equations (Donner & Zou 2012),
    solved numerically: independent of the monitor's closed form."""
    (l1, u1), (l2, u2) = w1, w2
    est = p1 / p2

    def f_lo(t: float) -> float:
        return (p1 - t * p2) - np.sqrt((p1 - l1) ** 2 + t * t * (u2 - p2) ** 2)

    def f_hi(t: float) -> float:
        return (t * p2 - p1) - np.sqrt((u1 - p1) ** 2 + t * t * (p2 - l2) ** 2)

    lo = 0.0 if p1 == 0 else brentq(f_lo, 0.0, est, xtol=1e-14)
    top = est * 10 + 10
    while f_hi(top) < 0 and top < 1e12:
        top *= 10
    return [lo, brentq(f_hi, est, top, xtol=1e-14) if f_hi(top) > 0 else np.inf]


def spread(lower: float, upper: float) -> tuple[float, float]:
    """A gap is max − min ≥ 0, its pair ordered by the data: the interval of |p₁ − p₂| from
    the one of p₁ − p₂ covers the truth in either direction."""
    return max(lower, 0.0), max(upper, -lower)


@pytest.mark.parametrize("seed", range(120))
@pytest.mark.parametrize("configured", [False, True])
def test_intervals_are_at_the_bonferroni_level_of_the_pairs_compared(
    seed: int, configured: bool
) -> None:
    g, y, p, k = random_dataset(seed)
    c = counts_of(g, y, p, k)
    conf = 0.95
    m = group_metrics(c, score_bins=1)
    n, fav = c[:, N], m.favourable
    reference = 0 if configured else None
    d = disparities(m, min_samples=MIN_SAMPLES, confidence=conf, reference=reference)
    eligible = n >= MIN_SAMPLES
    # the TPR gap: max − min over the groups with MIN_SAMPLES decisions and labelled positives
    pos = m.tp + m.fn
    judged = int((eligible & (pos >= MIN_SAMPLES)).sum())
    gap = d.tpr_gap
    if judged >= 2:
        pairs = judged * (judged - 1) // 2
        hi, lo = gap.high_group, gap.low_group
        assert hi is not None and lo is not None
        want = spread(*confint_proportions_2indep(
            m.tp[hi], pos[hi], m.tp[lo], pos[lo], method="newcomb", compare="diff",
            alpha=(1 - conf) / pairs,
        ))  # fmt: skip
        np.testing.assert_allclose([gap.lower, gap.upper], want, rtol=1e-9, atol=1e-12)
        assert gap.pairs == pairs  # what a page says: "95% CI over 15 pairs"
        if pairs == 1:  # two groups: the plain level, to the bit
            plain = newcombe_diff(m.tp[hi], pos[hi], m.tp[lo], pos[lo], conf)
            assert (gap.lower, gap.upper) == spread(float(plain[0]), float(plain[1]))
    else:
        assert np.isnan(gap.value)
    # the equalized-odds difference, the larger of the TPR and FPR gaps: each gap's Newcombe
    # interval at the level over both gaps' pairs, the interval of a maximum
    neg = m.fp + m.tn
    judged_f = int((eligible & (neg >= MIN_SAMPLES)).sum())
    eod = d.equalized_odds_difference
    if judged >= 2 and judged_f >= 2:
        both = judged * (judged - 1) // 2 + judged_f * (judged_f - 1) // 2
        limits = [
            spread(*confint_proportions_2indep(
                x[g.high_group], den[g.high_group], x[g.low_group], den[g.low_group],
                method="newcomb", compare="diff", alpha=(1 - conf) / both,
            ))
            for g, x, den in ((d.tpr_gap, m.tp, pos), (d.fpr_gap, m.fp, neg))
        ]  # fmt: skip
        want = [max(lim[0] for lim in limits), max(lim[1] for lim in limits)]
        np.testing.assert_allclose([eod.lower, eod.upper], want, rtol=1e-9, atol=1e-12)
        assert eod.pairs == both
        assert eod.value == max(d.tpr_gap.value, d.fpr_gap.value)
    # the DIR: the lowest selection rate against the reference (configured: G − 1 pairs; the
    # highest rate: the extreme pair of G(G − 1)/2)
    dir_ = d.disparate_impact
    compared = int((eligible & (n > 0)).sum())
    if np.isnan(dir_.value):
        return
    ref_ok = configured and eligible[0]
    pairs = compared - 1 if ref_ok else compared * (compared - 1) // 2
    alpha = (1 - conf) / max(pairs, 1)
    w, r = dir_.low_group, dir_.high_group
    assert w is not None and r is not None
    wil = [proportion_confint(fav[i], n[i], alpha=alpha, method="wilson") for i in (w, r)]
    want = _mover_limits(fav[w] / n[w], wil[0], fav[r] / n[r], wil[1])
    np.testing.assert_allclose([dir_.lower, dir_.upper], want, rtol=1e-7, atol=1e-12)
    assert dir_.pairs == max(pairs, 1)


def _miss_rates(conf: float, draws: int, groups: int) -> tuple[float, float, int]:
    """Over ``draws`` windows of ``groups`` groups with the same selection rate 0.5: the share
    whose statistical parity difference interval excludes the true 0, the same share for the
    reported pair's interval at the plain level, and the draws."""
    rng = np.random.default_rng(7)
    sizes = np.array([400, 200, 100, 60, 40, 30, 30, 30])[:groups]
    missed = plain_missed = 0
    for _ in range(draws):
        fav = rng.binomial(sizes, 0.5)
        c = np.zeros((groups, n_cells(1)), dtype=np.int64)
        c[:, N], c[:, FAV] = sizes, fav
        m = group_metrics(c, score_bins=1)
        spd = disparities(m, min_samples=MIN_SAMPLES, confidence=conf).statistical_parity_difference
        missed += spd.lower > 0
        hi, lo = spd.high_group, spd.low_group
        plain_lo, _ = newcombe_diff(fav[hi], sizes[hi], fav[lo], sizes[lo], conf)
        plain_missed += float(plain_lo) > 0
    return missed / draws, plain_missed / draws, draws


def _wilson(share: float, n: int) -> tuple[float, float]:
    lo, hi = proportion_confint(round(share * n), n, alpha=0.05, method="wilson")
    return float(lo), float(hi)


def test_the_reported_pair_misses_the_truth_at_most_as_often_as_the_level_says() -> None:
    """Six groups of equal rates, 3,000 draws: the statistical parity difference's interval
    (max − min) excludes the true 0 in at most 1 − confidence of them (upper 95 % bound), where
    the same pair's plain-level interval excludes it in far more (its lower bound above 2×)."""
    conf = 0.95
    share, plain, n = _miss_rates(conf, 3000, 6)
    assert _wilson(share, n)[1] <= 1 - conf, (share, plain)
    assert _wilson(plain, n)[0] > 2 * (1 - conf), (share, plain)


def test_a_significant_equalized_odds_rule_is_no_more_trigger_happy_than_one_on_a_gap() -> None:
    """Two groups whose TPR gap and FPR gap are both exactly 0.1 (the default bound): the
    equalized-odds difference (their maximum) is 0.1 too, and a significant rule on it fires
    (its lower limit above 0.1) in about α/2 of 10,000 draws, as a rule on either gap does
    (measured 2.4 %: its lower 95 % bound not above α/2; Newcombe is approximate, so not
    below it either). The maximum of the two gaps' lower limits at their own level fires in
    about α (4.4 %: the union of two α/2 errors, its lower 95 % bound above α/2)."""
    conf, draws, bound = 0.95, 10_000, 0.1
    rng = np.random.default_rng(11)
    pos = neg = np.array([300, 300])
    new = old = 0
    for _ in range(draws):
        tp, fp = rng.binomial(pos, [0.8, 0.7]), rng.binomial(neg, [0.3, 0.2])
        c = np.zeros((2, n_cells(1)), dtype=np.int64)
        c[:, TP], c[:, FN], c[:, FP], c[:, TN] = tp, pos - tp, fp, neg - fp
        c[:, FAV], c[:, N] = tp + fp, pos + neg
        d = disparities(group_metrics(c, score_bins=1), min_samples=MIN_SAMPLES, confidence=conf)
        new += d.equalized_odds_difference.lower > bound
        old += max(d.tpr_gap.lower, d.fpr_gap.lower) > bound
    alpha = 1 - conf
    assert _wilson(new / draws, draws)[0] <= alpha / 2, new
    assert _wilson(old / draws, draws)[0] > alpha / 2, old


@pytest.mark.parametrize(
    ("confidence", "pairs", "text"),
    [(0.95, 1, "95% CI"), (0.9, 3, "90% CI over 3 pairs"), (0.999, 1, "99.9% CI"),
     (0.975, 2, "97.5% CI over 2 pairs"), (0.995, 1, "99.5% CI")],
)  # fmt: skip
def test_a_page_names_its_level_unrounded(confidence: float, pairs: int, text: str) -> None:
    """Found by a review: 0.999 read "100% CI" and 0.975 "98% CI"."""
    assert ci_text(confidence, pairs) == text
