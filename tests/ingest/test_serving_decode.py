"""A serving stack's records → request and response halves: each decoded field by field, each
broken one a dead letter with its reason; the halves through the engine, what never met counted."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml

from monitor.config.spec import parse_config
from monitor.ingest.events import ConsumerBatch, LabelBatch, Reason
from monitor.ingest.keys import id_keys
from monitor.ingest.serving_decode import RESPONSE_DTYPE, ServingDecoder, request_dtype
from monitor.state.engine import Engine
from monitor.state.served import apply_served
from tests.app.test_serving_kafka import MAPPING, calls, payloads, rfc3339, seldon_payloads
from tests.kafka_helpers import MODEL


def setup(fmt: str) -> tuple[Engine, ServingDecoder]:
    text = MODEL.replace("    min_samples: 5\n", "    min_samples: 5\n" + MAPPING.format(fmt=fmt))
    if fmt == "seldon":
        text += "kafka: {predictions_topic: in, responses_topic: out}\n"
    engine = Engine(parse_config(yaml.safe_load(text)))
    return engine, ServingDecoder(engine.decoder.plan, fmt, "out")


def rec(value: bytes | None, headers: list[tuple[str, bytes]] | None = None, t: float = 0) -> Any:
    return SimpleNamespace(value=value, headers=headers or [], timestamp=round(t * 1000), offset=0)


def ce(kind: str, cid: str, t: float, **over: bytes) -> list[tuple[str, bytes]]:
    h = {
        "ce_specversion": b"1.0",
        "ce_id": cid.encode(),
        "ce_type": f"org.kubeflow.serving.inference.{kind}".encode(),
        "ce_source": b"s",
        "ce_time": rfc3339(t),
        "ce_inferenceservicename": b"credit",
        **over,
    }
    return [(k, v) for k, v in h.items() if v]


def batch(*records: Any) -> ConsumerBatch:
    return ConsumerBatch(list(records), "serve", 0)


def test_kserve_events_become_halves_with_the_rows_ids_times_groups_and_scores() -> None:
    engine, dec = setup("kserve-cloudevents")
    c = next(c for c in calls(5) if len(c["sex"]) == 5)
    req, resp = payloads(c)
    asked, answered, dead = dec.decode(
        batch(
            rec(resp, ce("response", c["id"], c["t"] + 0.05), c["t"]),
            rec(req, ce("request", c["id"], c["t"]), c["t"]),
        )
    )
    assert dead == []
    ids = [f"{c['id']}/{r}" for r in range(5)]
    assert list(asked["key"]) == list(id_keys(ids)) and list(answered["key"]) == list(id_keys(ids))
    assert np.allclose(asked["ts"], c["t"], atol=1e-6)
    assert list(answered["score"]) == c["p"]
    assert list(answered["pred"]) == [int(p >= 0.5) for p in c["p"]]
    reg = engine.registries[0]
    assert [reg.labels[g] for g in asked["groups"][:, 0]] == c["sex"]


def test_bare_oip_takes_the_id_from_the_payload_or_the_request_id_header() -> None:
    _, dec = setup("oip-json")
    c = next(c for c in calls(5) if len(c["sex"]) == 1)
    req, _ = payloads(c)
    body = json.loads(req)
    del body["id"]
    asked, _, dead = dec.decode(
        batch(rec(json.dumps(body).encode(), [("x-request-id", b"hdr-1")], c["t"]))
    )
    assert dead == [] and list(asked["key"]) == list(id_keys(["hdr-1"]))
    _, _, dead = dec.decode(batch(rec(json.dumps(body).encode(), [], c["t"])))
    assert [d.reason for d in dead] == [Reason.MISSING_ID]
    body["id"] = ""  # an empty id is none (as in the protobuf): the header's (a review)
    asked, _, dead = dec.decode(
        batch(rec(json.dumps(body).encode(), [("x-request-id", b"hdr-2")], c["t"]))
    )
    assert dead == [] and list(asked["key"]) == list(id_keys(["hdr-2"]))


def test_an_empty_payload_id_takes_the_cloudevents_id() -> None:
    """Found by a review: ``"id": ""`` hid the event's ``ce_id`` and the call was refused."""
    _, dec = setup("kserve-cloudevents")
    c = next(c for c in calls(5) if len(c["sex"]) == 1)
    req, resp = payloads(c)
    bodies = []
    for raw in (req, resp):
        body = json.loads(raw)
        body["id"] = ""
        bodies.append(json.dumps(body).encode())
    asked, answered, dead = dec.decode(
        batch(
            rec(bodies[0], ce("request", c["id"], c["t"]), c["t"]),
            rec(bodies[1], ce("response", c["id"], c["t"] + 0.05), c["t"]),
        )
    )
    assert dead == []
    assert list(asked["key"]) == list(answered["key"]) == list(id_keys([c["id"]]))


