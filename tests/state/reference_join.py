"""The pending store as it was before ``monitor/state/pending.py``: expired rows removed at once
(every row read and copied at each expiry). The reference that the lazy store must equal, row for
row, in ``tests/state/test_pending.py`` and ``bench/pending_expiry.py``.

The engine's interface changed: ``expire`` returns a count (of the removed rows awaiting a
label), ``label`` marks rows labelled. One fix: the expiry's shortcut skips the scan only when no row can be due — every row's bucket
at or past the *highest* model cut. It compared with the lowest, so while one model's cut lagged
(a model with a longer TTL, or with no event yet in the partition: cut at -2**62), the other
models' rows never expired.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.state.join import LABELLED, PENDING, SortedTable, pending_dtype


class ReferencePendingStore(SortedTable):
    """Predictions awaiting a label, and labelled ones kept until the TTL (de-duplication)."""

    def __init__(self, n_sets: int, *, max_size: int) -> None:
        super().__init__(pending_dtype(n_sets), max_size=max_size, age_field="bucket")
        self.n_sets = n_sets

    def awaiting_label(self) -> int:
        return int((self.main["state"] == PENDING).sum() + (self.delta["state"] == PENDING).sum())

    def label(self, idx: npt.NDArray[np.int64], rows: npt.NDArray[Any]) -> None:
        self.set_field(idx, "state", LABELLED)

    def expire(self, min_bucket_by_model: npt.NDArray[np.int64]) -> int:
        if not len(self) or self._min_age >= min_bucket_by_model.max():
            return 0
        data = self.data
        gone: npt.NDArray[Any] = self.remove_mask(
            data["bucket"] < min_bucket_by_model[data["model"]]
        )
        return int((gone["state"] == PENDING).sum())
