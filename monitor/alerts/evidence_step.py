"""What :meth:`ModelEvidence.step <monitor.alerts.evidence.ModelEvidence.step>` keeps between
buckets, and its mixture and standard error in fewer numpy calls.

A step works on small arrays (3 sets × 20 groups × 5 detectors × 16 arms), so it costs ~2 µs
per numpy call, not per number; the alert evaluation's budget is a millisecond a bucket. What
depends only on the references and the groups seen (:class:`Layout`) or on the baseline
blocks (:class:`Baseline`: they change once a block) is computed when they change, not per
bucket. Every number is the one the plain formulas give, to the bit (``tests/alerts/
test_evidence_step.py``).
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
KAPPA = 20.0  # pseudo-counts shrinking the reference's trailing-hour rate to its baseline


class Layout(NamedTuple):
    """The sets' references and groups as masks ``[set, group]`` (``r``: the reference's
    slot, 0 without one; ``is_ref3``: ``is_ref`` with a metric axis)."""

    has_ref: Mask
    r: npt.NDArray[np.int64]
    s_: npt.NDArray[np.int64]
    is_ref: Mask
    is_ref3: Mask
    live: Mask  # a group seen in this slot
    live_ref: Mask  # ... of a set with a reference
    others: Mask  # ... and not the reference: the pair tests' groups


def layout(refs: npt.NDArray[np.int64], sizes: list[int], g: int) -> Layout:
    """:class:`Layout` of references ``refs`` (-1: none yet) and ``sizes`` groups per set."""
    has_ref, r, s_ = refs >= 0, np.maximum(refs, 0), np.arange(len(refs))
    is_ref = (np.arange(g)[None, :] == r[:, None]) & has_ref[:, None]
    live = np.arange(g)[None, :] < np.array(sizes, np.int64)[:, None]
    live_ref = has_ref[:, None] & live
    return Layout(has_ref, r, s_, is_ref, is_ref[..., None], live, live_ref, live_ref & ~is_ref)


class Baseline(NamedTuple):
    """Per-block quantities of the baselines ``[set, group, metric]`` (read-only: ``p_base``
    goes out with every step)."""

    p_base: F64  # the baseline rate
    pr_base: F64  # the reference's [set, metric]
    rho: F64  # p_base relative to the reference's (a reference's: its own rate)
    ready: Mask  # g and its reference have min_baseline decisions (outcomes)
    rel: F64  # relative variance of p_base
    rel_ref: F64  # the reference's [set, metric]


def baseline(base: Any, lay: Layout, min_baseline: int) -> Baseline:
    """:class:`Baseline` of the sums ``base`` ``[set, group, metric, (x, n)]``."""
    s_, r = lay.s_, lay.r
    n_base = base[..., 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        p_base = base[..., 0] / n_base  # [S, G, 3]
        pr_base = p_base[s_, r]  # [S, 3]
        rho = np.where(lay.is_ref3, p_base, p_base / pr_base[:, None, :])
        rel = (1 - p_base) / (p_base * n_base)  # relative variance of a binomial rate
    ready = (n_base >= min_baseline) & (n_base[s_, r] >= min_baseline)[:, None]
    out = Baseline(p_base, pr_base, rho, ready, rel, rel[s_, r])
    for a in out:
        a.flags.writeable = False
    return out


def standard_error(p0: F64, b: Baseline, lay: Layout, n_h: Any, p_h: F64) -> F64:
    """Standard error of ``p0 = p_g,base / p_r,base · p_r,t`` (delta method: the three factors
    are independent, so their relative variances add); of ``p_g,base`` for a reference.
    ``p_r,t``'s share matters as much as the baselines': with two large groups the reference's
    hour is as noisy as g's own, and a bet against a ``p0`` that wanders by that much gains
    evidence on a fair stream (left out, one of five 8-day runs paged on an unchanged group).
    ``n_h``, ``p_h``: the reference's trailing-hour n and ``p_r,t`` per [set, metric]; the
    shrunk rate's variance is ``n·p(1−p)/(n + κ)²``. Undefined (NaN, +inf): 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_now = n_h * (1 - p_h) / (p_h * (n_h + KAPPA) ** 2)  # [S, 3]
        total = np.where(lay.is_ref3, b.rel, b.rel + (b.rel_ref + rel_now)[:, None])
    se: F64 = p0 * np.sqrt(total)  # ≥ 0, NaN or +inf (p0 > 0): no -inf to map
    return np.where(se < np.inf, se, 1.0)  # = np.nan_to_num(se, nan=1.0, posinf=1.0)


def mixture(log_r: F64, log_w: F64) -> F64:
    """``sq.log_mixture(log_r, log_w)`` of the detectors' evidence ``[S, G, 5, 16]``, to the
    bit, for their weights: the change detectors' and the four-fifths test's on arms 0–7, the
    equalized-odds test's on all 16 (``log_w`` −inf elsewhere).

    Laid out arm-first, the maximum is one reduction over whole rows (numpy reduces a short
    last axis a row at a time, ~60 ns a row), and ``exp`` skips the arms that are not there
    (``exp(−inf)`` takes numpy's slow path). The sum is numpy's over 16 arms, written out:
    ``np.sum`` adds a row of 16 pairwise, ``r_j = a_j + a_{j+8}``, then
    ``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))``; an absent arm adds an exact 0."""
    s, g, d, j = log_r.shape
    by_arm = np.empty((j, d, s * g))
    np.add(log_r.reshape(s * g, d, j).transpose(2, 1, 0), log_w.T[..., None], out=by_arm)
    top = np.maximum.reduce(by_arm, axis=0)  # [5, S·G]
    finite = np.isfinite(top)
    safe = np.where(finite, top, 0.0)
    np.subtract(by_arm, safe, out=by_arm)
    r = np.exp(by_arm[: j // 2])
    r[:, -1] += np.exp(by_arm[j // 2 :, -1])  # the equalized-odds test's arms 8–15
    r = r[0::2] + r[1::2]
    r = r[0::2] + r[1::2]
    with np.errstate(divide="ignore"):
        out = safe + np.log(r[0] + r[1])
    mixed: F64 = np.where(finite, out, top).T.reshape(s, g, d)  # a copy: C order
    return mixed


class KeyedDraws:
    """``np.random.Generator(np.random.Philox(key=key(model, block)))``, one block after another,
    with the same draws: a fresh ``Philox`` first seeds itself from the OS's entropy (~70 µs,
    though the key then replaces that seed); this one is built once and set to each key's
    initial state (counter 0, nothing buffered)."""

    def __init__(self) -> None:
        self._bits = np.random.Philox(key=0)
        self._gen = np.random.Generator(self._bits)

    def __call__(self, model: str, block: int) -> np.random.Generator:
        h = int.from_bytes(hashlib.blake2b(model.encode(), digest_size=8).digest(), "little")
        key = (h << 64) | (block & (2**64 - 1))  # Philox's 128-bit key, low word first
        words = np.array([key & (2**64 - 1), key >> 64], np.uint64)
        self._bits.state = {
            "bit_generator": "Philox",
            "state": {"counter": np.zeros(4, np.uint64), "key": words},
            "buffer": np.zeros(4, np.uint64),
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }
        return self._gen
