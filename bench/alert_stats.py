"""Intervals for the alert-quality benchmark: a rate with its interval, never a bare number.

* detection rates: Wilson score interval (the monitor's own, ``monitor.metrics.intervals``);
* a count of false pages over an exposure: the exact (Garwood 1936) Poisson interval,
  ``[χ²(α/2; 2k)/2, χ²(1−α/2; 2k+2)/2]``, found here by bisection on the Poisson CDF
  (``P(X ≥ k; λ_lo) = α/2``, ``P(X ≤ k; λ_hi) = α/2``) so the benchmark needs no scipy;
* a median delay: the distribution-free order-statistic interval (e.g. Conover, *Practical
  Nonparametric Statistics*, §3.2): ``[x_(l), x_(u)]`` with ranks from Bin(n, ½) so that
  ``P(l ≤ B < u) ≥ 1 − α``. Runs that never detected count as +∞, so the median and its
  interval stay honest (an upper limit of ∞ says "not established").
* the information limit of a change detector: ``log(c) / KL(q‖p)`` observations (Lorden 1971;
  for e-detectors Shin, Ramdas, Rinaldo 2023), with KL between Bernoulli rates in nats.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from monitor.metrics.intervals import wilson


def wilson_interval(x: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    lo, hi = wilson(x, n, confidence)
    return float(lo), float(hi)


def _poisson_cdf(k: int, lam: float) -> float:
    """P(X ≤ k) for X ~ Poisson(lam), summed in log space (k up to a few thousand)."""
    if lam <= 0:
        return 1.0
    log_terms = [i * math.log(lam) - lam - math.lgamma(i + 1) for i in range(k + 1)]
    top = max(log_terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in log_terms))


def _bisect(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Where the decreasing function ``f`` crosses 0 in ``[lo, hi]``."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def garwood(k: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval for a Poisson mean from ``k`` observed events."""
    a = (1 - confidence) / 2
    top = 10.0 + 4.0 * k
    upper = _bisect(lambda lam: _poisson_cdf(k, lam) - a, 0.0, top)
    if k == 0:
        return 0.0, upper
    lower = _bisect(lambda lam: a - (1 - _poisson_cdf(k - 1, lam)), 0.0, top)
    return lower, upper


def _binom_cdf_half(j: int, n: int) -> float:
    """P(B ≤ j) for B ~ Bin(n, ½)."""
    if j < 0:
        return 0.0
    return float(sum(math.comb(n, i) for i in range(min(j, n) + 1)) / 2**n)


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, lower, upper): order-statistic interval, ``inf`` for undetected runs."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan
    med = (xs[(n - 1) // 2] + xs[n // 2]) / 2
    a = (1 - confidence) / 2
    # largest l (1-based rank) with P(B ≤ l − 1) ≤ a; the upper rank mirrors it
    lo_rank = 0
    while lo_rank + 1 <= n and _binom_cdf_half(lo_rank, n) <= a:
        lo_rank += 1
    if lo_rank == 0:  # too few runs for the confidence: the interval is the whole line
        return med, -math.inf, math.inf
    up_rank = n + 1 - lo_rank
    return med, xs[lo_rank - 1], xs[up_rank - 1]


def kl_bernoulli(q: float, p: float) -> float:
    """KL(Bern(q) ‖ Bern(p)) in nats: the evidence one decision carries against ``p``."""
    return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))
