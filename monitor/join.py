"""Delayed-label join: compact, bounded tables keyed by the 64-bit prediction-id key.

Why sorted numpy record arrays and not a dict: a Python ``dict`` of tuples costs well over a
hundred bytes per pending prediction, and a production model can have millions of predictions
awaiting labels that arrive weeks later. A packed record (key, bucket, score, group indices,
model, prediction, state) is ~30 bytes; lookups of a whole batch are one ``searchsorted``, and
inserting a batch is one linear merge.

Two tables use the same mechanism (:class:`SortedTable`):

* **pending predictions** — kept after their label arrives (``state = LABELLED``) until the
  TTL, so that a repeated prediction or a repeated label is recognised and counted once;
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
    """Records sorted by ``key`` (unique), with vectorized find / insert / remove / evict."""

    def __init__(self, dtype: np.dtype[Any], *, max_size: int, age_field: str) -> None:
        self.data: npt.NDArray[Any] = np.zeros(0, dtype=dtype)
        self.max_size = max_size
        self.age_field = age_field

    def __len__(self) -> int:
        return len(self.data)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def find(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """Row index of each key, ``-1`` where absent."""
        stored = self.data["key"]
        pos = np.searchsorted(stored, keys)
        ok = pos < len(stored)
        ok[ok] = stored[pos[ok]] == keys[ok]
        return np.where(ok, pos, -1).astype(np.int64)

    def insert(self, rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Insert rows whose keys are absent (caller guarantees uniqueness within ``rows``).

        Returns the rows evicted to respect ``max_size`` (oldest by ``age_field`` first).
        """
        if len(rows):
            order = np.argsort(rows["key"], kind="stable")
            rows = rows[order]
            pos = np.searchsorted(self.data["key"], rows["key"])
            self.data = np.insert(self.data, pos, rows)
        return self._evict_over_cap()

    def remove(self, mask: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
        """Remove and return the rows selected by ``mask``."""
        if not mask.any():
            return self.data[:0]
        gone = self.data[mask]
        self.data = self.data[~mask]
        return gone

    def _evict_over_cap(self) -> npt.NDArray[Any]:
        excess = len(self.data) - self.max_size
        if excess <= 0:
            return self.data[:0]
        age = self.data[self.age_field]
        oldest = (
            np.argpartition(age, excess - 1)[:excess] if excess < len(age) else np.arange(len(age))
        )
        mask = np.zeros(len(self.data), dtype=bool)
        mask[oldest] = True
        return self.remove(mask)


def first_occurrences(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
    """Mask of the first occurrence of each key (later repeats are duplicates)."""
    first = np.zeros(len(keys), dtype=bool)
    if len(keys):
        _, idx = np.unique(keys, return_index=True)
        first[idx] = True
    return first


class PendingStore(SortedTable):
    """Predictions awaiting (or recently given) a label."""

    def __init__(self, n_sets: int, *, max_size: int) -> None:
        super().__init__(pending_dtype(n_sets), max_size=max_size, age_field="bucket")
        self.n_sets = n_sets

    def expire(self, min_bucket_by_model: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """Remove rows older than their model's TTL (``bucket < min_bucket_by_model[model]``)."""
        if not len(self.data):
            return self.data[:0]
        too_old = self.data["bucket"] < min_bucket_by_model[self.data["model"]]
        return self.remove(too_old)


class EarlyLabels(SortedTable):
    """Labels that arrived before their prediction, held for a grace period."""

    def __init__(self, *, max_size: int) -> None:
        super().__init__(EARLY_DTYPE, max_size=max_size, age_field="ts")

    def take(self, keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
        """Remove and return the held labels for ``keys``: (positions in ``keys``, rows)."""
        idx = self.find(keys)
        hit = np.flatnonzero(idx >= 0)
        if not len(hit):
            return hit, self.data[:0]
        rows = self.data[idx[hit]]
        mask = np.zeros(len(self.data), dtype=bool)
        mask[idx[hit]] = True
        self.data = self.data[~mask]
        return hit, rows

    def expire(self, before_ts: float) -> npt.NDArray[Any]:
        return self.remove(self.data["ts"] < before_ts) if len(self.data) else self.data[:0]
