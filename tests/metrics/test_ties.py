"""Ties go to the group with the most decisions behind its rate, then to the label that sorts
first, whatever order the groups arrived in (``ties.py``).

Found by reviews: with a 50/100, b 500/1000 (both 0.5) and c 350/1000, the DIR is 0.7 either
way, but its interval is a's (wide: no page) or b's (narrow: a significant FourFifthsRule
pages) — and which one was compared followed the order the monitor first met the groups, so a
live monitor and a replay of the same events could page differently; and the generated
Prometheus rules, which cannot order labels, could pick the other one."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.config.spec import parse_config
from monitor.metrics.results import attribute_result
from monitor.metrics.ties import extreme, label_ranks
from tests.helpers import cell_counts
from tests.metrics.test_batch import case


def test_label_ranks_and_extreme_pick_the_first_label_among_equals() -> None:
    assert label_ranks(["b", "a", "c"]).tolist() == [1, 0, 2]
    assert label_ranks(["b", "a"], width=4).tolist() == [1, 0, 6, 7]  # padding ranks last
    values = np.array([[0.5, 0.2, 0.5, 0.5]])
    rank = np.array([[2, 0, 1, 3]])
    mask = np.array([[True, True, True, False]])
    assert extreme(values, mask, rank, lowest=False).tolist() == [2]  # 0.5 at 0 and 2: rank 1
    assert extreme(values, mask, rank, lowest=True).tolist() == [1]
    assert extreme(values, ~mask & False, rank, lowest=False).tolist() == [0]  # none: 0
    n = np.array([[10, 5, 8, 99]])  # the most decisions first among the tied (3 is masked)
    assert extreme(values, mask, rank, lowest=False, weight=n).tolist() == [0]


def _named(r, metric):  # type: ignore[no-untyped-def]
    d = r.disparity(metric)
    name = lambda g: None if g is None else r.labels[g]  # noqa: E731
    return (name(d.low_group), name(d.high_group), d.value, d.lower, d.upper)


METRICS = ("disparate_impact_ratio", "statistical_parity_difference", "tpr_gap", "fpr_gap",
           "ppv_gap", "equalized_odds_difference", "score_ks_distance")  # fmt: skip


@pytest.mark.parametrize("order", [(0, 1, 2), (1, 0, 2), (2, 1, 0)])
def test_the_four_fifths_case_compares_the_same_groups_in_any_arrival_order(
    order: tuple[int, ...],
) -> None:
    cfg = parse_config({"models": {"m": {"attributes": {"sex": {}}}}})
    rows = {"a": dict(n=100, fav=50), "b": dict(n=1000, fav=500), "c": dict(n=1000, fav=350)}
    labels = [list(rows)[i] for i in order]
    counts = cell_counts(*[rows[g] for g in labels])
    r = attribute_result(counts, labels, cfg.models["m"], "sex", confidence=0.95)
    low, high, value, _, upper = _named(r, "disparate_impact_ratio")
    assert (low, high) == ("c", "b") and value == pytest.approx(0.7)
    assert upper < 0.8  # b's interval (the most decisions): significant, whichever came first


@pytest.mark.parametrize("seed", range(60))
def test_shuffling_the_groups_changes_no_named_result(seed: int) -> None:
    """Random count tables (ties, empty and single groups, configured references): each
    group's order shuffled, every disparity names the same groups with the same numbers."""
    spec, confidence, items = case(seed)
    rng = np.random.default_rng(10_000 + seed)
    for counts, labels, set_name in items:
        perm = rng.permutation(len(labels))
        a = attribute_result(counts, labels, spec, set_name, confidence=confidence)
        b = attribute_result(counts[perm], [labels[i] for i in perm], spec, set_name,
                             confidence=confidence)  # fmt: skip
        for metric in METRICS:
            x, y = _named(a, metric), _named(b, metric)
            assert x[:2] == y[:2], (metric, x, y)
            np.testing.assert_array_equal(np.array(x[2:]), np.array(y[2:]))
