"""Fast path of decoding Seldon Core 2's protobuf records: the checks of ``oip_grpc.py`` and
``oip.py`` over the whole batch, tensor position by tensor position, instead of record by record.

Each message is still parsed on its own (``FromString``: upb, in C); what the careful path then
does per tensor in Python (a :class:`~monitor.ingest.oip.Tensor`, its data flattened and each
value checked) is done here once per tensor *position* of the batch: the batch's messages share
one layout (tensor names, datatypes, trailing dimensions), so each position's contents are
joined and checked with numpy (lengths against shapes, integer ranges, finite floats, UTF-8),
and the mapped columns are cut from them.

Anything unusual gives up and the careful path (``serving_decode.py``) decodes the batch with
its dead letters: a message that does not parse, FP16,
a layout that differs between messages, a missing ``x-request-id``, a header other than a
protobuf ``seldon-infer-type``, a record without a time. On what the fast path accepts, both give
the same rows (``tests/ingest/test_seldon_fast.py``).
"""

from __future__ import annotations

import math
from itertools import chain
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from monitor.config.serving import TensorMapping
from monitor.ingest import seldon
from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.keys import RowIds
from monitor.ingest.oip import INTS, MAX_DIMS, MAX_ELEMENTS
from monitor.ingest.oip_grpc import FIELD, RAW, raw_bytes
from monitor.ingest.open_inference_grpc_pb2 import ModelInferRequest, ModelInferResponse
from monitor.ingest.seldon_native import SeldonNative
from monitor.ingest.serving_checks import (
    DECISIONS,
    NUMBERS,
    GiveUp,
    decisions,
    header,
    place,
    record_times,
    small_enough,
    within_limits,
)

KINDS = {b"proto/InferModelRequest": "request", b"proto/InferModelResponse": "response"}
# the contents fields whose element type is wider than the datatype: values to range-check
NARROW = {dt: INTS[dt] for dt in ("INT8", "INT16", "UINT8", "UINT16")}
FLOAT_TYPES = frozenset({"FP32", "FP64"})
ELEMENT: dict[str, Any] = {
    "FP32": np.float64,
    "FP64": np.float64,
    "BOOL": bool,
    "UINT64": np.uint64,
}


