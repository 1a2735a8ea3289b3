"""The evidence math against independent references: KL and likelihood ratios against scipy,
pair-type counts against explicit pairings of 0/1 arrays, e-values whose mean under the null is
at most 1, the Shiryaev–Roberts run length to a false alarm at least ``c``, and the detection
delay near the information limit ``log(c)/KL``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from monitor.metrics import sequential as sq


def test_kl_and_likelihood_ratios_match_scipy() -> None:
    rng = np.random.default_rng(1)
    q, p = rng.uniform(0.02, 0.98, 200), rng.uniform(0.02, 0.98, 200)
    want = [stats.entropy([a, 1 - a], [b, 1 - b]) for a, b in zip(q, p, strict=True)]
    np.testing.assert_allclose(sq.kl_bernoulli(q, p), want, rtol=1e-10)
    n = rng.integers(0, 60, 200)
    x = rng.binomial(n, 0.4)
    want_lr = stats.binom.logpmf(x, n, q) - stats.binom.logpmf(x, n, p)
    np.testing.assert_allclose(sq.log_lr_binomial(x, n, q, p), want_lr, rtol=1e-9, atol=1e-9)
    assert math.isclose(float(sq.kl_bernoulli(0.3, 0.5)), 0.0823, abs_tol=1e-4)  # the issue's


def test_threshold_and_expected_time() -> None:
    # 5 detectors, 90 days, 5-minute buckets: c = 5 * 25920
    assert sq.threshold(5, 90 * 86400, 1, 300) == pytest.approx(129600)
    # a 40-per-hour group at 0.5, drop to 0.3 (KL 0.0823 nats/decision): log(c)/(KL * rate)
    secs = sq.expected_seconds(math.log(129600), 0.5, 40 / 3600, ratio=0.6)
    assert float(secs) / 3600 == pytest.approx(math.log(129600) / (0.08228 * 40), rel=1e-3)
    assert math.isinf(float(sq.expected_seconds(10.0, 0.5, 0.0)))


@pytest.mark.parametrize(("xg", "ng", "xr", "nr"), [(3, 5, 40, 100), (7, 9, 2, 4), (0, 6, 6, 6)])
def test_pair_counts_have_the_distribution_of_an_explicit_random_pairing(
    xg: int, ng: int, xr: int, nr: int
) -> None:
    draws = 20_000
    rng = np.random.default_rng(2)
    got = np.stack(
        sq.pair_counts(
            np.full(draws, xg), np.full(draws, ng), np.full(draws, xr), np.full(draws, nr), rng
        ),
        axis=-1,
    )
    m = min(ng, nr)
    assert (got.sum(axis=1) == m).all() and (got >= 0).all()
    g = np.array([1] * xg + [0] * (ng - xg))
    r = np.array([1] * xr + [0] * (nr - xr))
    brute = np.zeros((draws, 4), np.int64)
    for i in range(draws):  # draw m of each without replacement, pair them in order
        a, b = rng.permutation(g)[:m], rng.permutation(r)[:m]
        brute[i] = [
            (a & b).sum(),
            (a & ~b & 1).sum(),
            (~a & 1 & b).sum(),
            ((1 - a) & (1 - b)).sum(),
        ]
    se = np.sqrt(got.var(axis=0) / draws + brute.var(axis=0) / draws) + 1e-12
    assert (np.abs(got.mean(axis=0) - brute.mean(axis=0)) < 4 * se).all()
    for t in range(4):  # the whole distribution of each type count (chi-square, pooled tails)
        values = np.arange(m + 1)
        a = np.array([(got[:, t] == v).sum() for v in values])
        b = np.array([(brute[:, t] == v).sum() for v in values])
        keep = (a + b) >= 20
        if keep.sum() > 1:
            assert stats.chi2_contingency(np.stack([a[keep], b[keep]])).pvalue > 1e-4


def _mean_ci(e: np.ndarray) -> tuple[float, float]:
    return float(e.mean()), float(3 * e.std() / math.sqrt(len(e)))


@pytest.mark.parametrize(("pg", "pr"), [(0.4, 0.5), (0.8, 1.0), (0.08, 0.1), (0.5, 0.5)])
def test_four_fifths_betting_e_values_have_mean_at_most_one_under_the_null(
    pg: float, pr: float
) -> None:
    """At the null's boundary ``p_g = 0.8·p_r`` (and inside it) every arm's e-value has mean
    ≤ 1; over 200,000 buckets of 8 vs 30 decisions, with a 3-SE interval."""
    rng = np.random.default_rng(3)
    b = 200_000
    ng, nr = np.full(b, 8), np.full(b, 30)
    pairs = np.stack(sq.pair_counts(rng.binomial(ng, pg), ng, rng.binomial(nr, pr), nr, rng), -1)
    ff, _ = sq.pair_z(0.8, 0.1)
    e = np.exp(sq.log_betting(pairs, sq.arms(ff)[:4]))  # the "g low" direction
    for j in range(e.shape[1]):
        mean, ci = _mean_ci(e[:, j])
        print(f"pg={pg} pr={pr} arm {j}: mean e {mean:.4f} ± {ci:.4f}")
        assert mean - ci <= 1.0
    if pg == 0.4:  # and the mean drops below 1 away from the boundary's other side
        assert e.mean() < 1.05


def test_gap_betting_and_likelihood_ratio_e_values_are_valid() -> None:
    rng = np.random.default_rng(4)
    b = 200_000
    n = np.full(b, 20)
    # TPR gap exactly at the bound 0.1 (g lower): E[e] ≤ 1 for the "g low" arms
    pairs = np.stack(sq.pair_counts(rng.binomial(n, 0.7), n, rng.binomial(n, 0.8), n, rng), -1)
    _, eo = sq.pair_z(0.8, 0.1)
    e = np.exp(sq.log_betting(pairs, sq.arms(eo)[:4]))
    for j in range(4):
        mean, ci = _mean_ci(e[:, j])
        assert mean - ci <= 1.0, (j, mean, ci)
    # the change arms: exact likelihood ratios, mean 1 at p0
    x = rng.binomial(n, 0.5)
    e = np.exp(sq.change_arms(x, n, np.full(b, 0.5), np.zeros(b)))
    mean, ci = _mean_ci(e[:, 3])
    assert abs(mean - 1) <= ci


def _run_lengths(c: float, p_true: float, seeds: int, horizon: int, n: int = 6) -> np.ndarray:
    """Steps until the SR mixture of the change arms (p0 = 0.5) reaches ``c``; ``horizon``
    for a run that never does (censored: the mean is then underestimated)."""
    rng = np.random.default_rng(5)
    log_w = np.full(8, -math.log(8))
    log_r = np.full((seeds, 8), -np.inf)
    done = np.full(seeds, horizon)
    for t in range(horizon):
        x = rng.binomial(n, p_true, seeds)
        log_e = sq.change_arms(x, np.full(seeds, n), np.full(seeds, 0.5), np.zeros(seeds))
        log_r = sq.sr_step(log_r, log_e, np.ones((seeds, 1), bool))
        hit = (sq.log_mixture(log_r, log_w) >= math.log(c)) & (done == horizon)
        done[hit] = t + 1
        log_r[hit] = -np.inf  # restart after an alarm (not counted again: done is set)
        if (done < horizon).all():
            break
    return done


def test_shiryaev_roberts_false_alarm_run_length_is_at_least_c() -> None:
    c = 200.0
    runs = _run_lengths(c, 0.5, seeds=400, horizon=int(30 * c))
    mean, se = runs.mean(), runs.std() / math.sqrt(len(runs))
    print(f"ARL at c={c:g}: {mean:.0f} ± {1.96 * se:.0f} steps (400 seeds, censored at 30c)")
    assert mean - 1.96 * se >= c


def test_detection_delay_is_near_the_information_limit() -> None:
    c = math.exp(10)
    runs = _run_lengths(c, 0.3, seeds=400, horizon=2000, n=6)
    limit = math.log(c) / (float(sq.kl_bernoulli(0.3, 0.5)) * 6)
    med = float(np.median(runs))
    print(f"delay at log c = 10: median {med:.1f} steps, limit log(c)/KL = {limit:.1f}")
    assert (runs < 2000).all()
    assert 0.6 * limit <= med <= 1.3 * limit


def test_sized_arms_keep_their_direction_and_hold_where_told() -> None:
    evidence = np.log(np.array([[1, 9, 3, 2, 50, 4, 1, 1]] * 4, float))
    arm = np.array([2, 6, -1, 3])  # down, up, not firing, down but held
    hold = np.array([False, False, False, True])
    assert sq.sized_arms(arm, evidence, hold).tolist() == [1, 4, -1, 3]


def _after_a_drop(sized: bool, n: int, seeds: int = 400) -> tuple[int, np.ndarray]:
    """A 20 % drop (0.5 → 0.4) at ``n`` decisions a step, the change detector's statistic
    as the evidence tracker keeps it (capped at log c + 2 once firing), a plug-in p0 that
    wanders by its standard error; once it fires, 2 days (576 five-minute steps) of the
    changed rate, then 2 days back at 0.5. Returns (runs that resolved while the change
    persisted, steps from the end of the change to the resolution; -1: never)."""
    rng = np.random.default_rng(11)
    log_w, log_c, se = np.full(8, -math.log(8)), 10.0, np.full(seeds, 0.015)
    log_r, arm = np.full((seeds, 8), -np.inf), np.full(seeds, -1)
    rec, early, back = np.zeros(seeds), np.zeros(seeds, bool), np.full(seeds, -1)

    def step(p: float) -> np.ndarray:
        nonlocal log_r
        p0, x = 0.5 + rng.normal(0, 0.015, seeds), rng.binomial(n, p, seeds)
        e = sq.reverse_change(x, n, p0, se, np.maximum(arm, 0))
        log_r = sq.sr_step(log_r, sq.change_arms(x, n, p0, se), np.ones((seeds, 1), bool))
        over = np.maximum(sq.log_mixture(log_r, log_w) - log_c - 2, 0)
        log_r = log_r - np.where(arm >= 0, over, 0)[:, None]
        return np.asarray(e)

    while (arm < 0).any():
        step(0.4)
        hit = (sq.log_mixture(log_r, log_w) >= log_c) & (arm < 0)
        arm[hit] = np.argmax(log_r[hit] + log_w, axis=-1)
    for t in range(2 * 576):
        if sized:  # as the evidence tracker does: while capped and no recovery evidence
            capped = sq.log_mixture(log_r, log_w) >= log_c + 2 - 1e-9
            arm = sq.sized_arms(arm, log_r + log_w, ~capped | (rec > 0))
        rec = np.maximum(0.0, rec + step(0.4 if t < 576 else 0.5))
        done = rec >= math.log(1000)
        if t < 576:
            early |= done
            rec[done] = 0.0  # resolved early; watched again as firing (to count once)
        else:
            back[(back < 0) & done] = t - 576
    return int(early.sum()), back


@pytest.mark.parametrize("n", [10, 100])
def test_a_firing_change_does_not_resolve_while_it_persists_and_does_once_it_ends(n: int) -> None:
    """Recovery is judged against half of the firing arm's bet. The arm that crossed first
    is often a larger bet than the change (a lucky start); judged against its half-way point
    a 20 % drop looks recovered now and then. Re-sized to the bet with the most evidence,
    it does not, and it still resolves within hours of the end of the change."""
    fired_early, _ = _after_a_drop(False, n)
    early, back = _after_a_drop(True, n)
    print(f"n={n}: resolved during the change {early}/400 (the first arm's: {fired_early}/400)")
    assert early <= 2 and early <= fired_early  # ≤ 0.5 %; the first arm: ~3 % (10–13 of 400)
    # every run resolves within the 2 days after; the median within 3 h (n = 100: ~1 h) or a
    # day (n = 10: ~8 h; the first arm's ~5.5 h, as it bets on a larger change)
    assert (back >= 0).all() and np.median(back) <= (36 if n == 100 else 288)


def test_a_pair_tests_time_to_detect_is_what_its_bets_take() -> None:
    """The four-fifths test on pairs of g (rate 0.3) and its reference (0.5): the Shiryaev–
    Roberts mixture over its eight arms, 20 pairs a step, reaches log c = 12 after about
    ``pair_expected_seconds`` (measured over 300 seeds, median within 0.7–1.4×). At a ratio
    of exactly the bound nothing ever shows (it is the null): the time is infinite, where the
    change detectors' 0.8× formula quoted a finite one (found by a review)."""
    ff, _ = sq.pair_z(0.8, 0.1)
    terms = sq.arms(ff)
    log_c, per_step = 12.0, 20
    want = float(sq.pair_expected_seconds(log_c, 0.3, 0.5, per_step, terms))  # in steps
    assert math.isinf(float(sq.pair_expected_seconds(log_c, 0.4, 0.5, per_step, terms)))
    assert want < float(sq.pair_expected_seconds(log_c, 0.35, 0.5, per_step, terms))
    log_w = np.full(len(terms), -math.log(len(terms)))
    delays = []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        log_r = np.full(len(terms), -np.inf)
        for step in range(1, 2000):
            yg, yr = rng.random(per_step) < 0.3, rng.random(per_step) < 0.5
            counts = [np.sum(yg & yr), np.sum(yg & ~yr), np.sum(~yg & yr), np.sum(~yg & ~yr)]
            log_r = sq.sr_step(log_r, sq.log_betting(np.array(counts), terms), True)
            if sq.log_mixture(log_r, log_w) >= log_c:
                delays.append(step)
                break
    med = float(np.median(delays))
    print(f"four-fifths test, 0.3 vs 0.5: median {med:.1f} steps, predicted {want:.1f}")
    assert len(delays) == 300
    assert 0.7 * want <= med <= 1.4 * want
