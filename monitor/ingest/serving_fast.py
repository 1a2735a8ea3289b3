"""Fast path of decoding a serving stack's records: typed structs of the batch's layout, then
checks and columns over the whole batch.

As for the monitor's own events (``decode_fast.py``), almost every batch is clean, and a model's
calls all have one *layout* (``serving_layout.py``): its typed structs let msgspec check in C
what ``oip.py`` checks value by value, one decoder call per record. What remains (data length against the shape, rows alike across tensors, finite floats, scores in
[0, 1], ids, models, times) is checked over columns, and the rows are built column by column.

The cyclic garbage collector is paused while a batch is decoded: every tensor's data is a list,
and a batch allocates tens of thousands of them, each of which would start and feed collections
that find nothing (payloads hold no cycles; reference counting frees them when the batch is
done). It is resumed as it was, whatever happens.

Anything unusual (another layout, a tombstone, a missing id, one bad value) gives
up, and the careful path (``serving_decode.py``) decodes the batch with its dead letters. On
what the fast path accepts, both give the same rows (``tests/ingest/test_serving_fast.py``).
"""

from __future__ import annotations

import gc
import math
from itertools import chain
from typing import Any, cast

import msgspec
import numpy as np
import numpy.typing as npt

from monitor.config.serving import TensorMapping
from monitor.ingest import oip_native
from monitor.ingest.cloudevents import Columns, columns
from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.keys import RowIds
from monitor.ingest.native import native
from monitor.ingest.oip import DATATYPES
from monitor.ingest.serving_checks import (
    DECISIONS,
    NUMBERS,
    Decoded,
    GiveUp,
    decisions,
    header,
    place,
    record_times,
    small_enough,
    within_limits,
)
from monitor.ingest.serving_layout import Layout, Signature, learn


