"""The fast path of Seldon Core 2's protobuf records (``seldon_fast.py``): clean batches take
it, and whatever the batch (clean, or with records spoiled in any of the ways below), the rows
and dead letters are those of the careful path, which decodes record by record
(``oip_grpc.py``, ``oip.py``)."""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from monitor.config.spec import parse_config
from monitor.ingest.events import ConsumerBatch
from monitor.ingest.open_inference_grpc_pb2 import ModelInferRequest, ModelInferResponse
from monitor.ingest.serving_decode import ServingDecoder
from monitor.state.engine import Engine
from tests.app.test_serving_kafka import MAPPING, calls, seldon_payloads
from tests.helpers import T0
from tests.ingest.test_serving_fast import outcome, same
from tests.kafka_helpers import MODEL

TYPES = {"request": b"proto/InferModelRequest", "response": b"proto/InferModelResponse"}


def decoder(*, fast: bool, mapping: str = MAPPING) -> ServingDecoder:
    return seldon_decoder(mapping.format(fmt="seldon"), fast=fast)


def seldon_decoder(mapping: str, *, fast: bool = True) -> ServingDecoder:
    """A Seldon decoder for ``mapping`` as written (``input:`` YAML, no ``{fmt}`` to fill)."""
    text = MODEL.replace("    min_samples: 5\n", "    min_samples: 5\n" + mapping)
    text += "kafka: {predictions_topic: in, responses_topic: out}\n"
    engine = Engine(parse_config(yaml.safe_load(text)), clock=lambda: T0 + 86_400)
    dec = ServingDecoder(engine.decoder.plan, "seldon", "out")
    if not fast:
        dec.fast = None
    return dec


def records(
    cs: list[dict[str, Any]], *, typed_header: bool = True, seed: int = 0, raw: bool = False
) -> list[Any]:
    """Each call's request and response as Seldon writes them, shuffled together (the
    ``seldon-infer-type`` header says which is which); typed or raw contents."""
    out = []
    for c in cs:
        for kind, value in zip(TYPES, seldon_payloads(c, raw=raw), strict=True):
            headers: list[tuple[str, bytes | None]] = [("x-request-id", c["id"].encode())]
            if typed_header:
                headers.append(("seldon-infer-type", TYPES[kind]))
            t = c["t"] + (0.05 if kind == "response" else 0)
            out.append(
                SimpleNamespace(value=value, headers=headers, timestamp=round(t * 1000), kind=kind)
            )
    random.Random(seed).shuffle(out)
    for i, r in enumerate(out):
        r.offset = 100 + i
    return out


def fast_took(dec: ServingDecoder, recs: list[Any], topic: str = "in") -> bool:
    assert dec.fast is not None
    return dec.fast.decode(ConsumerBatch(recs, topic, 0)) is not None


@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
def test_a_clean_mixed_batch_takes_the_fast_path_with_the_careful_paths_rows(raw: bool) -> None:
    cs = calls(3, n=120)  # 1-64 rows a call
    recs = records(cs, raw=raw)
    fast, careful = decoder(fast=True), decoder(fast=False)
    assert fast_took(fast, recs)
    got, want = outcome(fast, recs), outcome(careful, recs)
    same(got, want)
    assert len(got[0]) == len(got[1]) == sum(len(c["sex"]) for c in cs) and got[2] == []


def test_without_the_header_the_topic_says_which_half() -> None:
    cs = calls(4, n=40)
    recs = records(cs, typed_header=False)
    fast, careful = decoder(fast=True), decoder(fast=False)
    for topic, kind in (("in", "request"), ("out", "response")):
        half = [r for r in recs if r.kind == kind]
        assert fast_took(fast, half, topic)
        got = outcome(fast, half, topic)
        same(got, outcome(careful, half, topic))
        assert len(got[0 if kind == "request" else 1]) == sum(len(c["sex"]) for c in cs)


def _message(r: Any) -> Any:
    kind = dict(r.headers).get("seldon-infer-type")
    cls = ModelInferResponse if kind == TYPES["response"] else ModelInferRequest
    return cls.FromString(r.value)


def _tensors(msg: Any) -> Any:
    return msg.outputs if isinstance(msg, ModelInferResponse) else msg.inputs


