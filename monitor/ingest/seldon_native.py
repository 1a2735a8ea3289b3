"""The compiled fast path of Seldon Core 2's protobuf records (``native/src/seldon.rs``): the
Python fast path's (``seldon_fast.py``) columns from one call over the batch's records.

Single-row calls bring two records per decision; read, parsed and checked record by record in
Python (upb, then numpy per tensor position) they cost several times the monitor-JSON path. The
compiled function reads the records themselves (not ``rb.values``), so a batch it accepts
costs no Python per record beyond the objects of its columns; it computes the rows' keys too
(``native/src/keys.rs``). It declines (None) anything
unusual, and :class:`~monitor.ingest.seldon_fast.SeldonFast` then decodes the batch in Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from monitor.config.serving import Column, TensorMapping
from monitor.ingest import seldon
from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.keys import RowIds
from monitor.ingest.native import guarded, native

Place = tuple[str, int | None]


def _place(c: Column | None) -> Place | None:
    return None if c is None else (c.tensor, c.column)


class SeldonNative:
    """One model's batches through ``monitor_native.decode_seldon``."""

    def __init__(
        self, plan: DecodePlan, model: int, mapping: TensorMapping, responses_topic: str | None
    ) -> None:
        self.plan, self.responses_topic = plan, responses_topic
        self.name = plan.models[model].name
        attrs = plan.models[model].attributes
        self.n_attrs = len(attrs)
        self.attrs = None if mapping.stream else [_place(mapping.attributes[a.name]) for a in attrs]
        self.score, self.pred = _place(mapping.score), _place(mapping.prediction)
        self.threshold = plan.models[model].threshold
        self.hints: dict[str, bool] = {}  # topic -> may this model's records be on it

    def decode(self, rb: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        """The columns of :meth:`SeldonFast.decode`, or None (not built, turned off, declined)."""
        mod = native()
        records = getattr(rb, "records", None)
        if mod is None or records is None:
            return None
        topic = getattr(rb, "topic", "")
        ours = self.hints.get(topic)
        if ours is None:
            hint = seldon.topic_model(topic)
            ours = self.hints[topic] = not (hint in self.plan.model_index and hint != self.name)
        if not ours:
            return None
        lim = self.plan.limits
        lo, hi = self.plan.time_bounds()
        out = guarded(
            "decode_seldon",
            lambda: mod.decode_seldon(
                records,
                topic == self.responses_topic,
                lim.max_record_bytes,
                lim.max_rows_per_record,
                lim.max_id_length,
                lo,
                hi,
                self.attrs,
                self.score,
                self.pred,
                self.threshold,
            ),
        )
        if out is None:
            return None
        q_ids, q_rows, q_ts, columns, a_ids, a_rows, a_ts, scores, preds, which, q_keys, a_keys = (
            out
        )
        q_n, a_n = np.frombuffer(q_rows, dtype=np.int64), np.frombuffer(a_rows, dtype=np.int64)
        asked = RowIds(q_ids, q_n, keys=np.frombuffer(q_keys, dtype=np.uint64))
        if not q_ids:
            columns = [[] for _ in range(self.n_attrs)]
        answered = RowIds(a_ids, a_n, keys=np.frombuffer(a_keys, dtype=np.uint64))
        return (asked, np.frombuffer(q_ts, dtype=np.float64), columns), (
            answered,
            np.frombuffer(a_ts, dtype=np.float64),
            np.frombuffer(scores, dtype=np.float64),
            np.frombuffer(preds, dtype=np.uint8),
            np.frombuffer(which, dtype=np.int64),
        )
