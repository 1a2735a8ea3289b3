"""Label increments by their time (never before their prediction's bucket), so that alert rules
can read counts *as of* a boundary.

Why: in cohort mode a label is counted in its prediction's bucket. A poll batch can carry labels
from after a bucket boundary into a window that ends at it, and which ones depends on how the
prediction and label topics interleave — so a live monitor and a replay of the same events
would judge label-based rules (TPR/FPR gaps) on slightly different counts. Leaving out the
labels whose own time is at or after the boundary makes the answer independent of batching.

One :class:`LabelLedger` per (partition, model), beside the window ring. It keeps

* ``future``: a ring shaped like the window ring, holding the increments of labels whose time
  is after the last settled boundary — what to subtract from a window at the next boundary;
* the increments themselves, in arrival chunks, with their label-time bucket, so that they
  leave ``future`` once a boundary passes their time (:meth:`settle`).

Reading as of boundary *k* (:meth:`known_after`) settles through *k − 1* first; then
``counts_as_of(k) = ring.window(a, b) − future.window(a, b)``, at the cost of one window sum,
whatever the number of labels that ran ahead (a backlog read from the start of the topics).

What a settle takes out of ``future`` is what *became known* at that boundary: the label
increments whose time lies in the buckets just settled, whatever their predictions' buckets
(:meth:`arrivals`; the evidence detectors observe labelled outcomes as they arrive). A label
that comes after its time's boundary was settled is recorded as arriving in the next bucket to
settle, so it is observed once, at the next boundary, live and after a restore alike (windows
read as of that boundary count it, as before).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from monitor.state.windows import I64, WindowRing


def ledger_dtype(n_sets: int) -> np.dtype[Any]:
    """One label, as checkpointed: label-time bucket, counted bucket, groups (per set), cell."""
    return np.dtype(
        [
            ("label_bucket", np.int64),
            ("bucket", np.int64),
            ("groups", np.int32, (n_sets,)),
            ("cell", np.int64),
        ]
    )


class _Chunk(NamedTuple):
    """Labels of one batch, as columns (cheaper to build and filter than records)."""

    label_bucket: I64
    bucket: I64
    groups: npt.NDArray[Any]  # [n, k]
    cell: I64

    def take(self, sel: npt.NDArray[Any] | slice) -> _Chunk:
        return _Chunk(self.label_bucket[sel], self.bucket[sel], self.groups[sel], self.cell[sel])


class LabelLedger:
    def __init__(self, *, n_buckets: int, n_cells: int, n_sets: int, k: int) -> None:
        self.future = WindowRing(n_buckets=n_buckets, n_cells=n_cells)
        self.chunks: list[_Chunk] = []
        self.n_sets = n_sets
        self.k = k  # attribute sets of this model (the first k group columns)
        self.settled: int | None = None  # label-time buckets <= this have left `future`
        self.arrived: tuple[int, I64] | None = None  # (boundary, increments) of the last settle

    def __len__(self) -> int:
        return sum(len(c.bucket) for c in self.chunks)

    def _sync(self, ring: WindowRing) -> None:
        """Follow the window ring's head and groups, so that slots mean the same buckets."""
        self.future.grow(ring.n_groups)
        if ring.head is not None:
            self.future.advance(ring.head)

    def _add(self, c: _Chunk, sign: int) -> None:
        k = self.k
        n = len(c.bucket)
        if not n:
            return
        weights = np.full(n * k, sign, dtype=np.int64)
        if k == 1:
            self.future.add(c.bucket, c.groups[:, 0], c.cell, weights)
        else:
            self.future.add(
                np.repeat(c.bucket, k), c.groups.reshape(-1), np.repeat(c.cell, k), weights
            )

    def record(
        self,
        ring: WindowRing,
        label_buckets: I64,
        buckets: I64,
        groups: npt.NDArray[Any],
        cells: I64,
    ) -> None:
        """Note labels just counted in ``ring`` (all live there) with their label times."""
        if not len(buckets):
            return
        # sorted by label time: settling takes a prefix (a view), whatever the boundary
        c = _Chunk(label_buckets, buckets, groups[:, : self.k], cells).take(
            np.argsort(label_buckets, kind="stable")
        )
        if self.settled is not None:  # arriving after their boundary: known at the next one
            c = c._replace(label_bucket=np.maximum(c.label_bucket, self.settled + 1))
        self._sync(ring)
        self._add(c, +1)
        self.chunks.append(c)

    def settle(self, ring: WindowRing, boundary: int) -> None:
        """Labels with time bucket <= ``boundary`` are known as of every later boundary."""
        if self.settled is not None and boundary <= self.settled:
            return
        self.settled = boundary
        self._sync(ring)
        kept, known = [], []
        for c in self.chunks:
            i = int(np.searchsorted(c.label_bucket, boundary, "right"))
            if i:
                gone = c.take(slice(None, i))
                live = self.future.is_live(gone.bucket)
                self._add(gone if live.all() else gone.take(live), -1)
                known.append(gone)
            if i < len(c.bucket):
                kept.append(c.take(slice(i, None)))
        self.chunks = kept
        self.arrived = (boundary, self._cells(known))

    def _cells(self, chunks: list[_Chunk]) -> I64:
        """``[group, cell]`` increments of the labels in ``chunks`` (every attribute set)."""
        g, n = self.future.n_groups, self.future.n_cells
        out = np.zeros(g * n, dtype=np.int64)
        for c in chunks:  # a bincount of one chunk is the sum (~2x faster than add.at here)
            flat = (c.groups.astype(np.int64) * n + c.cell[:, None]).reshape(-1)
            counts = np.bincount(flat, minlength=g * n)  # integer counts: exact
            out = counts if len(chunks) == 1 else out + counts
        return out.reshape(g, n)

    def arrivals(self, ring: WindowRing, boundary: int) -> I64:
        """``[group, cell]`` increments of the labels that became known at ``boundary``: those
        whose time lies in the buckets settled by reading as of it (through ``boundary − 1``,
        back to the previous settle). Zeros if ``boundary − 1`` was settled by an earlier
        read of a later boundary."""
        self.settle(ring, boundary - 1)
        if self.arrived is None or self.arrived[0] != boundary - 1:
            return np.zeros((ring.n_groups, self.future.n_cells), dtype=np.int64)
        got = self.arrived[1]
        if got.shape[0] < ring.n_groups:
            got = np.concatenate(
                [got, np.zeros((ring.n_groups - got.shape[0], got.shape[1]), np.int64)]
            )
        return got

    def known_after(self, ring: WindowRing, boundary: int, start: int, end: int) -> I64:
        """Increments of labels whose time is at or after ``boundary``, over buckets
        ``start <= b < end``: what a window read as of the boundary leaves out."""
        self.settle_before(ring, boundary)
        return self.future.window(start, end)

    def settle_before(self, ring: WindowRing, boundary: int) -> None:
        """Settle through ``boundary - 1``, so that ``future`` holds exactly the labels at or
        after the boundary. An earlier boundary than one already settled past cannot be
        answered any more (boundaries are evaluated in order)."""
        if self.settled is not None and boundary - 1 < self.settled:
            raise ValueError(f"labels are settled past boundary {boundary}")
        self._sync(ring)  # shaped like the ring even when there is nothing new to settle
        self.settle(ring, boundary - 1)

    # -- checkpoints ---------------------------------------------------------------------------
    def export(self) -> npt.NDArray[Any]:
        out = np.zeros(len(self), dtype=ledger_dtype(self.n_sets))
        if self.chunks:
            out["label_bucket"] = np.concatenate([c.label_bucket for c in self.chunks])
            out["bucket"] = np.concatenate([c.bucket for c in self.chunks])
            out["groups"][:, : self.k] = np.concatenate([c.groups for c in self.chunks])
            out["groups"][:, self.k :] = -1
            out["cell"] = np.concatenate([c.cell for c in self.chunks])
        return out

    def load(self, ring: WindowRing, entries: npt.NDArray[Any], remap: I64) -> None:
        """Restore exported entries (group indices remapped) and rebuild ``future``."""
        if not len(entries):
            return
        g = entries["groups"][:, : self.k].astype(np.int64)
        g = remap[g]
        c = _Chunk(
            entries["label_bucket"].copy(),
            entries["bucket"].copy(),
            g.astype(np.int32),
            entries["cell"].astype(np.int64),
        ).take(np.argsort(entries["label_bucket"], kind="stable"))
        self._sync(ring)
        self._add(c.take(self.future.is_live(c.bucket)), +1)
        self.chunks = [c]


def arrivals(partitions: Iterable[Any], m: int, k: int, counts: I64) -> I64:
    """``Engine.label_arrivals``: ``counts`` is bucket ``k − 1``'s counts when labels are
    counted by arrival time (returned as they are), else zeros of the right shape, to which
    each partition's :meth:`LabelLedger.arrivals` of model ``m`` are added."""
    if counts.any():
        return counts
    for st in partitions:
        counts += st.ledgers[m].arrivals(st.rings[m], k)[: len(counts)]
    return counts