def _spoil(r: Any, how: str) -> None:
    """Spoil record ``r`` in one way (some leave it valid: the paths must still agree)."""
    if how == "tombstone":
        r.value = None
        return
    if how in ("garbage", "truncated"):
        r.value = b"\xff\xff\xff" if how == "garbage" else r.value[:-3]
        return
    if how in ("no_id", "empty_id"):
        r.headers = [h for h in r.headers if h[0] != "x-request-id"]
        if how == "empty_id":
            r.headers.append(("x-request-id", b""))
        return
    if how in ("json_type", "other_type", "empty_type", "non_utf8_type"):
        value = {"json_type": b"json/inferModelRequest", "other_type": b"proto/Other",
                 "empty_type": b"", "non_utf8_type": b"\xff"}[how]  # fmt: skip
        r.headers = [h for h in r.headers if h[0] != "seldon-infer-type"]
        r.headers.append(("seldon-infer-type", value))
        return
    if how in ("no_time", "future_time"):
        r.timestamp = -1 if how == "no_time" else round((T0 + 10 * 86_400) * 1000)
        return
    msg = _message(r)
    first = _tensors(msg)[0]
    raw = msg.raw_output_contents if isinstance(msg, ModelInferResponse) else msg.raw_input_contents
    if raw and how in ("short_data", "nan", "inf", "out_of_range", "bad_utf8"):
        _spoil_raw(raw, first.datatype, how)
    elif how == "message_id":
        msg.id = "from-the-message"
    elif how == "raw_contents":
        raw = (
            msg.raw_output_contents
            if isinstance(msg, ModelInferResponse)
            else msg.raw_input_contents
        )
        raw.append(b"\x00" * 8)
    elif how == "other_field":
        first.contents.int64_contents.append(1)
    elif how == "short_data":
        field = first.contents.ListFields()[0][0].name
        del getattr(first.contents, field)[-1]
    elif how == "shape":
        first.shape[0] += 1
    elif how == "no_rows":
        for t in _tensors(msg):
            t.shape[0] = 0
            t.ClearField("contents")
    elif how == "dup_name":
        _tensors(msg).add().CopyFrom(first)
    elif how == "no_tensors":
        del _tensors(msg)[:]
    elif how in ("nan", "inf", "out_of_range"):
        if first.datatype == "FP64":
            first.contents.fp64_contents[0] = {"nan": float("nan"), "inf": float("inf"),
                                                "out_of_range": 1.5}[how]  # fmt: skip
    elif how == "fp16":
        first.datatype = "FP16"
    elif how == "int8_range":
        for t in _tensors(msg):
            if t.datatype == "INT64":
                t.datatype = "INT8"
                values = list(t.contents.int64_contents)
                t.contents.ClearField("int64_contents")
                t.contents.int_contents.extend(values)  # 700 does not fit INT8
    elif how == "bad_utf8":
        if first.datatype == "BYTES":
            first.contents.bytes_contents[0] = b"\xff"
    elif how == "many_dims":
        first.shape.extend([1] * 9)
    elif how == "bool_score" and first.datatype == "FP64":
        values = [v >= 0.5 for v in first.contents.fp64_contents]
        first.datatype = "BOOL"
        first.contents.ClearField("fp64_contents")
        first.contents.bool_contents.extend(values)
    r.value = msg.SerializeToString()


