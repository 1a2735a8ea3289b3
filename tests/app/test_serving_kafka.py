"""A serving stack's traffic on real Apache Kafka, read as it is (issue 16): KServe's inference
logger CloudEvents (binary mode, ``ce_*`` headers, OIP v2 JSON bodies) and bare OIP JSON, each
call a request and a response of 1–64 rows, in both orders. ``run`` counts exactly what
``replay`` counts from the same decisions written as the monitor's own events."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from tests.app.test_kafka_state_status import status
from tests.helpers import T0, wait_for
from tests.kafka_helpers import MODEL as MODEL_TEXT
from tests.kafka_helpers import (
    MonitorProcess,
    end_offsets,
    own_tracebacks,
    produce,
    replay_report,
)

pytestmark = pytest.mark.integration

MAPPING = """    input:
      format: {fmt}
      score: {{tensor: probabilities, column: 1}}
      attributes:
        sex: {{tensor: sex}}
        age: {{tensor: features, column: 1}}
"""


def calls(seed: int, n: int = 300) -> list[dict[str, Any]]:
    """``n`` inference calls over six hours, each of 1–64 rows (a batch of applicants)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        rows = rng.choice([1, 1, 2, 5, 17, 64])
        t = round(T0 + 6 * 3600 * i / n + rng.uniform(0, 30), 3)  # Kafka keeps milliseconds
        sex = [rng.choice(["F", "M"]) for _ in range(rows)]
        age = [rng.randint(18, 80) for _ in range(rows)]
        p = [round(rng.betavariate(2, 2) * (0.8 if s == "F" else 1.0), 6) for s in sex]
        out.append({"id": f"call-{i}", "t": t, "sex": sex, "age": age, "p": p})
    return out


def row_ids(c: dict[str, Any]) -> list[str]:
    n = len(c["sex"])
    return [c["id"]] if n == 1 else [f"{c['id']}/{r}" for r in range(n)]


def as_events(cs: list[dict[str, Any]], seed: int) -> tuple[list[dict], list[dict]]:
    """The same decisions as the monitor's own prediction and label events."""
    rng = random.Random(seed + 1)
    preds, labels = [], []
    for c in cs:
        for rid, s, a, p in zip(row_ids(c), c["sex"], c["age"], c["p"], strict=True):
            preds.append(
                {
                    "prediction_id": rid,
                    "model_id": "credit",
                    "timestamp": c["t"],
                    "attributes": {"sex": s, "age": a},
                    "score": p,
                }
            )
            if rng.random() < 0.8:
                label = {"prediction_id": rid, "label": int(rng.random() < p)}
                labels.append(
                    {**label, "timestamp": c["t"] + rng.uniform(60, 7200), "call": c["id"]}
                )
    return preds, labels