@pytest.mark.parametrize(
    ("fmt", "value", "headers", "reason"),
    [
        ("kserve-cloudevents", b"{}", [("ce_type", b"x")], Reason.MISSING_ID),
        ("kserve-cloudevents", None, None, Reason.TOMBSTONE),
        ("oip-json", None, None, Reason.TOMBSTONE),
        ("seldon", None, None, Reason.TOMBSTONE),
        ("seldon", b"\xff\xff\xff\xff\x0f", None, Reason.NOT_PROTOBUF),
        ("seldon", b"\x00", [("seldon-infer-type", b"json/inferModelRequest")], Reason.NOT_JSON),
        ("seldon", b"", [("seldon-infer-type", b"xml")], Reason.UNDECODABLE),
        ("seldon", b"", None, Reason.MISSING_TENSOR),  # an empty ModelInferRequest
        ("oip-json", b"\x00garbage", None, Reason.NOT_JSON),
        ("oip-json", b"[1]", None, Reason.NOT_OBJECT),
        ("oip-json", b'{"id": "a"}', None, Reason.MISSING_TENSOR),
        (
            "oip-json",
            b'{"id": "a", "inputs": [{"name": "sex", "shape": [2], "datatype": "BYTES", "data": ["F"]}]}',
            None,
            Reason.BAD_TENSOR,
        ),
        (
            "oip-json",
            b'{"id": "a", "inputs": [{"name": "sex", "shape": [1], "datatype": "BYTES", "data": ["F"]}]}',
            None,
            Reason.MISSING_TENSOR,  # no features tensor for the age attribute
        ),
        (
            "oip-json",
            b'{"id": "a", "model_name": "fraud", "outputs": [{"name": "probabilities", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 0.5]}]}',
            None,
            Reason.UNKNOWN_MODEL,
        ),
        (
            "oip-json",
            b'{"id": "a", "outputs": [{"name": "probabilities", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 1.5]}]}',
            None,
            Reason.BAD_SCORE,
        ),
        # found by a review: a numeric id or model name was a bad_tensor
        ("oip-json", b'{"id": 17, "outputs": []}', None, Reason.BAD_ID),
        ("oip-json", b'{"id": "a", "model_name": 3, "outputs": []}', None, Reason.UNKNOWN_MODEL),
    ],
)
def test_broken_records_are_dead_letters_with_a_reason(
    fmt: str, value: bytes | None, headers: Any, reason: Reason
) -> None:
    _, dec = setup(fmt)
    asked, answered, dead = dec.decode(batch(rec(value, headers, 1_767_225_600.0)))
    assert len(asked) == len(answered) == 0
    assert [d.reason for d in dead] == [reason], [d.detail for d in dead]


def test_an_empty_service_name_names_no_model_on_a_request_and_on_a_response() -> None:
    """Found by a review: an empty ``ce_inferenceservicename`` refused the request
    (``unknown_model ''``) but the response was read by its ``model_name``, then orphaned."""
    _, dec = setup("kserve-cloudevents")
    c = next(c for c in calls(5) if len(c["sex"]) == 1)
    req, resp = payloads(c)
    halves = [(req, "request"), (resp, "response")]
    for i, (value, kind) in enumerate(halves):
        headers = [h for h in ce(kind, c["id"], c["t"]) if h[0] != "ce_inferenceservicename"]
        records = [rec(value, [*headers, ("ce_inferenceservicename", b"")], c["t"])]
        records.append(rec(value, headers, c["t"]))  # absent: the only model
        asked, answered, dead = dec.decode(batch(*records))
        assert [(d.reason, "''" in d.detail) for d in dead] == [(Reason.UNKNOWN_MODEL, True)]
        assert (len(asked), len(answered)) == ((1, 0) if i == 0 else (0, 1))


