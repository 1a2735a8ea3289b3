"""A broker that goes away mid-run is an outage to wait out: a poll that raises a Kafka error
leaves the loop running, not ready (with the reason), logged once, and ready again after the
next good poll. (Seen in CI: the broker stopped during a second group join and kafka-python
raised a connection error from ``poll``; the service exited with status 2.)"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.errors import KafkaConnectionError, KafkaTimeoutError

from monitor.app.service import Monitor
from monitor.config.spec import parse_config
from tests.app.fake_consumer import FakeConsumer

PRED, LAB = "preds", "labels"


class FlakyConsumer(FakeConsumer):
    """Raises the queued errors from ``poll``, then answers with no records."""

    def __init__(self, errors: list[Exception]) -> None:
        super().__init__({TopicPartition(PRED, 0), TopicPartition(LAB, 0)})
        self.errors = errors
        self.polls = 0

    def poll(self, timeout_ms: int = 0) -> dict[Any, Any]:
        self.polls += 1
        if self.errors:
            raise self.errors.pop(0)
        return {}


def test_a_poll_error_is_an_outage_not_an_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m"}},
            "kafka": {"predictions_topic": PRED, "labels_topic": LAB},
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)
    consumer = FlakyConsumer(
        [KafkaConnectionError("111 ECONNREFUSED"), KafkaTimeoutError("Unable to bootstrap")]
    )
    m.ownership.consumer = consumer
    m.ownership.pending = False
    m.ownership.owned = {0}
    with caplog.at_level(logging.INFO, logger="monitor.app.service"):  # outage.py logs there
        assert m.polls.poll(consumer) == {}
        ok, why = m.ready()
        assert not ok and why.startswith("Kafka unavailable: KafkaConnectionError")
        assert m.polls.poll(consumer) == {}  # still out: logged once, the reason is the latest
        assert "KafkaTimeoutError" in m.ready()[1]
        assert m.polls.poll(consumer) == {} and consumer.polls == 3
        assert "Kafka unavailable" not in m.ready()[1]  # back: another reason, if any
    warnings = [r for r in caplog.records if "Kafka unavailable, retrying" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].exc_info is not None  # with its traceback
    assert any("Kafka reachable again" in r.getMessage() for r in caplog.records)
    m.store.close()