def bodies(c: dict[str, Any], *, nested: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """A call's request and response as OIP JSON documents (rows of [n, 2] tensors nested as
    the shape says, or flat)."""
    n = len(c["sex"])
    features: list[Any] = [[700, a] for a in c["age"]]
    probs: list[Any] = [[round(1 - p, 6), p] for p in c["p"]]
    if not nested:
        features = [v for row in features for v in row]
        probs = [v for row in probs for v in row]
    request = {
        "id": c["id"],
        "inputs": [
            {"name": "sex", "shape": [n], "datatype": "BYTES", "data": c["sex"]},
            {"name": "features", "shape": [n, 2], "datatype": "INT64", "data": features},
        ],
    }
    response = {
        "model_name": "credit",
        "id": c["id"],
        "outputs": [{"name": "probabilities", "shape": [n, 2], "datatype": "FP64", "data": probs}],
    }
    return request, response


def payloads(c: dict[str, Any]) -> tuple[bytes, bytes]:
    request, response = bodies(c)
    return json.dumps(request).encode(), json.dumps(response).encode()


def send_all(bootstrap: str, records: list[tuple[str, str, bytes, list[Any], float]]) -> None:
    """(topic, key, value, headers, time) records, in this order."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1)
    for topic, key, value, headers, t in records:
        producer.send(
            topic, value=value, key=key.encode(), headers=headers, timestamp_ms=round(t * 1000)
        )
    producer.flush(60)
    producer.close()


def two_topic_monitor(
    tmp_path: Path, bootstrap: str, topics: tuple[str, str, str], fmt: str
) -> MonitorProcess:
    """A monitor reading requests, responses (``kafka.responses_topic``) and labels."""
    pred, resp, lab = topics
    m = MonitorProcess(
        tmp_path, bootstrap, name="two-topics", pred=pred, lab=lab,
        checkpoint=tmp_path / "two-topics.sqlite",
    )  # fmt: skip
    text = m.config.read_text().replace(
        f"  labels_topic: {lab}\n", f"  labels_topic: {lab}\n  responses_topic: {resp}\n"
    )
    assert f"responses_topic: {resp}" in text
    m.config.write_text(
        text.replace("    min_samples: 5\n", "    min_samples: 5\n" + MAPPING.format(fmt=fmt))
    )
    return m


def rfc3339(t: float) -> bytes:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z").encode()


def publish(bootstrap: str, topic: str, cs: list[dict[str, Any]], fmt: str, seed: int) -> None:
    """Each call's request and response, keyed by the call's id (so both land on one
    partition); in half of the calls the response is written first."""
    rng = random.Random(seed + 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1)
    for c in cs:
        req, resp = payloads(c)
        halves = [("request", req, c["t"]), ("response", resp, c["t"] + 0.05)]
        if rng.random() < 0.5:
            halves.reverse()
        for kind, body, t in halves:
            headers = []
            if fmt == "kserve-cloudevents":
                headers = [
                    ("ce_specversion", b"1.0"),
                    ("ce_id", c["id"].encode()),
                    ("ce_type", f"org.kubeflow.serving.inference.{kind}".encode()),
                    ("ce_source", b"http://credit-predictor.lending/"),
                    ("ce_time", rfc3339(t)),
                    ("ce_inferenceservicename", b"credit"),
                    ("ce_namespace", b"lending"),
                    ("content-type", b"application/json"),
                ]
            producer.send(
                topic, value=body, key=c["id"].encode(), headers=headers,
                timestamp_ms=round(t * 1000),
            )  # fmt: skip
    producer.flush(60)
    producer.close()


@pytest.mark.parametrize("fmt", ["kserve-cloudevents", "oip-json"])
def test_a_serving_stacks_traffic_counts_as_replay_of_the_same_decisions(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path, fmt: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    pred, lab = f"serve-{tag}", f"lab-{tag}"
    keep_topics(kafka.bootstrap, pred, lab)
    cs = calls(5)
    preds, labels = as_events(cs, 5)
    assert max(len(c["sex"]) for c in cs) == 64 and min(len(c["sex"]) for c in cs) == 1
    oracle = MonitorProcess(tmp_path, kafka.bootstrap, name="oracle", pred=pred, lab=lab)
    report = replay_report(tmp_path, oracle.config, preds, [_plain(e) for e in labels])
    publish(kafka.bootstrap, pred, cs, fmt, 5)
    produce(kafka.bootstrap, lab, labels, key="call")  # a label goes where its call went
    m = MonitorProcess(
        tmp_path, kafka.bootstrap, name="served", pred=pred, lab=lab,
        checkpoint=tmp_path / "served.sqlite",
    )  # fmt: skip
    text = m.config.read_text()
    m.config.write_text(
        text.replace("    min_samples: 5\n", "    min_samples: 5\n" + MAPPING.format(fmt=fmt))
    )
    got = run_to_end(m, kafka.bootstrap, [pred, lab])
    assert got["models"] == report["models"]  # per model, window, attribute and group
    counters = got["counters"]
    assert counters["predictions"] == len(preds)
    assert counters["unanswered_requests"] == counters["orphan_responses"] == 0
    assert counters["repeated_requests"] == counters["repeated_responses"] == 0


def test_requests_and_responses_on_two_topics_count_as_replay(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path
) -> None:
    """Seldon Core 2's layout with JSON payloads: requests on one topic (``.inputs``),
    responses on another (``.outputs``, ``kafka.responses_topic``), the id only in the
    ``x-request-id`` header, records keyed by it; the responses topic written first (it may
    be read ahead of the requests, or behind)."""
    tag = uuid.uuid4().hex[:8]
    pred, resp, lab = f"seldon.ns.model.credit.inputs.{tag}", f"outputs-{tag}", f"lab-{tag}"
    keep_topics(kafka.bootstrap, pred, resp, lab)
    cs = calls(8)
    preds, labels = as_events(cs, 8)
    oracle = MonitorProcess(tmp_path, kafka.bootstrap, name="oracle", pred=pred, lab=lab)
    report = replay_report(tmp_path, oracle.config, preds, [_plain(e) for e in labels])
    sent = []
    for topic, which in ((resp, 1), (pred, 0)):
        for c in cs:
            body = bodies(c)[which]
            del body["id"]
            headers = [("x-request-id", c["id"].encode())]
            sent.append((topic, c["id"], json.dumps(body).encode(), headers, c["t"] + 0.05 * which))
    send_all(kafka.bootstrap, sent)
    produce(kafka.bootstrap, lab, labels, key="call")
    m = two_topic_monitor(tmp_path, kafka.bootstrap, (pred, resp, lab), "oip-json")
    got = run_to_end(m, kafka.bootstrap, [pred, resp, lab])
    assert got["models"] == report["models"]
    counters = got["counters"]
    assert counters["predictions"] == len(preds)
    assert counters["unanswered_requests"] == counters["orphan_responses"] == 0
    assert {t for offs in got["offsets"].values() for t in offs} == {pred, resp, lab}


def seldon_payloads(c: dict[str, Any], *, raw: bool) -> tuple[bytes, bytes]:
    """A call as Seldon Core 2 writes it: ModelInferRequest / ModelInferResponse (protobuf),
    the tensors in typed contents or in raw little-endian buffers."""
    import struct

    import numpy as np

    from monitor.ingest.open_inference_grpc_pb2 import ModelInferRequest as Req
    from monitor.ingest.open_inference_grpc_pb2 import ModelInferResponse as Resp

    n = len(c["sex"])
    feats = [v for a in c["age"] for v in (700, a)]
    probs = [v for p in c["p"] for v in (round(1 - p, 6), p)]
    req = Req(model_name="credit_1", inputs=[
        Req.InferInputTensor(name="sex", datatype="BYTES", shape=[n]),
        Req.InferInputTensor(name="features", datatype="INT64", shape=[n, 2]),
    ])  # fmt: skip
    resp = Resp(model_name="credit_1", model_version="1", outputs=[
        Resp.InferOutputTensor(name="probabilities", datatype="FP64", shape=[n, 2]),
    ])  # fmt: skip
    if raw:
        req.raw_input_contents.extend([
            b"".join(struct.pack("<I", len(s)) + s.encode() for s in c["sex"]),
            np.array(feats, "<i8").tobytes(),
        ])  # fmt: skip
        resp.raw_output_contents.append(np.array(probs, "<f8").tobytes())
    else:
        req.inputs[0].contents.bytes_contents.extend(s.encode() for s in c["sex"])
        req.inputs[1].contents.int64_contents.extend(feats)
        resp.outputs[0].contents.fp64_contents.extend(probs)
    return req.SerializeToString(), resp.SerializeToString()


@pytest.mark.parametrize("header", [False, True], ids=["topic-says", "seldon-infer-type"])
def test_seldons_protobuf_topics_count_as_replay(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path, header: bool
) -> None:
    """Seldon Core 2 (issue 16): protobuf requests on ``seldon.<ns>.model.<m>.inputs``,
    responses on ``...outputs``, keyed by the request id, which only ``x-request-id`` carries;
    typed and raw contents; 1-64 rows a call; the outputs topic written first."""
    tag = uuid.uuid4().hex[:8]
    pred, resp = f"seldon.ns{tag}.model.credit.inputs", f"seldon.ns{tag}.model.credit.outputs"
    lab = f"lab-{tag}"
    keep_topics(kafka.bootstrap, pred, resp, lab)
    cs = calls(9)
    preds, labels = as_events(cs, 9)
    oracle = MonitorProcess(tmp_path, kafka.bootstrap, name="oracle", pred=pred, lab=lab)
    report = replay_report(tmp_path, oracle.config, preds, [_plain(e) for e in labels])
    kinds = {pred: b"proto/InferModelRequest", resp: b"proto/InferModelResponse"}
    sent = []
    for topic, which in ((resp, 1), (pred, 0)):
        for i, c in enumerate(cs):
            headers = [("x-request-id", c["id"].encode())]
            if header:
                headers.append(("seldon-infer-type", kinds[topic]))
            value = seldon_payloads(c, raw=i % 2 == 1)[which]
            sent.append((topic, c["id"], value, headers, c["t"] + 0.05 * which))
    send_all(kafka.bootstrap, sent)
    produce(kafka.bootstrap, lab, labels, key="call")
    m = two_topic_monitor(tmp_path, kafka.bootstrap, (pred, resp, lab), "seldon")
    got = run_to_end(m, kafka.bootstrap, [pred, resp, lab])
    assert got["models"] == report["models"]
    counters = got["counters"]
    assert counters["predictions"] == len(preds)
    assert counters["unanswered_requests"] == counters["orphan_responses"] == 0
    assert counters["invalid"] == 0  # every record decoded


def keep_topics(bootstrap: str, *names: str) -> None:
    """Three partitions each, kept however old the records' times: the test's event times
    are months back, and the broker's time retention would delete them (flakily, whenever
    its check runs) from topics made with the default."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            [NewTopic(n, 3, 1, topic_configs={"retention.ms": "-1"}) for n in names]
        )
    finally:
        admin.close()


