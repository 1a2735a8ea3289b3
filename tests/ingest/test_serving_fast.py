"""The fast path of a serving stack's records (``serving_fast.py``): clean batches take it, and
whatever the batch (clean, spoiled, another layout), the rows and dead letters are those of the
careful path, which decodes record by record (``oip.py``, ``cloudevents.from_kafka``)."""

from __future__ import annotations

import contextlib
import gc
import json
import random
import tracemalloc
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.config.spec import parse_config
from monitor.ingest.cloudevents import columns, from_kafka
from monitor.ingest.events import ConsumerBatch, Invalid
from monitor.ingest.keys import id_keys
from monitor.ingest.serving_decode import ServingDecoder
from monitor.state.engine import Engine
from tests.app.test_serving_kafka import MAPPING, bodies, calls, rfc3339, row_ids
from tests.helpers import T0
from tests.kafka_helpers import MODEL

FORMATS = ("oip-json", "kserve-cloudevents")


def decoder(fmt: str, *, fast: bool) -> ServingDecoder:
    text = MODEL.replace("    min_samples: 5\n", "    min_samples: 5\n" + MAPPING.format(fmt=fmt))
    engine = Engine(parse_config(yaml.safe_load(text)), clock=lambda: T0 + 86_400)
    dec = ServingDecoder(engine.decoder.plan, fmt)
    if not fast:
        dec.fast = None
    return dec


def records(
    cs: list[dict[str, Any]], fmt: str, *, nested: bool = False, times: bool = True, seed: int = 0
) -> list[Any]:
    """Each call's request and response as records, shuffled (either half may come first)."""
    out = []
    for c in cs:
        for kind, body in zip(("request", "response"), bodies(c, nested=nested), strict=True):
            t = c["t"] + (0.05 if kind == "response" else 0)
            headers: list[tuple[str, bytes | None]] = []
            if fmt == "kserve-cloudevents":
                headers = [
                    ("ce_specversion", b"1.0"),
                    ("ce_id", c["id"].encode()),
                    ("ce_type", f"org.kubeflow.serving.inference.{kind}".encode()),
                    ("ce_source", b"http://credit-predictor/"),
                    ("ce_inferenceservicename", b"credit"),
                    ("content-type", b"application/json"),
                ] + ([("ce_time", rfc3339(t))] if times else [])
            out.append(
                SimpleNamespace(
                    value=json.dumps(body).encode(), headers=headers, timestamp=round(t * 1000)
                )
            )
    random.Random(seed).shuffle(out)
    for i, r in enumerate(out):
        r.offset = i
    return out


def outcome(dec: ServingDecoder, recs: list[Any], topic: str = "serve") -> tuple[Any, ...]:
    """What a decoder makes of a batch: request rows, response rows, dead letters."""
    asked, answered, dead = dec.decode(ConsumerBatch(recs, topic, 0))
    return (
        asked.tolist(),
        answered.tolist(),
        [(d.reason, d.detail, d.record.offset) for d in dead],
    )


