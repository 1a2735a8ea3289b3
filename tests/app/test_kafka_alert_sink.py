"""The Kafka alert sink on a real broker: a send is bounded by ``alerts.sinks.timeout`` (kafka-python
waits up to 60 s for metadata by default), the page is retried until the topic takes it, and
what lands on the topic is the notification, once."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from kafka import KafkaConsumer

from monitor.alerts.sinks import Dispatcher
from monitor.app.service import _alert_producer
from monitor.config.spec import parse_config
from tests.alerts.test_sinks import transition
from tests.helpers import wait_for
from tests.kafka_helpers import create_topics, end_offsets

pytestmark = pytest.mark.integration


def read_all(kafka: Any, topic: str, n: int) -> list[dict[str, Any]]:
    """The first ``n`` records of ``topic`` (waits for them, up to 30 s)."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=30_000,
        **kafka.client,
    )
    try:
        out: list[dict[str, Any]] = []
        for record in consumer:
            out.append(json.loads(record.value))
            if len(out) >= n:
                break
        return out
    finally:
        consumer.close()


def test_a_send_to_a_topic_not_there_yet_fails_within_the_timeout_then_delivers(kafka) -> None:  # type: ignore[no-untyped-def]
    """The broker does not create topics on demand here: until the topic exists, each attempt
    fails after ``sinks.timeout`` (1 s), not kafka-python's 60 s; once it exists, the page
    that failed arrives, once."""
    topic = f"alerts-{uuid.uuid4().hex[:8]}"
    cfg = parse_config(
        {
            "kafka": {"bootstrap_servers": kafka.bootstrap},  # the plain session broker
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}},
            "alerts": {"sinks": {"kafka_topic": topic, "timeout": 1, "log": False}},
        }
    )
    send = _alert_producer(cfg)
    assert send is not None
    d = Dispatcher(cfg.alerts.sinks, kafka_send=send)
    d.start()
    started = time.monotonic()
    d.submit(transition("firing"))
    wait_for(lambda: d.failures["kafka"] >= 1, 20, lambda: "the first attempt to fail")
    first_failure = time.monotonic() - started
    assert first_failure < 10, f"the first attempt took {first_failure:.1f} s (timeout 1 s)"
    create_topics(kafka.bootstrap, {topic: 1}, client=kafka.client)
    wait_for(lambda: d.delivered["kafka"] == 1, 60, lambda: f"delivery ({d.failures})")
    d.close()
    (page,) = read_all(kafka, topic, 1)
    assert page["state"] == "firing" and page["labels"]["model"] == "m"
    assert end_offsets(kafka.bootstrap, [topic], client=kafka.client) == {(topic, 0): 1}  # once
    print(f"first attempt failed after {first_failure:.1f} s; {d.failures['kafka']} failures "
          "before the topic existed")  # fmt: skip
