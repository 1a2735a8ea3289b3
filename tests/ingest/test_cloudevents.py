"""CloudEvents on Kafka as KServe's inference logger writes them (binary mode, headers
``ce_*``), in structured mode, and broken: each attribute read, each refusal with a reason."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.ingest.cloudevents import (
    MAX_ATTRIBUTES,
    MAX_HEADERS,
    REQUEST,
    RESPONSE,
    columns,
    from_kafka,
)
from monitor.ingest.events import Invalid, Reason

BODY = b'{"id": "9f2", "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}'


def kserve(ce_type: str = REQUEST, sep: str = "_", **extra: bytes) -> list[tuple[str, bytes]]:
    h = {
        "specversion": b"1.0",
        "id": b"9f2",
        "type": ce_type.encode(),
        "source": b"http://localhost:9081/",
        "time": b"2026-01-01T10:00:00.250Z",
        "inferenceservicename": b"credit",
        "namespace": b"lending",
        "component": b"predictor",
        "endpoint": b"default",
        **extra,
    }
    return [(f"ce{sep}{k}", v) for k, v in h.items()] + [("content-type", b"application/json")]


def refused(headers: list[tuple[str, bytes]] | None, value: bytes | None, reason: Reason) -> str:
    with pytest.raises(Invalid) as info:
        from_kafka(headers, value)
    assert info.value.reason == reason, info.value.detail
    return info.value.detail


@pytest.mark.parametrize("sep", ["_", "-"])
def test_kserve_request_and_response_in_binary_mode(sep: str) -> None:
    req = from_kafka(kserve(REQUEST, sep), BODY)
    assert (req.id, req.kind, req.source, req.data) == (
        "9f2",
        "request",
        "http://localhost:9081/",
        BODY,
    )
    assert req.time == datetime(2026, 1, 1, 10, 0, 0, 250000, tzinfo=UTC).timestamp()
    assert req.attributes["inferenceservicename"] == "credit"
    assert req.attributes["namespace"] == "lending" and req.attributes["endpoint"] == "default"
    assert req.attributes["datacontenttype"] == "application/json"
    resp = from_kafka(kserve(RESPONSE, sep), b"{}")
    assert resp.kind == "response" and resp.id == req.id


def test_structured_mode_with_json_data_and_with_base64_data() -> None:
    event = {
        "specversion": "1.0",
        "id": "a1",
        "type": RESPONSE,
        "source": "s",
        "time": "2026-01-01T10:00:00+02:00",
        "data": {"outputs": []},
    }
    head = [("content-type", b"application/cloudevents+json; charset=utf-8")]
    got = from_kafka(head, json.dumps(event).encode())
    assert got.kind == "response" and json.loads(got.data) == {"outputs": []}
    assert got.time == datetime(2026, 1, 1, 8, 0, tzinfo=UTC).timestamp()
    del event["data"]
    event["data_base64"] = base64.b64encode(BODY).decode()
    assert from_kafka(head, json.dumps(event).encode()).data == BODY


def test_broken_events_are_refused_with_a_reason() -> None:
    no_id = [h for h in kserve() if h[0] != "ce_id"]
    assert "id" in refused(no_id, BODY, Reason.MISSING_ID)
    no_source = [h for h in kserve() if h[0] != "ce_source"]
    assert "source" in refused(no_source, BODY, Reason.BAD_CLOUDEVENT)
    refused([("content-type", b"application/json")], BODY, Reason.MISSING_ID)  # no ce_* at all
    refused(None, BODY, Reason.MISSING_ID)
    no_version = [h for h in kserve() if h[0] != "ce_specversion"]  # (was missing_id: a review)
    assert "ce_specversion" in refused(no_version, BODY, Reason.BAD_CLOUDEVENT)
    refused(kserve(), None, Reason.TOMBSTONE)
    assert "RFC 3339" in refused(kserve(time=b"yesterday"), BODY, Reason.BAD_TIMESTAMP)
    refused(kserve(time=b"2026-01-01T10:00:00"), BODY, Reason.BAD_TIMESTAMP)  # no offset
    refused(kserve(id=b"\xff\xfe"), BODY, Reason.BAD_ID)
    refused(kserve(id=b"x" * 5000), BODY, Reason.ID_TOO_LONG)
    structured = [("content-type", b"application/cloudevents+json")]
    refused(structured, b"not json", Reason.NOT_JSON)
    refused(structured, b"[1, 2]", Reason.NOT_OBJECT)
    refused(structured, b"[" * 100_000, Reason.NOT_OBJECT)
    refused(structured, b'{"a": ' + b"[" * 100_000, Reason.TOO_DEEP)
    # deep, and NaN elsewhere (read by the standard library then): too deep still (a review)
    deep = b'{"x": NaN, "data": ' + b"[" * 3000 + b"]" * 3000 + b"}"
    refused(structured, deep, Reason.TOO_DEEP)
    refused(structured, b'{"id": "a"', Reason.NOT_JSON)
    refused(structured, None, Reason.TOMBSTONE)
    ev = {"specversion": "1.0", "id": "a", "type": "t", "source": "s", "data_base64": "%%%"}
    refused(structured, json.dumps(ev).encode(), Reason.BAD_CLOUDEVENT)
    del ev["data_base64"]
    refused(structured, json.dumps(ev).encode(), Reason.BAD_CLOUDEVENT)  # no data at all
    # JSON escapes of lone surrogates (no UTF-8 text): refused by name, not as a bug
    lone = b'{"specversion": "1.0", "id": "a", "type": "t", "source": "s", "data": "\\ud800"}'
    assert "is not Unicode" in refused(structured, lone, Reason.BAD_CLOUDEVENT)  # its data
    lone = lone.replace(b'"id": "a"', b'"id": "\\udc00"').replace(b'"\\ud800"', b'"x"')
    assert "is not Unicode" in refused(structured, lone, Reason.BAD_ID)


def test_each_unreadable_attribute_is_refused_with_its_own_reason() -> None:
    """Found by a review: a ``ce_time`` header that is not UTF-8 was a ``bad_id``, one over the
    size limit an ``id_too_long``, and a missing source or type ``undecodable`` (the reason
    kept for bugs). The time's are bad timestamps, the envelope's ``bad_cloudevent``."""
    long = b"2" * 5000
    refused(kserve(time=b"\xff"), BODY, Reason.BAD_TIMESTAMP)
    refused(kserve(time=long), BODY, Reason.BAD_TIMESTAMP)
    refused(kserve(id=b"\xff"), BODY, Reason.BAD_ID)
    refused(kserve(id=long), BODY, Reason.ID_TOO_LONG)
    for name in ("ce_source", "ce_type"):
        spoiled = [(k, b"\xff" if k == name else v) for k, v in kserve()]
        assert name in refused(spoiled, BODY, Reason.BAD_CLOUDEVENT)
        spoiled = [(k, long if k == name else v) for k, v in kserve()]
        assert name in refused(spoiled, BODY, Reason.BAD_CLOUDEVENT)
        assert name[3:] in refused([h for h in kserve() if h[0] != name], BODY,
                                   Reason.BAD_CLOUDEVENT)  # fmt: skip


def test_attributes_after_many_other_headers_are_read_and_a_flood_is_refused_by_name() -> None:
    """A mesh and a tracer may put dozens of headers before the event's: they are read
    wherever they are. A record with more headers than any event needs is refused as too
    large (not read as an event without attributes)."""
    tracing = [(f"x-b3-{i}", b"v") for i in range(3 * MAX_ATTRIBUTES)]
    ev = from_kafka(tracing + kserve(), BODY)
    assert (ev.id, ev.kind, ev.attributes["namespace"]) == ("9f2", "request", "lending")
    flood = [(f"x-{i}", b"v") for i in range(MAX_HEADERS + 1)] + kserve()
    assert f"over {MAX_HEADERS}" in refused(flood, BODY, Reason.RECORD_TOO_LARGE)
    extensions = [(f"ce_ext{i}", b"v") for i in range(MAX_ATTRIBUTES)]
    detail = refused(kserve() + extensions, BODY, Reason.RECORD_TOO_LARGE)
    assert f"over {MAX_ATTRIBUTES} CloudEvent attributes" in detail
    repeated = kserve() + [("ce_id", b"9f2")] * (2 * MAX_ATTRIBUTES)  # one attribute, many times
    assert from_kafka(repeated, BODY).id == "9f2"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["ce_id", "ce_type", "ce_source", "ce_specversion", "ce_time", "content-type", "x"]
            ),
            st.one_of(st.none(), st.binary(max_size=40)),
        ),
        max_size=8,
    ),
    st.one_of(st.none(), st.binary(max_size=80)),
)
def test_whatever_the_headers_and_bytes_an_event_is_read_or_refused(
    headers: list[tuple[str, bytes | None]], value: bytes | None
) -> None:
    try:
        ev = from_kafka(headers, value)
    except Invalid as exc:
        assert isinstance(exc.reason, Reason) and exc.detail
        return
    assert ev.id and ev.type and ev.source


@pytest.mark.parametrize(
    "odd", [b"1e400", b"-1e999", b"1" + b"0" * 5000, b'{"n": ' * 100 + b"1e400" + b"}" * 100]
)
def test_structured_mode_reads_an_event_whatever_its_unread_members_hold(odd: bytes) -> None:
    """Found by a review: the envelope was parsed by the standard library and ``data``
    written back with it: 1e400 became Infinity (refused as not JSON downstream), a 5,000-digit
    integer passed Python's limit, and the event was lost; in binary mode it was read."""
    data = b'{"id": "a", "parameters": {"p": ' + odd + b'}, "outputs": []}'
    value = (
        b'{"specversion": "1.0", "id": "a1", "type": "' + RESPONSE.encode() + b'", "source": "s",'
        b' "traceext": ' + odd + b', "data": ' + data + b"}"
    )
    got = from_kafka([("content-type", b"application/cloudevents+json")], value)
    assert (got.id, got.kind, got.data) == ("a1", "response", data)
    assert "traceext" not in got.attributes  # not a string: no CloudEvent attribute


