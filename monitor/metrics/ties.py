"""Which group is the extreme one when several tie: the one with the most decisions behind its
rate, then the one whose label sorts first.

Why not the first index: a group's index is the order in which the monitor first met it, which
depends on how partitions and poll batches interleave. On a tie (the same rate from, say,
50/100 and 500/1000) the compared group decided the interval and so whether a significant
rule paged: a live monitor and a replay of the same events, or two replicas, could judge the
same counts differently (found by a review). Labels are the same everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Index = npt.NDArray[np.intp]
I64 = npt.NDArray[np.int64]
_LAST = np.iinfo(np.int64).max


def label_ranks(labels: Sequence[str], width: int | None = None) -> I64:
    """Each group's position in label order (padding past ``len(labels)`` ranks last). Read
    only: the same array is returned for the same labels (the evaluator asks at every
    boundary for the same attribute sets)."""
    return _ranks(tuple(labels), len(labels) if width is None else width)


@functools.lru_cache(maxsize=4096)
def _ranks(labels: tuple[str, ...], width: int) -> I64:
    out = np.arange(width, dtype=np.int64) + width  # padding: after every label, in order
    order = sorted(range(len(labels)), key=labels.__getitem__)
    out[np.array(order, dtype=np.intp)] = np.arange(len(labels))
    out.flags.writeable = False
    return out


def extreme(values: npt.NDArray[np.floating] | I64, mask: npt.NDArray[np.bool_], rank: I64, *,
            lowest: bool, weight: npt.NDArray[np.floating] | I64 | None = None) -> Index:  # fmt: skip
    """Per row, the index of the max (or min) of ``values`` where ``mask``; among equal values
    the largest ``weight`` (a rate's denominator: the group the generated Prometheus rules pick
    too, and equal rates of equal size have equal intervals, so both judge alike), then the
    lowest ``rank``; 0 for a row without any (as ``argmax`` of nothing)."""
    # ufunc reductions called directly: the array methods cost twice as much on small arrays
    fill = np.inf if lowest else -np.inf
    v = np.where(mask, values, fill)
    best = (np.minimum if lowest else np.maximum).reduce(v, axis=-1, keepdims=True)
    tied = mask & (v == best)
    if weight is not None:
        w = np.where(tied, weight, -np.inf)
        tied &= w == np.maximum.reduce(w, axis=-1, keepdims=True)
    out: Index = np.where(tied, rank, _LAST).argmin(axis=-1)  # rank broadcasts
    return out
