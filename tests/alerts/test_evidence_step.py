"""The evidence step's shortcuts give the plain formulas' numbers to the bit
(``monitor/alerts/evidence_step.py``, ``sequential.change_arms`` and ``sr_step_into``): the
same floats, NaN and infinities where they were, the same dtypes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from monitor.alerts import evidence_step as es
from monitor.metrics import sequential as sq


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def weights() -> np.ndarray:
    """ModelEvidence's: arms 0–7 for the change detectors and the four-fifths test, all 16
    for the equalized-odds test."""
    w = np.full((5, 16), -np.inf)
    w[:4, :8] = w[4] = 0
    out: np.ndarray = w - np.log(np.isfinite(w).sum(axis=1, keepdims=True))
    return out


@pytest.mark.parametrize("shape", [(3, 20), (1, 1), (2, 0)])
def test_the_mixture_is_log_mixture_to_the_bit(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        log_r = rng.normal(0, rng.choice([0.1, 5.0, 300.0]), (*shape, 5, 16))
        log_r[rng.random(log_r.shape[:-1]) < 0.2] = -np.inf  # detectors not started
        log_r[rng.random(log_r.shape) < 0.02] = -np.inf  # an arm without evidence
        log_r[rng.random(log_r.shape) < 0.02] = np.log(8)  # a term of exactly 0 (log w = −log 8)
        assert same(es.mixture(log_r, weights()), sq.log_mixture(log_r, weights()))


def test_change_arms_and_sr_step_into_are_the_plain_formulas_to_the_bit() -> None:
    rng = np.random.default_rng(2)
    for _ in range(100):
        shape = (3, 20, 3)
        p0 = np.clip(rng.random(shape) ** rng.choice([1, 8]), 1e-6, 1 - 1e-6)
        p0[0, :3] = [1e-6, 1 - 1e-6, 0.5]
        se = np.abs(rng.normal(0, rng.choice([1e-4, 0.05, 3.0]), shape))
        n = rng.integers(0, 300, shape)
        x, z = rng.integers(0, 301, shape) % (n + 1), float(rng.choice([1.5, 2.0]))
        lo = np.clip(p0 - z * se, sq.EPS, 1 - sq.EPS)[..., None]
        hi = np.clip(p0 + z * se, sq.EPS, 1 - sq.EPS)[..., None]
        d = np.concatenate([sq.STEPS, sq.STEPS])
        down = np.arange(8) < 4
        q = np.where(down, lo * (1 - d), 1 - (1 - hi) * (1 - d))
        plain = sq.log_lr_binomial(x[..., None], n[..., None], q, np.where(down, lo, hi))
        e = sq.change_arms(x, n, p0, se, z)
        assert same(e, plain)
        log_r = rng.normal(0, 3, (3, 20, 5, 16))
        log_r[0] = -np.inf
        step = rng.random((3, 20, 3, 1)) < 0.7
        want = log_r.copy()
        want[..., :3, :8] = sq.sr_step(log_r[..., :3, :8], e, step)
        sq.sr_step_into(log_r[..., :3, :8], e, step)
        assert same(log_r, want)


def test_the_standard_error_is_the_plain_formula_to_the_bit() -> None:
    rng = np.random.default_rng(3)
    refs = np.array([2, -1, 0])
    lay = es.layout(refs, [5, 4, 5], 5)
    for _ in range(50):
        base = rng.integers(0, 40, (3, 5, 3, 2))
        base[..., 0] = rng.integers(0, 41, (3, 5, 3)) % (base[..., 1] + 1)
        base[0, 1] = 0  # no data: NaN rates
        b = es.baseline(base, lay, 10)
        n_h = rng.integers(0, 30, (3, 3))
        p_h = rng.random((3, 3))
        p_h[1, 1] = 0.0  # a rate of 0: infinite relative variance
        p0 = np.clip(rng.random((3, 5, 3)), 1e-6, 1 - 1e-6)
        with np.errstate(divide="ignore", invalid="ignore"):
            p_base = base[..., 0] / base[..., 1]
            rel = (1 - p_base) / (p_base * base[..., 1])
            rel_now = n_h * (1 - p_h) / (p_h * (n_h + es.KAPPA) ** 2)
            r = lay.r
            total = np.where(lay.is_ref3, rel, rel + (rel[np.arange(3), r] + rel_now)[:, None])
        want = np.nan_to_num(p0 * np.sqrt(total), nan=1.0, posinf=1.0)
        assert same(es.standard_error(p0, b, lay, n_h, p_h), want)
        assert same(b.p_base, p_base)


def test_keyed_draws_are_a_fresh_philox_of_the_key() -> None:
    draws, rng = es.KeyedDraws(), np.random.default_rng(4)
    for block in [0, 1, 493_000, 2**64 - 1, 2**64 + 5]:
        h = int.from_bytes(hashlib.blake2b(b"credit", digest_size=8).digest(), "little")
        fresh = np.random.Generator(np.random.Philox(key=(h << 64) | (block & (2**64 - 1))))
        reused = draws("credit", block)
        good, bad = rng.integers(0, 60, 40), rng.integers(0, 60, 40)
        n = np.minimum(rng.integers(1, 90, 40), good + bad)
        for _ in range(3):  # and on from there, buffered bits and all
            assert np.array_equal(
                fresh.hypergeometric(good, bad, n), reused.hypergeometric(good, bad, n)
            )
            assert fresh.random() == reused.random()
            assert fresh.integers(0, 2**31) == reused.integers(0, 2**31)