def test_an_extension_not_read_may_be_long_or_not_utf8_and_the_event_is_read() -> None:
    """Found by a review: any ``ce_`` header over 4 KB (a tracer's ``ce_traceparent``, a
    custom extension) refused the event as ``id_too_long``, one not UTF-8 as ``bad_id``."""

    class Rec:
        def __init__(self, headers: list[tuple[str, bytes]]) -> None:
            self.headers, self.value = headers, BODY

    for odd in (b"t" * 10_000, b"\xff\xfe"):
        headers = kserve(traceparent=odd)
        got = from_kafka(headers, BODY)
        assert (got.id, got.kind, got.data) == ("9f2", "request", BODY)
        assert "traceparent" not in got.attributes and got.attributes["namespace"] == "lending"
        cols = columns([Rec(headers), Rec(kserve())])
        assert cols is not None and cols.id == ["9f2", "9f2"] and cols.kind == ["request"] * 2
    refused(kserve(inferenceservicename=b"m" * 5000), BODY, Reason.BAD_CLOUDEVENT)  # one read


@pytest.mark.parametrize("odd", [b'"x": NaN, ', b'"x": -Infinity, '])
def test_structured_mode_reads_what_only_the_standard_library_reads(odd: bytes) -> None:
    """Found by a review: NaN in an unread extension (which msgspec refuses) was refused as
    bad_id; it is read, as before the envelope was read with msgspec."""
    value = b'{"specversion": "1.0", "id": "a1", "type": "t", "source": "s", ' + odd
    got = from_kafka([("content-type", b"application/cloudevents+json")], value + b'"data": {}}')
    assert (got.id, json.loads(got.data)) == ("a1", {})


