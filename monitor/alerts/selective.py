"""Selective labels for the evidence detectors: when TPR and FPR cannot be measured.

Labelled outcomes of one predicted class only (a loan never granted is never repaid) make
TPR = TP / (TP + FN) and FPR = FP / (FP + TN) equal 1 by construction (``metrics/blindness.py``).
Judged over the blocks held (up to the baseline, a week), labels that *turn* selective stay
unseen for days: the old blocks still hold both classes, while every new bucket feeds the TPR
and FPR detectors outcomes of one class, and they paged "TPR/FPR of a rose" (found by a
review). So a group is also blind *now* once its labelled outcomes since the last one of a
predicted class are so many that the class's absence is no chance: with ``f`` that class's
share of the labelled outcomes held, a run of ``L`` outcomes without it has probability
``(1 − f)^L ≤ exp(−f·L)``; blind when ``f·L ≥`` :data:`EXPECTED_MISSING` (chance ≤ e^-20 per
run while ``f`` holds; a false call pauses the detectors until that class is labelled again).
``f`` is the long-run share: when the model's decisions shift a lot (approving 90 % where it
approved 50 %), runs grow longer than ``f`` expects until the blocks held catch up, and a
run of 40 approvals (1.5 % of runs at 90 %) pauses TPR/FPR for its remainder.

Outcomes labelled in such a run are no measurement of its TPR or FPR: they are kept out of
the detectors, their pair tests and their baselines (else a baseline of TPR = 1 would page
"TPR fell" once labelling is whole again). A group selective from the start keeps them until
the other class is labelled (something must end its blindness), then drops them (``ended``).
"""

from __future__ import annotations

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


def blind_now(streak: I64, obs: I64, held: I64) -> tuple[Mask, Mask]:
    """Update ``streak[..., (positives since the last negative, negatives since the last
    positive)]`` with one bucket's labelled outcomes ``obs`` (in place); which groups are
    blind (selective in all that is held, or in a run too long to be chance) and which of
    them by the run alone: only those outcomes are kept out of the baseline (kept out when
    the held ones decide, a group whose first labelled outcome was positive stayed blind for
    good: nothing more was held to end it)."""
    pos, neg = classes(obs)
    streak[..., 0] = np.where(neg > 0, 0, streak[..., 0] + pos)
    streak[..., 1] = np.where(pos > 0, 0, streak[..., 1] + neg)
    h_pos, h_neg = classes(held)
    total = h_pos + h_neg
    with np.errstate(divide="ignore", invalid="ignore"):
        share_neg = np.where(total > 0, h_neg / total, 0.0)
    run = (streak[..., 0] * share_neg >= EXPECTED_MISSING) | (
        streak[..., 1] * (1.0 - share_neg) * (total > 0) >= EXPECTED_MISSING
    )
    return blind_held(held) | run, run


def ended(held: I64, obs: I64, blind: Mask) -> Mask:
    """Groups whose held outcomes were of one predicted class and that now have the other:
    what they held measured nothing (TPR = FPR = 1), and a baseline of it would page "TPR
    fell" once labels are whole (a review: labels selective from the start, then whole).
    ``blind``: :func:`blind_now`'s (none blind, the common case: nothing to look at)."""
    if not blind.any():
        return blind
    out: Mask = blind_held(held) & ~blind_held(held + obs)
    return out


def unmeasured(obs: I64, blind: Mask) -> I64:
    """``obs`` without the TPR and FPR outcomes of blind groups (selection rates stay)."""
    if not blind.any():
        return obs
    out = obs.copy()
    out[blind, 1:] = 0
    return out
