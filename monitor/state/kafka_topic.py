"""The state topic's plumbing on kafka-python (used by ``kafka_store.py``): create or check it
(compacted), read it from the beginning to its end offsets, write records and wait for them.

Clients are built from the service's ``kafka:`` settings (``ingest/kafka.py``
``client_config``), so bootstrap servers, TLS and SASL are the consumer's. Anything that stops
the store from reading or writing is a :class:`CheckpointUnavailable` naming the topic: the
remedy is the cluster's (reachability, ACLs, the topic's settings), never moving data aside.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import KafkaError, TopicAlreadyExistsError

from monitor.config.settings import CheckpointSpec, KafkaSpec
from monitor.ingest.kafka import DEFAULT_MAX_MESSAGE_BYTES, _config_value, client_config
from monitor.state.checkpoint import CheckpointUnavailable

log = logging.getLogger("monitor.state.kafka_topic")

REQUEST_TIMEOUT_MS = 15_000
BOOTSTRAP_TIMEOUT_MS = 30_000  # an unreachable cluster at start: then CheckpointUnavailable
READ_TIMEOUT_S = 60.0  # reading the whole topic to its end offsets
MAX_BLOCK_MS = 10_000
WRITE_TIMEOUT_S = 20.0  # the acknowledgement of one phase of a save (the loop waits)
RECORD_OVERHEAD = 16 << 10  # key, chunk header and record batch around a chunk


class StateTopicError(CheckpointUnavailable):
    """The state topic exists but cannot hold state as configured (not compacted, records
    too small for a chunk): the service refuses to start."""


def _servers(spec: KafkaSpec) -> str:
    return ",".join(spec.bootstrap_servers)


def ensure_topic(spec: KafkaSpec, cp: CheckpointSpec) -> int:
    """Create the state topic (``cleanup.policy=compact``) if absent, check it is compacted
    and that a chunk fits its ``max.message.bytes`` (returned)."""
    topic = cp.state_topic
    try:
        admin = KafkaAdminClient(
            **client_config(spec),
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
        )
    except KafkaError as exc:
        raise CheckpointUnavailable(
            f"state topic {topic}: cannot reach Kafka at {_servers(spec)} ({exc})", topic
        ) from None
    try:
        if topic not in admin.list_topics():
            try:
                admin.create_topics(
                    {
                        topic: {
                            "num_partitions": cp.state_topic_partitions,
                            "replication_factor": cp.state_topic_replication,
                            "configs": {"cleanup.policy": "compact"},
                        }
                    },
                    wait_for_metadata=True,
                )
                log.info(
                    "created state topic %s (cleanup.policy=compact, %d partition(s))",
                    topic,
                    cp.state_topic_partitions,
                )
            except TopicAlreadyExistsError:  # another replica made it meanwhile
                pass
        res = ConfigResource(ConfigResourceType.TOPIC, topic, configs=None)
        found = admin.describe_configs([res], config_filter="all")
        policy = _config_value(found, topic, "cleanup.policy")
        limit = _config_value(found, topic, "max.message.bytes")
    except KafkaError as exc:
        raise CheckpointUnavailable(
            f"state topic {topic}: cannot create or describe it on {_servers(spec)} ({exc})",
            topic,
        ) from None
    finally:
        admin.close()
    if policy is None or {p.strip() for p in policy.split(",")} != {"compact"}:
        raise StateTopicError(
            f"state topic {topic} has cleanup.policy={policy}, it must be compact (alone: "
            "'delete' would drop a partition's state after the retention time); set it with "
            f"kafka-configs --alter --entity-type topics --entity-name {topic} "
            "--add-config cleanup.policy=compact, or name another topic in checkpoint.state_topic",
            topic,
        )
    most = int(limit) if limit is not None else DEFAULT_MAX_MESSAGE_BYTES
    if cp.state_chunk_bytes + RECORD_OVERHEAD > most:
        raise StateTopicError(
            f"state topic {topic}: checkpoint.state_chunk_bytes {cp.state_chunk_bytes} plus "
            f"{RECORD_OVERHEAD} bytes of overhead exceeds the topic's max.message.bytes {most}",
            topic,
        )
    return most


class TopicReader:
    """Reads the whole topic (every partition, from the beginning to the end offsets taken
    when the read starts) and hands each record to ``visit`` in offset order per partition:
    one key's records are in one partition, so the last visit of a key is its newest value."""

    def __init__(self, spec: KafkaSpec, topic: str, *, max_record_bytes: int) -> None:
        self.topic, self.spec = topic, spec
        try:
            self.consumer = KafkaConsumer(
                **client_config(spec),
                group_id=None,
                enable_auto_commit=False,
                request_timeout_ms=REQUEST_TIMEOUT_MS + 5_000,
                max_partition_fetch_bytes=max(max_record_bytes, 1 << 20) * 2,
                fetch_max_bytes=64 << 20,
            )
        except KafkaError as exc:
            raise CheckpointUnavailable(
                f"state topic {topic}: cannot reach Kafka at {_servers(spec)} ({exc})", topic
            ) from None

    def read(self, visit: Callable[[str, bytes | None], None]) -> int:
        """Every record up to the end offsets; returns how many."""
        c, topic = self.consumer, self.topic
        try:
            parts = c.partitions_for_topic(topic)
            if not parts:
                raise CheckpointUnavailable(f"state topic {topic} does not exist", topic)
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            c.assign(tps)
            ends = c.end_offsets(tps)
            c.seek_to_beginning(*tps)
            left = {tp for tp in tps if c.position(tp) < ends[tp]}
            deadline, n = time.monotonic() + READ_TIMEOUT_S, 0
            while left:
                if time.monotonic() > deadline:
                    raise CheckpointUnavailable(
                        f"state topic {topic}: not read to its end within {READ_TIMEOUT_S:.0f}s",
                        topic,
                    )
                for tp, records in c.poll(timeout_ms=500).items():
                    for r in records:
                        if r.offset < ends[tp] and r.key is not None:
                            visit(r.key.decode("utf-8", "replace"), r.value)
                            n += 1
                left = {tp for tp in left if c.position(tp) < ends[tp]}
            return n
        except KafkaError as exc:
            raise CheckpointUnavailable(
                f"state topic {topic}: cannot read it ({exc})", topic
            ) from None

    def close(self) -> None:
        self.consumer.close()