def _spoil_raw(raw: Any, datatype: str, how: str) -> None:
    """The spoilers of typed contents, on the first tensor's raw buffer."""
    if how == "short_data":
        raw[0] = raw[0][:-1]
    elif how == "bad_utf8" and datatype == "BYTES":
        raw[0] = b"\x01\x00\x00\x00\xff" + raw[0][: -(4 + len(raw[0]) // 8)]
    elif how in ("nan", "inf", "out_of_range") and datatype == "FP64":
        value = {"nan": float("nan"), "inf": float("inf"), "out_of_range": 1.5}[how]
        raw[0] = struct.pack("<d", value) + raw[0][8:]  # column 0: not the score


SPOILERS = [
    "tombstone", "garbage", "truncated", "no_id", "empty_id", "json_type", "other_type",
    "empty_type", "non_utf8_type", "no_time", "future_time", "message_id", "raw_contents",
    "other_field", "short_data", "shape", "no_rows", "dup_name", "no_tensors", "nan", "inf",
    "out_of_range", "fp16", "int8_range", "bad_utf8", "many_dims", "bool_score",
]  # fmt: skip


@pytest.mark.parametrize("how", SPOILERS)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
def test_a_spoiled_batch_gives_the_careful_paths_rows_and_dead_letters(
    how: str, seed: int, raw: bool
) -> None:
    recs = records(calls(10 + seed, n=30), seed=seed, raw=raw)
    rng = random.Random(seed)
    for r in rng.sample(recs, 3):
        _spoil(r, how)
    fast, careful = decoder(fast=True), decoder(fast=False)
    same(outcome(fast, recs), outcome(careful, recs))


@pytest.mark.parametrize("how", SPOILERS)
@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
def test_every_record_spoiled_the_same_way_still_agrees(how: str, raw: bool) -> None:
    """A batch where *every* record is spoiled alike (the fast path's layout check cannot
    lean on the clean majority)."""
    recs = records(calls(12, n=12), raw=raw)
    for r in recs:
        _spoil(r, how)
    fast, careful = decoder(fast=True), decoder(fast=False)
    same(outcome(fast, recs), outcome(careful, recs))


def test_the_stream_mapping_takes_no_request_columns() -> None:
    stream = """    input:
      format: {fmt}
      score: {{tensor: probabilities, column: 1}}
      attributes: stream
"""
    text = MODEL.replace(
        "    min_samples: 5\n", "    min_samples: 5\n" + stream.format(fmt="seldon")
    )
    text += "kafka: {predictions_topic: in, responses_topic: out, attributes_topic: attrs}\n"
    engine = Engine(parse_config(yaml.safe_load(text)), clock=lambda: T0 + 86_400)
    fast = ServingDecoder(engine.decoder.plan, "seldon", "out")
    careful = ServingDecoder(engine.decoder.plan, "seldon", "out")
    careful.fast = None
    recs = records(calls(13, n=20))
    assert fast_took(fast, recs)
    got = outcome(fast, recs)
    same(got, outcome(careful, recs))
    assert {g for row in got[0] for g in row[3]} == {-1}  # no groups until the attributes come


def test_a_request_id_header_past_the_limit_is_refused_not_cut_into_another_id() -> None:
    """Found in review: ``x-request-id`` was cut to 256 characters, so two calls whose ids
    differ after that had one key (the second dropped as a repeat). Now both halves of such a
    call are dead-lettered (``id_too_long``), and the batch's other calls are counted."""
    cs = calls(13, n=8)
    long_a, long_b = "r" * 256 + "a", "r" * 256 + "b"
    cs[0]["id"], cs[1]["id"] = long_a, long_b
    recs = records(cs)
    spoiled = {
        r.offset
        for r in recs
        if dict(r.headers)["x-request-id"] in (b"r" * 256 + b"a", b"r" * 256 + b"b")
    }
    asked, answered, dead = outcome(decoder(fast=True), recs)
    assert sorted(o for _, _, o in dead) == sorted(spoiled) and len(spoiled) == 4
    assert {r.value for r, _, _ in dead} == {"id_too_long"}
    alone = outcome(decoder(fast=True), [r for r in recs if r.offset not in spoiled])
    assert repr((asked, answered)) == repr(alone[:2]) and alone[2] == []


@pytest.mark.parametrize("raw", [False, True], ids=["typed", "raw"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "careful"])
def test_a_call_of_too_many_rows_is_dead_lettered(raw: bool, fast: bool) -> None:
    """As for OIP JSON (``test_serving_fast.py``): a protobuf call over
    ``limits.max_rows_per_record`` is refused with its reason, its neighbours counted."""
    n = 12_000
    big = {"id": "x" * 240, "t": T0 + 60, "sex": ["F"] * n, "age": [30] * n, "p": [0.5] * n}
    small = calls(7, n=4)
    asked, answered, dead = outcome(decoder(fast=fast), records([big, *small], raw=raw))
    assert len(dead) == 2 and {r.value for r, _, _ in dead} == {"too_many_rows"}
    assert all("12000 rows > limits.max_rows_per_record 10000" in d for _, d, _ in dead)
    assert len(asked) == len(answered) == sum(len(c["sex"]) for c in small)


@pytest.mark.parametrize("rows", [10_001, 30_000_000])
def test_a_tensor_of_rows_without_values_costs_nothing(rows: int) -> None:
    """Found in review: a 45-byte response of shape [30,000,000, 0] passed the element bound
    (rows × 0 values) and the fast path repeated the record's time per row before any row
    limit: 229 MiB for 45 bytes (8 GB at a billion rows). Now the fast path gives up on a
    zero trailing dimension and on more rows than ``limits.max_rows_per_record`` before any
    per-row work, and the careful path dead-letters the record."""
    import tracemalloc

    from monitor.ingest.open_inference_grpc_pb2 import ModelInferResponse as Resp

    resp = Resp(model_name="credit_1", id="abc", outputs=[
        Resp.InferOutputTensor(name="probabilities", datatype="FP64", shape=[rows, 0])])  # fmt: skip
    headers = [("seldon-infer-type", b"proto/InferModelResponse")]
    rec = SimpleNamespace(value=resp.SerializeToString(), headers=headers,
                          timestamp=round((T0 + 60) * 1000), offset=100)  # fmt: skip
    dec = decoder(fast=True)
    assert dec.fast is not None
    tracemalloc.start()
    try:
        fast = dec.fast.decode(ConsumerBatch([rec], "out", 0))
        asked, answered, dead = dec.decode(ConsumerBatch([rec], "out", 0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert fast is None and len(asked) == len(answered) == 0
    assert [d.reason.value for d in dead] in (["too_many_rows"], ["bad_tensor"])
    assert peak < 2 * 2**20, f"{peak / 2**20:.1f} MiB for {len(rec.value)} bytes"