def same(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    """Equal rows (NaN scores equal too) and dead letters."""
    assert len(a[0]) == len(b[0]) and len(a[1]) == len(b[1])
    assert repr(a) == repr(b)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
@pytest.mark.parametrize("times", [True, False], ids=["ce_time", "record-time"])
def test_clean_batches_take_the_fast_path_with_the_careful_paths_rows(
    fmt: str, nested: bool, times: bool
) -> None:
    cs = calls(3, n=120)  # 1-64 rows a call
    recs = records(cs, fmt, nested=nested, times=times)
    fast, careful = decoder(fmt, fast=True), decoder(fmt, fast=False)
    assert fast.fast is not None and fast.fast.decode(ConsumerBatch(recs, "serve", 0)) is not None
    got, want = outcome(fast, recs), outcome(careful, recs)
    same(got, want)
    assert len(got[0]) == len(got[1]) == sum(len(c["sex"]) for c in cs) and got[2] == []


def test_a_new_layout_is_learned_and_a_mixed_batch_goes_the_careful_way() -> None:
    fmt = "oip-json"
    fast, careful = decoder(fmt, fast=True), decoder(fmt, fast=False)
    cs = calls(5, n=40)
    flat, nested = records(cs[:20], fmt), records(cs[20:], fmt, nested=True)
    for recs in (flat, nested, flat):  # each batch of one layout: fast, after learning it
        assert fast.fast is not None and fast.fast.decode(ConsumerBatch(recs, "s", 0)) is not None
        same(outcome(fast, recs), outcome(careful, recs))
    mixed = flat[:10] + nested[:10]
    assert fast.fast.decode(ConsumerBatch(mixed, "s", 0)) is None
    same(outcome(fast, mixed), outcome(careful, mixed))


def _spoil(r: Any, how: str, fmt: str) -> None:
    try:
        body = json.loads(r.value)
    except (TypeError, ValueError):
        return  # spoiled already
    tensors = body.get("inputs") or body.get("outputs")
    first = tensors[0]
    if how == "tombstone":
        r.value = None
        return
    if how == "garbage":
        r.value = b"\x00" + r.value[:5]
        return
    if how == "big_int":
        first["data"][0] = 2**63 if first["datatype"] != "BYTES" else 7
    elif how == "bool_value":
        first["data"][0] = True
    elif how == "huge_float":
        r.value = r.value.replace(b'"data": [', b'"data": [1e400, ', 1)
        return
    elif how == "score_out_of_range":
        if "outputs" in body:
            first["data"] = [1.5 for _ in first["data"]]
    elif how == "shape":
        first["shape"][0] += 1
    elif how == "no_id":
        body.pop("id")
    elif how == "long_id":  # past limits.max_id_length (256): refused, never cut short
        body["id"] = "i" * 257
    elif how == "huge_record":  # past limits.max_record_bytes (1 MiB)
        body["parameters"] = {"padding": "p" * (1 << 20)}
    elif how == "fp_bigint" and "outputs" in body:  # an int no float holds
        first["data"][0] = 2**1030
    elif how == "empty_id":
        body["id"] = ""
    elif how == "other_model":
        body["model_name"] = "fraud"
    elif how == "extra_tensor":
        tensors.append({"name": "x", "shape": [1], "datatype": "FP32", "data": [0.5]})
    elif how == "datatype":
        first["datatype"] = "FP32"
    elif how == "int_in_float_tensor" and "outputs" in body:
        first["data"][0] = 0
    elif how == "no_record_time":
        r.timestamp = None
    elif how == "future":
        r.timestamp = round((T0 + 10 * 86_400) * 1000)
    elif fmt == "kserve-cloudevents":
        h = dict(r.headers)
        if how == "no_ce_id":
            h.pop("ce_id")
        elif how == "dash_spelling":
            h["ce-id"] = h.pop("ce_id")
        elif how == "capitals":
            h["CE_SOURCE"] = h.pop("ce_source")
        elif how == "structured":
            h["content-type"] = b"application/cloudevents+json"
        elif how == "not_utf8":
            h["ce_namespace"] = b"\xff\xfe"
        elif how == "bad_time":
            h["ce_time"] = b"yesterday"
        elif how == "other_type":
            h["ce_type"] = b"org.kubeflow.serving.inference.explain"
        elif how == "other_service":
            h["ce_inferenceservicename"] = b"fraud"
        elif how == "empty_service":
            h["ce_inferenceservicename"] = b""
        elif how == "long_header":
            h["ce_component"] = b"x" * 5000
        elif how == "long_id":
            h["ce_id"] = b"i" * 257
        elif how == "baggage":  # a header the monitor does not read: no reason to refuse
            h["baggage"] = b"x" * 5000
        r.headers = list(h.items())
    r.value = json.dumps(body).encode()


SPOILERS = [
    "tombstone", "garbage", "big_int", "bool_value", "huge_float", "score_out_of_range", "shape",
    "no_id", "empty_id", "other_model", "extra_tensor", "datatype", "int_in_float_tensor",
    "no_record_time", "future", "no_ce_id", "dash_spelling", "capitals", "structured",
    "not_utf8", "bad_time", "other_type", "other_service", "empty_service", "long_header",
    "long_id", "huge_record", "fp_bigint", "baggage",
]  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("how", SPOILERS)
def test_each_spoiled_record_sends_its_batch_the_careful_way(fmt: str, how: str) -> None:
    """One spoiled request and one spoiled response in a clean batch: the same dead letters
    and rows as record by record (and the spoiled batch is never taken whole)."""
    recs = records(calls(7, n=10), fmt)
    req = next(r for r in recs if b'"inputs"' in r.value)
    resp = next(r for r in recs if b'"outputs"' in r.value)
    for r in (req, resp):
        _spoil(r, how, fmt)
    fast = decoder(fmt, fast=True)
    want = outcome(decoder(fmt, fast=False), recs)
    if want[2]:  # a dead letter: the whole batch is the careful path's
        assert fast.fast is not None and fast.fast.decode(ConsumerBatch(recs, "s", 0)) is None
    same(outcome(fast, recs), want)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(FORMATS),
    seed=st.integers(0, 10**6),
    spoils=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(SPOILERS)), max_size=3),
    nested=st.booleans(),
)
def test_whatever_the_batch_the_fast_path_gives_the_careful_paths_rows_and_dead_letters(
    fmt: str, seed: int, spoils: list[tuple[int, str]], nested: bool
) -> None:
    recs = records(calls(seed, n=12), fmt, nested=nested, seed=seed)
    for at, how in spoils:
        with contextlib.suppress(KeyError):  # the same spoiler twice: what it removes is gone
            _spoil(recs[at % len(recs)], how, fmt)
    same(outcome(decoder(fmt, fast=True), recs), outcome(decoder(fmt, fast=False), recs))


