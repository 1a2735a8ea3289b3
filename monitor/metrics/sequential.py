"""Anytime-valid evidence on per-bucket counts: e-values, their Shiryaev–Roberts sums and the
threshold a false-page budget implies. Pure math on arrays (no state, no config).

**E-detector** (Shin, Ramdas, Rinaldo 2023, "E-detectors"): per step *t* an e-value ``e_t``
(``E[e_t | past] ≤ 1`` under no change); the Shiryaev–Roberts statistic
``R_t = (1 + R_{t-1}) · e_t`` has ``E[R_t] ≤ t`` under no change, so its alarm time
``τ = min{t: R_t ≥ c}`` has an average run length ``E[τ] ≥ c`` steps (their Prop. 2.4).
A mixture ``R_t = Σ_j w_j R^j_t`` (``Σ w_j = 1``) over a few bet sizes keeps the guarantee and
is within ``log(1/w_j)`` nats of the best bet in hindsight. All arithmetic is in logs
(``logaddexp``) so nothing overflows.

**Budget → threshold**: ``pages`` false alarms per ``per`` seconds, shared equally by ``K``
detectors stepping once per ``bucket`` seconds (a union bound over alarm rates):
``c = K · per / (pages · bucket)``; each detector then pages falsely at most once per ``c``
steps on average, all of them together at most ``pages`` per ``per``.

**Expected time to detect** a change of a Bernoulli rate ``p → q`` from ``r`` observations per
second: ``log(c) / (KL(q ‖ p) · r)`` seconds (the information limit: Lorden 1971; the
e-detector attains it up to the mixture's ``log(1/w)``); a pair test's: ``log(c)`` over its
best bet's growth per pair times the pairs per second.

**Betting on paired observations** (Chugg, Cortes-Gomez, Wilder, Ramdas, NeurIPS 2023,
"Auditing fairness by betting"): with ``Z ∈ [a, b]``, ``E[Z] ≥ 0`` under the null, each
``1 − λZ`` with ``0 ≤ λ < 1/b`` is an e-value, and a product over independent pairs too;
valid however the rates drift. ``Z`` of a pair depends only on its type (11, 10, 01, 00), so a
bucket's product is ``Π_type (1 − λ z_type)^{n_type}`` from the counts of the pair types.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
EPS = 1e-9


def threshold(k: int, per: float, pages: float, bucket: float) -> float:
    """``c = K · per / (pages · bucket)`` (at least 1): see the module docstring."""
    return max(1.0, k * per / (pages * bucket))


def kl_bernoulli(q: Any, p: Any) -> F64:
    """``KL(Bern(q) ‖ Bern(p)) = q log(q/p) + (1−q) log((1−q)/(1−p))`` in nats."""
    q = np.clip(np.asarray(q, np.float64), EPS, 1 - EPS)
    p = np.clip(np.asarray(p, np.float64), EPS, 1 - EPS)
    out: F64 = q * np.log(q / p) + (1 - q) * np.log((1 - q) / (1 - p))
    return out


def log_lr_binomial(x: Any, n: Any, q: Any, p: Any) -> F64:
    """``log [Bin(x; n, q) / Bin(x; n, p)] = x log(q/p) + (n−x) log((1−q)/(1−p))``: the
    likelihood-ratio e-value of ``x`` successes in ``n`` against the null rate ``p``
    (``E_p[LR] = 1``); 0 when ``n = 0``."""
    x, n = np.asarray(x, np.float64), np.asarray(n, np.float64)
    q = np.clip(np.asarray(q, np.float64), EPS, 1 - EPS)
    p = np.clip(np.asarray(p, np.float64), EPS, 1 - EPS)
    out: F64 = x * np.log(q / p) + (n - x) * np.log((1 - q) / (1 - p))
    return out


def expected_seconds(log_c: Any, p: Any, per_second: Any, ratio: float = 0.8) -> F64:
    """Seconds until a drop of the rate ``p`` to ``ratio · p`` shows at the threshold:
    ``log(c) / (KL(ratio·p ‖ p) · per_second)``; +inf without observations."""
    p = np.asarray(p, np.float64)
    rate = np.asarray(kl_bernoulli(ratio * p, p) * np.asarray(per_second, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        out: F64 = np.where(
            (rate > 0) & np.isfinite(rate), np.asarray(log_c) / np.where(rate > 0, rate, 1), np.inf
        )
    return out


def pair_expected_seconds(log_c: Any, p_g: Any, p_r: Any, per_second: Any, terms: F64) -> F64:
    """Seconds until a pair test's evidence reaches ``log c`` when g's rate is ``p_g`` and its
    reference's ``p_r``: ``log(c) / (g* · pairs per second)``, with ``g*`` the best arm's
    expected log e-value per pair, ``max_a Σ_type P(type) · terms[a, type]``, the outcomes of
    a pair independent (Kelly's growth rate; Chugg et al. 2023 §3). +inf when no arm grows
    (the rates meet the bound) or there are no pairs. ``terms``: :func:`arms`' ``[A, 4]``."""
    pg, pr = np.asarray(p_g, np.float64), np.asarray(p_r, np.float64)
    types = np.stack([pg * pr, pg * (1 - pr), (1 - pg) * pr, (1 - pg) * (1 - pr)], axis=-1)
    growth = (types @ terms.T).max(axis=-1) * np.asarray(per_second, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (growth > 0) & np.isfinite(growth)
        out: F64 = np.where(ok, np.asarray(log_c) / np.where(ok, growth, 1.0), np.inf)
    return out


def pair_counts(
    xg: I64, ng: I64, xr: I64, nr: I64, rng: np.random.Generator
) -> tuple[I64, I64, I64, I64]:
    """Counts of the pair types ``(11, 10, 01, 00)`` (first digit: group g's outcome) from
    ``m = min(ng, nr)`` random pairs: ``m`` of g's ``ng`` decisions (``xg`` positive) and ``m``
    of r's, drawn without replacement, matched at random. Hypergeometric draws: how many
    positives among g's ``m``, among r's ``m``, and how many of g's positives meet r's."""
    m = np.minimum(ng, nr)
    ab = _hyper(
        np.concatenate([xg, xr]), np.concatenate([ng - xg, nr - xr]), np.concatenate([m, m]), rng
    )
    a, b = ab[: len(m)], ab[len(m) :]
    n11 = _hyper(b, m - b, a, rng)
    return n11, a - n11, b - n11, m - a - b + n11


def _hyper(good: I64, bad: I64, draws: I64, rng: np.random.Generator) -> I64:
    good, bad, draws = (np.asarray(v, np.int64) for v in (good, bad, draws))
    ok = draws > 0
    out = np.zeros(np.broadcast(good, bad, draws).shape, np.int64)
    if ok.any():
        out[ok] = rng.hypergeometric(good[ok], bad[ok], draws[ok])
    return out


def betting_terms(z: Any, lam: Any) -> F64:
    """``log(1 − λ_a z_type)`` per arm ``a`` and pair type: ``[A, 4]`` (``z[A, 4]``,
    ``lam[A]``, ``λ · max z < 1``). A bucket's log e-value per arm is then
    ``Σ_type n_type · terms[a, type]`` (:func:`log_betting`)."""
    z, lam = np.asarray(z, np.float64), np.asarray(lam, np.float64)
    if np.any(lam[:, None] * z >= 1):
        raise ValueError("a bet must keep 1 - λZ > 0")
    out: F64 = np.log1p(-lam[:, None] * z)
    return out


def log_betting(counts: Any, terms: F64) -> F64:
    """``Σ_type n_type · log(1 − λ z_type)``: a bucket's log betting e-value per arm, from
    pair-type counts ``[..., 4]`` and :func:`betting_terms` ``[A, 4]``: ``[..., A]``."""
    out: F64 = np.asarray(counts, np.float64) @ terms.T
    return out


def sr_step(log_r: F64, log_e: F64, step: Any) -> F64:
    """Shiryaev–Roberts in logs: ``log R_t = log(1 + R_{t−1}) + log e_t`` where ``step``; an
    unobserved step (no data: nothing learned) leaves ``R`` unchanged, so silence never counts
    as a step (the run length is then at least ``c`` observed steps, hence also in time)."""
    out: F64 = np.where(step, np.logaddexp(0.0, log_r) + log_e, log_r)
    return out


def sr_step_into(log_r: F64, log_e: F64, step: Any) -> None:
    """:func:`sr_step` written into ``log_r`` (a view of the state) where ``step``: the same
    numbers without the temporary :func:`sr_step` returns and its caller copies in."""
    grown = np.logaddexp(0.0, log_r)
    grown += log_e
    np.copyto(log_r, grown, where=step)


def log_mixture(log_r: F64, log_w: F64) -> F64:
    """``log Σ_j w_j R^j`` over the last axis (``log_w``: −inf for an arm that is not there).

    The maximum is taken over the arms laid out first: numpy reduces a short last axis one row
    at a time (~60 ns a row), a leading one in whole rows; a maximum does not depend on the
    order it is taken in. The sum stays ``np.sum`` over the last axis: its order of additions
    (pairwise) is part of the numbers."""
    x = log_r + log_w
    by_arm = x.reshape(-1, x.shape[-1]).T.copy()
    top = np.maximum.reduce(by_arm, axis=0).reshape(x.shape[:-1])
    finite = np.isfinite(top)
    safe = np.where(finite, top, 0.0)
    with np.errstate(divide="ignore"):
        out: F64 = safe + np.log(np.sum(np.exp(x - safe[..., None]), axis=-1))
    return np.where(finite, out, top)


# -- the arms of the monitor's detectors ------------------------------------------------------
STEPS = np.array([0.1, 0.2, 0.35, 0.5])  # bet sizes: δ of a rate; λ as a fraction of 1/max Z


def pair_z(ratio: float, gap: float) -> tuple[F64, F64]:
    """``Z`` per pair type (11, 10, 01, 00; first digit: group g) for the four-fifths null
    (``Z = y_g − ratio·y_r``; reversed: the reference low) and the gap null
    (``Z = y_g − y_r + gap``; reversed): ``[2 directions, 4 types]`` each. ``E[Z] ≥ 0`` under
    ``p_g ≥ ratio·p_r`` resp. ``p_g ≥ p_r − gap``; negated, they test the reverse."""
    ff = np.array([(1 - ratio, 1, -ratio, 0), (1 - ratio, -ratio, 1, 0)], np.float64)
    eo = np.array([(gap, 1 + gap, gap - 1, gap), (gap, gap - 1, 1 + gap, gap)], np.float64)
    return ff, eo


def arms(z: F64) -> F64:
    """:func:`betting_terms` of every direction of ``z[D, 4]`` × each of :data:`STEPS` (``λ``
    a fraction of ``1/max z``): ``[D·len(STEPS), 4]``, direction-major."""
    zz = np.repeat(z, len(STEPS), axis=0)
    return betting_terms(zz, np.tile(STEPS, len(z)) / zz.max(axis=1))


def reverse_arms(z: F64) -> F64:
    """:func:`betting_terms` of the reverse null (``−Z``: the bound breached) for each
    direction of ``z[D, 4]``: ``[D, len(STEPS), 4]``; mixed equally by
    :func:`reverse_betting`."""
    return np.stack([betting_terms(np.tile(-zd, (len(STEPS), 1)), STEPS / (-zd).max()) for zd in z])


# change_arms: lo and 1 − hi as ``_FROM + _SIGN · end``; ``1 − δ`` per bet
_FROM, _SIGN, _KEEP = np.array([0.0, 1.0]), np.array([1.0, -1.0]), 1 - STEPS
_FROM2, _SIGN2 = _FROM[:, None], _SIGN[:, None]


def change_arms(x: Any, n: Any, p0: Any, se: Any, z: float = 2.0) -> F64:
    """Log likelihood-ratio e-values ``[..., 2·len(STEPS)]`` of ``x`` of ``n``: bets
    ``q = p_lo·(1−δ)`` against ``p_lo = p0 − z·se`` (the rate falls) and
    ``q = 1 − (1−p_hi)·(1−δ)`` against ``p_hi = p0 + z·se`` (its complement falls).

    ``p0`` is a plug-in (a baseline) with standard error ``se``. For a bet above ``p`` the
    ratio's mean is ``(p·q/p0 + (1−p)(1−q)/(1−p0))^n``, above 1 whenever the true rate is on
    the bet's side of ``p0``: betting from the far end of ``p0``'s interval keeps the mean at
    most 1 unless the baseline is off by more than ``z`` standard errors."""
    # the same numbers in fewer numpy calls (~2 µs each on these small arrays): both ends at
    # once, ``[..., (lo, hi), step]`` (the arms' order); ``p0 + (−z)·se`` is ``p0 − z·se`` to
    # the bit, ``1 + (−1)·v`` is ``1 − v`` and ``0 + 1·v`` is ``v`` (v ≥ EPS·(1 − δ) > 0)
    p0, se = np.asarray(p0, np.float64)[..., None], np.asarray(se, np.float64)[..., None]
    ends = p0 + (-_SIGN * z) * se
    ends = np.minimum(np.maximum(ends, EPS, out=ends), 1 - EPS, out=ends)  # = np.clip
    below = (_FROM + _SIGN * ends)[..., None] * _KEEP  # lo·(1−δ), (1−hi)·(1−δ)
    q = _FROM2 + _SIGN2 * below  # lo·(1−δ), 1 − (1−hi)·(1−δ)
    x, n = np.asarray(x, np.float64)[..., None, None], np.asarray(n, np.float64)[..., None, None]
    out = log_lr_binomial(x, n, q, ends[..., None])  # its clips: of values clipped, the same
    return out.reshape(*out.shape[:-2], 2 * len(STEPS))


def sized_arms(arm: Any, evidence: Any, hold: Any) -> Any:
    """Firing change arms (``-1``: not firing) re-sized to the bet of their direction with the
    most ``evidence`` [..., 8] (log, weighted), except where ``hold``. The arm that crossed
    first may have bet on a larger change than there is (a lucky start); its half-way recovery
    null (:func:`reverse_change`) then fails while the change persists (tpr-drop: a 20 % drop
    judged against a 35 % bet resolved). The caller holds an arm once the change's evidence
    falls from its cap or recovery evidence builds: after a recovery the smallest bet soon
    leads, and its null (5 % changed) would keep a small group's alert firing for days."""
    arm = np.asarray(arm)
    n = len(STEPS)
    best = np.where(arm >= n, n + evidence[..., n:].argmax(-1), evidence[..., :n].argmax(-1))
    return np.where((arm >= 0) & ~np.asarray(hold), best, arm)


def reverse_change(x: Any, n: Any, p0: Any, se: Any, arm: Any, z: float = 2.0) -> F64:
    """Log e-value of recovery for a change arm that fired (as :func:`sized_arms` keeps it):
    the end of ``p0``'s interval it bet from, against the rate half way to the arm's bet
    (valid while the rate stays at least half way changed)."""
    arm = np.asarray(arm)
    down = arm < len(STEPS)
    half = STEPS[arm % len(STEPS)] / 2
    p0, se = np.asarray(p0, np.float64), np.asarray(se, np.float64)
    end = np.clip(np.where(down, p0 - z * se, p0 + z * se), EPS, 1 - EPS)
    q = np.where(down, end * (1 - half), 1 - (1 - end) * (1 - half))
    return log_lr_binomial(x, n, end, q)


def reverse_betting(counts: Any, terms: F64) -> F64:
    """Log e-value of the reverse null from pair-type counts ``[..., 4]`` and the
    :func:`reverse_arms` of the direction that fired (``terms[..., steps, 4]``): the mean of the
    steps' e-values (a mixture of e-values is one)."""
    log_e = np.einsum("...t,...st->...s", np.asarray(counts, np.float64), terms)
    out: F64 = np.logaddexp.reduce(log_e, axis=-1) - np.log(len(STEPS))
    return out
