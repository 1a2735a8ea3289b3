"""The state topic's plumbing on kafka-python (used by ``kafka_store.py``): create or check it
(compacted, its segments bounded: ``kafka_segments.py``), read it from the beginning to its end
offsets, write records and wait for them.

Clients are built from the service's ``kafka:`` settings (``ingest/kafka.py``
``client_config``), so bootstrap servers, TLS and SASL are the consumer's. Anything that stops
the store from reading or writing is a :class:`CheckpointUnavailable` naming the topic: the
remedy is the cluster's (reachability, ACLs, the topic's settings), never moving data aside.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError

from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.ingest.kafka import DEFAULT_MAX_MESSAGE_BYTES, _config_value, client_config
from monitor.state.checkpoint import CheckpointUnavailable
from monitor.state.kafka_segments import CHECKED, topic_configs, warn_unbounded

log = logging.getLogger("monitor.state.kafka_topic")

REQUEST_TIMEOUT_MS = 15_000
# a writer killed inside a transaction holds back what readers see of the topic (the last
# stable offset) until the broker aborts it: this long, plus the broker's check interval
TRANSACTION_TIMEOUT_MS = 20_000
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


def _admin(spec: KafkaSpec, topic: str) -> KafkaAdminClient:
    try:
        return KafkaAdminClient(
            **client_config(spec),
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
        )
    except KafkaError as exc:
        raise CheckpointUnavailable(
            f"state topic {topic}: cannot reach Kafka at {_servers(spec)} ({exc})", topic
        ) from None


def require_topic(spec: KafkaSpec, topic: str) -> None:
    """A reader's check: the topic exists (never created; only Describe on it is needed)."""
    admin = _admin(spec, topic)
    try:
        found = topic in admin.list_topics()
    except KafkaError as exc:
        raise CheckpointUnavailable(
            f"state topic {topic}: cannot list topics on {_servers(spec)} ({exc})", topic
        ) from None
    finally:
        admin.close()
    if not found:
        raise CheckpointUnavailable(
            f"state topic {topic} does not exist on {_servers(spec)}: no checkpoint to read "
            "(a monitor with checkpoint.store: kafka creates it when it starts; check "
            "checkpoint.state_topic and kafka.bootstrap_servers)",
            topic,
        )


def ensure_topic(spec: KafkaSpec, cp: CheckpointSpec) -> int:
    """Create the state topic (compacted, bounded segments: ``kafka_segments.py``) if absent,
    check it is compacted and that a chunk fits its ``max.message.bytes`` (returned); warn
    when its segments are unbounded."""
    topic = cp.state_topic
    admin = _admin(spec, topic)
    try:
        if topic not in admin.list_topics():
            try:
                admin.create_topics(
                    {
                        topic: {
                            "num_partitions": cp.state_topic_partitions,
                            "replication_factor": cp.state_topic_replication,
                            "configs": topic_configs(cp),
                        }
                    },
                    wait_for_metadata=True,
                )
                log.info(
                    "created state topic %s (%d partition(s), %s)",
                    topic,
                    cp.state_topic_partitions,
                    ", ".join(f"{k}={v}" for k, v in topic_configs(cp).items()),
                )
            except TopicAlreadyExistsError:  # another replica made it meanwhile
                pass
        res = ConfigResource(ConfigResourceType.TOPIC, topic, configs=None)
        found = admin.describe_configs([res], config_filter="all")
        policy = _config_value(found, topic, "cleanup.policy")
        limit = _config_value(found, topic, "max.message.bytes")
        segments = {k: _config_value(found, topic, k) for k in CHECKED}
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
    warn_unbounded(topic, _servers(spec), segments, cp)  # slower restores, not wrong ones
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
                allow_auto_create_topics=False,  # a reader never creates the topic
                isolation_level="read_committed",  # no record of an aborted save
                request_timeout_ms=REQUEST_TIMEOUT_MS + 5_000,
                max_partition_fetch_bytes=max(max_record_bytes, 1 << 20) * 2,
                fetch_max_bytes=64 << 20,
            )
        except KafkaError as exc:
            raise CheckpointUnavailable(
                f"state topic {topic}: cannot reach Kafka at {_servers(spec)} ({exc})", topic
            ) from None

    def read(
        self, visit: Callable[[str, bytes | None], None], written: dict[int, int] | None = None
    ) -> int:
        """Every record up to the end offsets; returns how many. ``written``: a writer's own
        end offsets per partition, awaited first (a committed transaction's records become
        readable a moment after the commit returns)."""
        c, topic = self.consumer, self.topic
        deadline, n = time.monotonic() + READ_TIMEOUT_S, 0
        try:
            parts = c.partitions_for_topic(topic)
            if not parts:
                raise CheckpointUnavailable(f"state topic {topic} does not exist", topic)
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            c.assign(tps)
            ends = self._ends(tps, deadline)
            while any(ends[tp] < (written or {}).get(tp.partition, 0) for tp in tps):
                if time.monotonic() > deadline:
                    raise CheckpointUnavailable(
                        f"state topic {topic}: its own writes not readable within "
                        f"{READ_TIMEOUT_S:.0f}s",
                        topic,
                    )
                time.sleep(0.02)
                ends = self._ends(tps, deadline)
            c.seek_to_beginning(*tps)
            left = {tp for tp in tps if c.position(tp) < ends[tp]}
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

    def _ends(self, tps: list[TopicPartition], deadline: float) -> dict[TopicPartition, int]:
        """End offsets, asked again while the read has time: just after a broker restart the
        first request may wait out a connection that is gone (seen in CI)."""
        while True:
            try:
                return self.consumer.end_offsets(tps)  # type: ignore[no-any-return]
            except KafkaTimeoutError:
                if time.monotonic() > deadline:
                    raise

    def close(self) -> None:
        self.consumer.close()


