"""Open Inference Protocol v2 JSON (KServe v2, Triton, Seldon Core 2, MLServer) → one decision
per row.

The payloads, as the specification writes them (kserve/open-inference-protocol,
``specification/protocol/inference_rest.md``)::

    request  {"id"?: str, "parameters"?: {...}, "inputs": [tensor, ...], "outputs"?: [...]}
    response {"model_name": str, "model_version"?: str, "id"?: str, "parameters"?: {...},
              "outputs": [tensor, ...]}
    tensor   {"name": str, "shape": [int, ...], "datatype": str, "parameters"?: {...},
              "data": [...]}  # row-major, flat or nested as the shape says

The first dimension is the batch: a request of shape ``[n, ...]`` holds ``n`` decisions, row
``r`` is called ``<request id>/<r>`` (a request of one row keeps its id), and a mapping names a
tensor and, for a tensor of several columns, the column.

Written like the monitor's own decoder, for bytes from anyone: typed msgspec structs (unknown
keys ignored, as the protocol allows extensions; ``parameters`` too, never read: a number no
float holds there must not cost the record), the shape checked against the data (nested
lists walked level by level, never recursively), element counts bounded before anything is
allocated, each datatype's values checked (a BOOL is not an INT, an INT64 fits 64 bits, a float
is finite). Every refusal is an :class:`~monitor.ingest.events.Invalid` with a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec

from monitor.config.serving import Column
from monitor.ingest.events import Invalid, Reason
from monitor.ingest.keys import RowIds

INTS = {
    "UINT8": (0, 2**8 - 1),
    "UINT16": (0, 2**16 - 1),
    "UINT32": (0, 2**32 - 1),
    "UINT64": (0, 2**64 - 1),
    "INT8": (-(2**7), 2**7 - 1),
    "INT16": (-(2**15), 2**15 - 1),
    "INT32": (-(2**31), 2**31 - 1),
    "INT64": (-(2**63), 2**63 - 1),
}
FLOATS = frozenset({"FP16", "FP32", "FP64"})
DATATYPES = frozenset({"BOOL", "BYTES", *INTS, *FLOATS})
MAX_ELEMENTS = 1_000_000  # per tensor: a record is bounded in bytes already, this in work
MAX_DIMS = 8
FLOAT_MAX = 2**1024  # past this an int is no float64


class Tensor(msgspec.Struct, frozen=True):
    name: str
    shape: list[int]
    datatype: str
    data: list[Any]


class InferenceRequest(msgspec.Struct, frozen=True):
    inputs: list[Tensor]
    id: str | None = None


class InferenceResponse(msgspec.Struct, frozen=True):
    outputs: list[Tensor]
    model_name: str | None = None  # required by the text, left out of its own example
    id: str | None = None
    model_version: str | None = None


class InferencePayload(msgspec.Struct, frozen=True):
    """Either half, for a stream that carries both without saying which (bare OIP). A request
    may carry ``outputs`` too: the outputs it asks for (``{"name": ...}``), no tensors."""

    inputs: list[Tensor] | None = None
    outputs: msgspec.Raw = msgspec.Raw()  # read once it is known to be a response
    id: str | None = None
    model_name: str | None = None


_REQUEST = msgspec.json.Decoder(InferenceRequest)
_PAYLOAD = msgspec.json.Decoder(InferencePayload)
_RESPONSE = msgspec.json.Decoder(InferenceResponse)
_OUTPUTS = msgspec.json.Decoder(list[Tensor])


@dataclass(frozen=True)
class Table:
    """A payload's tensors as rows: ``values[name]`` is the flat row-major data, checked."""

    id: str | None
    rows: int
    widths: dict[str, int]
    datatypes: dict[str, str]
    values: dict[str, list[Any]]
    model: str | None = None  # a response's model_name

    def row_ids(self, fallback: str | None = None) -> RowIds:
        """``<id>/<row>`` per row (a single row keeps the id itself), never written out
        (``keys.RowIds``: their keys, their longest length)."""
        rid = self.id or fallback  # an empty id is none, as in the protobuf (a review)
        if rid is None or rid == "":
            raise Invalid(
                Reason.MISSING_ID, "the payload has no id (nor a UTF-8 header giving one)"
            )
        return RowIds([rid], [self.rows])

    def column(self, where: Column) -> list[Any]:
        """One value per row."""
        data = self.values.get(where.tensor)
        if data is None:
            raise Invalid(Reason.MISSING_TENSOR, f"no tensor named {where.tensor!r}")
        width = self.widths[where.tensor]
        if where.column is None:
            if width != 1:
                raise Invalid(
                    Reason.BAD_TENSOR,
                    f"tensor {where.tensor!r} has {width} columns per row; the mapping names none",
                )
            return data
        if not 0 <= where.column < width:
            raise Invalid(
                Reason.BAD_TENSOR,
                f"tensor {where.tensor!r} has {width} columns per row, not column {where.column}",
            )
        return data[where.column :: width]


