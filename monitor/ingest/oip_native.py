"""Bare Open Inference Protocol JSON batches through the compiled decoder
(``native/src/oip.rs``): the columns of :meth:`ServingFast._decode` (with the rows' keys
instead of the ids' text), from a poll's records, without a Python object per tensor.

A single-row call is two records per decision, and msgspec's typed structs plus the per-record
Python around them (ids, rows, columns) cost ~4 µs a decision against the monitor-JSON path's
~2 µs for decoding and counting one; the compiled decoder reads the records, checks each against
the layout the Python path learned, and returns the columns in one call. It declines (None)
whatever it does not take, and the Python fast path decodes the batch as before; on what it
takes, both give the same columns (``tests/ingest/test_oip_native.py``).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from monitor.config.serving import TensorMapping
from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.keys import RowIds
from monitor.ingest.native import guarded
from monitor.ingest.oip import DATATYPES, MAX_ELEMENTS
from monitor.ingest.serving_checks import DECISIONS, NUMBERS, Decoded, place
from monitor.ingest.serving_layout import Layout


def decode(
    native: ModuleType, rb: Any, layout: Layout, plan: DecodePlan, i: int, m: TensorMapping
) -> Decoded | None:
    """The batch's (requests, responses) columns of model ``i`` (mapped by ``m``, calls of
    ``layout``), or None when the compiled decoder declines (or the batch is no poll's)."""
    records = getattr(rb, "records", None)
    if records is None or layout.request is None or layout.response is None:
        return None
    model = plan.models[i]
    attrs = [] if m.stream else [
        place(layout.request, m.attributes[a.name], DATATYPES)[:2] for a in model.attributes
    ]  # fmt: skip
    score = place(layout.response, m.score, NUMBERS)[:2] if m.score else None
    pred = place(layout.response, m.prediction, DECISIONS)[:2] if m.prediction else None
    out = guarded(
        "decode_oip",
        lambda: native.decode_oip(
            records if isinstance(records, list) else list(records),
            layout.request,
            layout.response,
            attrs,
            (score, pred),
            model.threshold,
            model.name,
            plan.time_bounds(),
            plan.limits.max_record_bytes,
            MAX_ELEMENTS,
        ),
    )
    if out is None:
        return None
    q_rows, q_keys, q_long, q_ts, columns, a_rows, a_keys, a_long, a_ts, which, s, d = out
    q_n, a_n = np.frombuffer(q_rows, dtype=np.int64), np.frombuffer(a_rows, dtype=np.int64)
    q = RowIds([], q_n, keys=np.frombuffer(q_keys, dtype=np.uint64), longest=q_long)
    a = RowIds([], a_n, keys=np.frombuffer(a_keys, dtype=np.uint64), longest=a_long)
    return (q, np.frombuffer(q_ts), columns if len(q_n) else [[] for _ in model.attributes]), (
        a,
        np.frombuffer(a_ts),
        np.frombuffer(s),
        np.frombuffer(d, dtype=np.uint8),
        np.frombuffer(which, dtype=np.int64),
    )
