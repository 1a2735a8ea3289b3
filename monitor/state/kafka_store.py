"""Checkpoints in a compacted Kafka topic (``checkpoint.store: kafka``): any replica restores
any partition, no shared disk. The same interface as the SQLite :class:`CheckpointStore`.
The records' keys and values are described in ``kafka_layout.py``.

A save writes every chunk, waits for all acknowledgements, then writes the heads. A writer
killed between chunks leaves the head on the previous generation, whose slot the new one
never touches; on restore a generation counts only if every chunk of its slot carries it and
the payload's hash matches, else the previous generation (the other slot) is restored, and the
log says which generation was restored and why. A head with neither generation intact is
:class:`CheckpointCorrupt` (``checkpoint.on_corrupt`` decides). Heads of several partitions
are not written atomically together unless ``checkpoint.state_transactions`` makes each save
one Kafka transaction: each partition's state agrees with its own offsets either way.

Partitions restored together (``load``'s ``along``) are read in one pass over the topic
(``kafka_restore.py``); the topic's segments are bounded so that a pass reads little more than
the live state (``kafka_segments.py``).

Opened ``read_only`` (``status`` and ``report --checkpoint`` beside running replicas), the store
never creates the topic (it must exist) and builds no producer at all: no transactional id is
initialised, so a live writer's open transaction is neither fenced nor aborted by a reader.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import struct
import time
from collections.abc import Collection
from typing import Any

from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.state.checkpoint import (
    CheckpointCorrupt,
    CheckpointUnavailable,
    PartitionCheckpoint,
    decode,
)
from monitor.state.kafka_layout import ALERTS, CHUNK, MAGIC, VERSION, Commit, chunk_key, head_key
from monitor.state.kafka_layout import entity as _entity
from monitor.state.kafka_restore import Gather, Gathered, choose, commits
from monitor.state.kafka_topic import TopicReader, TopicWriter, ensure_topic, require_topic

log = logging.getLogger("monitor.state.kafka_store")

READS, REREAD_S = 3, 1.0  # a head with no intact generation is read again before it is corrupt


class KafkaStateStore:
    """Partition state, offsets and alert state in a compacted topic, fenced by generation."""

    def __init__(
        self, settings: CheckpointSpec, kafka: KafkaSpec, *, read_only: bool = False
    ) -> None:
        self.topic = settings.state_topic
        self.where = f"state topic {self.topic}"
        self.path = self.topic  # what messages name, as the SQLite store's file
        self.chunk_bytes = settings.state_chunk_bytes
        if read_only:
            require_topic(kafka, self.topic)  # exists; never created by a reader
        else:
            ensure_topic(kafka, settings)  # compacted, and a chunk fits in its records
        size = self.chunk_bytes + CHUNK.size
        self.reader = TopicReader(kafka, self.topic, max_record_bytes=size)
        self._writer: TopicWriter | None = None
        if not read_only:
            try:
                self._writer = TopicWriter(
                    kafka,
                    self.topic,
                    max_record_bytes=size,
                    transactional=settings.state_transactions,
                )
            except BaseException:
                self.reader.close()
                raise
        # per entity: the last intact commit known, and the highest generation seen or written
        self.good: dict[str, Commit | None] = {}
        self.top: dict[str, int] = {}
        self.slot_chunks: dict[str, int] = {}  # chunk key prefix -> chunks of its generation
        self.gathered: dict[str, Gathered] = {}  # read for a restore under way, not taken yet
        self.passes = self.records_read = 0  # reads of the whole topic, records they visited
        try:
            self._index()
        except BaseException:  # the clients are not left open behind an exception
            self.close()
            raise

    @property
    def writer(self) -> TopicWriter:
        if self._writer is None:
            raise CheckpointUnavailable(f"{self.where} is open read-only", self.topic)
        return self._writer

    def _own_writes(self) -> dict[int, int] | None:
        """This store's writes, awaited by a read (none when read-only)."""
        return None if self._writer is None else self._writer.written

    # -- reading ---------------------------------------------------------------------------
    def _pass(self, gather: Gather) -> Gather:
        """One read of the whole topic into ``gather`` (counted: ``passes``, ``records_read``);
        the generations it saw are noted, so a next one is above every writer's."""
        self.reader.read(gather.visit, self._own_writes())
        self.passes += 1
        self.records_read += gather.records
        for entity, gen in gather.top.items():
            self.top[entity] = max(self.top.get(entity, 0), gen)
        return gather

    def _index(self) -> dict[str, bytes]:
        """One pass over the topic: every head, and the highest chunk generation per entity
        (chunk data is not kept). Returns the heads."""
        heads = self._pass(Gather()).heads
        for entity, raw in heads.items():
            # a damaged head is reported by the load that needs it
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self._learn(entity, json.loads(raw))
        return heads

    def _learn(self, entity: str, head: dict[str, Any]) -> None:
        self._seen(entity, head.get("previous"))
        self._seen(entity, head["current"])
        self.good.setdefault(entity, head["current"])

    def _seen(self, entity: str, c: Commit | None) -> None:
        if c is not None:
            gen = int(c["generation"])
            self.top[entity] = max(self.top.get(entity, 0), gen)
            self.slot_chunks[chunk_key(entity, gen, 0)] = int(c["chunks"])

    def _restore(
        self, entity: str, what: str, along: Collection[str] = ()
    ) -> tuple[Commit, bytes] | None:
        """The newest intact generation of ``entity`` and its payload; None without a head.
        Its records come from the pass that gathered it with ``along`` (made now unless an
        earlier load's pass holds them). Read again (twice, a second apart) before giving up:
        another replica may be between its chunks and its head (a partition's previous owner
        saving on revoke)."""
        for attempt in range(READS):
            if attempt or not along or entity not in self.gathered:
                if not attempt and along:  # a new batch: what an earlier one left may be stale
                    self.gathered.clear()
                self._gather({entity, *along} if not attempt else {entity})
            try:
                return self._restore_once(entity, what, self.gathered.pop(entity))
            except CheckpointCorrupt as exc:
                if attempt == READS - 1:
                    raise
                log.warning("%s; reading it again in %.0f s", exc, REREAD_S)
                time.sleep(REREAD_S)
        raise AssertionError("unreachable")

    def _gather(self, entities: set[str]) -> None:
        """One pass for all of ``entities``: what each one's head needs, kept until its load."""
        gather = self._pass(Gather(frozenset(entities)))
        self.gathered.update(gather.finish())
        if len(entities) > 1:
            log.info(
                "%s read once for %d restores (%d records)",
                self.where,
                len(entities),
                gather.records,
            )

    def _restore_once(self, entity: str, what: str, found: Gathered) -> tuple[Commit, bytes] | None:
        if found.head is None:
            if found.orphan_chunks:
                log.warning(
                    "%s in %s: chunks but no head (a first checkpoint never completed): "
                    "treated as having no checkpoint",
                    what,
                    self.where,
                )
            return None
        try:
            named = commits(found.head)
            for c in reversed(named):
                self._seen(entity, c)
            chosen = choose(entity, named, found.table)
        except (ValueError, KeyError, TypeError) as exc:
            self.good[entity] = None
            raise CheckpointCorrupt(
                f"{self.where}, {what}: the head record is corrupt ({exc!r})", self.topic
            ) from None
        if isinstance(chosen, list):
            self.good[entity] = None
            raise CheckpointCorrupt(
                f"{self.where}, {what}: no intact generation ({'; '.join(chosen)})", self.topic
            )
        commit, payload, reasons = chosen
        self.good[entity] = commit
        if reasons:
            log.warning(
                "%s in %s: %s; restoring the previous generation %d",
                what,
                self.where,
                "; ".join(reasons),
                commit["generation"],
            )
        return commit, payload

    def load(self, partition: int, along: Collection[int] = ()) -> PartitionCheckpoint | None:
        """Partition ``partition``'s newest intact checkpoint. ``along``: the partitions
        restored with it (a replica's new assignment; every partition, for ``status``): the
        first of them to load reads the topic once for all, each keeps only the chunks its
        head names, and every later one takes its own (freed once restored)."""
        what = f"partition {partition}"
        found = self._restore(_entity(partition), what, [_entity(q) for q in along])
        if found is None:
            self.good[_entity(partition)] = None
            return None
        commit, payload = found
        try:
            (n,) = struct.unpack_from(">I", payload)
            inner = json.loads(payload[4 : 4 + n])
            offsets = {str(k): int(v) for k, v in inner["offsets"].items()}
            meta, arrays = decode(payload[4 + n :])
        except Exception as exc:  # any decoding problem means the state is unusable
            raise CheckpointCorrupt(
                f"{self.where}, {what}, generation {commit['generation']}, is corrupt ({exc})",
                self.topic,
            ) from None
        log.info(
            "partition %d restored from state topic %s generation %d (offsets %s)",
            partition,
            self.topic,
            commit["generation"],
            offsets,
        )
        return PartitionCheckpoint(partition, offsets, meta, arrays, float(inner["saved_at"]))

    def load_alerts(self) -> str | None:
        found = self._restore(ALERTS, "the alert state")
        if found is None:
            return None
        commit, payload = found
        try:
            text = payload.decode()
        except UnicodeDecodeError as exc:
            raise CheckpointCorrupt(
                f"{self.where}, the alert state is not text ({exc})", self.topic
            ) from None
        log.info("alert state restored from %s generation %d", self.where, commit["generation"])
        return text

    def partitions(self) -> list[int]:
        """Partitions with a head record in the topic (read now)."""
        return sorted(self.offsets())

    def offsets(self) -> dict[int, dict[str, int]]:
        """Each partition's offsets as its head says (read now; chunks are not checked)."""
        out = {}
        for entity, raw in self._index().items():
            if entity.startswith("p/") and entity[2:].isdigit():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    out[int(entity[2:])] = dict(json.loads(raw)["current"]["offsets"])
        return out

    # -- writing ---------------------------------------------------------------------------
    def _next_generation(self, entity: str) -> int:
        """Above every generation seen, and never in the slot of the last intact commit."""
        good = self.good.get(entity)
        gen = self.top.get(entity, 0) + 1
        if good is not None and gen % 2 == int(good["generation"]) % 2:
            gen += 1
        return gen

    def _plan(self, entity: str, payload: bytes, offsets: dict[str, int], now: float) -> Commit:
        gen = self._next_generation(entity)
        step = self.chunk_bytes
        count = max(1, -(-len(payload) // step))
        for i in range(count):
            data = payload[i * step : (i + 1) * step]
            self.writer.send(chunk_key(entity, gen, i), CHUNK.pack(MAGIC, gen, i, count) + data)
        return {
            "generation": gen,
            "chunks": count,
            "sha256": hashlib.sha256(payload).hexdigest(),
            "size": len(payload),
            "offsets": offsets,
            "saved_at": now,
        }

    def save(
        self, items: list[tuple[int, dict[str, int], bytes]], *, alerts: str | None = None
    ) -> None:
        """Write (partition, offsets, state blob) rows and the alert state: every chunk, then
        (once all are acknowledged) every head. Raises :class:`CheckpointError` naming the
        topic when it cannot; a half-written save is never restored."""
        with self.writer.transaction():
            plans = self._save(items, alerts)
        for entity, commit in plans:  # only once written (and committed)
            self.good[entity] = commit
            self._seen(entity, commit)

    def _save(
        self, items: list[tuple[int, dict[str, int], bytes]], alerts: str | None
    ) -> list[tuple[str, Commit]]:
        now = time.time()
        plans: list[tuple[str, Commit]] = []
        for entity in [_entity(p) for p, _, _ in items] + [ALERTS] * (alerts is not None):
            self.gathered.pop(entity, None)  # read before this save: stale
        for p, offsets, blob in items:
            inner = json.dumps({"offsets": offsets, "saved_at": now}).encode()
            payload = struct.pack(">I", len(inner)) + inner + blob
            plans.append((_entity(p), self._plan(_entity(p), payload, offsets, now)))
        if alerts is not None:
            plans.append((ALERTS, self._plan(ALERTS, alerts.encode(), {}, now)))
        self.writer.flush()
        for entity, commit in plans:
            head = {"version": VERSION, "current": commit, "previous": self.good.get(entity)}
            self.writer.send(head_key(entity), json.dumps(head).encode())
        self.writer.flush()
        # tombstones for the chunks of each slot's older, longer generation, so compaction
        # removes them: a leftover chunk is never read, this only keeps the topic small
        stale = False
        for entity, commit in plans:
            gen, count = int(commit["generation"]), int(commit["chunks"])
            for i in range(count, self.slot_chunks.get(chunk_key(entity, gen, 0), 0)):
                self.writer.send(chunk_key(entity, gen, i), None)
                stale = True
        if stale:  # the save is written already (or its transaction's commit says)
            with contextlib.suppress(CheckpointUnavailable):
                self.writer.flush()
        return plans

    def save_alerts(self, alerts: str) -> None:
        self.save([], alerts=alerts)

    def check_writable(self) -> None:
        """A real write, so a missing write ACL is found at start."""
        with self.writer.transaction():
            self.writer.send("meta/opened_at", json.dumps(time.time()).encode())
            self.writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self.reader.close()
