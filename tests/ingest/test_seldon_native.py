"""The compiled fast path of Seldon Core 2's protobuf records (``native/src/seldon.rs`` through
``seldon_native.py``): clean batches take it and decode to exactly the Python fast path's
columns (``SeldonFast.decode_python``) and the careful path's rows; anything unusual is
declined (None) and the Python paths decide; no bytes make it raise."""

from __future__ import annotations

import os
import random
import struct
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.ingest import native as native_module
from monitor.ingest.events import ConsumerBatch
from monitor.ingest.native import native
from monitor.ingest.open_inference_grpc_pb2 import ModelInferRequest as Req
from monitor.ingest.open_inference_grpc_pb2 import ModelInferResponse as Resp
from monitor.ingest.seldon_fast import SeldonFast
from monitor.ingest.serving_decode import ServingDecoder
from tests.app.test_serving_kafka import calls
from tests.helpers import T0
from tests.ingest.test_seldon_fast import SPOILERS, _spoil, seldon_decoder
from tests.ingest.test_seldon_fast import decoder as standard_decoder
from tests.ingest.test_seldon_fast import records as standard_records
from tests.ingest.test_serving_fast import outcome, same


def test_the_compiled_module_is_built() -> None:
    """Under CI the compiled module must be there (a build that silently fell back to Python
    would pass every other test here as skipped)."""
    if native_module._module is None:
        if os.environ.get("CI") == "true":
            pytest.fail("monitor_native is not importable (pip install ./native)")
        pytest.skip("monitor_native is not built (pip install ./native)")
    assert hasattr(native_module._module, "decode_seldon")


@pytest.fixture(autouse=True)
def _compiled(request: pytest.FixtureRequest) -> None:
    if request.node.name == "test_the_compiled_module_is_built":
        return
    if native() is None:
        if os.environ.get("CI") == "true" and native_module._module is None:
            pytest.fail("monitor_native is not importable (pip install ./native)")
        pytest.skip("monitor_native is not built or FAIRNESS_MONITOR_NATIVE=0")


# Mappings over tensors of every common datatype (the request carries all of them, mapped or
# not: an unmapped tensor is checked as well).
MAPPINGS = {
    "bytes-int64-fp64": """    input:
      format: seldon
      score: {tensor: probabilities, column: 1}
      attributes: {sex: {tensor: sex}, age: {tensor: features, column: 1}}
""",
    "bool-int8-fp32-bool": """    input:
      format: seldon
      score: {tensor: p32}
      prediction: {tensor: approved}
      attributes: {sex: {tensor: member}, age: {tensor: age8}}
""",
    "int64-fp32-fp64-int64": """    input:
      format: seldon
      score: {tensor: probabilities, column: 1}
      prediction: {tensor: code}
      attributes: {sex: {tensor: features, column: 0}, age: {tensor: income}}
""",
    "fp64-nested": """    input:
      format: seldon
      prediction: {tensor: code}
      attributes: {sex: {tensor: sex}, age: {tensor: weight, column: 2}}
""",
}


make_decoder = seldon_decoder  # its mappings hold YAML braces: written out, not formatted


def _raw(datatype: str, values: list[Any]) -> bytes:
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(v.encode())) + v.encode() for v in values)
    fmt = {"INT64": "q", "INT8": "b", "FP32": "f", "FP64": "d", "BOOL": "?"}[datatype]
    return struct.pack(f"<{len(values)}{fmt}", *values)


FIELD = {"BYTES": "bytes_contents", "INT64": "int64_contents", "INT8": "int_contents",
         "FP32": "fp32_contents", "FP64": "fp64_contents", "BOOL": "bool_contents"}  # fmt: skip


