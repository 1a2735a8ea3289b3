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

from monitor.config.kafka import KafkaSpec
from monitor.ingest import record_reader
from monitor.ingest.events import DeadLetter
from monitor.ingest.kafka_join import finish_unawaited_joins

log = logging.getLogger(__name__)


class TopicError(RuntimeError):
    """A configured topic cannot be used as configured (the service refuses to start)."""


class CopartitionError(TopicError):
    """The prediction and label topics cannot be joined partition by partition."""


# Kafka's default record size limit (broker message.max.bytes, producer max.request.size)
DEFAULT_MAX_MESSAGE_BYTES = 1_048_576
# room kept for a dead letter's headers and the record batch around it
DEAD_LETTER_OVERHEAD = 8192


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
    Group joins kafka-python would leave unfinished are finished (``kafka_join``: under load
    a member stayed unassigned for good).
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
    consumer.finished_joins = finish_unawaited_joins(consumer)  # None once kafka-python is fixed
    return consumer


def check_copartitioned(consumer: KafkaConsumer, spec: KafkaSpec) -> int:
    """Return the common partition count, or raise naming both topics and their counts."""
    counts = {}
    for topic in spec.input_topics:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            raise CopartitionError(
                f"topic {topic!r} does not exist (or has no partitions) on "
                f"{','.join(spec.bootstrap_servers)}"
            )
        counts[topic] = len(parts)
    p, lab = counts[spec.predictions_topic], counts[spec.labels_topic]
    if spec.responses_topic and counts[spec.responses_topic] != p:
        r = counts[spec.responses_topic]
        raise CopartitionError(
            f"prediction topic {spec.predictions_topic!r} has {p} partitions but responses "
            f"topic {spec.responses_topic!r} has {r}: they must be co-partitioned (same "
            "partition count, both keyed by request id) so that a response lands in the same "
            "partition number as its request"
        )
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


def topic_max_message_bytes(spec: KafkaSpec, topic: str) -> int:
    """The topic's ``max.message.bytes`` (its own setting or the broker's default), or Kafka's
    default when the broker will not say (no DescribeConfigs permission, an old broker)."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    try:
        admin = KafkaAdminClient(**client_config(spec), request_timeout_ms=10_000)
    except Exception as exc:  # the consumer already reached the cluster: keep the default
        log.warning("cannot read %s's max.message.bytes (%s); assuming Kafka's default", topic, exc)
        return DEFAULT_MAX_MESSAGE_BYTES
    try:
        res = ConfigResource(ConfigResourceType.TOPIC, topic, configs=None)
        found = admin.describe_configs([res], config_filter="all")
        value = _config_value(found, topic, "max.message.bytes")
        return int(value) if value is not None else DEFAULT_MAX_MESSAGE_BYTES
    except Exception as exc:
        log.warning("cannot read %s's max.message.bytes (%s); assuming Kafka's default", topic, exc)
        return DEFAULT_MAX_MESSAGE_BYTES
    finally:
        admin.close()


def _config_value(found: Any, topic: str, key: str) -> str | None:
    """One value out of ``describe_configs``' nested answer (its shape varies by version)."""
    if isinstance(found, dict):
        for by_name in found.values():
            entry = by_name.get(topic, {}).get(key) if isinstance(by_name, dict) else None
            if isinstance(entry, dict):
                return str(entry.get("value"))
            if entry is not None:
                return str(entry)
    for response in found if isinstance(found, list) else []:
        for resource in getattr(response, "resources", []):
            for cfg in resource[4]:
                if cfg[0] == key:
                    return str(cfg[1])
    return None


def check_dead_letter_topic(consumer: KafkaConsumer, spec: KafkaSpec) -> None:
    """Refuse to start when the dead-letter topic does not exist: otherwise the first invalid
    record blocks the loop for a minute and then stops it (``Failed to update metadata``)."""
    topic = spec.dead_letter_topic
    if topic and not consumer.partitions_for_topic(topic):
        raise TopicError(
            f"kafka.dead_letter_topic {topic!r} does not exist on "
            f"{','.join(spec.bootstrap_servers)}: create it (same retention as the input "
            "topics is a good start) or remove the setting"
        )