class TopicWriter:
    """Sends keyed records and waits for every acknowledgement (``acks=all``); with
    ``transactional``, between :meth:`begin` and :meth:`commit` in one Kafka transaction (a
    transactional id of its own per writer: atomic, not a fence against another process)."""

    def __init__(
        self, spec: KafkaSpec, topic: str, *, max_record_bytes: int, transactional: bool = False
    ) -> None:
        self.topic, self.spec, self.size = topic, spec, max_record_bytes
        self.transactional = transactional
        self.producer = self._producer()
        self.broken = False  # a transaction could not be ended: a new producer before the next
        self._futures: list[Any] = []
        self.written: dict[int, int] = {}  # partition -> end offset of this writer's records

    def _producer(self) -> KafkaProducer:
        more: dict[str, Any] = {}
        if self.transactional:
            more["transactional_id"] = f"{self.spec.client_id}-state-{uuid.uuid4().hex[:12]}"
            more["transaction_timeout_ms"] = TRANSACTION_TIMEOUT_MS
        try:
            producer = KafkaProducer(
                **client_config(self.spec),
                **more,
                acks="all",
                retries=5,
                linger_ms=5,
                max_in_flight_requests_per_connection=1,  # one key's records stay in order
                max_request_size=self.size + RECORD_OVERHEAD,
                batch_size=self.size + RECORD_OVERHEAD,
                request_timeout_ms=REQUEST_TIMEOUT_MS + 5_000,
                # a send waits at most this for metadata or buffer room (a broker outage): the
                # save fails and is retried rather than holding the loop past its liveness
                max_block_ms=MAX_BLOCK_MS,
            )
        except KafkaError as exc:
            raise CheckpointUnavailable(
                f"state topic {self.topic}: cannot reach Kafka at {_servers(self.spec)} ({exc})",
                self.topic,
            ) from None
        if self.transactional:
            try:
                producer.init_transactions()
            except KafkaError as exc:
                producer.close(timeout=5)
                raise CheckpointUnavailable(
                    f"state topic {self.topic}: cannot start a Kafka transaction ({exc}); "
                    "set checkpoint.state_transactions: false if the broker has none",
                    self.topic,
                ) from None
        return producer

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One save: committed if the block completes, else aborted (without transactions,
        the records sent stay written: the generations fence them)."""
        self.begin()
        try:
            yield
            self.commit()
        except BaseException:
            self.abort()
            raise

    def begin(self) -> None:
        if not self.transactional:
            return
        if self.broken:
            self.producer.close(timeout=5)
            self.producer, self.broken = self._producer(), False
        try:
            self.producer.begin_transaction()
        except KafkaError as exc:
            self.broken = True
            raise CheckpointUnavailable(
                f"state topic {self.topic}: cannot begin a transaction ({exc})", self.topic
            ) from None

    def commit(self) -> None:
        if not self.transactional:
            return
        try:
            self.producer.commit_transaction()
        except KafkaError as exc:  # transaction() aborts it
            raise CheckpointUnavailable(
                f"state topic {self.topic}: transaction not committed ({exc})", self.topic
            ) from None

    def abort(self) -> None:
        """After a failed save: its records are never read (read_committed)."""
        self._futures.clear()
        if self.transactional and not self.broken:
            try:
                self.producer.abort_transaction()
            except Exception as exc:  # e.g. the broker is down: a new producer next time
                log.debug("state topic %s: transaction not aborted (%s)", self.topic, exc)
                self.broken = True

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
            md = f.value
            self.written[md.partition] = max(self.written.get(md.partition, 0), md.offset + 1)

    def close(self) -> None:
        self.producer.close(timeout=5)
