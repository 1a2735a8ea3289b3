"""Sending boundary partials to the partials topic (``alerts.scope: global``), and the topic.

:meth:`PartialsOut.flush` returns only once the broker acknowledged every partial published so
far (one that failed is sent again): a checkpoint records a boundary as published only then, so
a partition's next owner never leaves a gap.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from monitor.alerts.global_view import GlobalView
from monitor.alerts.partials import BoundaryPartial
from monitor.alerts.partials_codec import PartialError, decode, encode
from monitor.config.spec import Config
from monitor.ingest.kafka import client_config

log = logging.getLogger("monitor.app.partials_out")

FLUSH_TIMEOUT = 30.0
# the producer's max_request_size (kafka-python's default, 1 MiB) less room for the record's
# key, headers and batch framing: a larger partial would be refused by the producer
MAX_PARTIAL_BYTES = 1_000_000
HELLO_KEY = b"hello"  # "this partition has an owner" (value: its number), with or without data
IDLE_KEY = b"idle"  # "this partition is idle": it holds no boundary back until its next partial


class PartialsOut:
    """Sends partials; :meth:`flush` returns once every one sent is acknowledged."""

    def __init__(self, config: Config) -> None:
        self.topic = config.alerts.partials_topic
        self.producer = KafkaProducer(**client_config(config.kafka), acks="all", linger_ms=5)
        self.unsent: list[tuple[bytes, bytes]] = []
        self.futures: list[tuple[Any, tuple[bytes, bytes]]] = []
        self.sent = self.failed = self.too_large = 0
        self.said: set[int] = set()  # partitions this replica said it owns
        self.idled: set[tuple[int, str]] = set()  # (partition, model) said idle, not busy since

    def publish(self, partials: list[BoundaryPartial]) -> None:
        for p in partials:
            value = encode(p)
            if len(value) > MAX_PARTIAL_BYTES:
                value = self._too_large(p, len(value))
            self._send((f"{p.model}/{p.partition}".encode(), value))

    def _too_large(self, p: BoundaryPartial, size: int) -> bytes:
        """A partial over the producer's request size (thousands of groups): refused by the
        producer, it stopped the replica, and every replica after it at the same boundary.
        Sent instead: the partial without groups (its windows, bucket, arrivals and cohorts
        empty), so the boundary is judged on without this partition's counts (logged,
        counted). A marker ("nothing through here") held the boundaries back until a partial
        of normal size came, and a partition whose partials stayed too large (groups are only
        ever added) stopped the model's global judging for good (found by a review)."""
        self.too_large += 1
        if self.too_large == 1 or self.too_large % 1000 == 0:
            log.error(
                "partials topic %s: the partial of model %s partition %d at boundary %d is "
                "%d bytes, over %d: its counts are left out of the global judgement (%d so "
                "far); fewer groups (max_groups) keep partials smaller",
                self.topic,
                p.model,
                p.partition,
                p.boundary,
                size,
                MAX_PARTIAL_BYTES,
                self.too_large,
            )
        assert p.windows is not None
        w, c = p.windows.shape[0], p.windows.shape[2]
        cohorts = len(p.cohorts)
        empty = BoundaryPartial(
            p.model, p.partition, p.boundary, p.first, (), (),
            windows=np.zeros((w, 0, c), np.int64),
            bucket=np.zeros((0, c), np.int64),
            arrivals=np.zeros((0, c), np.int64),
            cohorts=p.cohorts,
            cohort_counts=np.zeros((cohorts, 0, c), np.int64) if cohorts else None,
            cohort_held=p.cohort_held,
        )  # fmt: skip
        return encode(empty)

    def hello(self, owned: Iterable[int], firsts: Callable[[int], Mapping[str, int]]) -> None:
        """Say once that this replica owns each partition: the view waits to hear from every
        partition, and one without data (a producer keyed onto a few) said nothing else, so
        nothing was ever judged. ``firsts(p)``: each model's first bucket in ``p`` (those with
        data), asked once per partition said. A partition with data says where it starts: read before the partition's
        markers (another batch of the producer), a bare hello let the view judge without it."""
        for p in sorted(set(owned) - self.said):
            self.said.add(p)
            first = firsts(p)
            value = json.dumps({"partition": p, "first": dict(first)}) if first else str(p)
            self._send((HELLO_KEY, value.encode()))

    def idle(self, idle: Iterable[tuple[int, str]], models: Iterable[str]) -> None:
        """Say once per quiet spell that a partition is idle for a model (app/idle.py): in the
        view, as in one instance, it then holds none of the model's boundaries back. Idle for
        every model of ``models``, a partition is said as a bare number (as versions before
        per-model idleness wrote and read it: a replica of one reads the other's)."""
        now, every = set(idle), set(models)
        fresh = now - self.idled
        for p in sorted({p for p, _ in fresh}):
            if {m for q, m in now if q == p} >= every:
                self._send((IDLE_KEY, str(p).encode()))
                continue
            for model in sorted(m for q, m in fresh if q == p):
                value = json.dumps({"partition": p, "model": model})
                self._send((IDLE_KEY, value.encode()))
        self.idled = now

    def send(self, key: bytes, value: bytes) -> None:
        """Another record (the delivering replica's mark), sent like a partial."""
        self._send((key, value))

    def _send(self, record: tuple[bytes, bytes]) -> None:
        try:
            future = self.producer.send(self.topic, key=record[0], value=record[1])
        except KafkaError as exc:  # refused at once (a buffer full, no metadata): sent again
            log.error("partials topic %s: send failed: %s", self.topic, exc)
            self.failed += 1
            self.unsent.append(record)
            return
        self.futures.append((future, record))

    def flush(self) -> bool:
        """Whether everything published so far is acknowledged (failures are sent again)."""
        again, self.unsent = self.unsent, []
        for record in again:
            self._send(record)
        try:
            self.producer.flush(timeout=FLUSH_TIMEOUT)
        except KafkaError as exc:
            log.error("partials topic %s: flush failed: %s", self.topic, exc)
        waiting, self.futures = self.futures, []
        for future, record in waiting:
            if future.is_done and future.succeeded():
                self.sent += 1
            else:
                self.failed += 1
                self.unsent.append(record)
        return not self.unsent

    def close(self) -> None:
        self.producer.close(timeout=5)


