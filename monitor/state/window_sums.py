"""Sums of a fixed set of sliding windows, kept up to date between boundaries.

Why: the alert evaluator reads every window of a model at every closed bucket. Summed afresh
(:meth:`WindowRing.window`), a 24-hour window of 5-minute buckets adds 288 ``[group, cell]``
slices, twice with the as-of correction: ~0.8 ms per boundary for 3 windows × 60 groups,
more than all the alert math. Between two boundaries a window only gains its newest bucket,
loses its oldest and takes the increments that :meth:`WindowRing.add` made inside it (late
predictions, labels counted in their prediction's bucket, the as-of ledger's entries and
removals). The ring journals those increments while a reader is attached, so the sums cost
O(events since the last read) plus two bucket slices per window.

Exact by construction (integers) and checked against :meth:`Engine.counts_between`
(``tests/state/test_window_sums.py``). Whenever the increments alone cannot give the answer —
the first read, a ring replaced by a checkpoint restore, a journal dropped because nobody read
it, windows that jumped (boundaries skipped) or whose old buckets already left the ring — a
window is summed afresh, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from monitor.state.partition import PartitionState
from monitor.state.windows import I64, WindowRing

Range = tuple[int, int]  # buckets lo <= b < hi (empty when hi <= lo)
EXACT = 2**53


def live_range(ring: WindowRing, start: int, end: int) -> Range:
    """The buckets of ``start <= b < end`` that the ring holds (what :meth:`window` sums)."""
    assert ring.head is not None
    return max(start, ring.head - ring.n_buckets + 1), min(end, ring.head + 1)


@dataclass
class _Sums:
    """One ring's window sums as of the last read, over the live ranges of that read."""

    ring: WindowRing
    ranges: list[Range]
    sums: list[I64]


def _fresh(ring: WindowRing, ranges: list[Range]) -> list[I64]:
    return [ring.window(lo, hi) for lo, hi in ranges]


def _update(s: _Sums, ranges: list[Range]) -> list[I64]:
    """The windows ``ranges`` from the sums of ``s.ranges`` and the ring's journal since."""
    ring = s.ring
    journal = ring.start_journal()
    if journal is None or len(ranges) != len(s.ranges):
        return _fresh(ring, ranges)
    g, c = ring.n_groups, ring.n_cells
    oldest = ring.head - ring.n_buckets + 1 if ring.head is not None else 0
    # the journal's increments summed per segment between the old ranges' ends: each old
    # window is a run of segments, and every increment is added once whatever the windows
    points = sorted({x for lo, hi in s.ranges if hi > lo for x in (lo, hi)})
    delta = np.zeros((max(len(points) - 1, 0), g * c), dtype=np.int64)
    if journal and len(points) > 1:
        bucket, cell, weight = (np.concatenate(parts) for parts in zip(*journal, strict=True))
        seg = np.searchsorted(np.array(points), bucket, side="right") - 1
        inside = (seg >= 0) & (seg < len(points) - 1)
        flat, w = seg[inside] * (g * c) + cell[inside], weight[inside]
        if np.abs(w).sum() < EXACT:  # float sums of integers below 2^53 are exact
            delta = np.bincount(flat, w, delta.size).astype(np.int64).reshape(delta.shape)
        else:  # ~3x slower, exact whatever the sizes
            np.add.at(delta.reshape(-1), flat, w)
    out = []
    for (a1, b1), (a2, b2), old in zip(s.ranges, ranges, s.sums, strict=True):
        if b1 <= a1 or b2 <= a2 or a2 < a1 or b2 < b1 or a2 > b1 or a1 < oldest:
            out.append(ring.window(a2, b2))  # nothing to build on (or it left the ring)
            continue
        if len(old) < g:  # groups that appeared since: they had nothing before
            old = np.concatenate([old, np.zeros((g - len(old), c), np.int64)])
        i, j = points.index(a1), points.index(b1)
        new = old + delta[i:j].sum(axis=0).reshape(g, c)
        if a2 > a1:
            new -= ring.window(a1, a2)
        if b2 > b1:
            new += ring.window(b1, b2)
        out.append(new)
    return out


class WindowSums:
    """Sums of one model's windows per partition (its ring, and its label ledger's ``future``
    ring for the as-of correction), each read building on the previous one."""

    def __init__(self) -> None:
        self._sums: dict[tuple[int, int, bool], _Sums] = {}

    def read(
        self,
        partitions: dict[int, PartitionState],
        m: int,
        n_groups: int,
        n_cells: int,
        windows: Sequence[Range],
        as_of: int,
    ) -> list[I64]:
        """:meth:`Engine.counts_between` ``(m, start, end, as_of=as_of)`` of each window."""
        out = [np.zeros((n_groups, n_cells), dtype=np.int64) for _ in windows]
        for p, st in partitions.items():
            ring, ledger = st.rings[m], st.ledgers[m]
            ring.grow(n_groups)
            ledger.settle_before(ring, as_of)  # future: the labels at or after the boundary
            for future, r in ((False, ring), (True, ledger.future)):
                if r.head is None:
                    continue
                ranges = [live_range(r, a, b) for a, b in windows]
                s = self._sums.get((p, m, future))
                if s is None or s.ring is not r:
                    s = self._sums[(p, m, future)] = _Sums(r, ranges, _fresh(r, ranges))
                    r.start_journal()
                else:
                    s.sums, s.ranges = _update(s, ranges), ranges
                for o, x in zip(out, s.sums, strict=True):
                    if future:
                        o -= x
                    else:
                        o += x
        for key in [k for k in self._sums if k[0] not in partitions]:
            del self._sums[key]  # a revoked partition
        return out
