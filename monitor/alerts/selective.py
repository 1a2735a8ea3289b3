"""Selective labels and labels delivered by class, for the evidence detectors.

Labelled outcomes of one predicted class only (a loan never granted is never repaid) make
TPR = TP / (TP + FN) and FPR = FP / (FP + TN) equal 1 by construction (``metrics/blindness.py``).
The detectors count an outcome when its label arrives, which measures TPR and FPR only if the
label delay does not depend on the predicted class. Often it does: approvals' outcomes come
from the loan book within hours, denials' from a bureau's file once a day. Counted as they
came, every bucket between two files fed the detectors approvals only (TPR = FPR = 1) and the
file then fed them denials only; on fair 30-day streams that paged (``bench/alert_quality.py
--scenario fair-denials-daily``).

So labelled outcomes of one predicted class are *held back* (``withheld``) until an outcome
of the other class arrives, then released together: a run of approvals meets the file of
denials and the two are judged as one sample. Under whole labels runs are short (a bucket of a
large group holds both classes; a small group's run waits minutes).

A run can also mean the labels turned selective. With ``f`` the share of predicted negatives
(``negative_share``: of the labelled outcomes held, or of the decisions while those hold one
class or none), a run of ``L`` positives has probability ``(1 − f)^L ≤ exp(−f·L)``: once
``f·L ≥`` :data:`EXPECTED_MISSING` (chance ≤ e^-20 under whole labels) TPR and FPR show as
blind (as when everything labelled so far, held or held back, is of one class). When such a
run ends, it is released only if the bucket that ends it brings at least
half the other class's share of it (a file delivered apart); a few outcomes of the other class
mean labels turned whole again, and the run is dropped: a baseline of TPR = 1 would page "TPR
fell" (found by a review). ``f`` is the long-run share: when the model's decisions shift a lot
(approving 90 % where it approved 50 %), runs grow longer than ``f`` expects until the blocks
held catch up, and a run of 40 approvals (1.5 % of runs at 90 %) shows blind for its remainder.
States saved before runs were held back may hold one class only: ``ended`` drops that.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

EXPECTED_MISSING = 20.0  # expected outcomes of the missing class in the run
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def classes(counts: I64) -> tuple[I64, I64]:
    """Labelled outcomes predicted positive (TP + FP) and negative (FN + TN) from the
    detectors' ``[..., (selection, TPR, FPR), (x, n)]`` counts."""
    pos = counts[..., 1, 0] + counts[..., 2, 0]
    neg = counts[..., 1, 1] + counts[..., 2, 1] - pos
    return pos, neg


def blind_held(held: I64) -> Mask:
    """Labels for one predicted class only in everything held (selective from the start)."""
    pos, neg = classes(held)
    out: Mask = (pos + neg > 0) & ((pos == 0) | (neg == 0))
    return out


def negative_share(held: I64, favourable: int) -> npt.NDArray[np.float64]:
    """The share ``f`` of predicted negatives: among the labelled outcomes held when they hold
    both classes, else among the decisions held (labels one-sided or none yet: the decisions
    say what whole labels would hold; labelled outcomes of one class would say 0 or 1)."""
    h_pos, h_neg = classes(held)
    with np.errstate(divide="ignore", invalid="ignore"):
        by_labels = h_neg / (h_pos + h_neg)
    out: npt.NDArray[np.float64] = np.where(
        (h_pos > 0) & (h_neg > 0), by_labels, decided_negative(held, favourable)
    )
    return out


def decided_negative(counts: I64, favourable: int) -> npt.NDArray[np.float64]:
    """The share of predicted negatives among the decisions of ``counts`` (0 without any)."""
    fav, n = counts[..., 0, 0], counts[..., 0, 1]
    pred_neg = n - fav if favourable == 1 else fav  # the class of TN and FN: prediction 0
    out: npt.NDArray[np.float64] = pred_neg / np.maximum(n, 1)
    return out


class Held(NamedTuple):
    """What :func:`hold_runs` reads of the blocks held (``held``): it changes once a block, so
    the detectors keep it between buckets (:func:`held_classes`)."""

    pos: I64  # labelled outcomes predicted positive, negative (:func:`classes`)
    neg: I64
    f: npt.NDArray[np.float64]  # negative_share
    g: npt.NDArray[np.float64]  # 1 − f


def held_classes(held: I64, favourable: int) -> Held:
    """:class:`Held` of ``held``."""
    f = negative_share(held, favourable)
    return Held(*classes(held), f, 1.0 - f)


