"""Confidence intervals for rates, ratios of rates, and differences of rates (vectorized).

Why these: a fairness alert must hold up when a group is small. Wilson intervals stay inside
[0, 1] and behave at 0 and n; the MOVER-R (Wilson) ratio interval stays finite when one
group's count is zero, where Katz's log interval is undefined; Newcombe's hybrid score
interval is the recommended interval for a difference of independent proportions.

References: Wilson (1927); Katz et al. (1978) "Obtaining confidence intervals for the risk
ratio in cohort studies"; Donner & Zou (2012) "Closed-form confidence intervals for functions
of the normal mean and standard deviation" (MOVER-R); Newcombe (1998) "Interval estimation for
the difference between independent proportions", method 10; Fagerland, Lydersen & Laake (2015)
for recommendations.

All functions return ``(lower, upper)`` float arrays, NaN where undefined (zero
denominators) — never 0, which would look like a real measurement.
"""

from __future__ import annotations

import functools
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike


@functools.lru_cache(maxsize=64)
def z_value(confidence: float) -> float:
    """Two-sided standard-normal quantile, e.g. 1.96 for 0.95 (kept: the alert evaluator asks
    for the same one at every boundary)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _f(x: ArrayLike) -> F64:
    return np.asarray(x, dtype=np.float64)


def ratio(num: ArrayLike, den: ArrayLike) -> F64:
    """``num / den`` with NaN (not 0, not inf) where ``den`` is 0."""
    n, d = _f(num), _f(den)
    out = np.full(n.shape if n.shape == d.shape else np.broadcast_shapes(n.shape, d.shape), np.nan)
    q: F64 = np.divide(n, d, out=out, where=d > 0)
    return q


def wilson(x: ArrayLike, n: ArrayLike, confidence: float = 0.95) -> tuple[F64, F64]:
    """Wilson score interval for the proportion ``x / n``.

    centre = (p + z²/2n) / (1 + z²/n);  half-width = z·√(p(1−p)/n + z²/4n²) / (1 + z²/n)
    """
    return wilson_z(x, n, z_value(confidence))


def wilson_z(x: ArrayLike, n: ArrayLike, z: float | F64) -> tuple[F64, F64]:
    """:func:`wilson` at the normal quantile ``z`` (a number, or an array that broadcasts with
    ``x`` and ``n``: each pair of a stack at its own level, see :func:`compared_z`)."""
    x, n = _f(x), _f(n)
    z2 = z * z
    with np.errstate(divide="ignore", invalid="ignore"):
        p = x / n
        denom = 1.0 + z2 / n
        centre = (p + z2 / (2.0 * n)) / denom
        half = z * np.sqrt(np.maximum(p * (1.0 - p) / n + z2 / (4.0 * n * n), 0.0)) / denom
        # both limits in one array: centre + (−half) is centre − half, bit for bit
        limits = np.minimum(np.maximum(centre + np.multiply.outer(_SIGNS, half), 0.0), 1.0)
        lo, hi = np.where(n > 0, limits, np.nan)
    return lo, hi


def comparisons(groups: int, *, reference: bool) -> int:
    """How many pairs a disparity of ``groups`` compared groups chose its pair from: the
    most and the least of them (a gap; a ratio to the highest rate) any of the G(G−1)/2
    pairs, the least against a configured reference one of G − 1."""
    return max(groups - 1, 1) if reference else max(groups * (groups - 1) // 2, 1)


def adjusted(confidence: float, pairs: int) -> float:
    """The level of each pair's interval so that all ``pairs`` hold together at
    ``confidence`` (Bonferroni 1936): 1 − (1 − confidence)/m. The pair a disparity reports is
    the most extreme of m: at the plain level its interval would miss the truth far more often
    than 1 − confidence (with six groups of equal rates, the default rules paged ~10 times per
    90 days). One pair (two groups): ``confidence`` itself, to the bit."""
    return confidence if pairs <= 1 else 1.0 - (1.0 - confidence) / pairs


def level_text(confidence: float) -> str:
    """A confidence level as people write it: ``95%``, ``99.5%``, ``99.9%`` — never rounded
    to a whole percent (0.999 read "100%", 0.975 "98%": found by a review)."""
    return f"{round(confidence * 100, 8):g}%"


def ci_text(confidence: float, pairs: int) -> str:
    """How a page names a disparity's interval: ``95% CI``, or ``95% CI over 4 pairs`` when
    its pair was the most extreme of several (:func:`adjusted`)."""
    return f"{level_text(confidence)} CI" + (f" over {pairs} pairs" if pairs > 1 else "")


@functools.lru_cache(maxsize=4096)
def compared_z(confidence: float, pairs: int) -> float:
    """:func:`z_value` of :func:`adjusted` (kept: asked per attribute set at every boundary)."""
    return z_value(adjusted(confidence, pairs))


_SIGNS = np.array([-1.0, 1.0])


def katz_log_ratio(
    x1: ArrayLike, n1: ArrayLike, x2: ArrayLike, n2: ArrayLike, confidence: float = 0.95
) -> tuple[F64, F64]:
    """Katz log interval for ``(x1/n1) / (x2/n2)``: exp(ln RR ± z·√(1/x1 − 1/n1 + 1/x2 − 1/n2)).

    Undefined (NaN) when either count is zero.
    """
    x1, n1, x2, n2 = _f(x1), _f(n1), _f(x2), _f(n2)
    z = z_value(confidence)
    ok = (x1 > 0) & (x2 > 0) & (n1 > 0) & (n2 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_rr = np.log(x1 / n1) - np.log(x2 / n2)
        se = np.sqrt(1.0 / x1 - 1.0 / n1 + 1.0 / x2 - 1.0 / n2)
        lo = np.where(ok, np.exp(log_rr - z * se), np.nan)
        hi = np.where(ok, np.exp(log_rr + z * se), np.nan)
    return lo, hi


def mover_ratio(
    x1: ArrayLike, n1: ArrayLike, x2: ArrayLike, n2: ArrayLike, confidence: float = 0.95
) -> tuple[F64, F64]:
    """MOVER-R interval with Wilson limits for ``θ = p1 / p2`` (Donner & Zou 2012).

    L = [p1p2 − √((p1p2)² − l1(2p1 − l1)·u2(2p2 − u2))] / [u2(2p2 − u2)]
    U = [p1p2 + √((p1p2)² − u1(2p1 − u1)·l2(2p2 − l2))] / [l2(2p2 − l2)]
    where (l, u) are the Wilson limits of each proportion. Finite when x1 = 0; the upper limit
    is infinite when x2 = 0.
    """
    x1, n1, x2, n2 = _f(x1), _f(n1), _f(x2), _f(n2)
    l1, u1 = wilson(x1, n1, confidence)
    l2, u2 = wilson(x2, n2, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo, hi = mover_from_limits(x1 / n1, l1, u1, x2 / n2, l2, u2)
    defined = (n1 > 0) & (n2 > 0) & (x2 > 0)
    return np.where(defined, lo, np.nan), np.where(defined, hi, np.nan)


def mover_from_limits(p1: F64, l1: F64, u1: F64, p2: F64, l2: F64, u2: F64) -> tuple[F64, F64]:
    """:func:`mover_ratio` from the two proportions and their Wilson limits (for callers that
    have the limits already); meaningful where ``p2 > 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        pp = p1 * p2
        den_lo = u2 * (2.0 * p2 - u2)
        den_hi = l2 * (2.0 * p2 - l2)
        lo = (pp - np.sqrt(np.maximum(pp * pp - l1 * (2.0 * p1 - l1) * den_lo, 0.0))) / den_lo
        hi = (pp + np.sqrt(np.maximum(pp * pp - u1 * (2.0 * p1 - u1) * den_hi, 0.0))) / den_hi
        hi = np.where(den_hi > 0, hi, np.inf)
    return np.maximum(lo, 0.0), hi


