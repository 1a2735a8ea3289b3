"""Delayed-label join: compact, bounded tables keyed by the 64-bit prediction-id key.

Why sorted numpy record arrays and not a dict: a Python ``dict`` of tuples costs well over a
hundred bytes per pending prediction, and a production model can have millions of predictions
awaiting labels that arrive weeks later. A packed record (key, bucket, score, group indices,
model, prediction, state) is ~30 bytes; lookups of a whole batch are one ``searchsorted``, and
inserting a batch is one linear merge.

Two tables use the same mechanism (:class:`SortedTable`):

* **pending predictions** — kept after their label arrives (``state = LABELLED``) until the
  TTL, so that a repeated prediction or a repeated label is recognised and counted once
  (``pending.py``: :class:`~monitor.state.pending.PendingStore`, with cheap expiry);
* **early labels** — labels whose prediction has not been seen yet, held for a grace period;
  when it expires (or the table is full) the label is an *orphan*.

Both are bounded: past ``max_size`` the oldest rows are evicted first and reported to the
caller, who counts them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

PENDING = 0
LABELLED = 1
NO_SCORE = np.uint32(0xFFFFFFFF)


def pending_dtype(n_sets: int) -> np.dtype[Any]:
    """Packed record of one pending prediction (24 + 2·n_sets bytes)."""
    return np.dtype(
        [
            ("key", np.uint64),
            ("bucket", np.int64),
            ("score", np.uint32),  # score in millionths, NO_SCORE when absent
            ("groups", np.int16, (n_sets,)),
            ("model", np.uint16),
            ("pred", np.uint8),
            ("state", np.uint8),
        ]
    )


EARLY_DTYPE = np.dtype([("key", np.uint64), ("ts", np.float64), ("label", np.uint8)])


class SortedTable:
    """Records sorted by ``key`` (unique), with vectorized find / insert / remove / evict.

    Two sorted runs, like a tiny LSM tree: a large ``main`` and a small ``delta`` that takes
    the inserts. Inserting into ``delta`` moves little memory; ``delta`` is merged into
    ``main`` once it reaches a quarter of it, so each row is moved O(1) times on average.
    Row indices returned by :meth:`find` address ``main`` then ``delta`` as if concatenated.

    Lookups take the batch's key order (:func:`key_order`) when the caller already has it: the
    engine sorts each batch's keys once and reuses the order for duplicates, finds and inserts.
    """

    DELTA_MIN = 32_768

    def __init__(self, dtype: np.dtype[Any], *, max_size: int, age_field: str) -> None:
        self.main = np.zeros(0, dtype=dtype)
        self.delta = np.zeros(0, dtype=dtype)
        self.max_size = max_size
        self.age_field = age_field
        self._min_age: float = np.inf  # lower bound of the ages held (for cheap expiry checks)

    # searchsorted on a strided field view is slow: each run keeps a contiguous copy of its
    # keys, made on first search after the run is replaced (runs are replaced, never mutated
    # in their keys)
    @property
    def main(self) -> npt.NDArray[Any]:
        return self._main

    @main.setter
    def main(self, rows: npt.NDArray[Any]) -> None:
        self._main = rows
        self._main_keys: npt.NDArray[np.uint64] | None = None

    @property
    def delta(self) -> npt.NDArray[Any]:
        return self._delta

    @delta.setter
    def delta(self, rows: npt.NDArray[Any]) -> None:
        self._delta = rows
        self._delta_keys: npt.NDArray[np.uint64] | None = None

    def _keys(self) -> npt.NDArray[np.uint64]:
        if self._main_keys is None:
            self._main_keys = np.ascontiguousarray(self._main["key"])
        return self._main_keys

    def _dkeys(self) -> npt.NDArray[np.uint64]:
        if self._delta_keys is None:
            self._delta_keys = np.ascontiguousarray(self._delta["key"])
        return self._delta_keys

    def __len__(self) -> int:
        return len(self.main) + len(self.delta)

    @property
    def nbytes(self) -> int:
        return int(self.main.nbytes + self.delta.nbytes)

    @property
    def data(self) -> npt.NDArray[Any]:
        """All rows, main run then delta run (each sorted by key, not the whole)."""
        return np.concatenate([self.main, self.delta]) if len(self.delta) else self.main

    def load(self, rows: npt.NDArray[Any]) -> None:
        """Replace the contents with ``rows`` (any order), e.g. from a checkpoint."""
        rows = np.ascontiguousarray(rows, dtype=self.main.dtype)
        self.main = rows[np.argsort(rows["key"], kind="stable")]
        self.delta = self.main[:0]
        self._refresh_min_age()

    def find(
        self, keys: npt.NDArray[np.uint64], order: npt.NDArray[np.int64] | None = None
    ) -> npt.NDArray[np.int64]:
        """Row index of each key, ``-1`` where absent; ``order`` is ``key_order(keys)``."""
        if order is None:
            order = key_order(keys)
        # searching with sorted needles walks the table in order (cache-friendly)
        sk = keys[order]
        found = _search_sorted(self._keys(), sk)
        if len(self.delta):
            miss = np.flatnonzero(found < 0)
            if len(miss):
                d = _search_sorted(self._dkeys(), sk[miss])
                found[miss] = np.where(d >= 0, d + len(self.main), -1)
        out = np.empty(len(keys), dtype=np.int64)
        out[order] = found
        return out

    def models_of(self, idx: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The model of the rows at ``idx`` (a table of predictions), -1 where ``idx`` is."""
        out = np.full(len(idx), -1, dtype=np.int64)
        hit = idx >= 0
        out[hit] = self.rows(idx[hit])["model"]
        return out

    def rows(self, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        n = len(self.main)
        if not len(self.delta):
            return blobs(self.main)[idx].view(self.main.dtype)
        out = np.empty(len(idx), dtype=self.main.dtype)
        in_main = idx < n
        blobs(out)[in_main] = blobs(self.main)[idx[in_main]]
        blobs(out)[~in_main] = blobs(self.delta)[idx[~in_main] - n]
        return out

    def set_field(self, idx: npt.NDArray[np.int64], name: str, value: Any) -> None:
        n = len(self.main)
        in_main = idx < n
        self.main[name][idx[in_main]] = value
        self.delta[name][idx[~in_main] - n] = value

    def insert(self, rows: npt.NDArray[Any], *, presorted: bool = False) -> npt.NDArray[Any]:
        """Insert rows whose keys are absent (caller guarantees uniqueness within ``rows``;
        ``presorted``: they are already in key order).

        Returns the rows evicted to respect ``max_size`` (oldest by ``age_field`` first).
        """
        if len(rows):
            if not presorted:
                rows = rows[np.argsort(rows["key"], kind="stable")]
            pos = np.searchsorted(self._dkeys(), rows["key"])
            self.delta = _insert(self.delta, pos, rows)
            self._min_age = min(self._min_age, float(rows[self.age_field].min()))
            if self._merge_due():
                self._merge()
        return self._evict_over_cap()

    def _merge_due(self) -> bool:
        return len(self.delta) > max(self.DELTA_MIN, len(self.main) // 4)

    def _merge(self) -> None:
        if len(self.delta):
            pos = np.searchsorted(self._keys(), self.delta["key"])
            self.main = _insert(self.main, pos, self.delta)
            self.delta = self.delta[:0]

    def remove_mask(self, mask: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
        """Remove and return rows selected by ``mask`` over :attr:`data` order."""
        n = len(self.main)
        gone = np.concatenate([blobs(self.main)[mask[:n]], blobs(self.delta)[mask[n:]]]).view(
            self.main.dtype
        )
        if len(gone):
            self.main = blobs(self.main)[~mask[:n]].view(self.main.dtype)
            self.delta = blobs(self.delta)[~mask[n:]].view(self.main.dtype)
            self._refresh_min_age()
        return gone

    def _refresh_min_age(self) -> None:
        ages = [float(a[self.age_field].min()) for a in (self.main, self.delta) if len(a)]
        self._min_age = min(ages) if ages else np.inf

    def _evict_over_cap(self) -> npt.NDArray[Any]:
        excess = len(self) - self.max_size
        if excess <= 0:
            return self.main[:0]
        data = self.data
        age = data[self.age_field]
        mask = np.zeros(len(age), dtype=bool)
        if excess >= len(age):
            mask[:] = True
        else:  # oldest first, ties by key: the same rows whatever the runs' layout
            cut = np.partition(age, excess - 1)[excess - 1]
            mask[age < cut] = True
            tied = np.flatnonzero(age == cut)
            need = excess - int(mask.sum())
            mask[tied[np.argsort(data["key"][tied], kind="stable")[:need]]] = True
        return self.remove_mask(mask)


def fresh_rows(rows: npt.NDArray[Any], table: SortedTable) -> tuple[npt.NDArray[Any], int]:
    """The rows not repeating a key of the batch or of a row waiting in ``table``, and how
    many were dropped (the first of each key is kept)."""
    order = key_order(rows["key"])
    keep = first_occurrences(rows["key"], order) & (table.find(rows["key"], order) < 0)
    return rows[keep], int(len(rows) - keep.sum())


def take_rows(table: SortedTable, idx: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    """Remove the rows at ``idx`` from ``table`` and return them, in ``idx`` order."""
    rows = table.rows(idx)
    if len(idx):
        mask = np.zeros(len(table), dtype=bool)
        mask[idx] = True
        table.remove_mask(mask)
    return rows


def blobs(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The records as opaque fixed-size blobs: copying those is ~10x faster in numpy than
    copying structured records field by field."""
    return a.view(np.dtype((np.void, a.dtype.itemsize)))


def _insert(
    a: npt.NDArray[Any], pos: npt.NDArray[np.int64], rows: npt.NDArray[Any]
) -> npt.NDArray[Any]:
    """Insert ``rows`` (sorted) at sorted positions ``pos`` of ``a``: one linear merge."""
    out = np.empty(len(a) + len(rows), dtype=a.dtype)
    new = pos + np.arange(len(rows))
    old = np.ones(len(out), dtype=bool)
    old[new] = False
    blobs(out)[new] = blobs(rows)
    blobs(out)[old] = blobs(a)
    return out


def _search_sorted(
    stored: npt.NDArray[np.uint64], keys: npt.NDArray[np.uint64]
) -> npt.NDArray[np.int64]:
    """Position of each of the (sorted) ``keys`` in ``stored``, ``-1`` where absent."""
    pos = np.searchsorted(stored, keys)
    ok = pos < len(stored)
    ok[ok] = stored[pos[ok]] == keys[ok]
    return np.where(ok, pos, -1).astype(np.int64)


def key_order(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """Stable sort order of a batch's keys: equal keys keep their arrival order."""
    return np.argsort(keys, kind="stable")


def first_occurrences(
    keys: npt.NDArray[np.uint64],
    order: npt.NDArray[np.int64] | None = None,
    eligible: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.bool_]:
    """Mask of the first occurrence of each key (later repeats are duplicates).

    With a stable order, the first of each run of equal sorted keys is the earliest to arrive.
    ``eligible``: only those can be the first (a copy already too old to count does not make
    a later one a duplicate); the others are marked first unless an eligible copy came earlier.
    """
    if order is None:
        order = key_order(keys)
    sk = keys[order]
    run_start = np.ones(len(keys), dtype=bool)
    run_start[1:] = sk[1:] != sk[:-1]
    first = np.empty(len(keys), dtype=bool)
    if eligible is None:
        first[order] = run_start
        return first
    el = eligible[order].astype(np.int64)
    before = np.cumsum(el) - el  # eligible copies before each sorted position
    runs = np.cumsum(run_start) - 1
    first[order] = before == before[np.flatnonzero(run_start)][runs]
    return first


class EarlyLabels(SortedTable):
    """Labels that arrived before their prediction, held for a grace period."""

    def __init__(self, *, max_size: int) -> None:
        super().__init__(EARLY_DTYPE, max_size=max_size, age_field="ts")

    def take(
        self, keys: npt.NDArray[np.uint64], order: npt.NDArray[np.int64] | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Remove and return the held labels for ``keys``: (positions in ``keys``, rows)."""
        idx = self.find(keys, order)
        hit = np.flatnonzero(idx >= 0)
        if not len(hit):
            return hit, self.main[:0]
        rows = self.rows(idx[hit])
        mask = np.zeros(len(self), dtype=bool)
        mask[idx[hit]] = True
        self.remove_mask(mask)
        return hit, rows

    def expire(self, before_ts: float) -> npt.NDArray[Any]:
        if not len(self) or self._min_age >= before_ts:
            return self.main[:0]
        return self.remove_mask(self.data["ts"] < before_ts)


def other_model(
    keys: npt.NDArray[np.uint64],
    models: npt.NDArray[np.uint16],
    dup: npt.NDArray[np.bool_],
    held: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """Duplicates whose earlier copy is another model's prediction: the same id, no earlier
    copy of this model in the batch, and the table's row (``held``: its model, -1 without one)
    not of this model. Labels name decisions by id alone, so such a prediction cannot be told
    apart from the other model's: it is counted as ``shared_id_predictions``, not as a
    repeat (README: ids must be unique across the models of one monitor)."""
    pair = keys ^ (models.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    out: npt.NDArray[np.bool_] = dup & first_occurrences(pair) & (held != models)
    return out