class ServingFast:
    """Whole-batch decoding of one model's serving traffic (the only serving model)."""

    def __init__(self, plan: DecodePlan, fmt: str, model: int, mapping: TensorMapping) -> None:
        self.plan, self.fmt, self.model, self.m = plan, fmt, model, mapping
        self.name = plan.models[model].name
        self.layout: Layout | None = None

    def decode(self, rb: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        """((request row ids, their times, raw group values per attribute), (response row ids,
        their times, scores, decisions, the batch index of each row's record)), or None when
        the careful path must decode."""
        collecting = gc.isenabled()
        gc.disable()  # see the module's docstring
        try:
            compiled = native() if self.fmt == "oip-json" else None
            out = None
            if compiled is not None and self.layout is not None:
                out = oip_native.decode(compiled, rb, self.layout, self.plan, self.model, self.m)
            if out is None:
                small_enough(self.plan, rb)
                out = self._decode(rb)
            return within_limits(self.plan, out)
        except Exception:  # GiveUp, or whatever the bytes did: the careful path judges them
            return None
        finally:
            if collecting:
                gc.enable()

    def _decode(self, rb: Any) -> Decoded:
        values = rb.values
        records = getattr(rb, "records", None)
        if self.fmt == "kserve-cloudevents":
            if records is None:
                raise GiveUp
            events = columns(records)
            if events is None:
                raise GiveUp
            bodies, kinds = events.data, events.kind
        else:
            bodies, events, kinds = values, None, None
        payloads = self._payloads(bodies)
        if kinds is None:  # a payload with inputs is a request (its outputs name what it asks)
            is_req = [p.inputs is not None for p in payloads]
        else:
            if set(kinds) - {"request", "response"}:
                raise GiveUp
            is_req = [k == "request" for k in kinds]
            if any(p.inputs is None for p, r in zip(payloads, is_req, strict=True) if r):
                raise GiveUp
        if any(p.outputs is None for p, r in zip(payloads, is_req, strict=True) if not r):
            raise GiveUp
        times = self._times(rb, events)
        ids = self._ids(payloads, events, records)
        reqs = [i for i, r in enumerate(is_req) if r]
        resps = [i for i, r in enumerate(is_req) if not r]
        self._models(payloads, events, resps)
        asked = self._requests([payloads[i] for i in reqs], [ids[i] for i in reqs], times[reqs])
        answered = self._responses(
            [payloads[i] for i in resps], [ids[i] for i in resps], times[resps]
        )
        r_ids, r_ts, scores, preds, rows_of = answered
        return asked, (r_ids, r_ts, scores, preds, np.asarray(resps, dtype=np.int64)[rows_of])

    def _payloads(self, bodies: list[Any]) -> list[Any]:
        for attempt in range(2):
            if self.layout is not None:
                try:
                    return list(map(self.layout.decoder.decode, bodies))
                except (msgspec.DecodeError, TypeError, RecursionError):
                    if attempt:
                        raise GiveUp from None
            learned = learn(bodies, self.layout)
            if learned is None or (
                self.layout is not None
                and (learned.request, learned.response)
                == (self.layout.request, self.layout.response)
            ):
                raise GiveUp
            self.layout = learned
        raise GiveUp

    def _times(self, rb: Any, events: Columns | None) -> npt.NDArray[np.float64]:
        if events is not None and events.time is not None:  # as the careful path, event by event
            lo, hi = self.plan.time_bounds()
            at = self.plan.event_time
            pairs = zip(events.time, rb.timestamps_ms, strict=True)
            return np.array([at(t, s, lo, hi, seconds=True) for t, s in pairs], np.float64)
        return record_times(self.plan, rb)

    def _ids(self, payloads: list[Any], events: Columns | None, records: Any) -> list[str]:
        ids: list[str | None] = [p.id or None for p in payloads]  # empty: none (oip.row_ids)
        if None in ids:
            if events is not None:
                ids = [e if i is None else i for i, e in zip(ids, events.id, strict=True)]
            else:
                if records is None:
                    raise GiveUp
                ids = [
                    header(r.headers, "x-request-id") if i is None else i
                    for i, r in zip(ids, records, strict=True)
                ]
            if None in ids:
                raise GiveUp
        if "" in ids:
            raise GiveUp
        return cast("list[str]", ids)

    def _models(self, payloads: list[Any], events: Columns | None, resps: list[int]) -> None:
        """Every record is the one serving model's (else the careful path sorts them out)."""
        names = {payloads[i].model_name for i in resps}
        if events is not None:  # the CloudEvent's name, else the response's (as the careful path)
            hints = events.servicename
            names = {h for h in hints if h is not None} | {
                payloads[i].model_name for i in resps if hints[i] is None
            }
        if not names <= {None, self.name}:
            raise GiveUp

    def _requests(
        self, payloads: list[Any], ids: list[str], times: npt.NDArray[np.float64]
    ) -> tuple[RowIds, npt.NDArray[np.float64], list[list[Any]]]:
        layout = self.layout
        assert layout is not None
        if not payloads:
            return RowIds([], []), times, [[] for _ in self.plan.models[self.model].attributes]
        sig = layout.request
        if sig is None:
            raise GiveUp
        n_rows = _checked_rows([p.inputs for p in payloads], sig)
        columns: list[list[Any]] = []
        for attr in self.plan.models[self.model].attributes if not self.m.stream else ():
            k, col, width, nested = place(sig, self.m.attributes[attr.name], DATATYPES)
            data = [p.inputs[k].data for p in payloads]
            columns.append(_column(data, col, width, nested))
        return RowIds(ids, n_rows), np.repeat(times, n_rows), columns

    def _responses(
        self, payloads: list[Any], ids: list[str], times: npt.NDArray[np.float64]
    ) -> tuple[
        RowIds,
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[Any],
        npt.NDArray[np.int64],
    ]:
        layout = self.layout
        assert layout is not None
        if not payloads:
            empty = np.zeros(0)
            none = RowIds([], [])
            return none, empty, empty, np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64)
        sig = layout.response
        if sig is None:
            raise GiveUp
        n_rows = _checked_rows([p.outputs for p in payloads], sig)
        columns = {}
        for name, where, allowed in (
            ("score", self.m.score, NUMBERS),
            ("pred", self.m.prediction, DECISIONS),
        ):
            if where is not None:
                k, col, width, nested = place(sig, where, allowed)
                columns[name] = _column([p.outputs[k].data for p in payloads], col, width, nested)
        scores, preds = decisions(
            int(n_rows.sum()),
            columns.get("score"),
            columns.get("pred"),
            self.plan.models[self.model].threshold,
        )
        which = np.repeat(np.arange(len(payloads)), n_rows)  # each row's payload
        return RowIds(ids, n_rows), np.repeat(times, n_rows), scores, preds, which


def _checked_rows(halves: list[Any], sig: Signature) -> npt.NDArray[np.int64]:
    """Rows per payload, once every tensor's data fill its shape and all tensors have as many
    rows. (Every float is finite already: JSON has no NaN or Infinity, and msgspec refuses a
    number out of a float's range.)"""
    rows = np.array([h[0].shape[0] for h in halves], dtype=np.int64)
    for k, (_, _, trailing, nested) in enumerate(sig):
        width = 1 if nested else math.prod(trailing)  # a nested row's length msgspec checked
        if k and not (np.array([h[k].shape[0] for h in halves]) == rows).all():
            raise GiveUp
        if not (np.array([len(h[k].data) for h in halves]) == rows * width).all():
            raise GiveUp
    return rows


def _column(data: list[list[Any]], col: int, width: int, nested: bool) -> list[Any]:
    """One value per row, in the order of the payloads and their rows."""
    if nested:
        return [row[col] for d in data for row in d]
    if width == 1:
        return list(chain.from_iterable(data))
    return list(chain.from_iterable(d[col::width] for d in data))
