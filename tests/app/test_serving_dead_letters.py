"""A response whose request never comes (issue 16), on real Apache Kafka: once the other
half is later than the model's lateness, the response record is dead-lettered, once, with
reason ``orphan_response`` and the source topic, partition and offset of its record (the
record stays there); the decisions that did meet count as replay counts them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

from tests.app.test_attributes_kafka import ticks
from tests.app.test_serving_kafka import (
    MAPPING,
    _plain,
    as_events,
    bodies,
    calls,
    keep_topics,
    run_to_end,
)
from tests.helpers import T0, wait_for
from tests.kafka_helpers import MonitorProcess, produce, replay_report

pytestmark = pytest.mark.integration


def test_a_response_without_its_request_is_dead_lettered_by_its_offset(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    pred, resp, lab, dlq = f"in-{tag}", f"out-{tag}", f"lab-{tag}", f"dlq-{tag}"
    keep_topics(kafka.bootstrap, pred, resp, lab, dlq)
    cs = calls(14, n=60)
    cs += ticks(max(c["t"] for c in cs) + 3600)  # every partition's clock past the ghosts
    preds, labels = as_events(cs, 14)
    ghosts = [
        {"id": f"ghost-{i}", "t": T0 + 60 * i, "sex": ["F"] * r, "age": [30] * r, "p": [0.5] * r}
        for i, r in enumerate([1, 1, 5, 1])
    ]
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")

    def send(topic: str, c: dict[str, Any], body: dict[str, Any], t: float) -> Any:
        return producer.send(
            topic, value=json.dumps(body).encode(), key=c["id"].encode(),
            headers=[("x-request-id", c["id"].encode())], timestamp_ms=round(t * 1000),
        )  # fmt: skip

    orphaned = {}
    for g in ghosts:  # responses only: their requests never come
        meta = send(resp, g, bodies(g)[1], g["t"]).get(30)
        orphaned[(meta.partition, meta.offset)] = len(g["sex"])
    for c in cs:
        request, response = bodies(c)
        send(pred, c, request, c["t"])
        send(resp, c, response, c["t"] + 0.05)
    producer.flush(60)
    producer.close()
    produce(kafka.bootstrap, lab, labels, key="call")
    oracle = MonitorProcess(tmp_path, kafka.bootstrap, name="oracle", pred=pred, lab=lab)
    report = replay_report(tmp_path, oracle.config, preds, [_plain(e) for e in labels])

    m = MonitorProcess(
        tmp_path, kafka.bootstrap, name="orphans", pred=pred, lab=lab, dlq=dlq,
        checkpoint=tmp_path / "orphans.sqlite", kafka_settings={"responses_topic": resp},
    )  # fmt: skip
    text = m.config.read_text()
    m.config.write_text(
        text.replace(
            "    min_samples: 5\n", "    min_samples: 5\n" + MAPPING.format(fmt="oip-json")
        )
    )
    got = run_to_end(m, kafka.bootstrap, [pred, resp, lab])
    assert got["models"] == report["models"]
    assert got["counters"]["orphan_responses"] == sum(orphaned.values())  # by decision
    assert got["counters"]["predictions"] == len(preds)

    consumer = KafkaConsumer(
        dlq, bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
        consumer_timeout_ms=500,
    )  # fmt: skip
    letters: list[Any] = []
    try:
        wait_for(
            lambda: letters.extend(consumer) or len(letters) >= len(orphaned),
            30,
            lambda: f"{len(orphaned)} dead letters, got {len(letters)}",
        )
    finally:
        consumer.close()
    found = {}
    for r in letters:
        h = {k: v.decode() for k, v in r.headers}
        assert h["fm.reason"] == "orphan_response" and h["fm.source.topic"] == resp
        assert (
            f"of {orphaned[(int(h['fm.source.partition']), int(h['fm.source.offset']))]} "
            in (h["fm.detail"])
        )
        found[(int(h["fm.source.partition"]), int(h["fm.source.offset"]))] = h["fm.detail"]
    assert sorted(found) == sorted(orphaned) and len(letters) == len(orphaned)  # each once
