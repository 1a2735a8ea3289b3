"""Label-free per-group error rates (``metrics/estimates.py``): the closed-form χ² tail is
scipy's; the estimate equals a recount from the raw events; on the simulator with calibrated
scores the estimated TPR/FPR of each group and hour hold the rate its labels later show within
the stated error; a group whose calibration is broken is flagged within a day of labels, and its
estimate is no longer shown."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import chi2
from statsmodels.stats.proportion import proportion_confint

from monitor.app.simulate import LendingSimulation, iter_hours, scenario
from monitor.config.spec import parse_config
from monitor.ingest.events import RawRecord
from monitor.metrics.estimates import CALIBRATION_ALPHA, chi2_sf, estimate
from monitor.metrics.registry import z_for
from monitor.state.engine import Engine
from tests.helpers import T0, label, pred, run

HOUR = 3600


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 9, 10, 20, 31])
def test_chi2_tail_is_scipys(k: int) -> None:
    for x in (0.0, 1e-6, 0.5, 1.0, k - 0.5, float(k), 2.0 * k, 5.0 * k + 10, 200.0):
        assert chi2_sf(x, k) == pytest.approx(chi2.sf(x, k), rel=1e-9, abs=1e-300)


def test_the_estimate_is_a_recount_of_the_events() -> None:
    """Random events, some labelled, some without a score: TPR/FPR estimated from the cells
    equal the labelled confusion counts plus Σ s / Σ (1 − s) of the unlabelled scored ones."""
    rng = np.random.default_rng(11)
    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"],
                                         "min_samples": 1, "score_bins": 7}}})  # fmt: skip
    engine = Engine(cfg)
    n = 3000
    group = rng.choice(["a", "b"], n)
    score = rng.integers(0, 10**6 + 1, n) / 1e6
    scored = rng.random(n) < 0.9
    p = (rng.random(n) < score).astype(int)
    y = (rng.random(n) < score).astype(int)
    labelled = rng.random(n) < 0.4
    preds = [pred(i, T0 + i % 600, group[i], int(p[i]), float(score[i]) if scored[i] else None)
             for i in range(n)]  # fmt: skip
    labels = [label(i, T0 + 700, int(y[i])) for i in range(n) if labelled[i]]
    run(engine, preds, labels)
    snap = engine.snapshot().models["m"]
    idx, names = snap.groups[0]
    est = estimate(snap.windows["1h"].counts[idx], score_bins=7, z=1.96, min_samples=1)
    for gi, g in enumerate(names):
        m = group == g
        unl = m & ~labelled & scored
        tp = (m & labelled & (p == 1) & (y == 1)).sum() + score[unl & (p == 1)].sum()
        fn = (m & labelled & (p == 0) & (y == 1)).sum() + score[unl & (p == 0)].sum()
        fp = (m & labelled & (p == 1) & (y == 0)).sum() + (1 - score[unl & (p == 1)]).sum()
        tn = (m & labelled & (p == 0) & (y == 0)).sum() + (1 - score[unl & (p == 0)]).sum()
        assert est.tpr[gi] == pytest.approx(tp / (tp + fn), abs=1e-9)
        assert est.fpr[gi] == pytest.approx(fp / (fp + tn), abs=1e-9)
        assert est.estimated[gi] == unl.sum()
        assert est.unscored_unlabelled[gi] == (m & ~labelled & ~scored).sum()
        v1 = (score[unl & (p == 1)] * (1 - score[unl & (p == 1)])).sum()
        v0 = (score[unl & (p == 0)] * (1 - score[unl & (p == 0)])).sum()
        # Fieller's limits solve (TP − r(TP + FN))² = z²((1 − r)² v1 + r² v0)
        for r in (est.tpr_lower[gi], est.tpr_upper[gi]):
            assert (tp - r * (tp + fn)) ** 2 == pytest.approx(
                1.96**2 * ((1 - r) ** 2 * v1 + r**2 * v0), rel=1e-6
            )
        assert est.tpr_lower[gi] < est.tpr[gi] < est.tpr_upper[gi]


def _simulate(
    name: str, seed: int, hours: float
) -> tuple[list[RawRecord], list[tuple[float, RawRecord]]]:
    sim = LendingSimulation(scenario(name), seed=seed, start=T0, rate_per_hour=600.0, model="m")
    preds, labels = [], []
    for b in iter_hours(sim, hours, step=600.0):
        preds += [RawRecord(v) for _, v in b.predictions]
        labels += [(json.loads(v)["timestamp"], RawRecord(v)) for _, v in b.labels]
    return preds, labels


def _config() -> object:
    return parse_config({"models": {"m": {
        "attributes": {"group": {}}, "windows": ["1h", "1d"], "bucket": "1h", "lateness": "3d",
        "min_samples": 30, "score_bins": 10, "join": {"ttl": "4d"}}}})  # fmt: skip


def _hourly(engine: Engine, hours: int) -> list[np.ndarray]:
    out = []
    for h in range(hours):
        b = int(T0 // HOUR) + h
        out.append(engine.counts_between(0, b, b + 1))
    return out


def test_estimates_hold_the_rates_the_labels_later_show() -> None:
    """Calibrated scenario, 20 seeds × 24 hourly windows × 2 groups × (TPR, FPR): before any
    label the estimate's 95 % interval holds the rate computed from the labels later in
    ≥ 95 % of windows (the coverage's Clopper–Pearson interval reaches 0.95)."""
    z = z_for(0.95)
    hits = total = 0
    for seed in range(20):
        preds, labels = _simulate("calibrated", seed, 27)
        engine = Engine(_config())
        run(engine, [p for p in preds if json.loads(p.value)["timestamp"] < T0 + 24 * HOUR])
        before = _hourly(engine, 24)
        idx, _ = engine.snapshot().models["m"].groups[0]
        run(engine, [], [r for _, r in labels])
        after = _hourly(engine, 24)
        for c0, c1 in zip(before, after, strict=True):
            est = estimate(c0[idx], score_bins=10, z=z, min_samples=30)
            tp, fp, fn, tn = (c1[idx][:, c].astype(float) for c in (2, 3, 4, 5))
            for rate, lo, hi in ((tp / (tp + fn), est.tpr_lower, est.tpr_upper),
                                 (fp / (fp + tn), est.fpr_lower, est.fpr_upper)):  # fmt: skip
                hits += int(((lo <= rate) & (rate <= hi)).sum())
                total += len(rate)
    low, high = proportion_confint(hits, total, alpha=0.05, method="beta")
    print(f"coverage {hits}/{total} = {hits / total:.3f} [{low:.3f}, {high:.3f}]")
    assert high >= 0.95 and hits / total >= 0.93


def test_a_broken_calibration_is_flagged_within_a_day_of_labels() -> None:
    """Miscalibrated scenario (group B repays less often than scored), 20 seeds: after the
    first day (labels 1–3 h late: ~21 h of them), the check over the day's window flags B in
    every run and hides its estimate; A (calibrated) is flagged in at most 2 runs (α = 0.01:
    P(≥ 3 of 20) ≈ 0.001)."""
    flagged = {"A": 0, "B": 0}
    for seed in range(20):
        preds, labels = _simulate("miscalibrated", 100 + seed, 24)
        engine = Engine(_config())
        run(engine, preds, [r for t, r in labels if t < T0 + 24 * HOUR])
        snap = engine.snapshot().models["m"]
        idx, names = snap.groups[0]
        day = snap.windows["1d"].counts[idx]
        est = estimate(snap.windows["1h"].counts[idx], score_bins=10, z=1.96, min_samples=30,
                       calibration=day)  # fmt: skip
        for gi, g in enumerate(names):
            if est.check[gi] == "miscalibrated":
                flagged[g] += 1
                assert np.isnan(est.tpr[gi]) and np.isnan(est.fpr_upper[gi])
                assert est.calibration_p[gi] < CALIBRATION_ALPHA
            else:
                assert np.isfinite(est.tpr[gi])
    print(f"flagged: {flagged}")
    assert flagged["B"] == 20 and flagged["A"] <= 2, flagged