HEADER_NAMES = [
    "ce_id", "ce_type", "ce_source", "ce_specversion", "ce_time", "ce_inferenceservicename",
    "ce-id", "CE_TYPE", "content-type", "x-request-id", "ce_namespace",
]  # fmt: skip
HEADER_VALUES = [
    b"", b"1.0", b"abc", b"org.kubeflow.serving.inference.request", b"2026-01-01T00:00:00Z",
    b"2026-01-01T00:00:00", b"\xff", b"application/cloudevents+json; charset=utf-8",
    b"application/json", b"x" * 4097, None,
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.sampled_from(HEADER_NAMES), st.sampled_from(HEADER_VALUES)), max_size=9
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([b"{}", None]),
)
def test_cloud_event_columns_read_what_from_kafka_reads_or_decline(
    headers: list[list[tuple[str, bytes | None]]], value: bytes | None
) -> None:
    """Read a batch's headers by attribute (``columns``) or decline it; never read otherwise
    than :func:`from_kafka` reads each record."""
    recs = [SimpleNamespace(headers=h, value=value) for h in headers]
    try:
        cols = columns(recs)
    except (Invalid, UnicodeDecodeError):
        cols = None  # the fast path gives the batch to the careful path
    if cols is None:
        return
    for i, r in enumerate(recs):
        ev = from_kafka(r.headers, r.value)  # what columns accepted, from_kafka accepts too
        assert (ev.id, ev.kind, ev.time, ev.data) == (
            cols.id[i],
            cols.kind[i],
            None if cols.time is None else cols.time[i],
            cols.data[i],
        )
        assert ev.attributes.get("inferenceservicename") == cols.servicename[i]


