"""The stacked results (``metrics/batch.py``, through ``results.attribute_results``) are the
straightforward per-attribute computation (``fairness.group_metrics`` + ``disparities``, itself
cross-checked against fairlearn, AIF360 and statsmodels) bit for bit.

Random stacks of 1–9 attribute sets of different widths (so padding is exercised), with empty
groups, single groups, undefined TPR/FPR/PPV, zero selection rates, many ties (rates from few
distinct counts), every ``min_samples`` regime, configured reference groups that are eligible,
ineligible or absent, both favourable classes, and random calibration cells.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from monitor.config.spec import parse_config
from monitor.metrics.disparities import AttributeDisparities, Disparity
from monitor.metrics.fairness import GroupMetrics, disparities, group_metrics
from monitor.metrics.intervals import mover_ratio, newcombe_diff, wilson
from monitor.metrics.results import attribute_result, attribute_results
from monitor.metrics.score_parity import ABSENT
from monitor.state.windows import CAL, FAV, FN, FP, TN, TP, N, hist_cell, n_cells

CASES = 200


def same_float(a: float, b: float) -> bool:
    """Equal as floats, the same sign of zero, or both NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    return bool(
        np.array_equal(a, b, equal_nan=True)
        and np.array_equal(np.signbit(a), np.signbit(b))
        and np.array_equal(np.isnan(a), np.isnan(b))
    )


def assert_same_disparity(a: Disparity, b: Disparity, what: str) -> None:
    for f in ("value", "lower", "upper"):
        assert same_float(getattr(a, f), getattr(b, f)), (what, f, a, b)
    assert (a.low_group, a.high_group, a.basis) == (b.low_group, b.high_group, b.basis), (
        what,
        a,
        b,
    )
    for g in (a.low_group, a.high_group):
        assert g is None or type(g) is int, (what, a)


def assert_same(gm: GroupMetrics, d: AttributeDisparities, ref_gm, ref_d) -> None:  # type: ignore[no-untyped-def]
    for name in GroupMetrics.__struct_fields__:
        if name == "bounds":
            assert gm.bounds.keys() == ref_gm.bounds.keys()
            for k, (lo, hi) in gm.bounds.items():
                assert same_array(lo, ref_gm.bounds[k][0]), k
                assert same_array(hi, ref_gm.bounds[k][1]), k
        else:
            assert same_array(getattr(gm, name), getattr(ref_gm, name)), name
    for name in AttributeDisparities.__struct_fields__:
        a, b = getattr(d, name), getattr(ref_d, name)
        if isinstance(b, Disparity):
            assert_same_disparity(a, b, name)
        elif isinstance(b, np.ndarray):
            assert same_array(a, b), name
        elif isinstance(b, float):
            assert same_float(a, b), (name, a, b)
        else:
            assert a == b and type(a) is type(b), (name, a, b)


