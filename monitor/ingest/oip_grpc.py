"""Open Inference Protocol gRPC messages (``ModelInferRequest`` / ``ModelInferResponse``, the
protobuf payloads Seldon Core 2 writes to its Kafka topics) → the same checked
:class:`~monitor.ingest.oip.Table` as the JSON form.

A tensor's values come from the one ``contents`` field of its datatype (the specification's
``InferTensorContents``: ``bool_contents`` for BOOL, ``int_contents`` for INT8/16/32,
``int64_contents``, ``uint_contents`` for UINT8/16/32, ``uint64_contents``, ``fp32_contents``,
``fp64_contents``, ``bytes_contents`` for BYTES), or from the message's raw contents (one
little-endian buffer per tensor, in order; a BYTES element is a 4-byte length and its bytes).
Values in the field of another datatype, raw and typed contents together, a raw buffer of the
wrong size, BYTES that are not UTF-8: each is refused with its reason. The tensors then pass the
JSON form's checks (shape against data, element bound, each datatype's range, finite floats).

The message classes are generated from ``open_inference_grpc.proto`` (``make proto``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from monitor.ingest.events import Invalid, Reason
from monitor.ingest.oip import (
    INTS,
    MAX_ELEMENTS,
    InferenceRequest,
    InferenceResponse,
    Table,
    Tensor,
    to_table,
)
from monitor.ingest.open_inference_grpc_pb2 import (
    ModelInferRequest,
    ModelInferResponse,
)

# the contents field of each datatype (FP16 has none: raw contents only)
FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
FIELDS = frozenset(FIELD.values())
RAW = {  # little-endian element types of raw contents
    "BOOL": "<u1",
    "INT8": "<i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "UINT8": "<u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
}


def decode_request(data: bytes) -> Table:
    msg = _parse(ModelInferRequest, data, "ModelInferRequest")
    tensors = _tensors(msg.inputs, list(msg.raw_input_contents))
    return to_table(InferenceRequest(tensors, msg.id or None), "inputs")


def decode_response(data: bytes) -> Table:
    msg = _parse(ModelInferResponse, data, "ModelInferResponse")
    tensors = _tensors(msg.outputs, list(msg.raw_output_contents))
    response = InferenceResponse(
        tensors, msg.model_name or None, msg.id or None, msg.model_version or None
    )
    return to_table(response, "outputs")


def _parse(cls: Any, data: Any, name: str) -> Any:
    if not isinstance(data, bytes):
        raise Invalid(Reason.TOMBSTONE, "a record without a value (a tombstone)")
    msg = cls()
    try:
        msg.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise Invalid(Reason.NOT_PROTOBUF, f"not a {name}: {str(exc)[:120]}") from None
    return msg


def _tensors(tensors: Any, raw: list[bytes]) -> list[Tensor]:
    if raw and len(raw) != len(tensors):
        raise Invalid(
            Reason.BAD_TENSOR, f"{len(raw)} raw contents for {len(tensors)} tensors (one each)"
        )
    out = []
    for i, t in enumerate(tensors):
        shape = list(t.shape)
        if raw:
            used = [f.name for f, _ in t.contents.ListFields()] if t.HasField("contents") else []
            if used:
                raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: raw and typed contents")
            data = _raw(t.name, t.datatype, shape, raw[i])
        else:
            data = _typed(t)
        out.append(Tensor(t.name, shape, t.datatype, data))
    return out


def _typed(t: Any) -> list[Any]:
    own = FIELD.get(t.datatype)
    if own is None:
        raise Invalid(
            Reason.BAD_TENSOR,
            f"tensor {t.name!r}: datatype {t.datatype[:20]!r} has no contents field (raw only)",
        )
    others = [f.name for f, _ in t.contents.ListFields() if f.name != own]
    if others:
        raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: {others[0]} in a {t.datatype}")
    values = getattr(t.contents, own)
    if len(values) > MAX_ELEMENTS:
        raise Invalid(Reason.BAD_TENSOR, f"tensor {t.name!r}: over {MAX_ELEMENTS} elements")
    if own == "bytes_contents":
        return [_text(t.name, v) for v in values]
    return list(values)


def _raw(name: str, datatype: str, shape: list[int], buf: bytes) -> list[Any]:
    if datatype == "BYTES":
        return raw_bytes(name, buf)
    dtype = RAW.get(datatype)
    if dtype is None:
        raise Invalid(Reason.BAD_TENSOR, f"tensor {name!r}: unknown datatype {datatype[:20]!r}")
    size = np.dtype(dtype).itemsize
    if len(buf) % size or len(buf) // size > MAX_ELEMENTS:
        raise Invalid(Reason.BAD_TENSOR, f"tensor {name!r}: {len(buf)} raw bytes of {datatype}")
    arr = np.frombuffer(buf, dtype=dtype)
    if datatype == "BOOL":
        if (arr > 1).any():
            raise Invalid(Reason.BAD_TENSOR, f"tensor {name!r}: a BOOL byte other than 0 or 1")
        return [bool(v) for v in arr.tolist()]
    if datatype in INTS:
        return [int(v) for v in arr.tolist()]
    return [float(v) for v in arr.astype(np.float64).tolist()]


def raw_bytes(name: str, buf: bytes) -> list[str]:
    """Elements of 4-byte little-endian length and their bytes, back to back."""
    out: list[str] = []
    at = 0
    while at < len(buf):
        if len(out) >= MAX_ELEMENTS or at + 4 > len(buf):
            raise Invalid(Reason.BAD_TENSOR, f"tensor {name!r}: raw BYTES cut short")
        n = int.from_bytes(buf[at : at + 4], "little")
        if at + 4 + n > len(buf):
            raise Invalid(Reason.BAD_TENSOR, f"tensor {name!r}: raw BYTES cut short")
        out.append(_text(name, buf[at + 4 : at + 4 + n]))
        at += 4 + n
    return out


def _text(name: str, value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise Invalid(Reason.BAD_TENSOR, f"tensor {name!r}: BYTES that are not UTF-8") from None
