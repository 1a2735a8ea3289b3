"""The pending-prediction store, whose TTL expiry costs nothing per bucket but its own rows.

Why not remove expired rows at once: the store is sorted by key, not by age, so finding the
rows of the buckets that just passed the TTL means reading every row, and removing them means
copying every row — for each bucket, while only ~1/(TTL in buckets) of them go. Instead:

* :class:`AgeCounts` keeps how many rows each (model, bucket) holds in each run (main, delta)
  and how many of them await a label: expiry sums the buckets below the cut — the counts it
  must report — and marks those rows *dead* (``bucket < cut[model]``) without touching them;
* dead rows are logically absent: :meth:`PendingStore.find` does not see them, ``len`` and
  the counts leave them out, and they are physically dropped (one copy, :meth:`_purge`) once
  they are an eighth of the table, before a row that would collide with one goes in, before
  the size cap is applied and before the rows are read out (``data``, for checkpoints).

The live rows of each run, and so merges, evictions and checkpoints, are exactly those of the
store that removed expired rows at once (``tests/state/reference_join.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.state.join import LABELLED, PENDING, SortedTable, blobs, pending_dtype

I64 = npt.NDArray[np.int64]
# AgeCounts' count rows: all rows in the main run, all rows in the delta run, awaiting a label
MAIN, DELTA, AWAITING = 0, 1, 2
_NONE = np.iinfo(np.int64).min  # past the newest bucket held: never equal to a newer bucket
_NO_KEYS = np.zeros(0, np.uint64)


class AgeCounts:
    """Rows per (model, bucket): in the main run, in the delta run, awaiting a label.

    Per model, sorted distinct buckets ``b[lo:hi]`` with counts ``c[:, lo:hi]``; ``b[hi]`` is
    always ``_NONE``. Buckets mostly arrive in order and leave from the oldest, so appending
    and dropping a prefix are the common moves.
    """

    def __init__(self) -> None:
        self._b: dict[int, I64] = {}
        self._c: dict[int, I64] = {}
        self._lo: dict[int, int] = {}
        self._hi: dict[int, int] = {}
        self.awaiting = 0  # rows awaiting a label, over all models

    def count(self, rows: npt.NDArray[Any], run: int | I64, sign: int) -> None:
        """Count table ``rows`` in (``sign`` 1) or out (-1); ``run`` MAIN / DELTA (per row)."""
        if not len(rows):
            return
        waits = rows["state"] == PENDING
        n_waiting = int(np.count_nonzero(waits))
        self.awaiting += sign * n_waiting
        model, bucket = rows["model"], rows["bucket"]
        if isinstance(run, int) and bucket.min() == bucket.max() and model.min() == model.max():
            m = int(model[0])  # the usual insert: one model, one bucket
            p = self._column(m, int(bucket[0]))
            self._c[m][run, p] += sign * len(rows)
            self._c[m][AWAITING, p] += sign * n_waiting
            return
        for m, sel in self._by_model(model):
            pos = self._positions(m, bucket if sel is None else bucket[sel])
            c = self._c[m]
            flat, cap = c.reshape(-1), c.shape[1]
            r = run if isinstance(run, int) or sel is None else run[sel]
            np.add.at(flat, r * cap + pos, sign)
            if n_waiting:
                np.add.at(flat, AWAITING * cap + pos[waits if sel is None else waits[sel]], sign)

    def labelled(self, model: npt.NDArray[Any], bucket: I64, sign: int) -> None:
        """Rows stopped (``sign`` -1) or started (1) awaiting a label."""
        self.awaiting += sign * len(bucket)
        for m, sel in self._by_model(model):
            pos = self._positions(m, bucket if sel is None else bucket[sel])
            c = self._c[m]
            np.add.at(c.reshape(-1), AWAITING * c.shape[1] + pos, sign)

    @staticmethod
    def _by_model(model: npt.NDArray[Any]) -> list[tuple[int, Any]]:
        m0 = int(model[0])
        if bool(np.all(model == m0)):
            return [(m0, None)]
        return [(m, model == m) for m in np.unique(model).tolist()]

    def _column(self, m: int, bucket: int) -> int:
        """Column of one bucket: in Python when it is the newest held or a newer one."""
        hi, b = self._hi.get(m, 0), self._b.get(m)
        if b is not None and hi > self._lo[m]:
            if b[hi - 1] == bucket:
                return hi - 1
            if b[hi - 1] < bucket and hi + 1 < len(b):
                b[hi] = bucket
                self._hi[m] = hi + 1
                return hi
        return int(self._positions(m, np.array([bucket], np.int64))[0])

    def _positions(self, m: int, bk: I64) -> I64:
        """Columns of ``bk`` in model ``m``'s arrays, making room for new buckets."""
        if m not in self._b:
            self._b[m], self._c[m] = np.full(1, _NONE), np.zeros((3, 1), np.int64)
            self._lo[m] = self._hi[m] = 0
        lo, hi, b = self._lo[m], self._hi[m], self._b[m]
        at = lo + np.searchsorted(b[lo:hi], bk)
        if hi > lo and np.array_equal(b[at], bk):  # all held already (b[hi] matches none)
            return at
        new = np.unique(bk)
        if hi > lo and new[0] > b[hi - 1] and hi + len(new) < len(b):
            b[hi : hi + len(new)] = new  # after the newest: append in place
            self._hi[m] = hi = hi + len(new)
            return lo + np.searchsorted(b[lo:hi], bk)
        have = b[lo:hi]
        merged = np.union1d(have, new)
        cap = max(64, 2 * len(merged))
        c = np.zeros((3, cap), np.int64)
        c[:, np.searchsorted(merged, have)] = self._c[m][:, lo:hi]
        self._b[m] = np.full(cap, _NONE)
        self._b[m][: len(merged)] = merged
        self._c[m], self._lo[m], self._hi[m] = c, 0, len(merged)
        return np.searchsorted(merged, bk)

    def take_below(self, cut: I64) -> tuple[int, int, int]:
        """Drop the buckets below ``cut[model]``: (rows in main, rows in delta, awaiting)."""
        out = np.zeros(3, np.int64)
        for m, b in self._b.items():
            if m >= len(cut):
                continue
            lo, hi = self._lo[m], self._hi[m]
            k = int(np.searchsorted(b[lo:hi], cut[m]))
            if k:
                out += self._c[m][:, lo : lo + k].sum(axis=1)
                self._lo[m] = lo + k
        self.awaiting -= int(out[AWAITING])
        return int(out[MAIN]), int(out[DELTA]), int(out[AWAITING])

    def merge(self) -> None:
        """The delta run was merged into main."""
        for c in self._c.values():
            c[MAIN] += c[DELTA]
            c[DELTA] = 0


