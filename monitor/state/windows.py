"""Event-time bucket ring holding integer count cells per group.

Why a ring of buckets: every sliding window (``5m``, ``1h``, ``7d ending 30d ago``) is a sum
over a contiguous range of buckets, so one tensor ``counts[slot, group, cell]`` serves all
windows, updates are O(events) with one ``np.add.at``, and eviction is zeroing a slot.

The ring covers ``n_buckets`` consecutive buckets ending at ``head`` (the newest bucket seen).
An event whose bucket is at or before ``head - n_buckets`` arrived too late to be counted: it
is reported as *late* (never silently dropped). Counts that leave the ring are accumulated in
``expired`` so that ``in ring + expired`` is every accepted event, which makes loss testable.

Lateness is decided per event against the running maximum of the buckets seen so far (in
arrival order), exactly as if events were applied one at a time, so the result does not depend
on how a stream is cut into batches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]

# Cells of the count tensor. The confusion cells use class 1 as "positive" for both the
# prediction and the label; which prediction value is *favourable* only affects FAV.
N, FAV, TP, FP, FN, TN = range(6)
CAL = 6  # then, per score bin b: CAL+3b = labelled count, +1 = label sum, +2 = score sum (µ)
# then per score bin b: hist_cell(bins)+b = scored predictions (counted when predicted), then the
# ESTIMATE_CELLS of score_cells.py (score sums per predicted class, all and labelled)
ESTIMATE_CELLS = 12
SCORE_SCALE = 1_000_000
CELL_NAMES = ("predictions", "favourable", "tp", "fp", "fn", "tn")
# a window-sum reader's journal is dropped past this many entries per count cell of the ring:
# by then summing afresh is cheaper, and the journal's memory stays within the ring's
JOURNAL_LIMIT = 1.0
# what add() added since a reader's last read, one entry per call: the events' buckets [e] and
# their flat [group, cell] indices and weights [e, cells per event] (scatter's blocks unrepeated:
# the reader bins each event's bucket once)
Journal = list[tuple[I64, I64, I64]]


def n_cells(score_bins: int) -> int:
    return CAL + 4 * score_bins + ESTIMATE_CELLS


def hist_cell(score_bins: int) -> int:
    """The first cell of the score histogram of every scored prediction (one cell per bin)."""
    return CAL + 3 * score_bins


def estimate_cell(score_bins: int) -> int:
    """The first of the :data:`ESTIMATE_CELLS` (``score_cells.py``)."""
    return CAL + 4 * score_bins


class WindowRing:
    """Counts for one (model, partition): ``counts[slot, group, cell]`` over a bucket ring."""

    def __init__(self, *, n_buckets: int, n_cells: int, n_groups: int = 0) -> None:
        if n_buckets < 1:
            raise ValueError("n_buckets must be at least 1")
        self.n_buckets = n_buckets
        self.n_cells = n_cells
        self.counts: I64 = np.zeros((n_buckets, n_groups, n_cells), dtype=np.int64)
        self.expired: I64 = np.zeros((n_groups, n_cells), dtype=np.int64)
        self.head: int | None = None
        self.first: int | None = None  # the first bucket ever seen (where alerting starts)
        # the newest bucket whose counts left the ring (a window reaching back to it is no longer
        # whole; buckets the head jumped over held nothing to lose). None: not known (restored)
        self.gone_through: int | None = -(2**62)
        # set by a reader that keeps window sums up to date (window_sums.py): what add() added
        self.journal: Journal | None = None
        self.journaled = 0  # entries in it

    @property
    def n_groups(self) -> int:
        return int(self.counts.shape[1])

    def grow(self, n_groups: int) -> None:
        """Make room for ``n_groups`` groups (new groups are appended, indices never move)."""
        extra = n_groups - self.n_groups
        if extra <= 0:
            return
        self.counts = np.concatenate(
            [self.counts, np.zeros((self.n_buckets, extra, self.n_cells), np.int64)], axis=1
        )
        self.expired = np.concatenate([self.expired, np.zeros((extra, self.n_cells), np.int64)])

    @property
    def oldest(self) -> int | None:
        """Oldest bucket still held (``None`` before the first event)."""
        return None if self.head is None else self.head - self.n_buckets + 1

    def advance(self, new_head: int) -> None:
        """Move the head forward, moving the contents of reused slots to ``expired``."""
        if self.head is None:
            self.head = int(new_head)
            return
        if new_head <= self.head:
            return
        if self.gone_through is None:  # restored: what left before the checkpoint is unknown
            self.gone_through = self.head - self.n_buckets
        k = min(int(new_head) - self.head, self.n_buckets)
        slots = (self.head + 1 + np.arange(k)) % self.n_buckets
        reused = self.counts[slots]
        if reused.any():
            self.expired += reused.sum(axis=0)
            self.counts[slots] = 0
            held = np.flatnonzero(reused.reshape(k, -1).any(axis=1))  # slot i held this bucket:
            newest = self.head + 1 + int(held[-1]) - self.n_buckets  # head + 1 + i − n
            self.gone_through = max(self.gone_through, newest)
        self.head = int(new_head)

    def admit(self, buckets: I64) -> tuple[Bool, Bool]:
        """Advance the head over ``buckets`` (in arrival order) and classify each event.

        Returns ``(late, gone)``: *late* events were already too old when they arrived (not
        counted); *gone* events were in time on arrival but their bucket left the ring later in
        this same batch (counted straight into ``expired``). The others go into the ring.
        """
        if len(buckets) == 0:
            empty = np.zeros(0, dtype=bool)
            return empty, empty
        start = buckets[0] if self.head is None else self.head
        running = np.maximum.accumulate(np.maximum(buckets, start))
        late = buckets <= running - self.n_buckets
        if self.first is None:
            self.first = int(buckets[~late].min())
        self.advance(int(running[-1]))
        assert self.head is not None
        gone = ~late & (buckets <= self.head - self.n_buckets)
        if self.gone_through is not None and gone.any():  # counted, gone at once (expired)
            self.gone_through = max(self.gone_through, int(buckets[gone].max()))
        return late, gone

    def is_live(self, buckets: I64) -> Bool:
        """Whether each bucket is currently held by the ring."""
        if self.head is None:
            return np.zeros(len(buckets), dtype=bool)
        return (buckets > self.head - self.n_buckets) & (buckets <= self.head)

    def add(self, buckets: I64, groups: npt.NDArray[Any], cells: I64, weights: I64) -> None:
        """``counts[bucket, group, cell] += weight`` for live buckets (vectorized, duplicates add)."""
        if len(buckets) == 0:
            return
        slot = buckets % self.n_buckets
        cell = groups.astype(np.int64) * self.n_cells + cells  # the index in counts[slot]
        np.add.at(self.counts.reshape(-1), slot * (self.n_groups * self.n_cells) + cell, weights)
        if self.journal is not None:
            self.journal.append((buckets, cell[:, None], weights[:, None]))
            self.journaled += len(buckets)
            if self.journaled > JOURNAL_LIMIT * self.counts.size:  # the reader sums afresh
                self.journal = None

    def start_journal(self) -> Journal | None:
        """Journal what :meth:`add` adds from now on; returns the journal so far (``None``:
        dropped, or never started)."""
        journal, self.journal, self.journaled = self.journal, [], 0
        return journal

    def scatter(
        self,
        buckets: I64,
        groups: npt.NDArray[Any],
        cells: I64,
        weights: I64,
        live: Bool,
        gone: Bool,
    ) -> None:
        """Add ``weights[e, j]`` to cell ``cells[e, j]`` of every attribute set's group of
        event ``e`` (``groups[e, set]``): into its bucket when ``live``, into ``expired`` when
        ``gone`` (see :meth:`admit`), nowhere when late. One block of cells per event: the flat
        indices are one broadcast ``slot · G·C + group · C + cell`` (no per-cell repeats)."""
        k, m = groups.shape[1], cells.shape[1]
        for mask, ring in ((live, True), (gone, False)):
            if not mask.any():
                continue
            e = int(mask.sum())
            cell = (
                groups[mask].astype(np.int64)[:, :, None] * self.n_cells + cells[mask][:, None, :]
            ).reshape(-1)
            w = np.broadcast_to(weights[mask][:, None, :], (e, k, m)).reshape(-1)
            if not ring:
                np.add.at(self.expired.reshape(-1), cell, w)
                continue
            b = buckets[mask]
            base = (b % self.n_buckets) * (self.n_groups * self.n_cells)
            flat = (base[:, None] + cell.reshape(e, k * m)).reshape(-1)
            np.add.at(self.counts.reshape(-1), flat, w)
            if self.journal is not None:
                self.journal.append((b, cell.reshape(e, k * m), w.reshape(e, k * m)))
                self.journaled += len(cell)
                if self.journaled > JOURNAL_LIMIT * self.counts.size:
                    self.journal = None

    def window(self, start: int, end: int) -> I64:
        """Sum of buckets ``start <= b < end`` that the ring holds: ``[group, cell]``."""
        if self.head is None:
            return np.zeros((self.n_groups, self.n_cells), dtype=np.int64)
        lo = max(start, self.head - self.n_buckets + 1)
        hi = min(end, self.head + 1)
        if hi <= lo:
            return np.zeros((self.n_groups, self.n_cells), dtype=np.int64)
        a, b = lo % self.n_buckets, (hi - 1) % self.n_buckets + 1
        if b - a == 1:  # one bucket (a window's newest or oldest): a copy, not a sum
            out: I64 = self.counts[a].copy()
        elif a < b:  # one contiguous run of slots; else the range wraps around the ring's end
            out = self.counts[a:b].sum(axis=0)
        else:
            out = self.counts[a:].sum(axis=0) + self.counts[:b].sum(axis=0)
        return out

    def total(self) -> I64:
        """Everything accepted so far: the ring plus what has expired from it."""
        out: I64 = self.counts.sum(axis=0) + self.expired
        return out


def late_on_arrival(
    rings: list[WindowRing], widths: list[int], model: npt.NDArray[Any], ts: npt.NDArray[Any]
) -> Bool:
    """Events already too old for their model's ring before a batch moves it: late however the
    batch is cut, so such a copy of an id never makes a later one a duplicate."""
    oldest = np.array([-(2**62) if r.head is None else r.head - r.n_buckets for r in rings])
    return np.asarray((ts // np.asarray(widths)[model]).astype(np.int64) <= oldest[model])