def hold_runs(
    withheld: I64, obs: I64, held: I64, favourable: int, known: Held | None = None
) -> tuple[I64, Mask]:
    """One bucket's detector counts ``obs`` with its labelled outcomes held back while they
    are of one predicted class (``withheld``: the run so far and, in its selection row, the
    decisions since the last release; updated in place), and which groups are blind now.

    A run is released with the bucket that brings the other class. A run too long for chance
    (``f·L ≥`` :data:`EXPECTED_MISSING`) is released only if that bucket brings at least half
    of the other class's share of it (``d·L / (1 − d)`` for ``L`` positives, ``d`` the share
    of predicted negatives among the decisions since the last release: the classes were
    delivered apart), else dropped (labels were selective, then whole again); released, the
    two classes are weighted as the decisions since the last release stand (:func:`weighted`).
    ``known``: :func:`held_classes` of ``held`` if the caller keeps it.

    Per bucket of a whole-label stream no run is long: nothing is dropped or weighted, and the
    counts are sent or kept whole; that case takes a shorter path (the same integers, ~20
    fewer numpy calls: the alert evaluation's budget is a millisecond)."""
    h = held_classes(held, favourable) if known is None else known
    w_pos, w_neg = classes(withheld)
    both = withheld + obs  # its selection row: the decisions since the last release
    c_pos, c_neg = classes(both)
    release = (c_pos > 0) & (c_neg > 0)
    long_pos, long_neg = w_pos * h.f >= EXPECTED_MISSING, w_neg * h.g >= EXPECTED_MISSING
    out = obs.copy()
    if not (long_pos.any() or long_neg.any()):  # none dropped, none weighted
        out[..., 1:, :] = np.where(release[..., None, None], both[..., 1:, :], 0)
        withheld[...] = np.where(release[..., None, None], 0, both)
        k_pos, k_neg = np.where(release, 0, c_pos), np.where(release, 0, c_neg)
    else:
        long = (long_pos, long_neg)
        kept = _release(both, obs, (w_pos, w_neg), release, long, favourable, out)
        withheld[...] = kept
        k_pos, k_neg = classes(kept)
    run = (k_pos * h.f >= EXPECTED_MISSING) | (k_neg * h.g >= EXPECTED_MISSING)
    all_pos, all_neg = h.pos + k_pos, h.neg + k_neg  # classes(held + kept)
    blind: Mask = (all_pos + all_neg > 0) & ((all_pos == 0) | (all_neg == 0))  # blind_held
    return out, blind | run  # one class in all labelled so far: blind too


def _release(
    both: I64,
    obs: I64,
    run: tuple[I64, I64],
    release: Mask,
    long: tuple[Mask, Mask],
    favourable: int,
    out: I64,
) -> I64:
    """:func:`hold_runs` with a long run somewhere: which runs are dropped, which weighted;
    writes the counts sent into ``out``; returns what stays held back."""
    (pos, neg), (w_pos, w_neg) = classes(obs), run
    long_pos, long_neg = long
    # the other class's share among the decisions made during the run: what it should bring
    # (the blocks held can be lopsided: a detector that resolved forgets its metric's blocks)
    dn = decided_negative(both, favourable)
    with np.errstate(divide="ignore", invalid="ignore"):
        few_neg = long_pos & (neg < 0.5 * w_pos * dn / (1.0 - dn))
        few_pos = long_neg & (pos < 0.5 * w_neg * (1.0 - dn) / dn)
    dropped = release & (few_neg | few_pos)
    files = release & ~dropped & (long_pos | long_neg)
    if files.any():
        both[files] = weighted(both[files], favourable)
    mixed = (pos > 0) & (neg > 0)
    r, d, m = (x[..., None, None] for x in (release, dropped, mixed))
    sent = np.where(r & ~d, both, np.where(d & m, obs, 0))
    kept = np.where(~r, both, np.where(d & ~m, obs, 0))  # a dropped run's bucket starts a run
    kept[release, 0, :] = 0  # decisions count afresh from a release
    out[..., 1:, :] = sent[..., 1:, :]
    return kept


def weighted(counts: I64, favourable: int) -> I64:
    """``counts`` (a released run and the outcomes that ended it) with one predicted class's
    outcomes scaled down so the classes stand as in its decisions (its selection row): TPR and
    FPR as if both classes were labelled alike (inverse-coverage weighting per predicted class,
    Horvitz & Thompson 1952). A file of denials covers other hours than the run of approvals it
    ends (the first file of a run: fewer); unweighted, TPR and FPR moved with the coverage (a
    review: "FPR fell" paged at the second file). Only ever scaled down: no count grows."""
    out = counts.copy()
    n, neg_share = counts[:, 0, 1], decided_negative(counts, favourable)
    tp, fp = counts[:, 1, 0], counts[:, 2, 0]
    fn, tn = counts[:, 1, 1] - tp, counts[:, 2, 1] - fp
    pos, neg = tp + fp, fn + tn
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (neg * (1.0 - neg_share)) / (pos * neg_share)  # > 1: too many negatives
    ok = (n > 0) & (neg_share > 0) & (neg_share < 1) & np.isfinite(ratio) & (ratio > 0)
    s_pos = np.where(ok & (ratio < 1), ratio, 1.0)
    s_neg = np.where(ok & (ratio > 1), 1.0 / ratio, 1.0)
    tp, fp = np.rint(tp * s_pos).astype(np.int64), np.rint(fp * s_pos).astype(np.int64)
    fn, tn = np.rint(fn * s_neg).astype(np.int64), np.rint(tn * s_neg).astype(np.int64)
    out[:, 1, 0], out[:, 1, 1], out[:, 2, 0], out[:, 2, 1] = tp, tp + fn, fp, fp + tn
    return out


def ended(held: I64, obs: I64, blind: Mask) -> Mask:
    """Groups whose held outcomes were of one predicted class and that now have the other:
    what they held measured nothing (TPR = FPR = 1), and a baseline of it would page "TPR
    fell" once labels are whole (a review: labels selective from the start, then whole).
    Only a state saved before runs were held back can hold that. ``blind``:
    :func:`hold_runs`'s (none blind, the common case: nothing to look at)."""
    if not blind.any():
        return blind
    out: Mask = blind_held(held) & ~blind_held(held + obs)
    return out