def tensors(c: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(name, datatype, shape, flat values) of a call's request and response tensors."""
    n, sex, age, p = len(c["sex"]), c["sex"], c["age"], c["p"]
    asked = [
        ("sex", "BYTES", [n], sex),
        ("features", "INT64", [n, 2], [v for a in age for v in (700, a)]),
        ("age8", "INT8", [n], [min(a, 127) for a in age]),
        ("income", "FP32", [n], [a + 0.25 for a in age]),
        ("member", "BOOL", [n], [s == "F" for s in sex]),
        ("weight", "FP64", [n, 1, 3], [v for a in age for v in (a / 3, -1e300, 2.5)]),
    ]
    answered = [
        ("probabilities", "FP64", [n, 2], [v for x in p for v in (round(1 - x, 6), x)]),
        ("p32", "FP32", [n], p),
        ("approved", "BOOL", [n], [x >= 0.5 for x in p]),
        ("code", "INT64", [n], [int(x >= 0.5) for x in p]),
    ]
    return asked, answered


def payloads(c: dict[str, Any], *, raw: bool, message_id: bool) -> tuple[bytes, bytes]:
    asked, answered = tensors(c)
    req = Req(model_name="credit_1", id=c["id"] if message_id else "")
    resp = Resp(model_name="credit_1", model_version="1", id=c["id"] if message_id else "")
    for msg, ts, add, raws in (
        (req, asked, req.inputs.add, req.raw_input_contents),
        (resp, answered, resp.outputs.add, resp.raw_output_contents),
    ):
        for name, datatype, shape, values in ts:
            t = add(name=name, datatype=datatype, shape=shape)
            if raw:
                raws.append(_raw(datatype, values))
            elif datatype == "BYTES":
                t.contents.bytes_contents.extend(v.encode() for v in values)
            else:
                getattr(t.contents, FIELD[datatype]).extend(values)
        if c.get("parameters"):
            msg.parameters["content_type"].string_param = "np"
    return req.SerializeToString(), resp.SerializeToString()


TYPES = {"request": b"proto/InferModelRequest", "response": b"proto/InferModelResponse"}


def batch_of(
    cs: list[dict[str, Any]],
    *,
    raw: bool = False,
    message_id: bool = True,
    header_id: bool = True,
    typed_header: bool = True,
    seed: int = 0,
) -> list[Any]:
    out = []
    for c in cs:
        for kind, value in zip(("request", "response"), payloads(c, raw=raw, message_id=message_id), strict=True):  # fmt: skip
            headers: list[tuple[str, bytes | None]] = []
            if header_id:
                headers.append(("X-Request-Id", c["id"].encode()))
            if typed_header:
                half = TYPES[kind]
                headers.append(("seldon-infer-type", half))
            t = c["t"] + (0.05 if kind == "response" else 0)
            out.append(SimpleNamespace(value=value, headers=headers,
                                       timestamp=round(t * 1000), kind=kind))  # fmt: skip
    random.Random(seed).shuffle(out)
    for i, r in enumerate(out):
        r.offset = 100 + i
    return out


def uniform_calls(rows: int, n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sex = [rng.choice(["F", "M", "é", ""]) for _ in range(rows)]
        age = [rng.randint(18, 80) for _ in range(rows)]
        p = [rng.choice([0.0, 1.0, 0.5, round(rng.random(), 6)]) for _ in range(rows)]
        out.append({"id": f"call-{seed}-{i}", "t": round(T0 + 60 * i, 3),
                    "sex": sex, "age": age, "p": p})  # fmt: skip
    return out


def both(dec: ServingDecoder, recs: list[Any], topic: str = "in") -> tuple[Any, Any]:
    """(compiled, Python fast path) columns of one batch."""
    fast = dec.fast
    assert isinstance(fast, SeldonFast)
    compiled = fast.native.decode(ConsumerBatch(recs, topic, 0))
    return compiled, fast.decode_python(ConsumerBatch(recs, topic, 0))


def assert_same_columns(a: Any, b: Any) -> None:
    """Equal columns, value for value and type for type."""
    (q_a, t_a, c_a), (r_a, rt_a, s_a, p_a, w_a) = a
    (q_b, t_b, c_b), (r_b, rt_b, s_b, p_b, w_b) = b
    for x, y in ((q_a, q_b), (r_a, r_b)):
        assert x.calls == y.calls and x.rows.dtype == y.rows.dtype
        assert np.array_equal(x.rows, y.rows)
        assert np.array_equal(x.keys(), y.keys()) and x.keys().dtype == np.uint64
    for x, y in ((t_a, t_b), (rt_a, rt_b), (s_a, s_b), (p_a, p_b), (w_a, w_b)):
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)
    assert [[(type(v), v) for v in col] for col in c_a] == [
        [(type(v), v) for v in col] for col in c_b
    ]


@pytest.mark.parametrize("mapping", list(MAPPINGS))
@pytest.mark.parametrize("rows", [1, 4, 64])
@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
@pytest.mark.parametrize("ids", ["message", "header", "both"])
def test_clean_batches_take_the_compiled_path_with_the_python_paths_columns(
    mapping: str, rows: int, raw: bool, ids: str
) -> None:
    cs = uniform_calls(rows, n=max(2, 128 // rows), seed=rows)
    cs[0]["parameters"] = True
    recs = batch_of(cs, raw=raw, message_id=ids != "header", header_id=ids != "message")
    dec = make_decoder(MAPPINGS[mapping])
    compiled, python = both(dec, recs)
    assert compiled is not None and python is not None
    assert_same_columns(compiled, python)
    got = outcome(dec, recs, "in")
    same(got, outcome(make_decoder(MAPPINGS[mapping], fast=False), recs, "in"))
    assert len(got[0]) == len(got[1]) == rows * len(cs) and got[2] == []


@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
def test_responses_on_the_responses_topic_without_the_header(raw: bool) -> None:
    cs = uniform_calls(4, n=20)
    recs = batch_of(cs, raw=raw, typed_header=False)
    dec = make_decoder(MAPPINGS["bool-int8-fp32-bool"])
    careful = make_decoder(MAPPINGS["bool-int8-fp32-bool"], fast=False)
    for topic, kind in (("in", "request"), ("out", "response")):
        half = [r for r in recs if r.kind == kind]
        compiled, python = both(dec, half, topic)
        assert compiled is not None and python is not None
        assert_same_columns(compiled, python)
        same(outcome(dec, half, topic), outcome(careful, half, topic))


def test_the_standard_mixed_batch_of_1_to_64_rows_a_call() -> None:
    for raw in (False, True):
        recs = standard_records(calls(3, n=120), raw=raw)
        dec = standard_decoder(fast=True)
        compiled, python = both(dec, recs)
        assert compiled is not None and python is not None
        assert_same_columns(compiled, python)


# what the Python fast path gives up on, and so must the compiled one
DECLINED = {
    "tombstone", "garbage", "truncated", "no_id", "empty_id", "json_type", "other_type",
    "empty_type", "non_utf8_type", "no_time", "future_time", "raw_contents", "other_field",
    "short_data", "shape", "no_rows", "dup_name", "no_tensors", "nan", "inf", "fp16",
    "int8_range", "bad_utf8", "many_dims", "bool_score",
}  # fmt: skip


@pytest.mark.parametrize("how", SPOILERS)
@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
def test_a_spoiled_batch_is_declined_and_the_careful_path_decides(how: str, raw: bool) -> None:
    recs = standard_records(calls(10, n=30), raw=raw)
    rng = random.Random(1)
    spoiled = [r for r in recs if how not in ("nan", "inf", "bool_score") or r.kind == "response"]
    spoiled = [r for r in spoiled if how not in ("bad_utf8", "int8_range") or r.kind == "request"]
    for r in rng.sample(spoiled, 3):
        _spoil(r, how)
    dec = standard_decoder(fast=True)
    compiled, python = both(dec, recs)
    if how in DECLINED:
        assert compiled is None and python is None
    elif compiled is not None:
        assert python is not None
        assert_same_columns(compiled, python)
    same(outcome(dec, recs), outcome(standard_decoder(fast=False), recs))


@pytest.mark.parametrize("how", SPOILERS)
@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
def test_every_record_spoiled_alike_is_declined_where_python_gives_up(how: str, raw: bool) -> None:
    """No clean majority to differ from: each check must decline on its own."""
    recs = standard_records(calls(12, n=12), raw=raw)
    for r in recs:
        _spoil(r, how)
    dec = standard_decoder(fast=True)
    compiled, python = both(dec, recs)
    if python is None:
        assert compiled is None
    elif compiled is not None:
        assert_same_columns(compiled, python)
    same(outcome(dec, recs), outcome(standard_decoder(fast=False), recs))


def _spoil_native(recs: list[Any], how: str) -> None:
    """Spoilers of what only the compiled path reads itself (headers, times, layouts)."""
    r = recs[3]
    if how == "renamed_tensor":
        msg = (Resp if r.kind == "response" else Req).FromString(r.value)
        (msg.outputs if r.kind == "response" else msg.inputs)[-1].name = "other"
        r.value = msg.SerializeToString()
    elif how == "no_timestamp":
        r.timestamp = None
    elif how == "non_ascii_key":
        r.headers.insert(0, ("x-request-\u0130d", b"zzz"))
    elif how == "bytes_key":
        r.headers.insert(0, (b"x-request-id", b"zzz"))
    elif how == "str_value":
        r.headers = [(k, v.decode() if v else v) for k, v in r.headers]
    elif how == "no_headers":
        r.headers = None
    elif how == "value_str":
        r.value = r.value.decode("latin-1")
    elif how == "huge":
        r.value = r.value + b"\x00" * (2**21)
    elif how == "parameter_not_utf8":
        msg = (Resp if r.kind == "response" else Req).FromString(r.value)
        r.value = msg.SerializeToString() + b"\x22\x08\x0a\x01\xff\x12\x03\x1a\x01a"


NATIVE_SPOILERS = ["renamed_tensor", "no_timestamp", "non_ascii_key", "bytes_key", "str_value",
                   "no_headers", "value_str", "huge", "parameter_not_utf8"]  # fmt: skip


@pytest.mark.parametrize("how", NATIVE_SPOILERS)
def test_unusual_records_are_declined(how: str) -> None:
    recs = batch_of(uniform_calls(1, n=12))
    _spoil_native(recs, how)
    dec = make_decoder(MAPPINGS["bytes-int64-fp64"])
    assert both(dec, recs)[0] is None
    same(outcome(dec, recs), outcome(make_decoder(MAPPINGS["bytes-int64-fp64"], fast=False), recs))


def test_another_models_topic_is_declined(monkeypatch: pytest.MonkeyPatch) -> None:
    recs = batch_of(uniform_calls(1, n=4))
    dec = make_decoder(MAPPINGS["bytes-int64-fp64"])
    assert both(dec, recs, "seldon.ns.model.credit.inputs")[0] is not None
    assert isinstance(dec.fast, SeldonFast)
    monkeypatch.setitem(dec.fast.plan.model_index, "other", 0)  # another known model's topic
    assert both(dec, recs, "seldon.ns.model.other.inputs") == (None, None)


def _mutate(rng: random.Random, value: bytes) -> bytes:
    b = bytearray(value)
    for _ in range(rng.randint(1, 3)):
        how = rng.random()
        at = rng.randrange(len(b) + 1)
        if how < 0.4 and b:
            b[min(at, len(b) - 1)] = rng.randrange(256)
        elif how < 0.6:
            del b[at : at + rng.randint(1, 4)]
        elif how < 0.8:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        else:
            b = b[:at]
    return bytes(b)


@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
def test_mutated_messages_never_raise_and_what_is_taken_equals_python(raw: bool) -> None:
    """Random edits of clean messages: the compiled path declines or agrees with Python."""
    rng = random.Random(7 + raw)
    dec = make_decoder(MAPPINGS["bool-int8-fp32-bool"])
    clean = batch_of(uniform_calls(2, n=3), raw=raw)
    taken = 0
    for _ in range(1500):
        recs = [SimpleNamespace(**vars(r)) for r in clean]
        for r in rng.sample(recs, rng.randint(1, 2)):
            r.value = _mutate(rng, r.value)
        compiled, python = both(dec, recs)
        if compiled is not None:
            taken += 1
            assert python is not None
            assert_same_columns(compiled, python)
    assert taken > 0  # some edits leave valid messages (a changed value, an unknown field)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.binary(max_size=200), min_size=1, max_size=4),
    responses=st.booleans(),
    stamp=st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70)),
)
def test_arbitrary_bytes_never_raise(values: list[bytes], responses: bool, stamp: Any) -> None:
    half = b"proto/InferModelResponse" if responses else b"proto/InferModelRequest"
    recs = [
        SimpleNamespace(
            value=v,
            headers=[("seldon-infer-type", half), ("x-request-id", b"a")],
            timestamp=stamp,
            offset=i,
        )
        for i, v in enumerate(values)
    ]
    dec = make_decoder(MAPPINGS["bytes-int64-fp64"])
    compiled, python = both(dec, recs)
    if compiled is not None:
        assert python is not None
        assert_same_columns(compiled, python)


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=6),
    rows=st.lists(st.integers(min_value=1, max_value=12), min_size=6, max_size=6),
)
def test_the_row_keys_of_any_ids_are_python_s(ids: list[str], rows: list[int]) -> None:
    """The compiled path computes the rows' keys itself: FNV-1a over code points (trailing NULs
    of a one-row call's id left out), as ``keys.row_keys``."""
    cs = uniform_calls(1, n=len(ids))
    for c, i, n in zip(cs, ids, rows, strict=False):
        c["id"] = i
        c["sex"], c["age"], c["p"] = c["sex"] * n, c["age"] * n, c["p"] * n
    recs = batch_of(cs, header_id=False)
    compiled, python = both(make_decoder(MAPPINGS["bytes-int64-fp64"]), recs)
    assert compiled is not None and python is not None
    assert_same_columns(compiled, python)
