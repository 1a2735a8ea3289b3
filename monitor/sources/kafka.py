"""Kafka plumbing on kafka-python: client settings, the consumer, the co-partitioning check,
the rebalance listener, and the dead-letter producer.

The service loop (``service.py``) owns all state; this module only talks to Kafka.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.range import RangePartitionAssignor

from monitor.events import DeadLetter
from monitor.settings import KafkaSpec
from monitor.sources import record_reader

log = logging.getLogger(__name__)


class CopartitionError(RuntimeError):
    """The prediction and label topics cannot be joined partition by partition."""


def client_config(spec: KafkaSpec) -> dict[str, Any]:
    """Connection settings shared by the consumer, the producers and the admin client."""
    cfg: dict[str, Any] = {
        "bootstrap_servers": list(spec.bootstrap_servers),
        "client_id": spec.client_id,
        "security_protocol": spec.security_protocol,
    }
    if spec.sasl_mechanism:
        cfg["sasl_mechanism"] = spec.sasl_mechanism
        cfg["sasl_plain_username"] = spec.sasl_username
        cfg["sasl_plain_password"] = spec.sasl_password
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        if getattr(spec, key):
            cfg[key] = getattr(spec, key)
    return cfg


def make_consumer(spec: KafkaSpec) -> KafkaConsumer:
    """A consumer with manual offsets and the range assignor.

    Range assignment gives partition *p* of both topics to the same member when the topics
    have the same partition count, which is what the per-partition join needs. Fetched record
    batches are parsed by ``record_reader`` (compiled), not by kafka-python's pure Python.
    """
    consumer = KafkaConsumer(
        **client_config(spec),
        group_id=spec.group_id,
        enable_auto_commit=False,
        auto_offset_reset=spec.auto_offset_reset,
        max_poll_records=spec.max_poll_records,
        session_timeout_ms=spec.session_timeout_ms,
        heartbeat_interval_ms=max(1000, spec.session_timeout_ms // 10),
        partition_assignment_strategy=[RangePartitionAssignor],
        fetch_max_bytes=64 * 2**20,
        max_partition_fetch_bytes=8 * 2**20,
    )
    record_reader.install(consumer)
    return consumer


def check_copartitioned(consumer: KafkaConsumer, spec: KafkaSpec) -> int:
    """Return the common partition count, or raise naming both topics and their counts."""
    counts = {}
    for topic in (spec.predictions_topic, spec.labels_topic):
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise CopartitionError(
                f"topic {topic!r} does not exist (or has no partitions) on "
                f"{','.join(spec.bootstrap_servers)}"
            )
        counts[topic] = len(parts)
    p, lab = counts[spec.predictions_topic], counts[spec.labels_topic]
    if p != lab:
        raise CopartitionError(
            f"prediction topic {spec.predictions_topic!r} has {p} partitions but label topic "
            f"{spec.labels_topic!r} has {lab}: they must be co-partitioned (same partition "
            "count, both keyed by prediction id) so that a label lands in the same partition "
            "number as its prediction"
        )
    return p


class RebalanceQueue(ConsumerRebalanceListener):  # type: ignore[misc]
    """Hands rebalance events to the main loop without blocking.

    kafka-python 3 calls listeners on its network thread: blocking there (checkpoint I/O,
    commits) would stall heartbeats. The main loop drains this queue after every poll and does
    the work itself; correctness does not depend on timing, because every checkpoint pairs a
    partition's state with its offsets and records below the restored offset are skipped.

    Newly assigned partitions are paused here (a flag in the subscription state, no I/O) until
    the main loop has restored them and sought to their offsets: otherwise the fetcher reads
    from the group's position first and every record of that first fetch is read again.
    """

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[tuple[str, set[TopicPartition]]] = queue.SimpleQueue()
        self.consumer: KafkaConsumer | None = None  # set once the consumer exists

    def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        self.events.put(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        tps = set(assigned)
        if self.consumer is not None and tps:
            self.consumer.pause(*tps)  # resumed by the main loop once restored
        self.events.put(("assigned", tps))

    def on_partitions_lost(self, lost: Iterable[TopicPartition]) -> None:
        self.events.put(("lost", set(lost)))

    def drain(self) -> list[tuple[str, set[TopicPartition]]]:
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out


class DeadLetterSink:
    """Produces invalid records, unchanged, to the dead-letter topic with why and whence."""

    def __init__(self, spec: KafkaSpec, topic: str) -> None:
        self.topic = topic
        self.producer = KafkaProducer(**client_config(spec), acks="all", linger_ms=20, retries=10)
        self.sent = 0

    def send(self, dead: Iterable[DeadLetter]) -> None:
        for d in dead:
            rec = d.record
            value = rec.value if isinstance(rec.value, bytes) else repr(rec.value).encode()
            headers = [
                ("fm.reason", d.reason.value.encode()),
                ("fm.detail", d.detail.encode()[:500]),
                ("fm.source.topic", rec.topic.encode()),
                ("fm.source.partition", str(rec.partition).encode()),
                ("fm.source.offset", str(rec.offset).encode()),
            ]
            self.producer.send(self.topic, value=value, headers=headers)
            self.sent += 1

    def flush(self, timeout: float = 30.0) -> None:
        self.producer.flush(timeout=timeout)

    def close(self) -> None:
        self.producer.close(timeout=5)
