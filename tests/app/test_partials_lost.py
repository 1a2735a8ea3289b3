"""The judging state resumes from a saved offset of the partials topic: partials the broker
deleted before it (retention) are said to be lost, loudly, never waited for in silence; on a
real broker (records deleted below an offset) and with a stand-in."""

from __future__ import annotations

import logging
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaTimeoutError

from monitor.app.partials_out import partials_lost


class Reader:
    def __init__(self, first: int | None, error: Exception | None = None) -> None:
        self.first, self.error = first, error

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        if self.error is not None:
            raise self.error
        return {tp: self.first for tp in tps}


def test_a_saved_offset_below_the_first_kept_one_is_a_loss_with_its_offsets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tp = TopicPartition("parts", 0)
    with caplog.at_level(logging.ERROR):
        why = partials_lost(Reader(first=40), tp, 12)
    assert why is not None and "partials 12..39 of parts were deleted" in why
    assert why in caplog.text
    assert partials_lost(Reader(first=12), tp, 12) is None  # the saved one is still there
    assert partials_lost(Reader(first=0), tp, 12) is None
    assert partials_lost(Reader(first=None), tp, 12) is None
    assert partials_lost(Reader(0, KafkaTimeoutError("no answer")), tp, 12) is None


@pytest.mark.integration
def test_partials_deleted_on_the_broker_are_found_lost(kafka) -> None:  # type: ignore[no-untyped-def]
    topic = f"partials-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    reader = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=None)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        for i in range(10):
            producer.send(topic, value=b"%d" % i)
        producer.flush(30)
        tp = TopicPartition(topic, 0)
        assert partials_lost(reader, tp, 3) is None  # all kept
        admin.delete_records({tp: 6})  # as retention would: everything below offset 6
        why = partials_lost(reader, tp, 3)
        assert why is not None and f"partials 3..5 of {topic}" in why
        assert partials_lost(reader, tp, 6) is None
    finally:
        reader.close()
        producer.close()
        admin.close()
