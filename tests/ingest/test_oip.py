"""Open Inference Protocol v2 JSON payloads, built from the specification's REST text
(kserve/open-inference-protocol ``specification/protocol/inference_rest.md``), decoded field by
field; every malformed one refused with its reason, none raising anything else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.config.serving import Column
from monitor.ingest.events import Invalid, Reason
from monitor.ingest.keys import id_keys
from monitor.ingest.oip import MAX_ELEMENTS, decode_payload, decode_request, decode_response


def tensor(name: str, shape: list[int], datatype: str, data: list[Any]) -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def request(*inputs: dict[str, Any], rid: str | None = "req-7") -> bytes:
    body: dict[str, Any] = {"inputs": list(inputs), "parameters": {"content_type": "np"}}
    if rid is not None:
        body["id"] = rid
    return json.dumps(body).encode()


def refused(data: bytes, reason: Reason, *, response: bool = False) -> str:
    with pytest.raises(Invalid) as info:
        (decode_response if response else decode_request)(data)
    assert info.value.reason == reason, info.value.detail
    return info.value.detail


def test_a_batched_request_gives_each_row_its_columns_and_an_id() -> None:
    t = decode_request(
        request(
            tensor("features", [3, 2], "FP32", [0.1, 34, 0.7, 51, 0.4, 29]),
            tensor("sex", [3], "BYTES", ["F", "M", "F"]),
            tensor("age_band", [3, 1], "INT32", [[1], [2], [1]]),  # nested as the shape says
        )
    )
    assert t.id == "req-7" and t.rows == 3
    assert t.widths == {"features": 2, "sex": 1, "age_band": 1}
    assert t.column(Column("features", 1)) == [34, 51, 29]
    assert t.column(Column("features", 0)) == [0.1, 0.7, 0.4]
    assert t.column(Column("sex")) == ["F", "M", "F"]
    assert t.column(Column("age_band")) == [1, 2, 1]
    assert t.row_ids().keys().tolist() == id_keys(["req-7/0", "req-7/1", "req-7/2"]).tolist()


def test_a_response_with_probabilities_per_class() -> None:
    body = {
        "model_name": "credit",
        "model_version": "3",
        "id": "req-7",
        "outputs": [
            tensor("probabilities", [2, 2], "FP64", [[0.8, 0.2], [0.35, 0.65]]),
            tensor("label", [2], "INT64", [0, 1]),
        ],
    }
    t = decode_response(json.dumps(body).encode())
    assert t.id == "req-7" and t.rows == 2
    assert t.column(Column("probabilities", 1)) == [0.2, 0.65]
    assert t.column(Column("label")) == [0, 1]
    assert t.datatypes == {"probabilities": "FP64", "label": "INT64"}


def test_one_row_keeps_its_id_and_a_header_id_stands_in_for_a_missing_one() -> None:
    one = decode_request(request(tensor("x", [1, 3], "FP32", [1, 2, 3]), rid=None))
    assert one.row_ids(fallback="ce-123").keys().tolist() == id_keys(["ce-123"]).tolist()
    single = decode_request(request(tensor("x", [1], "BOOL", [True]))).row_ids()
    assert single.keys().tolist() == id_keys(["req-7"]).tolist()
    with pytest.raises(Invalid) as info:
        one.row_ids()
    assert info.value.reason == Reason.MISSING_ID


def test_a_bare_payload_is_a_request_by_its_inputs_even_when_it_names_the_outputs_it_asks() -> None:
    """OIP lets a request list the outputs it wants (``{"name": ...}``, no tensors): such a
    request is a request, not a malformed response."""
    asking = json.loads(request(tensor("sex", [1], "BYTES", ["F"])))
    asking["outputs"] = [{"name": "probabilities"}]
    kind, t = decode_payload(json.dumps(asking).encode())
    assert kind == "request" and t.column(Column("sex")) == ["F"]
    answer = {"id": "r", "model_name": "m", "outputs": [tensor("p", [1], "FP32", [0.25])]}
    kind, t = decode_payload(json.dumps(answer).encode())
    assert (kind, t.model, t.id, t.column(Column("p"))) == ("response", "m", "r", [0.25])
    for body, reason in (
        (b'{"id": "r"}', Reason.MISSING_TENSOR),
        (b'{"id": "r", "outputs": [{"name": "p"}]}', Reason.BAD_TENSOR),  # no tensor
        (b'{"id": "r", "outputs": 7}', Reason.BAD_TENSOR),
    ):
        with pytest.raises(Invalid) as info:
            decode_payload(body)
        assert info.value.reason == reason, info.value.detail


def test_a_mapping_that_misses_the_payload_says_which_way() -> None:
    t = decode_request(request(tensor("features", [2, 2], "FP32", [1, 2, 3, 4])))
    for where, reason, words in [
        (Column("feature"), Reason.MISSING_TENSOR, "no tensor named 'feature'"),
        (Column("features"), Reason.BAD_TENSOR, "2 columns per row; the mapping names none"),
        (Column("features", 2), Reason.BAD_TENSOR, "not column 2"),
        (Column("features", -1), Reason.BAD_TENSOR, "not column -1"),
    ]:
        with pytest.raises(Invalid) as info:
            t.column(where)
        assert info.value.reason == reason and words in info.value.detail


@pytest.mark.parametrize(
    ("payload", "reason", "words"),
    [
        (request(tensor("x", [2, 2], "FP32", [1, 2, 3])), Reason.BAD_TENSOR, "do not match"),
        (request(tensor("x", [2, 2], "FP32", [[1, 2], [3]])), Reason.BAD_TENSOR, "do not match"),
        (request(tensor("x", [2], "FP32", [[1], [2]])), Reason.BAD_TENSOR, "do not match"),
        # ragged rows with the right total (found by a review: [2, 3] as rows of 2 and 4 was
        # accepted, row 1's column 1 read 50 instead of 40)
        (
            request(tensor("x", [2, 3], "FP32", [[1, 2], [3, 4, 5, 6]])),
            Reason.BAD_TENSOR,
            "do not match",
        ),
        (
            request(tensor("x", [2, 2, 2], "FP32", [[[1, 2, 3], [4]], [[5, 6], [7, 8]]])),
            Reason.BAD_TENSOR,
            "do not match",
        ),
        (request(tensor("x", [2], "FP8", [1, 2])), Reason.BAD_TENSOR, "unknown datatype"),
        (request(tensor("x", [2], "INT32", [1, True])), Reason.BAD_TENSOR, "not INT32"),
        (request(tensor("x", [1], "INT64", [2**63])), Reason.BAD_TENSOR, "not INT64"),
        (request(tensor("x", [1], "UINT8", [-1])), Reason.BAD_TENSOR, "not UINT8"),
        (request(tensor("x", [1], "FP32", ["0.5"])), Reason.BAD_TENSOR, "not FP32"),
        (request(tensor("x", [1], "BYTES", [7])), Reason.BAD_TENSOR, "not BYTES"),
        (request(tensor("x", [1], "BOOL", [1])), Reason.BAD_TENSOR, "not BOOL"),
        (request(tensor("x", [-1], "FP32", [])), Reason.BAD_TENSOR, "shape"),
        (request(tensor("x", [], "FP32", [1])), Reason.BAD_TENSOR, "shape"),
        (request(tensor("x", [10**9, 10**9], "FP32", [])), Reason.BAD_TENSOR, "elements"),
        (request(tensor("x", [0, 2], "FP32", [])), Reason.BAD_TENSOR, "no rows"),
        (
            request(tensor("x", [2], "FP32", [1, 2]), tensor("x", [2], "FP32", [1, 2])),
            Reason.BAD_TENSOR,
            "two tensors named 'x'",
        ),
        (
            request(tensor("x", [2], "FP32", [1, 2]), tensor("y", [3], "FP32", [1, 2, 3])),
            Reason.BAD_TENSOR,
            "3 rows, the others 2",
        ),
        (json.dumps({"inputs": []}).encode(), Reason.MISSING_TENSOR, "no inputs"),
        (json.dumps({"instances": [[1, 2]]}).encode(), Reason.BAD_TENSOR, "not an inference"),
        (json.dumps({"inputs": [{"name": "x"}]}).encode(), Reason.BAD_TENSOR, "not an inference"),
        (b"\x00\xff garbage", Reason.NOT_JSON, ""),
        (b'{"inputs": [' * 200_000, Reason.TOO_DEEP, ""),
        (b"[]", Reason.NOT_OBJECT, "not an object"),
    ],
)
def test_malformed_requests_are_refused_with_a_reason(
    payload: bytes, reason: Reason, words: str
) -> None:
    assert words in refused(payload, reason)


def test_deeply_nested_data_and_large_numbers_are_refused_not_raised() -> None:
    deep = b'{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":' + b"[" * 100_000
    deep += b"]" * 100_000 + b"}]}"
    refused(deep, Reason.TOO_DEEP)
    huge = request(tensor("x", [1], "FP64", [0])).replace(b"[0]", b"[1" + b"0" * 5000 + b"]")
    refused(huge, Reason.BAD_TENSOR)  # an int of 5000 digits: msgspec refuses it
    big = request(tensor("x", [1], "FP64", [0])).replace(b"[0]", b"[1" + b"0" * 400 + b"]")
    refused(big, Reason.BAD_TENSOR)  # 400 digits: a Python int, no float64 (it overflowed)


def test_a_response_without_outputs_or_with_a_broken_tensor_is_refused() -> None:
    refused(
        json.dumps({"model_name": "m", "outputs": []}).encode(),
        Reason.MISSING_TENSOR,
        response=True,
    )
    bad = {"outputs": [tensor("p", [2], "FP32", [0.5])]}
    refused(json.dumps(bad).encode(), Reason.BAD_TENSOR, response=True)


def test_the_element_bound_is_checked_before_the_data_are_walked() -> None:
    shape = [MAX_ELEMENTS + 1]
    assert "elements" in refused(request(tensor("x", shape, "FP32", [0.0])), Reason.BAD_TENSOR)


JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=6)
    ),
    max_leaves=40,
)
TENSORS = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["x", "y", 7]),
        "shape": st.lists(st.integers(min_value=-2, max_value=4), max_size=4),
        "datatype": st.sampled_from(["FP32", "INT8", "UINT64", "BOOL", "BYTES", "FP9", 3]),
        "data": JSON,
    }
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.one_of(
        st.binary(max_size=64),
        JSON.map(lambda v: json.dumps(v).encode()),
        st.lists(TENSORS, max_size=3).map(lambda ts: json.dumps({"inputs": ts}).encode()),
        st.lists(TENSORS, max_size=3).map(lambda ts: json.dumps({"outputs": ts}).encode()),
    )
)
def test_whatever_the_bytes_a_payload_decodes_or_is_refused_with_a_reason(data: bytes) -> None:
    for decode in (decode_request, decode_response):
        try:
            t = decode(data)
        except Invalid as exc:
            assert isinstance(exc.reason, Reason) and exc.detail
            continue
        assert t.rows > 0
        for name, flat in t.values.items():  # what was taken holds together
            assert len(flat) == t.rows * t.widths[name]