def run_to_end(
    m: MonitorProcess,
    bootstrap: str,
    topics: list[str],
    before_stop: Callable[[MonitorProcess], None] | None = None,
) -> dict[str, Any]:
    """Start ``m``, wait until its checkpoint is at the topics' ends (then ``before_stop``, to
    read its endpoints), stop it; its status."""
    m.start()
    target = end_offsets(bootstrap, topics)
    try:

        def caught_up() -> dict[str, Any] | None:
            got = status(m.config, {}, before_first=True)
            seen = {(t, int(p)): o for p, offs in got["offsets"].items() for t, o in offs.items()}
            return got if all(seen.get(k, 0) >= v for k, v in target.items()) else None

        wait_for(caught_up, 120, lambda: f"the checkpoint to reach {target}")
        if before_stop is not None:
            before_stop(m)
        m.signal()
        assert m.wait(30) == 0
    finally:
        if m.proc is not None and m.proc.poll() is None:
            m.proc.kill()
    assert not own_tracebacks(m.log.read_text())
    return status(m.config, {})


def _plain(label: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in label.items() if k != "call"}


SIM_MODEL = """
models:
  lending:
    attributes: {group: {}, sex: {}}
    intersections: [[group, sex]]
    windows: [1h, 6h]
    bucket: 1m
    lateness: 6h
    min_samples: 5
"""