@pytest.mark.parametrize(
    ("name", "first"), [("ce_id", b"\xff"), ("ce_time", b"\xff"), ("ce_id", b"x" * 5000)]
)
def test_a_repeated_header_is_judged_alike_whatever_else_the_batch_holds(
    name: str, first: bytes
) -> None:
    """Found by a review: with a header repeated, a bad first copy before a good one, the
    fast path read the last copy alone and counted the record's rows while
    :func:`from_kafka` (the careful path) dead-letters it; which one ran depended on the
    other records of the batch, so live and replay could count it differently."""
    import copy

    recs = records(calls(3, n=4), "kserve-cloudevents")
    recs[0].headers = [(name, first), *recs[0].headers]
    careful = outcome(decoder("kserve-cloudevents", fast=False), copy.deepcopy(recs))
    assert [offset for _, _, offset in careful[2]] == [0]  # the record is dead-lettered
    assert columns(recs) is None  # the batch is the careful path's
    same(outcome(decoder("kserve-cloudevents", fast=True), copy.deepcopy(recs)), careful)


def test_score_columns_are_numbers_in_the_unit_interval_per_row() -> None:
    """A decoded batch's scores are those written, row by row (a plausible slip: the other
    class's column, or rows of one call shuffled)."""
    cs = calls(11, n=30)
    recs = records(cs, "oip-json")
    _, answered, dead = decoder("oip-json", fast=True).decode(ConsumerBatch(recs, "s", 0))
    assert dead == []
    want = {}
    for c in cs:
        want.update(zip(id_keys(row_ids(c)).tolist(), c["p"], strict=True))
    got = dict(zip(answered["key"].tolist(), answered["score"].tolist(), strict=True))
    assert got == want and np.isin(answered["pred"], [0, 1]).all()


def test_the_collector_is_left_as_it_was_whatever_the_batch() -> None:
    """The fast path pauses the cyclic collector for a batch: it must come back on after a
    clean batch and after a spoiled one, and stay off when the application had it off."""
    dec = decoder("oip-json", fast=True)
    clean = records(calls(2, n=5), "oip-json")
    spoiled = records(calls(3, n=5), "oip-json")
    spoiled[0].value = b"{"
    assert dec.fast is not None
    try:
        for was in (True, False):
            (gc.enable if was else gc.disable)()
            assert dec.fast.decode(ConsumerBatch(clean, "s", 0)) is not None
            assert gc.isenabled() is was
            assert dec.fast.decode(ConsumerBatch(spoiled, "s", 0)) is None
            assert gc.isenabled() is was
    finally:
        gc.enable()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("how", "reason"),
    [("long_id", "id_too_long"), ("huge_record", "record_too_large"), ("fp_bigint", "bad_tensor")],
)
def test_records_past_the_limits_are_dead_lettered_by_name_and_their_neighbours_counted(
    fmt: str, how: str, reason: str
) -> None:
    """Found in review: a 2-million-character id took 26 s to decode and a 300-character
    request-id header was cut to 256 (two calls, one key). Now each spoiled half is refused
    with its reason (both halves of the call where both are spoiled), and the batch's other
    calls are decoded as if alone."""
    recs = records(calls(11, n=12), fmt)
    resp = next(r for r in recs if b'"outputs"' in r.value)
    req = next(r for r in recs if b'"inputs"' in r.value)
    for r in (req, resp):
        _spoil(r, how, fmt)
    spoiled = {req.offset, resp.offset} if how != "fp_bigint" else {resp.offset}
    asked, answered, dead = outcome(decoder(fmt, fast=True), recs)
    assert sorted(o for _, _, o in dead) == sorted(spoiled)
    assert {r.value for r, _, _ in dead} == {reason}
    clean = [r for r in recs if r.offset not in spoiled]
    alone = outcome(decoder(fmt, fast=True), clean)
    assert repr((asked, answered)) == repr(alone[:2]) and alone[2] == []