class DeadLetterSink:
    """Produces invalid records to the dead-letter topic with why and whence (headers).

    A value is sent unchanged unless it would not fit in one Kafka record on that topic: then
    its first bytes go, with ``fm.truncated: true`` and ``fm.original.size``, so an oversize
    poison record cannot stop the service (``MessageSizeTooLargeError``). A tombstone is sent
    as an empty value. Sends are asynchronous; :meth:`flush` (before every checkpoint) waits
    for them and counts the ones the broker refused in :attr:`failed`.
    """

    def __init__(
        self, spec: KafkaSpec, topic: str, *, max_message_bytes: int | None = None
    ) -> None:
        self.topic = topic
        limit = max_message_bytes or topic_max_message_bytes(spec, topic)
        self.max_value_bytes = max(
            1024, min(limit, DEFAULT_MAX_MESSAGE_BYTES) - DEAD_LETTER_OVERHEAD
        )
        self.producer = KafkaProducer(
            **client_config(spec),
            acks="all",
            linger_ms=20,
            retries=10,
            max_request_size=max(limit, DEFAULT_MAX_MESSAGE_BYTES),
        )
        self.sent = 0
        self.truncated = 0
        self.failed = 0
        self._futures: list[Any] = []

    def send(self, dead: Iterable[DeadLetter]) -> None:
        for d in dead:
            key, value, headers = dead_letter_record(d, self.max_value_bytes)
            if ("fm.truncated", b"true") in headers:
                self.truncated += 1
            try:
                sent = self.producer.send(self.topic, value=value, key=key, headers=headers)
                self._futures.append(sent)
            except Exception as exc:  # refused before sending: count, never stop the service
                self._refused(exc)
            self.sent += 1

    def _refused(self, exc: BaseException) -> None:
        self.failed += 1
        level = logging.ERROR if self.failed == 1 else logging.DEBUG
        log.log(level, "dead letter not written to %s: %s", self.topic, exc)

    def flush(self, timeout: float = 30.0) -> None:
        self.producer.flush(timeout=timeout)
        for f in self._futures:
            if f.is_done and f.failed():
                self._refused(f.exception)
        self._futures.clear()

    def close(self) -> None:
        self.producer.close(timeout=5)


def dead_letter_record(
    d: DeadLetter, room: int
) -> tuple[bytes | None, bytes, list[tuple[str, bytes]]]:
    """(key, value, headers) of a dead letter that fits in ``room`` bytes beside its own
    ``fm.*`` headers: the record's key and headers first, then as much of its value as fits
    (``fm.truncated``, ``fm.original.size``). A key and headers that take over half the room
    are left out (``fm.dropped.headers``: their size), else a record with large headers made a
    dead letter the topic refused, and the record was counted but never dead-lettered (found
    by a review)."""
    rec = d.record
    if rec.value is None:
        value = b""
    elif isinstance(rec.value, bytes):
        value = rec.value
    else:
        value = repr(rec.value).encode("utf-8", "backslashreplace")
    key = rec.key if isinstance(rec.key, bytes) else None
    headers = dead_letter_headers(d)
    own = len(key or b"") + sum(
        _header_size(len(k.encode("utf-8", "surrogatepass")), len(v))
        for k, v in headers
        if not k.startswith("fm.")
    )
    if own > room // 2:
        key, headers = None, [h for h in headers if h[0].startswith("fm.")]
        headers.append(("fm.dropped.headers", str(own).encode()))
        own = 0
    if len(value) > room - own:
        headers += [("fm.truncated", b"true"), ("fm.original.size", str(len(value)).encode())]
        value = value[: room - own]
    return key, value, headers


def _header_size(key: int, value: int) -> int:
    """Bytes a header takes in a Kafka record (v2): its key and value, each after its length as
    a zigzag varint; thousands of small headers took more than the room left for them when the
    lengths were not counted, and the dead letter was refused (found by a review)."""
    return key + value + ((2 * key).bit_length() // 7 + 1) + ((2 * value).bit_length() // 7 + 1)


def dead_letter_headers(d: DeadLetter) -> list[tuple[str, bytes]]:
    """Why a record was dead-lettered and where it was, as the dead letter's headers, after the
    record's own (its key is kept as the dead letter's). The detail is cut to 500 characters
    before it is encoded: cut in bytes, a multi-byte character split in two made the header
    invalid UTF-8 (found in review)."""
    rec = d.record
    own = [
        (k, v if isinstance(v, bytes) else b"")  # a null value cannot be sent as one
        for k, v in rec.headers
        if isinstance(k, str) and not k.startswith("fm.")
    ]
    when = [("fm.source.timestamp", str(rec.timestamp_ms).encode())] if rec.timestamp_ms else []
    return [
        *own,  # the record's own (a CloudEvent's ce_*, Seldon's x-request-id): decodable again
        ("fm.reason", d.reason.value.encode()),
        ("fm.detail", d.detail[:500].encode("utf-8", "backslashreplace")),
        ("fm.source.topic", rec.topic.encode()),
        ("fm.source.partition", str(rec.partition).encode()),
        ("fm.source.offset", str(rec.offset).encode()),
        *when,  # (not the dead letter's own time: retention would delete old ones at once)
    ]