def test_through_the_engine_halves_that_never_meet_are_counted() -> None:
    engine, dec = setup("kserve-cloudevents")
    cs = calls(5)[:40]
    records = []
    for i, c in enumerate(cs):
        req, resp = payloads(c)
        if i % 10 != 1:
            records.append(rec(req, ce("request", c["id"], c["t"]), c["t"]))
        if i % 10 != 2:
            records.append(rec(resp, ce("response", c["id"], c["t"] + 0.05), c["t"]))
    records.append(records[0])  # a request logged twice
    asked, answered, dead = dec.decode(batch(*records))
    assert dead == []
    apply_served(engine, 0, asked, answered, LabelBatch())
    n_rows = sum(len(c["sex"]) for i, c in enumerate(cs) if i % 10 not in (1, 2))
    counters = engine.partitions[0].counters
    assert counters["predictions"] == n_rows
    assert counters["repeated_requests"] == len(cs[0]["sex"])
    late = {**cs[0], "id": "late", "t": cs[-1]["t"] + 7 * 3600}  # past the 6 h lateness
    req, resp = payloads(late)
    more = dec.decode(batch(rec(req, ce("request", "late", late["t"]), late["t"])))
    apply_served(engine, 0, more[0], more[1], LabelBatch())
    # a half expires on the other kind's clock: the late request moves only the requests'
    assert counters["orphan_responses"] == sum(len(c["sex"]) for c in cs[1::10])
    assert counters["unanswered_requests"] == 0
    more = dec.decode(batch(rec(resp, ce("response", "late", late["t"]), late["t"])))
    apply_served(engine, 0, more[0], more[1], LabelBatch())
    unanswered = sum(len(c["sex"]) for i, c in enumerate(cs) if i % 10 == 2)
    orphans = sum(len(c["sex"]) for i, c in enumerate(cs) if i % 10 == 1)
    assert counters["unanswered_requests"] == unanswered
    assert counters["orphan_responses"] == orphans


def test_waiting_requests_survive_a_checkpoint_into_an_engine_that_numbers_groups_otherwise() -> (
    None
):
    engine, dec = setup("kserve-cloudevents")
    cs = [c for c in calls(5) if len(c["sex"]) > 1][:3]
    asked, _, _ = dec.decode(
        batch(*[rec(payloads(c)[0], ce("request", c["id"], c["t"]), c["t"]) for c in cs])
    )
    apply_served(engine, 0, asked, np.zeros(0, RESPONSE_DTYPE), LabelBatch())
    meta, arrays = engine.export_partition(0)
    other, dec2 = setup("kserve-cloudevents")
    other.registries[0].index(0, "X")  # a group this engine met first: other indices
    other.import_partition(0, meta, arrays)
    _, answered, _ = dec2.decode(
        batch(*[rec(payloads(c)[1], ce("response", c["id"], c["t"]), c["t"]) for c in cs])
    )
    apply_served(other, 0, np.zeros(0, request_dtype(other.n_sets)), answered, LabelBatch())
    assert other.partitions[0].counters["predictions"] == sum(len(c["sex"]) for c in cs)
    direct, dec3 = setup("kserve-cloudevents")  # the same halves, no checkpoint between
    both = [
        rec(payloads(c)[i], ce(k, c["id"], c["t"]), c["t"])
        for c in cs
        for i, k in ((0, "request"), (1, "response"))
    ]
    a, b, _ = dec3.decode(batch(*both))
    apply_served(direct, 0, a, b, LabelBatch())
    assert by_label(other) == by_label(direct)
    assert set(by_label(other)["sex"]) == {"F", "M"}