def _big_call(n: int, rid: str) -> dict[str, Any]:
    return {"id": rid, "t": T0 + 60, "sex": ["F", "M"] * (n // 2), "age": [30] * n, "p": [0.5] * n}


def _traced_peak(dec: ServingDecoder, recs: list[Any]) -> tuple[tuple[Any, ...], int]:
    tracemalloc.start()
    try:
        out = dec.decode(ConsumerBatch(recs, "serve", 0))
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "careful"])
def test_a_call_of_too_many_rows_is_refused_before_its_rows_exist(fmt: str, fast: bool) -> None:
    """Found in review: a 0.96 MB request of one-value rows under a 240-character id made a
    ``<id>/<row>`` text per row (781 MiB resident for one record), and a few such records
    flushed every genuine waiting request from the join. Now a call of more rows than
    ``limits.max_rows_per_record`` is dead-lettered (``too_many_rows``) and row ids are keys
    computed from the id's hash and the row's digits, never texts: decoding the record takes
    a few times its own size (it took 81 times)."""
    big = _big_call(60_000, "x" * 240)
    recs = records([big, *calls(5, n=4)], fmt)
    dead_offsets = {r.offset for r in recs if len(r.value) > 100_000}
    (asked, answered, dead), peak = _traced_peak(decoder(fmt, fast=fast), recs)
    assert {d.record.offset for d in dead} == dead_offsets and len(dead_offsets) == 2
    assert {d.reason.value for d in dead} == {"too_many_rows"}
    assert all("60000 rows > limits.max_rows_per_record 10000" in d.detail for d in dead)
    assert len(asked) == len(answered) == sum(len(c["sex"]) for c in calls(5, n=4))
    size = sum(len(r.value) for r in recs)
    assert peak < 20 * size, f"{peak / size:.1f} times the batch's bytes"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_call_at_the_row_limit_is_keyed_as_its_row_texts_would_be(fmt: str) -> None:
    """At the limit, with an id that leaves just room for the row numbers: every row is kept,
    keyed as ``id_keys`` keys the texts labels will name (``<id>/0`` … ``<id>/9999``)."""
    rid = "y" * (256 - len("/9999"))
    big = _big_call(10_000, rid)
    (asked, answered, dead), _ = _traced_peak(decoder(fmt, fast=True), records([big], fmt))
    want = id_keys(row_ids(big)).tolist()
    assert dead == [] and asked["key"].tolist() == want and answered["key"].tolist() == want
    longer = _big_call(10_000, rid + "z")  # "/9999" takes it to 257 characters
    _, _, dead = decoder(fmt, fast=True).decode(ConsumerBatch(records([longer], fmt), "s", 0))
    assert [d.reason.value for d in dead] == ["id_too_long"] * 2
    assert "decision id of 257 characters" in dead[0].detail


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_request_of_thousands_of_tensors_is_not_compiled_but_decoded_the_careful_way(
    fmt: str,
) -> None:
    """Found by helper-55: learning a layout compiles a struct per tensor, so one request of
    15,000 small tensors leading a poll cost the fast path over a second each time (the
    careful path: a fifth of that). Past ``MAX_TENSORS`` the layout is not learned."""
    from monitor.ingest.serving_layout import _SAMPLE, MAX_TENSORS, signature

    fast, careful = decoder(fmt, fast=True), decoder(fmt, fast=False)
    normal = records(calls(3, n=20), fmt)
    i = next(i for i, r in enumerate(normal) if b'"inputs"' in r.value)
    body = json.loads(normal[i].value)
    for k in (MAX_TENSORS, MAX_TENSORS + 1, 5_000):
        extra = [{"name": f"t{j}", "shape": [1], "datatype": "BOOL", "data": [True]}
                 for j in range(k - len(body["inputs"]))]  # fmt: skip
        value = json.dumps(dict(body, inputs=body["inputs"] + extra)).encode()
        inputs = _SAMPLE.decode(value).inputs
        assert inputs is not None and len(inputs) == k
        assert (signature(inputs) is None) is (k > MAX_TENSORS)
        hostile = SimpleNamespace(**dict(vars(normal[i]), value=value))
        recs = [hostile, *normal[:i], *normal[i + 1 :]]
        assert fast.fast is not None
        if k > MAX_TENSORS:
            assert fast.fast.decode(ConsumerBatch(recs, "s", 0)) is None
        same(outcome(fast, recs), outcome(careful, recs))