def ensure_partials_topic(config: Config) -> None:
    """One partition (the order of each partition's partials is kept), plain retention."""
    topic, k = config.alerts.partials_topic, config.kafka
    admin = KafkaAdminClient(**client_config(k))
    try:
        if topic not in admin.list_topics():
            replication = config.checkpoint.state_topic_replication
            try:
                admin.create_topics([NewTopic(topic, 1, replication)])
                log.info("created partials topic %s (1 partition)", topic)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


def partials_lost(reader: Any, tp: Any, offset: int) -> str | None:
    """Why the judging state cannot go on exactly, when the broker deleted partials before
    ``offset`` (where the saved state reads on from) by the topic's retention: the boundaries
    they held never come again, and the global view waits for them. Logged as an error (the
    reader then starts at the oldest partial kept); None when nothing was deleted or the first
    offset is not known (it is asked once, at start)."""
    try:
        first = reader.beginning_offsets([tp]).get(tp)
    except KafkaError as exc:
        log.warning("partials topic %s: its first offset is unknown (%s)", tp.topic, exc)
        return None
    if first is None or first <= offset:
        return None
    why = (
        f"partials {offset}..{first - 1} of {tp.topic} were deleted by its retention before the "
        "judging state read them: the boundaries they held cannot be judged globally "
        "(docs/deploy.md, 'Scaling out': keep the retention longer than an outage)"
    )
    log.error("%s", why)
    return why


def read_partials(
    polled: Mapping[Any, list[Any]], view: GlobalView, marks: Mapping[bytes, Callable[[Any], None]]
) -> int:
    """A poll of the partials topic into the global view: partials, hello and idle records;
    ``marks``: the readers of the other keyed records. Returns how many were not readable
    (each logged: one bad record of a shared topic must not stop the view)."""
    bad = 0
    for records in polled.values():
        for r in records:
            try:
                if r.key in marks:
                    marks[r.key](r.value)
                elif r.key in (HELLO_KEY, IDLE_KEY):
                    (view.hello if r.key == HELLO_KEY else view.idle)(r.value)
                else:
                    view.add(decode(r.value), r.offset)
            except PartialError as exc:
                bad += 1
                log.error("partials topic offset %d: %s", r.offset, exc)
    return bad