def newcombe_diff(
    x1: ArrayLike, n1: ArrayLike, x2: ArrayLike, n2: ArrayLike, confidence: float = 0.95
) -> tuple[F64, F64]:
    """Newcombe hybrid score interval for ``p1 − p2`` (Newcombe 1998, method 10).

    L = d − √((p1 − l1)² + (u2 − p2)²),  U = d + √((u1 − p1)² + (p2 − l2)²)
    """
    x1, n1, x2, n2 = _f(x1), _f(n1), _f(x2), _f(n2)
    l1, u1 = wilson(x1, n1, confidence)
    l2, u2 = wilson(x2, n2, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        return newcombe_from_limits(x1 / n1, l1, u1, x2 / n2, l2, u2)


def newcombe_from_limits(p1: F64, l1: F64, u1: F64, p2: F64, l2: F64, u2: F64) -> tuple[F64, F64]:
    """:func:`newcombe_diff` from the two proportions and their Wilson limits.

    Squares are written as products: ``x * x`` is correctly rounded for arrays and numpy
    scalars alike, whereas a numpy scalar's ``x ** 2`` goes through libm's ``pow``, which
    differs from it in the last bit for ~0.1 % of values — so one pair and a stack of pairs
    would not give the same bits.
    """
    d = p1 - p2
    a, b, c, e = p1 - l1, u2 - p2, u1 - p1, p2 - l2
    return d - np.sqrt(a * a + b * b), d + np.sqrt(c * c + e * e)


def spread_limits(lower: F64, upper: F64) -> tuple[F64, F64]:
    """The interval of a spread |p₁ − p₂| from the interval [L, U] of p₁ − p₂ (p₁ the higher
    observed rate): [max(L, 0), max(U, −L)].

    Why: a gap is max − min, never negative, and its pair is ordered by the data; where L < 0
    the truth may run the other way by as much as −L. A rule may call a gap back under its
    bound only when U and −L both are: on U alone, FPRs of 0/3000 and 0/32 "recovered" at
    U = 0.001 while the pair allows 0.107 the other way (found by a review). It covers |d|
    whenever [L, U] covers d (d ≥ 0: max(L, 0) ≤ d ≤ U; d < 0: 0 ≤ −d ≤ −L), and the lower
    limit is past a bound ≥ 0 exactly when L is, so firing is unchanged.
    """
    return np.maximum(lower, 0.0), np.maximum(upper, -lower)