def test_a_ce_time_is_seconds_never_read_as_milliseconds() -> None:
    """Found by helper-55: ``ce_time`` (RFC 3339: seconds once parsed) went through the epoch
    milliseconds rule: the year 9000, with ``min_timestamp: 0`` (a historic replay), was taken
    as 1977. Far in the future, it is dead-lettered as such on both paths."""
    fmt = "kserve-cloudevents"
    text = MODEL.replace("    min_samples: 5\n", "    min_samples: 5\n" + MAPPING.format(fmt=fmt))
    cfg = parse_config(yaml.safe_load(text + "min_timestamp: 0\n"))
    recs = records(calls(1, n=1), fmt)
    for r in recs:
        r.headers = [(k, v) for k, v in r.headers if k != "ce_time"]
        r.headers.append(("ce_time", b"9000-01-01T00:00:00Z"))
    got = []
    for fast in (True, False):
        dec = ServingDecoder(Engine(cfg, clock=lambda: T0 + 86_400).decoder.plan, fmt)
        if not fast:
            dec.fast = None
        asked, answered, dead = dec.decode(ConsumerBatch(recs, "serve", 0))
        assert len(asked) == len(answered) == 0
        got.append([(d.reason.value, d.detail) for d in dead])
    assert got[0] == got[1] and len(got[0]) == 2
    assert all(reason == "timestamp_in_future" and "221845392000" in detail
               for reason, detail in got[0])  # fmt: skip


def test_a_dead_lettered_cloud_event_keeps_its_headers_and_key_to_be_decoded_again() -> None:
    """Found by helper-55: a binary-mode CloudEvent's id, type and time live in its ``ce_*``
    headers; its dead letter kept only the payload, which cannot be decoded again alone."""
    from monitor.ingest.kafka import dead_letter_headers

    fmt = "kserve-cloudevents"
    recs = records(calls(1, n=1), fmt)
    bad = recs[0]
    bad.key, bad.value = b"call-0", b"\x00 not json"
    bad.headers = [*bad.headers, ("fm.reason", b"forged"), ("nothing", None)]
    _, _, dead = decoder(fmt, fast=True).decode(ConsumerBatch(recs, "serve", 0))
    (d,) = dead
    assert d.record.key == b"call-0"
    headers = dead_letter_headers(d)
    own = [(k, v) for k, v in headers if not k.startswith("fm.")]
    assert own == [(k, v or b"") for k, v in bad.headers if k != "fm.reason"]
    fm = dict(h for h in headers if h[0].startswith("fm."))
    assert fm["fm.reason"] == d.reason.value.encode()  # ours, not the record's forged one
    assert fm["fm.source.timestamp"] == str(bad.timestamp).encode()
    assert sum(k == "fm.reason" for k, _ in headers) == 1


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("where", ["payload", "tensor"])
def test_a_number_no_float_holds_in_parameters_costs_no_record(fmt: str, where: str) -> None:
    """Found by helper-55: ``parameters`` (never read) were decoded as typed JSON, so a
    ``1e400`` or a 5,000-digit integer there dead-lettered the whole call as bad_tensor."""
    recs = records(calls(2, n=10), fmt)
    for r in recs:
        body = json.loads(r.value)
        host = body if where == "payload" else (body.get("inputs") or body["outputs"])[0]
        host["parameters"] = {"huge": "@@", "big": "##"}
        r.value = json.dumps(body).replace('"@@"', "1e400").replace('"##"', "9" * 5_000).encode()
    got = outcome(decoder(fmt, fast=True), recs)
    same(got, outcome(decoder(fmt, fast=False), recs))
    assert got[2] == [] and len(got[0]) == len(got[1]) > 0