@pytest.mark.parametrize("fmt", ["kserve-cloudevents", "oip-json", "seldon", "seldon+attributes"])
def test_the_simulators_serving_traffic_counts_as_replay_of_its_own_events(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path, fmt: str
) -> None:
    """``+attributes``: the attributes on a topic of their own (``--attributes-topic``), the
    requests without them."""
    import subprocess
    import sys

    from monitor.app.simulate_serving import MAPPING as SIM_MAPPING

    tag = uuid.uuid4().hex[:8]
    pred, lab = f"sim-{tag}", f"simlab-{tag}"
    fmt, apart = fmt.removesuffix("+attributes"), fmt.endswith("+attributes")
    topics = [pred, lab]
    if fmt == "seldon":  # requests and responses on two topics, as Seldon Core 2 names them
        pred = f"seldon.sim{tag}.model.lending.inputs"
        topics = [pred, pred.replace(".inputs", ".outputs"), lab]
    more_args = []
    if apart:
        topics.append(f"simattrs-{tag}")
        more_args = ["--attributes-topic", topics[-1]]
    keep_topics(kafka.bootstrap, *topics)
    common = ["--scenario", "abrupt", "--seed", "3", "--start", str(T0), "--hours", "3"]
    for more in (["--out", str(tmp_path / "own")], ["--bootstrap", kafka.bootstrap, "--speed", "1e9",
                 "--format", fmt, "--predictions-topic", pred, "--labels-topic", lab, *more_args]):  # fmt: skip
        r = subprocess.run(
            [sys.executable, "-m", "monitor", "simulate", *common, *more],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
    own = tmp_path / "own"
    oracle = MonitorProcess(tmp_path, kafka.bootstrap, name="oracle", pred=pred, lab=lab)
    oracle.config.write_text(oracle.config.read_text().replace(MODEL_TEXT, SIM_MODEL))
    preds = [json.loads(x) for x in (own / "predictions.jsonl").read_text().splitlines()]
    labels = [json.loads(x) for x in (own / "labels.jsonl").read_text().splitlines()]
    report = replay_report(tmp_path, oracle.config, preds, labels)
    m = MonitorProcess(
        tmp_path, kafka.bootstrap, name="served", pred=pred, lab=lab,
        checkpoint=tmp_path / "served.sqlite",
    )  # fmt: skip
    mapping = {"format": fmt, **SIM_MAPPING}
    if apart:
        mapping["attributes"] = "stream"
    serving = "    input: " + json.dumps(mapping) + "\n"
    text = m.config.read_text().replace(MODEL_TEXT, SIM_MODEL + serving)
    if fmt == "seldon":
        text = text.replace(
            f"  labels_topic: {lab}\n", f"  labels_topic: {lab}\n  responses_topic: {topics[1]}\n"
        )
    if apart:
        text = text.replace(
            f"  labels_topic: {lab}\n", f"  labels_topic: {lab}\n  attributes_topic: {topics[-1]}\n"
        )
    m.config.write_text(text)
    got = run_to_end(m, kafka.bootstrap, topics)
    assert got["models"] == report["models"]
    assert got["counters"]["predictions"] == len(preds) > 1000
    assert got["counters"]["orphan_responses"] == got["counters"]["unanswered_requests"] == 0
    if apart:
        assert got["counters"]["attributed_decisions"] == len(preds)