class PendingStore(SortedTable):
    """Predictions awaiting a label, and labelled ones kept until the TTL (de-duplication)."""

    DEAD_SHARE = 8  # dead rows are dropped once they are 1/DEAD_SHARE of the physical rows

    def __init__(self, n_sets: int, *, max_size: int) -> None:
        super().__init__(pending_dtype(n_sets), max_size=max_size, age_field="bucket")
        self.n_sets = n_sets
        self._ages = AgeCounts()
        self._cut = np.zeros(0, np.int64)  # the last expiry's min bucket per model
        self._cut_max = _NONE
        self._dead = [0, 0]  # dead rows still in main, in delta
        self._masked = _NO_KEYS  # keys of dead rows that find() did not see (sorted)

    def __len__(self) -> int:
        return len(self.main) + len(self.delta) - self._dead[0] - self._dead[1]

    @property
    def data(self) -> npt.NDArray[Any]:
        """The live rows, main run then delta run (each sorted by key, not the whole)."""
        self._purge()
        return super().data

    def load(self, rows: npt.NDArray[Any]) -> None:
        super().load(rows)
        self._ages = AgeCounts()
        self._cut = np.zeros(0, np.int64)
        self._dead = [0, 0]
        self._masked = _NO_KEYS
        self._ages.count(self.main, MAIN, 1)

    def awaiting_label(self) -> int:
        """Rows whose label has not arrived (the rest are labelled, kept until the TTL)."""
        return self._ages.awaiting

    def find(
        self, keys: npt.NDArray[np.uint64], order: npt.NDArray[np.int64] | None = None
    ) -> npt.NDArray[np.int64]:
        """Row index of each key, ``-1`` where absent (or dead)."""
        idx = super().find(keys, order)
        if self._dead[0] or self._dead[1]:
            hit = np.flatnonzero(idx >= 0)
            if len(hit):
                rows = self.rows(idx[hit])
                cut = self._cut[0] if len(self._cut) == 1 else self._cut[rows["model"]]
                dead = hit[rows["bucket"] < cut]
                if len(dead):
                    idx[dead] = -1
                    self._masked = np.union1d(self._masked, keys[dead])
        return idx

    def label(self, idx: npt.NDArray[np.int64], rows: npt.NDArray[Any]) -> None:
        """Mark the rows at ``idx`` labelled; ``rows`` are their records, all awaiting (the
        join has them at hand: :meth:`set_field` would read them again)."""
        if len(idx):
            self._ages.labelled(rows["model"], rows["bucket"], -1)
            super().set_field(idx, "state", LABELLED)

    def set_field(self, idx: npt.NDArray[np.int64], name: str, value: Any) -> None:
        if name == "state" and len(idx):
            rows = self.rows(idx)
            was = rows["state"] == PENDING
            if np.ndim(value) == 0:  # one value for all: the rows move one way
                sign = -1 if value != PENDING else 1
                moves = [(sign, was if sign < 0 else ~was)]
            else:
                moves = [(-1, was & (value != PENDING)), (1, ~was & (value == PENDING))]
            for sign, moved in moves:
                if np.any(moved):
                    self._ages.labelled(rows["model"][moved], rows["bucket"][moved], sign)
        super().set_field(idx, name, value)

    def insert(self, rows: npt.NDArray[Any], *, presorted: bool = False) -> npt.NDArray[Any]:
        """Insert rows whose keys are absent: :meth:`find` gave -1 for each since the last
        expiry (a dead row's key is seen then, and its row dropped first)."""
        if len(rows):
            if (self._dead[0] or self._dead[1]) and self._purge_before(rows):
                self._purge()
            self._ages.count(rows, DELTA, 1)
        return super().insert(rows, presorted=presorted)

    def _purge_before(self, rows: npt.NDArray[Any]) -> bool:
        """Whether dead rows must go before ``rows`` do: a key of a dead row, a row that would
        count as dead, or more physical rows than the size cap."""
        if len(self.main) + len(self.delta) + len(rows) > self.max_size:
            return True
        if len(self._masked):
            if len(self._masked) * 32 > len(self.main) + len(self.delta):
                return True  # (labels keep coming for expired rows: keep the list short)
            pos = np.searchsorted(self._masked, rows["key"])
            if np.any(self._masked[np.minimum(pos, len(self._masked) - 1)] == rows["key"]):
                return True
        return int(rows["bucket"].min()) < self._cut_max and bool(
            np.any(rows["bucket"] < self._cut[rows["model"]])
        )

    def _merge_due(self) -> bool:
        live_main, live_delta = len(self.main) - self._dead[0], len(self.delta) - self._dead[1]
        return live_delta > max(self.DELTA_MIN, live_main // 4)

    def _merge(self) -> None:
        super()._merge()
        self._ages.merge()
        self._dead = [self._dead[0] + self._dead[1], 0]

    def remove_mask(self, mask: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
        self._purge()  # mask addresses the live rows
        n_main = int(mask[: len(self.main)].sum())
        gone = super().remove_mask(mask)
        self._ages.count(gone, np.where(np.arange(len(gone)) < n_main, MAIN, DELTA), -1)
        return gone

    def expire(self, min_bucket_by_model: npt.NDArray[np.int64]) -> int:
        """Expire rows older than their model's TTL (``bucket < min_bucket_by_model[model]``);
        returns how many of them were awaiting a label."""
        cut = np.asarray(min_bucket_by_model, dtype=np.int64)
        if (self._dead[0] or self._dead[1]) and (
            len(cut) != len(self._cut) or np.any(cut < self._cut)
        ):
            self._purge()  # dead rows must stay below the cut
        in_main, in_delta, awaiting = self._ages.take_below(cut)
        self._cut = cut.copy()
        self._cut_max = int(cut.max()) if len(cut) else _NONE
        self._dead = [self._dead[0] + in_main, self._dead[1] + in_delta]
        if (self._dead[0] + self._dead[1]) * self.DEAD_SHARE >= len(self.main) + len(self.delta):
            self._purge()
        return awaiting

    def _purge(self) -> None:
        """Drop the dead rows physically (the live rows keep their runs and order)."""
        if not (self._dead[0] or self._dead[1]):
            return
        if self._dead[0]:
            self.main = self._live(self.main, self._dead[0])
        if self._dead[1]:
            self.delta = self._live(self.delta, self._dead[1])
        self._dead = [0, 0]
        self._masked = _NO_KEYS

    def _live(self, rows: npt.NDArray[Any], dead: int) -> npt.NDArray[Any]:
        keep = rows["bucket"] >= self._cut[rows["model"]]
        assert len(rows) - int(keep.sum()) == dead, "dead rows miscounted"
        out: npt.NDArray[Any] = blobs(rows)[keep].view(rows.dtype)
        return out
