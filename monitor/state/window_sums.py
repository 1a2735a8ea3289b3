"""Sums of a fixed set of sliding windows, kept up to date between boundaries.

Why: the alert evaluator reads every window of a model at every closed bucket. Summed afresh
(:meth:`WindowRing.window`), a 24-hour window of 5-minute buckets adds 288 ``[group, cell]``
slices, twice with the as-of correction: ~0.8 ms per boundary for 3 windows × 60 groups,
more than all the alert math. Between two boundaries a window only gains its newest bucket,
loses its oldest and takes the increments that :meth:`WindowRing.add` made inside it (late
predictions, labels counted in their prediction's bucket, the as-of ledger's entries and
removals). The ring journals those increments while a reader is attached, so the sums cost
O(events since the last read) plus two bucket slices per window.

The usual read is one boundary after the previous one: every window slid by one bucket
(:func:`_slide`). Its cost is then per numpy call, not per cell (the arrays are small), so
that case is done in a fixed handful of calls for all windows at once; any other move of the
windows takes the general path (:func:`_update`).

Exact by construction (integers) and checked against :meth:`Engine.counts_between`
(``tests/state/test_window_sums.py``). Whenever the increments alone cannot give the answer —
the first read, a ring replaced by a checkpoint restore, a journal dropped because nobody read
it, windows that jumped (boundaries skipped) or whose old buckets already left the ring — a
window is summed afresh, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from monitor.state.partition import PartitionState
from monitor.state.windows import I64, Journal, WindowRing

Range = tuple[int, int]  # buckets lo <= b < hi (empty when hi <= lo)


def live_range(ring: WindowRing, start: int, end: int) -> Range:
    """The buckets of ``start <= b < end`` that the ring holds (what :meth:`window` sums)."""
    assert ring.head is not None
    return max(start, ring.head - ring.n_buckets + 1), min(end, ring.head + 1)


@dataclass
class _Sums:
    """One ring's window sums as of the last read, over the live ranges of that read:
    ``sums[window]`` is ``[group, cell]``. ``points`` are the non-empty ranges' ends, sorted;
    when no range is empty (``whole``), ``lo``/``hi`` are each range's ends as their indices."""

    ring: WindowRing
    ranges: list[Range]
    sums: I64
    points: I64 = field(init=False)
    lo: I64 = field(init=False)
    hi: I64 = field(init=False)
    whole: bool = field(init=False)

    def __post_init__(self) -> None:
        self.moved(self.ranges)

    def moved(self, ranges: list[Range]) -> None:
        """The windows now span ``ranges``."""
        self.ranges = ranges
        self.points = np.array(sorted({x for a, b in ranges if b > a for x in (a, b)}), np.int64)
        self.whole = bool(ranges) and all(b > a for a, b in ranges)
        self.lo = np.searchsorted(self.points, np.array([a for a, _ in ranges], np.int64))
        self.hi = np.searchsorted(self.points, np.array([b for _, b in ranges], np.int64))


def _fresh(ring: WindowRing, ranges: list[Range]) -> I64:
    out = np.zeros((len(ranges), ring.n_groups, ring.n_cells), dtype=np.int64)
    for o, (lo, hi) in zip(out, ranges, strict=True):
        o += ring.window(lo, hi)
    return out


def _binned(journal: Journal, points: I64, size: int) -> I64:
    """The journal's increments summed per segment between ``points``: row ``s`` of
    ``[len(points) − 1, size]`` holds those with ``points[s] <= bucket < points[s + 1]``. The
    others are left out (no reader needs them): the decisions of the newest bucket, most of a
    journal, are at or after the last point. ``np.add.at``: exact, and here faster than a
    float ``bincount`` and its cast back."""
    out = np.zeros((max(len(points) - 1, 0), size), dtype=np.int64)
    for bucket, cell, weight in journal:  # one bucket per event, its cells a row
        seg = np.searchsorted(points, bucket, side="right") - 1
        inner = (seg >= 0) & (seg < len(points) - 1)
        n = np.count_nonzero(inner)
        if n < len(seg):
            if not n:
                continue
            seg, cell, weight = seg[inner], cell[inner], weight[inner]
        flat = ((seg * size)[:, None] + cell).reshape(-1)  # 1-D: add.at's fast loop
        np.add.at(out.reshape(-1), flat, weight.reshape(-1))
    return out