def by_label(engine: Engine) -> dict[str, dict[str, list[int]]]:
    """Each attribute set's accepted counts per group label (group numbering aside)."""
    snap = engine.snapshot().models["credit"]
    out = {}
    for name, (idx, labels) in zip(snap.set_names, snap.groups, strict=True):
        out[name] = {
            lab: snap.totals[i].tolist()
            for i, lab in zip(idx, labels, strict=True)
            if snap.totals[i].any()
        }
    return out


@pytest.mark.parametrize("consecutive", [True, False])
@pytest.mark.parametrize("fmt", ["oip-json", "seldon"])
def test_each_response_row_knows_its_records_offset_and_topic(fmt: str, consecutive: bool) -> None:
    """An orphan response is dead-lettered by where its record is: each row carries its
    record's offset (on either decoding path) and whether it came on the responses topic."""
    _, dec = setup(fmt)
    cs = [c for c in calls(6) if len(c["sex"]) in (1, 5)][:4]
    records = []
    for i, c in enumerate(cs):
        _, resp = payloads(c)
        if fmt == "seldon":
            resp = seldon_payloads(c, raw=False)[1]
        headers = [("x-request-id", c["id"].encode())]
        if fmt == "seldon":  # a response by its header, whatever the topic
            headers.append(("seldon-infer-type", b"proto/InferModelResponse"))
        r = rec(resp, headers, c["t"])
        r.offset = 40 + i if consecutive else 40 + 3 * i
        records.append(r)
    _, answered, dead = dec.decode(ConsumerBatch(records, "out", 0))
    assert dead == []
    expected = [r.offset for r, c in zip(records, cs, strict=True) for _ in c["sex"]]
    assert answered["offset"].tolist() == expected
    assert set(answered["on_responses"].tolist()) == {1}
    _, answered, _ = dec.decode(ConsumerBatch(records, "serve", 0))  # another topic
    assert set(answered["on_responses"].tolist()) == {0}


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(
    ("datatype", "column"), [("BYTES", ["700", "41"]), ("BOOL", [True, False])]
)
def test_a_binned_attribute_that_is_no_number_is_a_bad_attribute(
    fast: bool, datatype: str, column: list[Any]
) -> None:
    """Age is binned ([30, 50]); found by a review: text was filed under __missing__ (as if
    the applicant had not said), booleans under '<30'. The good call beside it is kept."""
    _, dec = setup("oip-json")
    if not fast:
        dec.fast = None

    def request(cid: str, features: dict[str, Any]) -> Any:
        sex = {"name": "sex", "shape": [1], "datatype": "BYTES", "data": ["F"]}
        return rec(json.dumps({"id": cid, "inputs": [sex, features]}).encode(), [], 1.7672256e9)

    good = request("ok", {"name": "features", "shape": [1, 2], "datatype": "INT64",
                          "data": [700, 41]})  # fmt: skip
    bad = request("bad", {"name": "features", "shape": [1, 2], "datatype": datatype,
                          "data": column})  # fmt: skip
    asked, _, dead = dec.decode(batch(good, bad))
    assert list(asked["key"]) == list(id_keys(["ok"]))
    assert [d.reason for d in dead] == [Reason.BAD_ATTRIBUTE]
    assert "attribute age must be a finite number" in dead[0].detail


@pytest.mark.parametrize("fast", [True, False])
def test_a_call_id_ending_in_nul_is_a_bad_id(fast: bool) -> None:
    _, dec = setup("oip-json")
    if not fast:
        dec.fast = None
    sex = {"name": "sex", "shape": [1], "datatype": "BYTES", "data": ["F"]}
    feats = {"name": "features", "shape": [1, 2], "datatype": "INT64", "data": [700, 41]}
    recs = [rec(json.dumps({"id": i, "inputs": [sex, feats]}).encode(), [], 1.7672256e9)
            for i in ("a", "a\0")]  # fmt: skip
    asked, _, dead = dec.decode(batch(*recs))
    assert list(asked["key"]) == list(id_keys(["a"]))
    assert [d.reason for d in dead] == [Reason.BAD_ID]
