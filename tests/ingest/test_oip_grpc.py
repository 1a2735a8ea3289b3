"""Open Inference Protocol gRPC messages (Seldon Core 2's Kafka payloads): fixtures built with
the message classes, as a server would write them, decoded field by field; typed and raw
contents; every malformed message refused with its reason; Seldon's records told apart by
header or topic."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.config.serving import Column
from monitor.ingest import seldon
from monitor.ingest.events import Invalid, Reason
from monitor.ingest.keys import id_keys
from monitor.ingest.oip_grpc import decode_request, decode_response
from monitor.ingest.open_inference_grpc_pb2 import ModelInferRequest, ModelInferResponse

Inp = ModelInferRequest.InferInputTensor
Out = ModelInferResponse.InferOutputTensor


def request(*inputs: Any, rid: str = "req-9", raw: list[bytes] | None = None) -> bytes:
    msg = ModelInferRequest(model_name="credit", id=rid, inputs=list(inputs))
    if raw is not None:
        msg.raw_input_contents.extend(raw)
    msg.parameters["content_type"].string_param = "np"
    return msg.SerializeToString()


def refused(data: bytes, reason: Reason, *, response: bool = False) -> str:
    with pytest.raises(Invalid) as info:
        (decode_response if response else decode_request)(data)
    assert info.value.reason == reason, info.value.detail
    return info.value.detail


def test_a_request_with_typed_contents_gives_each_row_its_columns() -> None:
    sex = Inp(name="sex", datatype="BYTES", shape=[3])
    sex.contents.bytes_contents.extend([b"F", b"M", "é".encode()])
    feats = Inp(name="features", datatype="INT64", shape=[3, 2])
    feats.contents.int64_contents.extend([700, 34, 650, 51, 720, -29])
    band = Inp(name="band", datatype="UINT8", shape=[3, 1])
    band.contents.uint_contents.extend([1, 2, 255])
    t = decode_request(request(sex, feats, band))
    assert (t.id, t.rows) == ("req-9", 3)
    assert t.column(Column("sex")) == ["F", "M", "é"]
    assert t.column(Column("features", 1)) == [34, 51, -29]
    assert t.column(Column("band")) == [1, 2, 255]
    assert t.datatypes == {"sex": "BYTES", "features": "INT64", "band": "UINT8"}
    assert t.row_ids().keys().tolist() == id_keys(["req-9/0", "req-9/1", "req-9/2"]).tolist()


def test_a_response_with_fp32_probabilities_and_a_bool_decision() -> None:
    probs = Out(name="probabilities", datatype="FP32", shape=[2, 2])
    probs.contents.fp32_contents.extend([0.8, 0.2, 0.35, 0.65])
    label = Out(name="label", datatype="BOOL", shape=[2])
    label.contents.bool_contents.extend([False, True])
    msg = ModelInferResponse(model_name="credit_1", model_version="1", id="req-9")
    msg.outputs.extend([probs, label])
    t = decode_response(msg.SerializeToString())
    assert (t.id, t.model, t.rows) == ("req-9", "credit_1", 2)
    want = [float(np.float32(0.2)), float(np.float32(0.65))]  # float32 on the wire
    assert t.column(Column("probabilities", 1)) == want
    assert t.column(Column("label")) == [False, True]


def test_raw_contents_are_little_endian_buffers_one_per_tensor() -> None:
    feats = np.array([[700, 34], [650, 51]], dtype="<i8")
    half = np.array([0.25, 0.5], dtype="<f2")
    words = [b"F", "é".encode()]
    strings = b"".join(struct.pack("<I", len(w)) + w for w in words)
    t = decode_request(
        request(
            Inp(name="features", datatype="INT64", shape=[2, 2]),
            Inp(name="score16", datatype="FP16", shape=[2]),
            Inp(name="sex", datatype="BYTES", shape=[2]),
            raw=[feats.tobytes(), half.tobytes(), strings],
        )
    )
    assert t.column(Column("features", 1)) == [34, 51]
    assert t.column(Column("score16")) == [0.25, 0.5]
    assert t.column(Column("sex")) == ["F", "é"]
    out = ModelInferResponse(id="r", outputs=[Out(name="p", datatype="FP64", shape=[2])])
    out.raw_output_contents.append(np.array([0.1, 0.9], "<f8").tobytes())
    assert decode_response(out.SerializeToString()).column(Column("p")) == [0.1, 0.9]


def _tensor(name: str, datatype: str, shape: list[int], field: str, values: list[Any]) -> Any:
    t = Inp(name=name, datatype=datatype, shape=shape)
    getattr(t.contents, field).extend(values)
    return t


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (b"\xff\xff\xff\xff\x0f garbage", Reason.NOT_PROTOBUF, "not a ModelInferRequest"),
        (b'{"inputs": []}', Reason.NOT_PROTOBUF, "not a ModelInferRequest"),
        (b"", Reason.MISSING_TENSOR, "no inputs"),
        (
            request(_tensor("x", "FP32", [2], "int64_contents", [1, 2])),
            Reason.BAD_TENSOR,
            "int64_contents in a FP32",
        ),
        (
            request(_tensor("x", "INT64", [3], "int64_contents", [1, 2])),
            Reason.BAD_TENSOR,
            "do not match",
        ),
        (
            request(_tensor("x", "INT8", [1], "int_contents", [300])),
            Reason.BAD_TENSOR,
            "not INT8",
        ),
        (
            request(_tensor("x", "FP32", [1], "fp32_contents", [math.nan])),
            Reason.BAD_TENSOR,
            "not FP32",
        ),
        (
            request(_tensor("x", "FP16", [1], "fp32_contents", [0.5])),
            Reason.BAD_TENSOR,
            "raw only",
        ),
        (
            request(_tensor("x", "BYTES", [1], "bytes_contents", [b"\xff"])),
            Reason.BAD_TENSOR,
            "not UTF-8",
        ),
        (
            request(_tensor("x", "TEXT", [1], "bytes_contents", [b"a"])),
            Reason.BAD_TENSOR,
            "no contents field",
        ),
        (
            request(_tensor("x", "INT64", [-1], "int64_contents", [])),
            Reason.BAD_TENSOR,
            "shape",
        ),
        (
            request(Inp(name="x", datatype="INT32", shape=[2]), raw=[b"\x01\x00\x00"]),
            Reason.BAD_TENSOR,
            "raw bytes",
        ),
        (
            request(Inp(name="x", datatype="INT32", shape=[1]), raw=[b"\x01\x00\x00\x00"] * 2),
            Reason.BAD_TENSOR,
            "2 raw contents for 1 tensors",
        ),
        (
            request(_tensor("x", "INT32", [1], "int_contents", [1]), raw=[b"\x01\x00\x00\x00"]),
            Reason.BAD_TENSOR,
            "raw and typed",
        ),
        (
            request(Inp(name="x", datatype="BYTES", shape=[1]), raw=[b"\x09\x00\x00\x00ab"]),
            Reason.BAD_TENSOR,
            "cut short",
        ),
        (
            request(Inp(name="x", datatype="BOOL", shape=[1]), raw=[b"\x02"]),
            Reason.BAD_TENSOR,
            "BOOL byte",
        ),
    ],
)
def test_malformed_messages_are_refused_with_a_reason(
    data: bytes, reason: Reason, words: str
) -> None:
    assert words in refused(data, reason)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_whatever_the_bytes_a_message_decodes_or_is_refused_with_a_reason(data: bytes) -> None:
    for decode in (decode_request, decode_response):
        try:
            t = decode(data)
        except Invalid as bad:
            assert bad.reason in (Reason.NOT_PROTOBUF, Reason.BAD_TENSOR, Reason.MISSING_TENSOR)
        else:
            assert t.rows >= 1


def test_seldon_records_are_told_apart_by_header_else_by_topic() -> None:
    one = Inp(name="sex", datatype="BYTES", shape=[1])
    one.contents.bytes_contents.append(b"F")
    req = request(one)
    assert seldon.half(req, [("seldon-infer-type", b"proto/InferModelRequest")], True)[0] == (
        "request"
    )
    assert seldon.half(req, [], False)[0] == "request"  # from the requests topic
    body = (
        b'{"id": "r", "outputs": [{"name": "p", "shape": [1], "datatype": "FP32", "data": [0.5]}]}'
    )
    kind, t = seldon.half(body, [("Seldon-Infer-Type", b"json/inferModelResponse")], False)
    assert (kind, t.column(Column("p"))) == ("response", [0.5])
    with pytest.raises(Invalid) as info:
        seldon.half(req, [("seldon-infer-type", b"avro/whatever")], False)
    assert info.value.reason == Reason.UNDECODABLE
    # without the header, the topic decides: the two messages' tensors have the same fields
    # and numbers, so the bytes alone cannot tell a request from a response
    assert seldon.half(req, [], True)[0] == "response"
    assert seldon.topic_model("seldon.lending.model.credit.outputs") == "credit"
    assert seldon.topic_model("seldon.lending.pipeline.credit.outputs") is None