def _slide(s: _Sums, journal: Journal) -> None:
    """Every window slid by one bucket since the last read (their old ranges non-empty and
    still in the ring): update ``s.sums`` in place.

    A window ``[a, b)`` becomes ``[a + 1, b + 1)``: it takes the journal's increments in
    ``[a, b)``, loses bucket ``a`` and gains bucket ``b`` (as the ring holds them now). With
    ``J(p)`` the increments in ``[points[0], p)`` and ``C(p)`` bucket ``p``'s counts, that is
    ``R(b) − R(a)`` for ``R(p) = J(p) + C(p)``: one row per distinct end, shared by the
    windows (the 1 h and 6 h windows end at the same bucket)."""
    ring, pts = s.ring, s.points
    g, c = ring.n_groups, ring.n_cells
    if s.sums.shape[1] < g:  # groups that appeared since: they had nothing before
        grown = np.zeros((len(s.sums), g, c), dtype=np.int64)
        grown[:, : s.sums.shape[1]] = s.sums
        s.sums = grown
    r = ring.counts[pts % ring.n_buckets]
    if journal:
        j = _binned(journal, pts, g * c).reshape(-1, g, c)  # per segment: R's steps
        for i in range(1, len(j)):  # a running sum of a few long rows (cumsum along axis 0
            j[i] += j[i - 1]  # is a strided loop per column: ~10x slower here)
        r[1:] += j
    for w, (i, k) in enumerate(zip(s.lo, s.hi, strict=True)):  # in place: no temporaries
        s.sums[w] += r[k]
        s.sums[w] -= r[i]


def _update(s: _Sums, ranges: list[Range], journal: Journal) -> I64:
    """The windows ``ranges`` from the sums of ``s.ranges`` and the ring's journal since."""
    ring = s.ring
    g, c = ring.n_groups, ring.n_cells
    oldest = ring.head - ring.n_buckets + 1 if ring.head is not None else 0
    # the journal's increments summed per segment between the old ranges' ends: each old
    # window is a run of segments, and every increment is added once whatever the windows
    points = [int(x) for x in s.points]
    delta = np.zeros((max(len(points) - 1, 0), g * c), dtype=np.int64)
    if journal and points:
        delta = _binned(journal, s.points, g * c)
    out = np.zeros((len(ranges), g, c), dtype=np.int64)
    for w, ((a1, b1), (a2, b2)) in enumerate(zip(s.ranges, ranges, strict=True)):
        if b1 <= a1 or b2 <= a2 or a2 < a1 or b2 < b1 or a2 > b1 or a1 < oldest:
            out[w] = ring.window(a2, b2)  # nothing to build on (or it left the ring)
            continue
        old = s.sums[w]
        out[w, : len(old)] = old  # groups that appeared since had nothing before
        i, j = points.index(a1), points.index(b1)
        out[w] += delta[i:j].sum(axis=0).reshape(g, c)
        if a2 > a1:
            out[w] -= ring.window(a1, a2)
        if b2 > b1:
            out[w] += ring.window(b1, b2)
    return out


def _read(s: _Sums, ranges: list[Range]) -> None:
    """Bring ``s`` to ``ranges``: slid by one bucket, moved otherwise, or afresh."""
    ring = s.ring
    journal = ring.start_journal()
    if journal is None or len(ranges) != len(s.ranges):
        s.sums = _fresh(ring, ranges)
    elif (
        s.whole
        and ring.head is not None
        and int(s.points[0]) > ring.head - ring.n_buckets
        and ranges == [(a + 1, b + 1) for a, b in s.ranges]
    ):
        _slide(s, journal)
        s.ranges, s.points = ranges, s.points + 1  # the same ends, one bucket on
        return
    else:
        s.sums = _update(s, ranges, journal)
    s.moved(ranges)


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
        out: I64 | None = None  # the first sums read, then the first own array: one pass each
        own = False  # whether `out` is ours to add to (else it is a ring's sums, kept for later)
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
                    _read(s, ranges)
                if out is None:
                    out, own = (-s.sums, True) if future else (s.sums, False)
                elif not own:
                    out, own = (out - s.sums if future else out + s.sums), True
                elif future:
                    out -= s.sums
                else:
                    out += s.sums
        if out is None:
            out = np.zeros((len(windows), n_groups, n_cells), dtype=np.int64)
        elif not own:
            out = out.copy()
        for key in [k for k in self._sums if k[0] not in partitions]:
            del self._sums[key]  # a revoked partition
        return list(out)
