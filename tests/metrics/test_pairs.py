"""Every compared pair of a disparity (``metrics/pairs.py``): a significant rule asks whether
any pair, not only the most extreme one, lies wholly beyond its bound."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from monitor.config.spec import ModelSpec, parse_config
from monitor.metrics.intervals import adjusted
from monitor.metrics.pairs import _every_pair, significant_pair
from monitor.metrics.results import AttributeResult, attribute_result
from tests.helpers import cell_counts
from tests.metrics.test_compared_pairs import _mover_limits

SPEC: ModelSpec = parse_config({"models": {"m": {"attributes": {"g": {}}}}}).models["m"]


def result(*groups: dict[str, int]) -> AttributeResult:
    labels = [chr(ord("a") + i) for i in range(len(groups))]
    return attribute_result(cell_counts(*groups), labels, SPEC, "g", confidence=0.95)


def _labelled(n: int, rate: float, pos: int, tpr: float) -> dict[str, int]:
    """A group of ``n`` decisions with ``pos`` labelled positives, TPR ``tpr`` (no negatives
    labelled: only the TPR matters here)."""
    tp = round(pos * tpr)
    return {"n": n, "fav": round(n * rate), "tp": tp, "fn": pos - tp}


def test_a_significant_pair_behind_a_noisier_extreme_one_is_found() -> None:
    """The review's case: c (40 decisions) has the lowest ratio, 0.60, not significant; b vs a
    0.70 is. The interval is MOVER-R of Wilson limits at the level over the 3 pairs, checked
    against statsmodels' Wilson limits and the MOVER-D equations solved numerically."""
    r = result({"n": 5000, "fav": 2500}, {"n": 5000, "fav": 1750}, {"n": 40, "fav": 12})
    d = r.disparity("disparate_impact_ratio")
    assert (d.low_group, d.pairs) == (2, 3) and d.upper > 0.8  # c vs a: not significant
    got = significant_pair(r, "disparate_impact_ratio", op="<", bound=0.8, min_samples=30,
                           confidence=0.95)  # fmt: skip
    assert got is not None and (got.low_group, got.high_group, got.pairs) == (1, 0, 3)
    alpha = 1 - adjusted(0.95, 3)
    w_b = proportion_confint(1750, 5000, alpha=alpha, method="wilson")
    w_a = proportion_confint(2500, 5000, alpha=alpha, method="wilson")
    lower, upper = _mover_limits(0.35, w_b, 0.5, w_a)
    assert got.value == pytest.approx(0.7, abs=1e-12)
    assert (got.lower, got.upper) == pytest.approx((lower, upper), abs=1e-9)
    assert got.upper < 0.8


def test_a_significant_gap_behind_a_noisier_extreme_one_is_found() -> None:
    """TPR: c's gap to a is the widest (0.27, 30 positives), b's (0.15, 4,000) is the one
    wholly above 0.1: Newcombe's interval at the 3-pair level, checked with statsmodels."""
    r = result(_labelled(5000, 0.5, 4000, 0.8), _labelled(5000, 0.5, 4000, 0.65),
               _labelled(100, 0.5, 30, 0.5333))  # fmt: skip
    assert r.disparity("tpr_gap").low_group == 2 and r.disparity("tpr_gap").lower < 0.1
    got = significant_pair(r, "tpr_gap", op=">", bound=0.1, min_samples=30, confidence=0.95)
    assert got is not None and (got.low_group, got.high_group) == (1, 0)
    ci = confint_proportions_2indep(3200, 4000, 2600, 4000, method="newcomb", compare="diff",
                                    alpha=1 - adjusted(0.95, 3))  # fmt: skip
    assert (got.lower, got.upper) == pytest.approx((max(ci[0], 0), max(ci[1], -ci[0])), abs=1e-9)
    assert got.value == pytest.approx(0.15, abs=1e-12) and got.lower > 0.1


@pytest.mark.parametrize("seed", range(40))
def test_the_pairs_are_judged_with_the_numbers_of_batch_to_the_bit(seed: int) -> None:
    """The numbers are ``batch.py``'s: the reported pair's, named, are the disparity's own;
    another pair found is wholly beyond the bound and no more extreme than the reported one."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(int(rng.integers(2, 7))):
        n = int(rng.integers(30, 3000))
        pos = int(rng.integers(30, n + 1))
        groups.append(_labelled(n, float(rng.uniform(0.2, 0.6)), pos, float(rng.uniform(0.4, 0.9))))
    r = result(*groups)
    for metric, op, bound in (("disparate_impact_ratio", "<", 0.8), ("tpr_gap", ">", 0.1),
                              ("statistical_parity_difference", ">", 0.1)):  # fmt: skip
        d = r.disparity(metric)
        got = significant_pair(r, metric, op=op, bound=bound, min_samples=30, confidence=0.95)
        past = d.value < bound if op == "<" else d.value > bound
        if got is not None:  # another pair, wholly beyond, and no more extreme than d
            assert (got.low_group, got.high_group) != (d.low_group, d.high_group)
            assert past and (got.upper < bound if op == "<" else got.lower > bound)
            assert (got.value >= d.value) if op == "<" else (got.value <= d.value)
        every = _every_pair(r, metric, 30, 0.95, None)  # the reported pair among them:
        (i,) = np.flatnonzero((every.low == d.low_group) & (every.high == d.high_group))
        assert (every.value[i], every.lower[i], every.upper[i]) == (d.value, d.lower, d.upper)


def test_other_metrics_and_rules_the_other_way_are_judged_on_the_reported_pair() -> None:
    r = result({"n": 5000, "fav": 2500}, {"n": 5000, "fav": 1750}, {"n": 40, "fav": 12})
    for metric, op in (("equalized_odds_difference", ">"), ("disparate_impact_ratio", ">"),
                       ("score_ks_distance", ">")):  # fmt: skip
        assert significant_pair(r, metric, op=op, bound=0.8, min_samples=30,
                                confidence=0.95) is None  # fmt: skip


@pytest.mark.parametrize("seed", range(300))
def test_the_cheap_necessary_test_never_drops_a_significant_pair(seed: int) -> None:
    """The search first drops pairs by a necessary condition on the result's own (narrower)
    Wilson limits; every pair an exhaustive search over all pairs finds wholly past the bound
    (at the pair's level) must still be found: the same answer on random sets of 3–8 groups
    with rates spread around the bounds, sizes 30–20,000."""
    rng = np.random.default_rng(1000 + seed)
    groups = [
        _labelled(int(n), float(rng.uniform(0.15, 0.6)), int(max(30, n * 0.6)),
                  float(rng.uniform(0.4, 0.95)))
        for n in np.exp(rng.uniform(np.log(30), np.log(20000), int(rng.integers(3, 9))))
    ]  # fmt: skip
    r = result(*groups)
    for metric, op, bound in (("disparate_impact_ratio", "<", 0.8), ("tpr_gap", ">", 0.1),
                              ("statistical_parity_difference", ">", 0.1)):  # fmt: skip
        d = r.disparity(metric)
        got = significant_pair(r, metric, op=op, bound=bound, min_samples=30, confidence=0.95)
        every = _every_pair(r, metric, 30, 0.95, None)
        beyond = every.upper < bound if op == "<" else every.lower > bound
        reported = (every.low == d.low_group) & (every.high == d.high_group)
        found = {
            (int(every.low[i]), int(every.high[i])) for i in np.flatnonzero(beyond & ~reported)
        }
        assert (got is None) == (not found), (metric, got, found)
        if got is not None:
            assert (got.low_group, got.high_group) in found