class TopicWriter:
    """Sends keyed records and waits for every acknowledgement (``acks=all``)."""

    def __init__(self, spec: KafkaSpec, topic: str, *, max_record_bytes: int) -> None:
        self.topic = topic
        try:
            self.producer = KafkaProducer(
                **client_config(spec),
                acks="all",
                retries=5,
                linger_ms=5,
                max_in_flight_requests_per_connection=1,  # one key's records stay in order
                max_request_size=max_record_bytes + RECORD_OVERHEAD,
                batch_size=max_record_bytes + RECORD_OVERHEAD,
                request_timeout_ms=REQUEST_TIMEOUT_MS + 5_000,
                # a send waits at most this for metadata or buffer room (a broker outage): the
                # save fails and is retried rather than holding the loop past its liveness
                max_block_ms=MAX_BLOCK_MS,
            )
        except KafkaError as exc:
            raise CheckpointUnavailable(
                f"state topic {topic}: cannot reach Kafka at {_servers(spec)} ({exc})", topic
            ) from None
        self._futures: list[Any] = []

    def send(self, key: str, value: bytes | None) -> None:
        try:
            self._futures.append(self.producer.send(self.topic, key=key.encode(), value=value))
        except KafkaError as exc:
            self._futures.clear()
            raise CheckpointUnavailable(
                f"state topic {self.topic}: cannot write {key} ({exc})", self.topic
            ) from None

    def flush(self) -> None:
        """Wait until every record sent is acknowledged; raise if one is not."""
        futures, self._futures = self._futures, []
        try:
            self.producer.flush(timeout=WRITE_TIMEOUT_S)
        except KafkaError as exc:
            raise CheckpointUnavailable(
                f"state topic {self.topic}: write not acknowledged ({exc})", self.topic
            ) from None
        for f in futures:
            if not f.is_done or f.failed():
                why = f.exception if f.is_done else f"no answer within {WRITE_TIMEOUT_S:.0f}s"
                raise CheckpointUnavailable(
                    f"state topic {self.topic}: write not acknowledged ({why})", self.topic
                )

    def close(self) -> None:
        self.producer.close(timeout=5)