@pytest.mark.parametrize("nan", [b"", b'"x": NaN, '])  # read with msgspec, and as only json reads
def test_structured_members_the_monitor_reads_must_be_strings(nan: bytes) -> None:
    """Found by a review: ``"time": 1767261600`` was ignored (the event then timed by its
    record), ``"data_base64": null`` decoded from the text "None"; both are refused by name,
    in either reading of the envelope. ``null`` is an absent attribute."""
    structured = [("content-type", b"application/cloudevents+json")]

    def event(**members: object) -> bytes:
        base = {"specversion": "1.0", "id": "a", "type": "t", "source": "s", "data": {}}
        return b"{" + nan + json.dumps({**base, **members}).encode()[1:]

    assert "'time'" in refused(structured, event(time=1767261600), Reason.BAD_TIMESTAMP)
    assert "'id'" in refused(structured, event(id=7), Reason.BAD_ID)
    detail = refused(structured, event(inferenceservicename=["credit"]), Reason.BAD_CLOUDEVENT)
    assert "'inferenceservicename'" in detail
    for odd in (None, 1234, {"a": 1}):
        detail = refused(structured, event(data_base64=odd), Reason.BAD_CLOUDEVENT)
        assert "data_base64 is not a string" in detail
    got = from_kafka(structured, event(time=None, data_base64=base64.b64encode(BODY).decode()))
    assert (got.id, got.time, got.data) == ("a", None, BODY)
    got = from_kafka(structured, event(traceext=12, namespace=None))  # not read: left out
    assert "traceext" not in got.attributes and json.loads(got.data) == {}
