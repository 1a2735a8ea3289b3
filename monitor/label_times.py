"""Label increments by their own time, so that alert rules can read counts *as of* a boundary.

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

Evaluating boundary *k* settles through *k − 1* first; then
``counts_as_of(k) = ring.window(a, b) − future.window(a, b)``, at the cost of one window sum,
whatever the number of labels that ran ahead (a backlog read from the start of the topics).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.windows import I64, WindowRing


def ledger_dtype(n_sets: int) -> np.dtype[Any]:
    """One label increment: label-time bucket, counted bucket, groups (per set), cell, weight."""
    return np.dtype(
        [
            ("label_bucket", np.int64),
            ("bucket", np.int64),
            ("groups", np.int32, (n_sets,)),
            ("cell", np.int16),
            ("weight", np.int64),
        ]
    )


class LabelLedger:
    def __init__(self, *, n_buckets: int, n_cells: int, n_sets: int, k: int) -> None:
        self.future = WindowRing(n_buckets=n_buckets, n_cells=n_cells)
        self.chunks: list[npt.NDArray[Any]] = []
        self.dtype = ledger_dtype(n_sets)
        self.k = k  # attribute sets of this model (the first k group columns)
        self.settled: int | None = None  # label-time buckets <= this have left `future`

    def __len__(self) -> int:
        return sum(len(c) for c in self.chunks)

    def _sync(self, ring: WindowRing) -> None:
        """Follow the window ring's head and groups, so that slots mean the same buckets."""
        self.future.grow(ring.n_groups)
        if ring.head is not None:
            self.future.advance(ring.head)

    def _add(self, entries: npt.NDArray[Any], sign: int) -> None:
        live = self.future.is_live(entries["bucket"])
        e = entries[live]
        if not len(e):
            return
        k = self.k
        self.future.add(
            np.repeat(e["bucket"], k),
            e["groups"][:, :k].reshape(-1),
            np.repeat(e["cell"].astype(np.int64), k),
            sign * np.repeat(e["weight"], k),
        )

    def record(
        self,
        ring: WindowRing,
        label_buckets: I64,
        buckets: I64,
        groups: npt.NDArray[Any],
        cells: I64,
        weights: I64,
    ) -> None:
        """Note increments just added to ``ring`` (all live there) with their label times."""
        if not len(buckets):
            return
        entries = np.zeros(len(buckets), dtype=self.dtype)
        entries["label_bucket"] = label_buckets
        entries["bucket"] = buckets
        entries["groups"][:, : self.k] = groups
        entries["groups"][:, self.k :] = -1
        entries["cell"] = cells
        entries["weight"] = weights
        if self.settled is not None:  # labels from before a settled boundary need no undoing
            entries = entries[entries["label_bucket"] > self.settled]
            if not len(entries):
                return
        self._sync(ring)
        self._add(entries, +1)
        self.chunks.append(entries)

    def settle(self, ring: WindowRing, boundary: int) -> None:
        """Labels with time bucket <= ``boundary`` are known as of every later boundary."""
        if self.settled is not None and boundary <= self.settled:
            return
        self.settled = boundary
        self._sync(ring)
        kept = []
        for c in self.chunks:
            lb = c["label_bucket"]
            if lb.min() > boundary:  # the usual case for a backlog: nothing to do
                kept.append(c)
                continue
            done = lb <= boundary
            self._add(c[done], -1)
            if not done.all():
                kept.append(c[~done])
        self.chunks = kept

    def window(self, ring: WindowRing, start: int, end: int) -> I64:
        """Increments of labels after the settled boundary, over buckets ``start <= b < end``."""
        self._sync(ring)
        return self.future.window(start, end)

    # -- checkpoints ---------------------------------------------------------------------------
    def export(self) -> npt.NDArray[Any]:
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, self.dtype)

    def load(self, ring: WindowRing, entries: npt.NDArray[Any], remap: I64) -> None:
        """Restore exported entries (group indices remapped) and rebuild ``future``."""
        if not len(entries):
            return
        entries = entries.copy()
        g = entries["groups"]
        ok = g >= 0
        g[ok] = remap[g[ok]]
        self._sync(ring)
        self._add(entries, +1)
        self.chunks = [entries]