class SeldonFast:
    """Whole-batch decoding of one model's Seldon Core 2 protobuf records."""

    def __init__(
        self, plan: DecodePlan, model: int, mapping: TensorMapping, responses_topic: str | None
    ) -> None:
        self.plan, self.model, self.m = plan, model, mapping
        self.name = plan.models[model].name
        self.responses_topic = responses_topic
        self.native = SeldonNative(plan, model, mapping, responses_topic)

    def decode(self, rb: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        """As :meth:`ServingFast.decode`: the request and response columns, or None. The
        compiled path first (``seldon_native.py``), when it is built and takes the batch."""
        compiled = self.native.decode(rb)
        if compiled is not None:
            return compiled
        return self.decode_python(rb)

    def decode_python(self, rb: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        """The Python fast path alone."""
        try:
            small_enough(self.plan, rb)
            return within_limits(self.plan, self._decode(rb))
        except Exception:  # GiveUp, or whatever the bytes did: the careful path judges them
            return None

    def _decode(self, rb: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        records = getattr(rb, "records", None)
        topic = getattr(rb, "topic", "")
        hint = seldon.topic_model(topic)
        if records is None or (hint in self.plan.model_index and hint != self.name):
            raise GiveUp
        default = "response" if topic == self.responses_topic else "request"
        kinds, ids = [], []
        for r in records:
            if not isinstance(r.value, bytes):
                raise GiveUp
            kinds.append(_kind(r.headers) or default)
            ids.append(header(r.headers, "x-request-id"))
        times = record_times(self.plan, rb)
        reqs = [i for i, k in enumerate(kinds) if k == "request"]
        resps = [i for i, k in enumerate(kinds) if k == "response"]
        values = rb.values
        asked_msgs = [ModelInferRequest.FromString(values[i]) for i in reqs]
        answered_msgs = [ModelInferResponse.FromString(values[i]) for i in resps]
        asked = _Tensors(
            [m.inputs for m in asked_msgs],
            [m.raw_input_contents for m in asked_msgs],
            _ids(asked_msgs, reqs, ids),
            self.plan.limits.max_rows_per_record,
        )
        answered = _Tensors(
            [m.outputs for m in answered_msgs],
            [m.raw_output_contents for m in answered_msgs],
            _ids(answered_msgs, resps, ids),
            self.plan.limits.max_rows_per_record,
        )
        n_attrs = len(self.plan.models[self.model].attributes)
        columns: list[list[Any]] = [[] for _ in range(n_attrs)] if not asked.n else []
        if asked.n and not self.m.stream:
            for attr in self.plan.models[self.model].attributes:
                columns.append(asked.column(self.m.attributes[attr.name], None).tolist())
        r_ids, r_ts = answered.row_ids(), np.repeat(times[resps], answered.rows)
        scores, preds = decisions(
            len(r_ids),
            answered.column(self.m.score, NUMBERS) if answered.n and self.m.score else None,
            answered.column(self.m.prediction, DECISIONS)
            if answered.n and self.m.prediction
            else None,
            self.plan.models[self.model].threshold,
        )
        which = np.repeat(np.asarray(resps, dtype=np.int64), answered.rows)
        requests = (asked.row_ids(), np.repeat(times[reqs], asked.rows), columns)
        return requests, (r_ids, r_ts, scores, preds, which)


class _Tensors:
    """The tensors of one half of the batch, checked as the careful path checks them."""

    def __init__(
        self, tensors: list[Any], raws: list[Any], ids: list[str | None], max_rows: int
    ) -> None:
        self.n = len(tensors)
        self.ids = ids
        self.rows = np.zeros(self.n, dtype=np.int64)
        self.sig: tuple[tuple[str, str, tuple[int, ...], bool], ...] = ()
        self.flat: list[npt.NDArray[Any]] = []
        if not self.n:
            return
        layouts = {tuple((t.name, t.datatype, tuple(t.shape)[1:]) for t in ts) for ts in tensors}
        if len(layouts) != 1:
            raise GiveUp
        layout = layouts.pop()
        if not layout or len({name for name, _, _ in layout}) != len(layout):
            raise GiveUp
        if any(0 in trailing for _, _, trailing in layout):  # [n, 0]: rows without values,
            raise GiveUp  # n of them from a few bytes (the careful path bounds them)
        self.sig = tuple((name, dt, trailing, False) for name, dt, trailing in layout)
        self.rows = np.array([ts[0].shape[0] for ts in tensors], dtype=np.int64)
        if not (self.rows > 0).all() or int(self.rows.max()) > max_rows:  # before any repeat
            raise GiveUp
        if None in self.ids or "" in self.ids:
            raise GiveUp
        raw = [len(r) for r in raws]  # raw contents: one buffer per tensor, in every message
        if any(raw) and raw != [len(layout)] * self.n:
            raise GiveUp
        for k, (_, datatype, trailing, _) in enumerate(self.sig):
            if k and not (np.array([ts[k].shape[0] for ts in tensors]) == self.rows).all():
                raise GiveUp
            at = [ts[k] for ts in tensors]
            if any(raw):
                self.flat.append(_raw(at, [r[k] for r in raws], datatype, trailing, self.rows))
            else:
                self.flat.append(_contents(at, datatype, trailing, self.rows))

    def row_ids(self) -> RowIds:
        return RowIds(cast("list[str]", self.ids), self.rows)  # None and "" gave up above

    def column(self, where: Any, allowed: frozenset[str] | None) -> npt.NDArray[Any]:
        k, col, width, _ = place(self.sig, where, allowed or frozenset(FIELD))
        return self.flat[k].reshape(-1, width)[:, col] if width else self.flat[k][:0]


def _kind(headers: Any) -> str | None:
    """The half a protobuf ``seldon-infer-type`` header names, None without one; anything
    else (JSON, another value, not UTF-8, empty) gives up: the careful path judges it."""
    for key, raw in headers or ():
        if key.lower() == seldon.TYPE_HEADER:
            return KINDS[raw]
    return None


def _ids(msgs: list[Any], records: list[int], headers: list[str | None]) -> list[str | None]:
    """A message's own id, else its record's ``x-request-id`` (as ``Table.row_ids``)."""
    return [m.id or headers[i] for m, i in zip(msgs, records, strict=True)]


def _raw(
    tensors: list[Any],
    bufs: list[bytes],
    datatype: str,
    trailing: tuple[int, ...],
    rows: npt.NDArray[np.int64],
) -> npt.NDArray[Any]:
    """As :func:`_contents`, from raw little-endian buffers (no typed contents beside them;
    FP16 to the careful path); BYTES elements read as the careful path reads them."""
    if datatype == "FP16" or len(trailing) >= MAX_DIMS:
        raise GiveUp
    width = math.prod(trailing)
    if any(d < 0 for d in trailing) or int(rows.max()) * width > MAX_ELEMENTS:
        raise GiveUp
    if any(t.HasField("contents") and t.contents.ListFields() for t in tensors):
        raise GiveUp
    if datatype == "BYTES":  # 4-byte lengths and their bytes: Invalid gives up
        parts = [raw_bytes("", b) for b in bufs]
        if not (np.array([len(p) for p in parts]) == rows * width).all():
            raise GiveUp
        return np.array(list(chain.from_iterable(parts)), dtype=object)
    dtype = RAW.get(datatype)
    if dtype is None:
        raise GiveUp
    size = np.dtype(dtype).itemsize
    if not (np.array([len(b) for b in bufs]) == rows * width * size).all():
        raise GiveUp
    flat = np.frombuffer(b"".join(bufs), dtype=dtype)
    if datatype == "BOOL":
        if (flat > 1).any():
            raise GiveUp
        return flat.astype(bool)
    if datatype in FLOAT_TYPES:
        flat = flat.astype(np.float64)
        if not np.isfinite(flat).all():
            raise GiveUp
        return flat
    return flat.astype(np.uint64 if datatype == "UINT64" else np.int64)


def _contents(
    tensors: list[Any], datatype: str, trailing: tuple[int, ...], rows: npt.NDArray[np.int64]
) -> npt.NDArray[Any]:
    """One tensor position's values over the batch, row-major, checked: the shape sane and
    small enough, only its datatype's contents field set and as long as the shape says, each
    value of its datatype."""
    own = FIELD.get(datatype)
    if own is None or not 0 <= len(trailing) < MAX_DIMS or any(d < 0 for d in trailing):
        raise GiveUp
    width = math.prod(trailing)
    if int(rows.max()) * width > MAX_ELEMENTS:
        raise GiveUp
    contents = [t.contents for t in tensors]
    for c in contents:
        if [f.name for f, _ in c.ListFields()] not in ([own], []):
            raise GiveUp
    parts = [getattr(c, own) for c in contents]
    if not (np.array([len(p) for p in parts]) == rows * width).all():
        raise GiveUp
    if datatype == "BYTES":
        return np.array([v.decode() for v in chain.from_iterable(parts)], dtype=object)
    kind = ELEMENT.get(datatype, np.int64)
    total = int((rows * width).sum())
    flat = np.fromiter(chain.from_iterable(parts), dtype=kind, count=total)
    if datatype in NARROW:
        lo, hi = NARROW[datatype]
        if len(flat) and not ((flat >= lo) & (flat <= hi)).all():
            raise GiveUp
    if datatype in FLOAT_TYPES and not np.isfinite(flat).all():
        raise GiveUp
    return flat