def decode_request(data: bytes) -> Table:
    return to_table(_decode(_REQUEST, data), "inputs")


def decode_response(data: bytes) -> Table:
    return to_table(_decode(_RESPONSE, data), "outputs")


def decode_payload(data: bytes) -> tuple[str, Table]:
    """``("request" | "response", table)``: which half a payload is, by its keys: with
    ``inputs`` a request, else with ``outputs`` a response."""
    p = _decode(_PAYLOAD, data)
    if p.inputs is not None:
        return "request", to_table(p, "inputs")
    if not p.outputs:
        raise Invalid(Reason.MISSING_TENSOR, "a payload with neither inputs nor outputs")
    outputs = _decode(_OUTPUTS, p.outputs)
    response = InferenceResponse(outputs, p.model_name, p.id, None)
    return "response", to_table(response, "outputs")


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if text.startswith("Expected `object`") and " - at " not in text:
            raise Invalid(Reason.NOT_OBJECT, "not an inference payload (not an object)") from None
        if text.endswith("- at `$.id`"):  # the call's id, not a tensor: said so (a review)
            raise Invalid(Reason.BAD_ID, f"the payload's id: {text}") from None
        if text.endswith("- at `$.model_name`"):
            raise Invalid(Reason.UNKNOWN_MODEL, f"the payload's model_name: {text}") from None
        raise Invalid(Reason.BAD_TENSOR, f"not an inference payload: {text}") from None
    except msgspec.DecodeError as exc:
        raise Invalid(Reason.NOT_JSON, str(exc)) from None
    except RecursionError:  # msgspec's limit on nesting, met before any of ours
        raise Invalid(Reason.TOO_DEEP, "nested deeper than the decoder follows") from None


def to_table(payload: InferenceRequest | InferenceResponse | InferencePayload, field: str) -> Table:
    tensors: list[Tensor] = getattr(payload, field)
    if not tensors:
        raise Invalid(Reason.MISSING_TENSOR, f"the payload has no {field}")
    rows: int | None = None
    widths, types, values = {}, {}, {}
    for t in tensors:
        if t.name in values:
            raise Invalid(Reason.BAD_TENSOR, f"two tensors named {t.name!r}")
        n, width = _shape(t)
        if rows is not None and n != rows:
            raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r} has {n} rows, the others {rows}")
        rows = n
        flat = _flatten(t)
        _check_values(t, flat)
        widths[t.name], types[t.name], values[t.name] = width, t.datatype, flat
    assert rows is not None
    if rows == 0:
        raise Invalid(Reason.BAD_TENSOR, "the payload has no rows")
    model = getattr(payload, "model_name", None) if field == "outputs" else None
    return Table(payload.id, rows, widths, types, values, model)


def _shape(t: Tensor) -> tuple[int, int]:
    """(rows, values per row) after checking the shape is sane and small enough."""
    if t.datatype not in DATATYPES:
        raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: unknown datatype {t.datatype!r}")
    if not 1 <= len(t.shape) <= MAX_DIMS or any(d < 0 for d in t.shape):
        raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: shape {t.shape[: MAX_DIMS + 1]}")
    total = 1
    for d in t.shape:
        total *= d
        if total > MAX_ELEMENTS:
            raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: over {MAX_ELEMENTS} elements")
    width = total // t.shape[0] if t.shape[0] else 0
    return t.shape[0], width


def _flatten(t: Tensor) -> list[Any]:
    """Row-major flat data: flat already, or nested exactly as the shape says (walked level
    by level, so no nesting depth costs a Python frame)."""
    total = math.prod(t.shape)
    level: list[Any] = t.data
    if len(level) == total and not any(isinstance(v, list) for v in level):
        return level
    level = [level]
    for size in t.shape:  # every list at each level as long as the shape says: no ragged rows
        if not all(isinstance(v, list) and len(v) == size for v in level):
            raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: data do not match {t.shape}")
        level = [v for sub in level for v in sub]
    if any(isinstance(v, list) for v in level):
        raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: data do not match {t.shape}")
    return level


def _check_values(t: Tensor, flat: list[Any]) -> None:
    """Each element of the datatype it claims (JSON gives bool, int, float, str)."""
    dt = t.datatype
    if dt == "BOOL":
        ok = all(type(v) is bool for v in flat)
    elif dt == "BYTES":
        ok = all(type(v) is str for v in flat)
    elif dt in FLOATS:
        ok = all(_real(v) for v in flat)
    else:
        lo, hi = INTS[dt]
        ok = all(type(v) is int and lo <= v <= hi for v in flat)
    if not ok:
        raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: a value is not {dt}")


def _real(v: Any) -> bool:
    """A finite float64 (an int is compared, never converted: a 400-digit one overflows)."""
    if type(v) is float:
        return math.isfinite(v)
    return type(v) is int and -FLOAT_MAX < v < FLOAT_MAX
