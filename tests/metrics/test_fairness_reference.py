"""Cross-check the fairness math against independent reference libraries.

fairlearn (selection rate, TPR/FPR, demographic-parity and equalized-odds difference/ratio),
AIF360 (disparate impact, statistical parity / equal opportunity / average odds difference,
smoothed empirical differential fairness) and statsmodels (Wilson, Katz-log ratio, Newcombe
difference) on 240 random datasets with 2–12 groups, some tiny, some empty, some with empty
denominators.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from monitor.metrics.fairness import disparities, group_metrics
from monitor.metrics.intervals import katz_log_ratio, mover_ratio, newcombe_diff, wilson
from monitor.state.windows import FAV, FN, FP, TN, TP, N, n_cells

warnings.filterwarnings("ignore")


@pytest.fixture(autouse=True, scope="module")
def _quiet_root_logger() -> Iterator[None]:
    """aif360 logs its missing optional dependencies on the root logger when imported; quiet
    them here only (a module-level setLevel used to silence every later test's log capture)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    yield
    root.setLevel(level)


N_DATASETS = 240


def random_dataset(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(group, y_true, y_pred, n_groups): varied sizes, base rates and selection rates."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 13))
    sizes = rng.choice([0, 1, 2, 3, 5, 10, 40, 200, 1000], size=k)
    sizes[:2] = np.maximum(sizes[:2], 1)  # at least two non-empty groups
    base = rng.uniform(0, 1, size=k)
    base[rng.random(k) < 0.15] = 0.0  # no positives: TPR undefined
    base[rng.random(k) < 0.1] = 1.0  # no negatives: FPR undefined
    sel = rng.uniform(0.05, 0.95, size=k)
    g = np.repeat(np.arange(k), sizes)
    y = (rng.random(len(g)) < base[g]).astype(int)
    p = (rng.random(len(g)) < np.clip(sel[g] + 0.2 * (y - 0.5), 0, 1)).astype(int)
    return g, y, p, k


def counts_of(g: np.ndarray, y: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    """Counts array computed directly (independently of the engine)."""
    c = np.zeros((k, n_cells(1)), dtype=np.int64)
    c[:, N] = np.bincount(g, minlength=k)
    c[:, FAV] = np.bincount(g, weights=p, minlength=k)
    c[:, TP] = np.bincount(g, weights=(p == 1) & (y == 1), minlength=k)
    c[:, FP] = np.bincount(g, weights=(p == 1) & (y == 0), minlength=k)
    c[:, FN] = np.bincount(g, weights=(p == 0) & (y == 1), minlength=k)
    c[:, TN] = np.bincount(g, weights=(p == 0) & (y == 0), minlength=k)
    return c


@pytest.mark.parametrize("seed", range(N_DATASETS))
def test_against_fairlearn(seed: int) -> None:
    from fairlearn.metrics import (
        MetricFrame,
        demographic_parity_difference,
        demographic_parity_ratio,
        equalized_odds_difference,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )

    g, y, p, k = random_dataset(seed)
    gm = group_metrics(counts_of(g, y, p, k), score_bins=1)
    d = disparities(gm, min_samples=1)
    mf = MetricFrame(
        metrics={"sr": selection_rate, "tpr": true_positive_rate, "fpr": false_positive_rate},
        y_true=y,
        y_pred=p,
        sensitive_features=g,
    )
    by = mf.by_group
    present = np.flatnonzero(gm.n > 0)
    assert sorted(by.index) == list(present)
    assert np.all(np.isnan(gm.selection_rate[gm.n == 0]))  # empty group: NaN, not 0
    np.testing.assert_allclose(gm.selection_rate[present], by["sr"].to_numpy(), rtol=1e-12)
    for ours, theirs in ((gm.tpr, by["tpr"]), (gm.fpr, by["fpr"])):
        defined = np.isfinite(ours[present])
        np.testing.assert_allclose(ours[present][defined], theirs.to_numpy()[defined], rtol=1e-12)
        # Convention difference, asserted: fairlearn reports 0 where the denominator is 0.
        assert np.all(theirs.to_numpy()[~defined] == 0.0)
    np.testing.assert_allclose(
        d.statistical_parity_difference.value,
        demographic_parity_difference(y, p, sensitive_features=g),
        rtol=1e-12,
        atol=1e-15,
    )
    fl_ratio = demographic_parity_ratio(y, p, sensitive_features=g)
    if np.nanmax(gm.selection_rate) > 0:
        np.testing.assert_allclose(d.disparate_impact.value, fl_ratio, rtol=1e-12, atol=1e-15)
    else:  # nobody selected: 0/0 is undefined for both
        assert np.isnan(d.disparate_impact.value) and np.isnan(fl_ratio)
    tpr_ok = np.isfinite(gm.tpr[present]).all()
    fpr_ok = np.isfinite(gm.fpr[present]).all()
    if tpr_ok and fpr_ok:
        np.testing.assert_allclose(
            d.equalized_odds_difference.value,
            equalized_odds_difference(y, p, sensitive_features=g),
            rtol=1e-12,
            atol=1e-15,
        )
    else:
        # our gaps ignore groups whose rate is undefined: equal to fairlearn's gap over the
        # groups where the rate is defined
        gaps = []
        for col, ours in (("tpr", gm.tpr), ("fpr", gm.fpr)):
            v = by[col].to_numpy()[np.isfinite(ours[present])]
            if len(v) >= 2:
                gaps.append(v.max() - v.min())
        if gaps:
            np.testing.assert_allclose(d.equalized_odds_difference.value, max(gaps), atol=1e-12)
        else:
            assert np.isnan(d.equalized_odds_difference.value)


@pytest.mark.parametrize("seed", range(0, N_DATASETS, 1))
def test_against_aif360(seed: int) -> None:
    from aif360.datasets import BinaryLabelDataset
    from aif360.metrics import BinaryLabelDatasetMetric, ClassificationMetric

    g, y, p, k = random_dataset(seed)
    gm = group_metrics(counts_of(g, y, p, k), score_bins=1)
    d = disparities(gm, min_samples=1)
    ref = d.reference
    assert ref is not None
    others = [i for i in np.flatnonzero(gm.n > 0) if i != ref]
    target = others[seed % len(others)]
    df = pd.DataFrame({"g": g.astype(float), "y": y.astype(float)})
    truth = BinaryLabelDataset(df=df, label_names=["y"], protected_attribute_names=["g"])
    pred = truth.copy(deepcopy=True)
    pred.labels = p.reshape(-1, 1).astype(float)
    cm = ClassificationMetric(
        truth,
        pred,
        unprivileged_groups=[{"g": float(target)}],
        privileged_groups=[{"g": float(ref)}],
    )
    if gm.selection_rate[ref] > 0:
        np.testing.assert_allclose(d.impact_ratios[target], cm.disparate_impact(), rtol=1e-12)
    np.testing.assert_allclose(
        gm.selection_rate[target] - gm.selection_rate[ref],
        cm.statistical_parity_difference(),
        atol=1e-12,
    )
    eod = gm.tpr[target] - gm.tpr[ref]
    if np.isfinite(eod):
        np.testing.assert_allclose(eod, cm.equal_opportunity_difference(), atol=1e-12)
    aod = d.average_odds_difference
    if aod.low_group is not None:
        cm2 = ClassificationMetric(
            truth,
            pred,
            unprivileged_groups=[{"g": float(aod.low_group)}],
            privileged_groups=[{"g": float(ref)}],
        )
        np.testing.assert_allclose(aod.value, cm2.average_odds_difference(), atol=1e-12)
    # smoothed empirical differential fairness over the predictions (AIF360 computes it on a
    # dataset's labels, so hand it the predictions as labels)
    pred_ds = BinaryLabelDataset(
        df=pd.DataFrame({"g": g.astype(float), "y": p.astype(float)}),
        label_names=["y"],
        protected_attribute_names=["g"],
    )
    bm = BinaryLabelDatasetMetric(pred_ds)
    np.testing.assert_allclose(
        d.differential_fairness,
        bm.smoothed_empirical_differential_fairness(concentration=1.0),
        rtol=1e-9,
    )


@pytest.mark.parametrize("seed", range(N_DATASETS))
def test_intervals_against_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(10_000 + seed)
    n1, n2 = rng.choice([1, 2, 5, 12, 40, 300, 5000], size=2)
    x1, x2 = rng.integers(0, n1 + 1), rng.integers(0, n2 + 1)
    conf = float(rng.choice([0.9, 0.95, 0.99]))
    alpha = 1 - conf
    lo, hi = wilson(x1, n1, conf)
    ref = proportion_confint(x1, n1, alpha=alpha, method="wilson")
    np.testing.assert_allclose([lo, hi], ref, rtol=1e-9, atol=1e-12)
    lo, hi = newcombe_diff(x1, n1, x2, n2, conf)
    ref = confint_proportions_2indep(x1, n1, x2, n2, method="newcomb", compare="diff", alpha=alpha)
    np.testing.assert_allclose([lo, hi], ref, rtol=1e-9, atol=1e-12)
    lo, hi = katz_log_ratio(x1, n1, x2, n2, conf)
    if x1 > 0 and x2 > 0:
        ref = confint_proportions_2indep(x1, n1, x2, n2, method="log", compare="ratio", alpha=alpha)
        np.testing.assert_allclose([lo, hi], ref, rtol=1e-9)
    else:  # Katz is undefined with a zero count: NaN, not a made-up number
        assert np.isnan(lo) and np.isnan(hi)


@pytest.mark.parametrize("seed", range(N_DATASETS))
def test_mover_ratio_solves_the_mover_equations(seed: int) -> None:
    """MOVER-R limits are the roots of the MOVER-D equations for p1 − θ·p2 (Donner & Zou 2012).

    Independent check of the closed form: solve numerically with scipy's brentq.
    """
    rng = np.random.default_rng(20_000 + seed)
    n1, n2 = rng.choice([3, 12, 40, 300, 5000], size=2)
    x1, x2 = int(rng.integers(0, n1 + 1)), int(rng.integers(1, n2 + 1))
    conf = 0.95
    (l1,), (u1,) = (np.atleast_1d(v) for v in wilson(x1, n1, conf))
    (l2,), (u2,) = (np.atleast_1d(v) for v in wilson(x2, n2, conf))
    p1, p2 = x1 / n1, x2 / n2
    est = p1 / p2
    lo, hi = mover_ratio(x1, n1, x2, n2, conf)

    def f_lo(t: float) -> float:
        return (p1 - t * p2) - np.sqrt((p1 - l1) ** 2 + t * t * (u2 - p2) ** 2)

    def f_hi(t: float) -> float:
        return (t * p2 - p1) - np.sqrt((u1 - p1) ** 2 + t * t * (p2 - l2) ** 2)

    if x1 == 0:
        assert lo == 0.0
    else:
        np.testing.assert_allclose(lo, brentq(f_lo, 0.0, est), rtol=1e-7)
    if True:
        top = est * 10 + 10
        while f_hi(top) < 0 and top < 1e9:
            top *= 10
        if f_hi(top) > 0:
            np.testing.assert_allclose(hi, brentq(f_hi, est, top), rtol=1e-7)
    assert lo <= est <= hi