def random_counts(rng: np.random.Generator, groups: int, bins: int) -> np.ndarray:
    """Counts with empty and unlabelled groups; half the sets from few distinct values (ties,
    round rates), half from any values (rates whose squares and roots round)."""
    c = np.zeros((groups, n_cells(bins)), dtype=np.int64)
    if rng.random() < 0.5:
        scale = int(rng.choice([1, 3, 10, 50, 1000]))
        c[:, N] = rng.integers(0, 4, groups) * scale * rng.choice([0, 1], groups, p=[0.15, 0.85])
        c[:, FAV] = np.minimum(c[:, N], rng.integers(0, 4, groups) * scale // 2)
        labelled = (c[:, N] * rng.choice([0.0, 0.5, 1.0], groups)).astype(np.int64)
        for cell in (TP, FP, FN):
            c[:, cell] = rng.integers(0, 3, groups) * labelled // 4
    else:
        c[:, N] = rng.integers(0, 3000, groups) * rng.choice([0, 1], groups, p=[0.1, 0.9])
        c[:, FAV] = rng.integers(0, c[:, N] + 1)
        labelled = rng.integers(0, c[:, N] + 1)
        for cell in (TP, FP, FN):
            c[:, cell] = rng.integers(0, labelled // 3 + 1)
    c[rng.random(groups) < 0.1, FAV] = 0  # a zero selection rate
    c[:, TN] = np.maximum(labelled - c[:, TP] - c[:, FP] - c[:, FN], 0)
    c[rng.random(groups) < 0.15, TP] = 0  # no positives: TPR undefined where FN is 0 too
    c[rng.random(groups) < 0.15, FN] = 0
    cal = rng.integers(0, 20, (groups, bins, 3)) * np.array([1, 1, 400_000])
    c[:, CAL : CAL + 3 * bins] = cal.reshape(groups, -1)
    # score histograms: empty groups, few scored, ties between the largest groups
    h = hist_cell(bins)
    c[:, h : h + bins] = rng.integers(0, 3, (groups, bins)) * int(rng.choice([1, 5, 40]))
    c[rng.random(groups) < 0.15, h : h + bins] = 0
    return c


def spec_for(rng: np.random.Generator, sets: int, ref: dict[str, str]):  # type: ignore[no-untyped-def]
    cfg = parse_config(
        {
            "models": {
                "m": {
                    "attributes": {f"s{i}": {} for i in range(sets)},
                    "min_samples": int(rng.choice([0, 1, 2, 30])),
                    "favourable": int(rng.integers(0, 2)),
                    "score_bins": int(rng.choice([1, 4, 10])),
                    "reference_groups": ref,
                }
            }
        }
    )
    return cfg.models["m"]


def case(seed: int) -> tuple[Any, float, list[tuple[np.ndarray, list[str], str]]]:
    """(model spec, confidence, [(counts, group labels, attribute set)]) of one random case."""
    rng = np.random.default_rng(seed)
    sets = int(rng.integers(1, 10))
    widths = rng.integers(1, 13, sets)
    widths[rng.random(sets) < 0.2] = 1  # single groups: no disparity is defined
    ref = {f"s{i}": f"g{int(rng.integers(0, 14))}" for i in range(sets) if rng.random() < 0.5}
    spec = spec_for(rng, sets, ref)
    confidence = float(rng.choice([0.9, 0.95, 0.99]))
    items = [
        (random_counts(rng, int(g), spec.score_bins), [f"g{j}" for j in range(g)], f"s{i}")
        for i, g in enumerate(widths)
    ]
    return spec, confidence, items


@pytest.mark.parametrize("seed", range(CASES))
def test_stacked_results_are_the_reference_bit_for_bit(seed: int) -> None:
    spec, confidence, items = case(seed)
    results = attribute_results(items, spec, confidence=confidence)
    assert len(results) == len(items)
    for (counts, labels, set_name), r in zip(items, results, strict=True):
        ref_gm = group_metrics(
            counts, score_bins=spec.score_bins, confidence=confidence, favourable=spec.favourable
        )
        ref_label = spec.reference_groups.get(set_name)
        reference = (  # configured but not in the window: no comparison is made
            None
            if ref_label is None
            else labels.index(ref_label)
            if ref_label in labels
            else ABSENT
        )
        ref_d = disparities(
            ref_gm,
            min_samples=spec.min_samples,
            reference=reference,
            confidence=confidence,
            labels=labels,
        )
        assert r.labels == tuple(labels)
        assert_same(r.groups, r.disparities, ref_gm, ref_d)
        one = attribute_result(counts, labels, spec, set_name, confidence=confidence)
        assert_same(one.groups, one.disparities, ref_gm, ref_d)
        cells = {"disparate_impact_ratio": (N,), "tpr_gap": (TP, FN), "fpr_gap": (FP, TN)}
        for basis, cs in {**cells, "ppv_gap": (TP, FP), "equalized_odds_difference": ()}.items():
            for g in range(len(labels)):
                assert r.denominator(g, basis) == sum(int(counts[g, c]) for c in cs)


def test_the_cases_cover_the_edges() -> None:
    """The random cases above reach every branch the equality must hold on."""
    seen: set[str] = set()
    for seed in range(CASES):
        spec, confidence, items = case(seed)
        for (counts, labels, set_name), r in zip(
            items, attribute_results(items, spec, confidence=confidence), strict=True
        ):
            d = r.disparities
            seen.add("dir" if d.disparate_impact.defined else "no dir")
            seen.add("eod fpr" if d.equalized_odds_difference.basis == "fpr_gap" else "eod tpr")
            if d.tpr_gap.defined and d.tpr_gap.value == 0.0:
                seen.add("tied gap")
            if spec.reference_groups.get(set_name) in labels:
                ok = d.reference == labels.index(spec.reference_groups[set_name])
                seen.add("configured reference used" if ok else "configured reference ineligible")
            if len(labels) == 1:
                seen.add("single group")
            if (counts[:, N] == 0).any():
                seen.add("empty group")
            if d.eligible.any() and np.isnan(r.groups.tpr[d.eligible]).any():
                seen.add("undefined tpr")
            if not d.eligible.all() and d.eligible.any():
                seen.add("ineligible group")
            seen.add("score ks" if d.score_ks_distance.defined else "no score ks")
    assert seen >= {
        "dir",
        "no dir",
        "eod fpr",
        "eod tpr",
        "tied gap",
        "configured reference used",
        "configured reference ineligible",
        "single group",
        "empty group",
        "undefined tpr",
        "ineligible group",
        "score ks",
        "no score ks",
    }, seen


def test_intervals_give_the_same_bits_for_one_pair_and_for_a_stack() -> None:
    """The reference computes each pair's interval on numpy scalars, the stacked path on
    arrays: every formula must round the same way for both (a scalar's ``x ** 2`` is libm's
    ``pow``, an array's is ``x * x``; they differ in the last bit for ~0.1 % of values)."""
    rng = np.random.default_rng(0)
    n1, n2 = rng.integers(1, 3000, 3000), rng.integers(1, 3000, 3000)
    x1, x2 = rng.integers(0, n1 + 1), rng.integers(1, n2 + 1)
    for f in (newcombe_diff, mover_ratio):
        lo, hi = f(x1, n1, x2, n2)
        one = [f(a, b, c, d) for a, b, c, d in zip(x1, n1, x2, n2, strict=True)]
        assert same_array(lo, np.array([float(o[0]) for o in one]))
        assert same_array(hi, np.array([float(o[1]) for o in one]))
    lo, hi = wilson(x1, n1)
    one = [wilson(a, b) for a, b in zip(x1, n1, strict=True)]
    assert same_array(lo, np.array([float(o[0]) for o in one]))
    assert same_array(hi, np.array([float(o[1]) for o in one]))


@pytest.mark.parametrize("white", [29, 0])
def test_a_configured_reference_below_min_samples_makes_no_comparison(white: int) -> None:
    """Found by a review: with ``reference_groups: {race: White}`` and White below min_samples
    in a short window (or absent from it), the highest-rate group stood in: the DIR became
    Black vs Asian (0.643 [0.614, 0.673]) and FourFifthsRule paged a comparison nobody
    configured. It is undefined instead (insufficient data), as the evidence detectors do."""
    spec = parse_config(
        {"models": {"m": {"attributes": {"race": {}}, "reference_groups": {"race": "White"}}}}
    ).models["m"]
    c = np.zeros((3, n_cells(spec.score_bins)), dtype=np.int64)
    c[:, N] = [white, 3000, 3000]
    c[:, FAV] = [white // 2, 1350, 2100]  # Black 0.45, Asian 0.70
    labels = ["White", "Black", "Asian"] if white else ["__missing__", "Black", "Asian"]
    r = attribute_results([(c, labels, "race")], spec, confidence=0.95)[0]
    d = r.disparities
    assert d.reference is None and math.isnan(d.disparate_impact.value)
    assert not d.four_fifths_significant
    assert d.score_reference is None
    # the gaps compare the groups among themselves and stay defined
    assert d.statistical_parity_difference.value == pytest.approx(0.25)
    unset = parse_config({"models": {"m": {"attributes": {"race": {}}}}}).models["m"]
    r = attribute_results([(c, labels, "race")], unset, confidence=0.95)[0]
    assert r.disparities.disparate_impact.value == pytest.approx(0.45 / 0.70)  # none configured
