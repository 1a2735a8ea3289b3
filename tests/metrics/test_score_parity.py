"""Score-distribution parity (``metrics/score_parity.py``): the distances are scipy's on the
binned data, the DKW interval covers the binned distributions' true distance, and a stream whose
one group's scores move while its selection rate stays put is caught (by the distance and by an
alert rule on it) where the four-fifths rule sees nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import ks_2samp, wasserstein_distance
from statsmodels.stats.proportion import proportion_confint

from monitor.alerts.evaluator import AlertEvaluator
from monitor.app.replay import replay
from monitor.config.spec import parse_config
from monitor.ingest.events import RawRecord
from monitor.metrics.results import attribute_result
from monitor.state.engine import Engine
from monitor.state.windows import hist_cell, n_cells
from tests.helpers import T0


def counts_from(hists: np.ndarray) -> np.ndarray:
    """``counts[group, cell]`` with only the score histogram filled (and N = scored)."""
    g, bins = hists.shape
    c = np.zeros((g, n_cells(bins)), dtype=np.int64)
    c[:, hist_cell(bins) : hist_cell(bins) + bins] = hists
    c[:, 0] = hists.sum(axis=1)
    return c


def spec(bins: int, min_samples: int = 1, reference: str | None = None):  # type: ignore[no-untyped-def]
    model = {"attributes": {"g": {}}, "score_bins": bins, "min_samples": min_samples}
    if reference:
        model["reference_groups"] = {"g": reference}
    return parse_config({"models": {"m": model}}).models["m"]


@pytest.mark.parametrize("seed", range(60))
def test_distances_equal_scipy_on_the_binned_scores(seed: int) -> None:
    rng = np.random.default_rng(seed)
    bins = int(rng.choice([2, 5, 10, 20, 64]))
    groups = int(rng.integers(2, 6))
    hists = rng.integers(0, 50, (groups, bins)) * rng.choice([0, 1], (groups, bins), p=[0.3, 0.7])
    hists[:, int(rng.integers(bins))] += 1  # no group without scores
    names = [f"g{i}" for i in range(groups)]
    r = attribute_result(counts_from(hists), names, spec(bins), "g", confidence=0.95)
    d = r.disparities
    ref = d.score_reference
    assert ref == int(np.argmax(hists.sum(axis=1)))  # no configured reference: the largest
    centres = (np.arange(bins) + 0.5) / bins
    expanded = [np.repeat(centres, h) for h in hists]
    for g in range(groups):
        if g == ref:
            assert np.isnan(d.score_ks[g]) and np.isnan(d.score_wasserstein[g])
            continue
        ks = ks_2samp(expanded[g], expanded[ref]).statistic
        w1 = wasserstein_distance(centres, centres, hists[g], hists[ref])
        assert d.score_ks[g] == pytest.approx(ks, abs=1e-9, rel=0)
        assert d.score_wasserstein[g] == pytest.approx(w1, abs=1e-9, rel=0)
    worst = int(np.nanargmax(d.score_ks))
    assert d.score_ks_distance.low_group == worst and d.score_ks_distance.high_group == ref
    assert d.score_ks_distance.lower <= d.score_ks_distance.value <= d.score_ks_distance.upper


def test_a_configured_reference_is_used_when_it_has_enough_scores() -> None:
    hists = np.array([[50, 50], [10, 0], [0, 70]])
    r = attribute_result(counts_from(hists), ["a", "b", "c"], spec(2, 5, "b"), "g", confidence=0.95)
    assert r.disparities.score_reference == 1
    assert r.disparities.score_ks.tolist()[2] == pytest.approx(1.0)
    # below min_samples the configured reference is not replaced by the group with most
    # scores (a comparison nobody configured): the distances are undefined
    r = attribute_result(
        counts_from(hists), ["a", "b", "c"], spec(2, 20, "b"), "g", confidence=0.95
    )
    assert r.disparities.score_reference is None
    assert np.isnan(r.disparities.score_ks).all()
    unset = attribute_result(counts_from(hists), ["a", "b", "c"], spec(2, 20), "g", confidence=0.95)
    assert unset.disparities.score_reference == 0  # none configured: the most scored group


def test_the_dkw_interval_covers_the_true_binned_distance() -> None:
    """200 seeds of two groups drawn from known binned distributions (different sizes): the
    95 % interval of both distances holds the true distance in ≥ 95 % of runs (the Clopper–
    Pearson lower bound of the coverage, over every seed; DKW is conservative)."""
    bins = 10
    p_a = np.diff(np.concatenate([[0], np.linspace(0, 1, bins + 1)[1:] ** 1.3]))
    p_b = np.diff(np.concatenate([[0], np.linspace(0, 1, bins + 1)[1:] ** 0.9]))
    true_ks = np.abs(np.cumsum(p_a) - np.cumsum(p_b)).max()
    true_w1 = np.abs(np.cumsum(p_a) - np.cumsum(p_b))[:-1].sum() / bins
    covered = {"ks": 0, "w1": 0}
    runs = 200
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        hists = np.stack([rng.multinomial(400, p_a), rng.multinomial(60, p_b)])
        d = attribute_result(counts_from(hists), ["a", "b"], spec(bins), "g", confidence=0.95)
        ks, w1 = d.disparities.score_ks_distance, d.disparities.score_wasserstein_distance
        covered["ks"] += ks.lower <= true_ks <= ks.upper
        covered["w1"] += w1.lower <= true_w1 <= w1.upper
    for name, k in covered.items():
        low, _ = proportion_confint(k, runs, alpha=0.05, method="beta")
        assert low >= 0.95 or k == runs, (name, k, low)


@pytest.mark.parametrize("seed", range(40))
def test_the_worst_groups_interval_holds_over_every_group_compared(seed: int) -> None:
    """The worst of m groups is the most extreme of m distances: its interval is DKW's with all
    m + 1 CDFs (the m groups and the reference) within ``√(ln(2(m+1)/α) / 2n)`` at once; one
    compared group: the one-pair ``√(ln(4/α) / 2n)``. Computed here from the counts alone."""
    rng = np.random.default_rng(seed)
    bins, groups, floor = int(rng.choice([4, 10, 20])), int(rng.integers(2, 9)), 25
    hists = np.stack([rng.multinomial(int(rng.integers(5, 400)), rng.dirichlet(np.ones(bins)))
                      for _ in range(groups)])  # fmt: skip
    n = hists.sum(axis=1)
    conf = float(rng.choice([0.9, 0.95, 0.99]))
    d = attribute_result(
        counts_from(hists), [f"g{i}" for i in range(groups)], spec(bins, floor), "g",
        confidence=conf,
    ).disparities  # fmt: skip
    eligible = np.flatnonzero(n >= floor)
    if len(eligible) < 2:
        assert np.isnan(d.score_ks_distance.value)
        return
    ref = int(eligible[np.argmax(n[eligible])])
    m = len(eligible) - 1
    alpha = 1 - conf
    eps = np.sqrt(np.log(2 * (m + 1) / alpha) / (2 * n))
    for dist, shrink in ((d.score_ks_distance, 1.0), (d.score_wasserstein_distance, 1 - 1 / bins)):
        w = dist.low_group
        assert dist.high_group == ref and dist.pairs == m
        half = (eps[w] + eps[ref]) * shrink
        assert dist.lower == pytest.approx(max(dist.value - half, 0.0), rel=1e-12, abs=1e-15)
        assert dist.upper == pytest.approx(min(dist.value + half, 1.0), rel=1e-12, abs=1e-15)
    # each group's own margin is the one-pair one
    one = np.sqrt(np.log(4 / alpha) / (2 * n))
    for g in eligible:
        if g != ref:
            assert d.score_margin[g] == pytest.approx(one[g] + one[ref], rel=1e-12)


def _event(i: int, t: float, group: str, score: float) -> RawRecord:
    ev = {"prediction_id": f"p{i}", "model_id": "m", "timestamp": t,
          "attributes": {"g": group}, "prediction": int(score >= 0.5), "score": round(score, 6)}  # fmt: skip
    return RawRecord(json.dumps(ev).encode())


def test_a_score_shift_that_keeps_the_selection_rate_is_caught() -> None:
    """12 h of two groups with uniform scores (selection rate 0.5 each); from hour 6 group b's
    scores crowd around the threshold (uniform on [0.4, 0.6]): its selection rate stays 0.5,
    its score distribution does not (true KS 0.4). A rule on the KS distance fires, the
    four-fifths rule never does, and before the shift the KS rule stays silent."""
    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "min_samples": 30}},
            "alerts": {
                "rules": [
                    {"name": "ScoreShift", "metric": "score_ks_distance", "op": ">",
                     "bound": 0.1, "significant": True, "for": "5m"},
                    {"name": "FourFifths", "metric": "disparate_impact_ratio", "op": "<",
                     "bound": 0.8, "significant": True, "for": "5m"},
                ],
                "drift": {"enabled": False},
            },
        }
    )  # fmt: skip
    rng = np.random.default_rng(3)
    preds = []
    for i, t in enumerate(np.sort(rng.uniform(T0, T0 + 12 * 3600, 12_000))):
        group = "a" if rng.random() < 0.6 else "b"
        shifted = group == "b" and t >= T0 + 6 * 3600
        preds.append(_event(i, float(t), group, rng.uniform(0.4, 0.6) if shifted else rng.random()))
    engine = Engine(cfg)
    evaluator = AlertEvaluator(cfg, engine)
    assert not replay(engine, preds, [], evaluator=evaluator, batch_size=200)
    fired = [t for t in evaluator.history if t.alert.state == "firing"]
    assert {t.alert.name for t in fired} == {"ScoreShift"}, [
        (t.alert.name, t.alert.at - T0) for t in fired
    ]
    first = min(t.alert.at for t in fired)
    assert T0 + 6 * 3600 < first <= T0 + 7 * 3600  # within an hour's window of the shift
    snap = engine.snapshot().models["m"]
    idx, labels = snap.groups[0]
    r = attribute_result(snap.windows["1h"].counts[idx], labels, cfg.models["m"], "g",
                         confidence=0.95)  # fmt: skip
    assert r.disparities.disparate_impact.value > 0.85  # the selection rates still agree
    assert r.disparities.score_ks_distance.lower > 0.1
