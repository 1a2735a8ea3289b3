"""Partition ownership: which partitions this instance owns and where each of its inputs stands.

Exactly-once counting without transactions rests here. On assignment a partition's state is
restored from its checkpoint and the consumer seeks both topics to the offsets that state
reflects (or to ``auto_offset_reset`` without a checkpoint); records below the offset expected
next are skipped, so a record fetched before the seek is never counted twice. On revocation the
partition's state is checkpointed (not on *lost*: another instance may own it already) and
dropped. The rebalance listener paused newly assigned partitions; they resume once sought.
kafka-python rebalances on its network thread: a partition may be taken away again before its
queued assignment is handled here; it is then left alone (its revocation is queued too).

Without a checkpoint the offset expected next is the consumer's ``position`` after the reset
seek, which asks the broker. In an outage (an error or no answer) the (topic, partition) is
owned with its next offset unknown: paused (nothing fetched, counted, checkpointed or
committed), not ready, alerts waiting, the position asked again once per loop turn until the
broker answers; it then resumes from there, so its first record is counted once.
Everything the consumer is asked goes through ``self.consumer`` (a stand-in in unit tests).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Iterable
from typing import Any, NamedTuple

from kafka import TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from monitor.app.checkpointing import Outcome
from monitor.config.kafka import KafkaSpec
from monitor.ingest.events import ConsumerBatch
from monitor.state.checkpoint import CheckpointError, PartitionCheckpoint
from monitor.state.engine import Engine

log = logging.getLogger("monitor.app.ownership")


class Inputs(NamedTuple):
    """A partition's records to apply from each input topic (any may be absent)."""

    predictions: ConsumerBatch | None = None
    labels: ConsumerBatch | None = None
    responses: ConsumerBatch | None = None  # ``responses_topic``'s, when there is one
    attributes: ConsumerBatch | None = None  # ``attributes_topic``'s, when there is one


Accepted = dict[int, Inputs]
# how long one ``position`` ask may block the loop (kafka-python's own bound is
# request_timeout_ms, 30 s, per call): an unanswered ask is repeated on the next loop turn
POSITION_TIMEOUT_MS = 2000


class PartitionOwnership:
    """Owned partitions, the next offset of each (topic, partition), and the consumer calls
    that keep them true: restore + seek on assign, checkpoint + drop on revoke."""

    def __init__(
        self,
        kafka: KafkaSpec,
        engine: Engine,
        load: Callable[[int, Collection[int]], PartitionCheckpoint | None],
    ) -> None:
        self.k = kafka
        self.engine = engine
        # a partition's checkpoint, given the partitions restored with it (a state topic is
        # read once for all of them); the checkpoint policy decides on damage
        self.load = load
        self.consumer: Any = None
        self.owned: set[int] = set()
        self.next_offsets: dict[TopicPartition, int] = {}
        # owned, next offset not known yet (paused); replaced, never changed in place: the HTTP
        # threads read it (readiness)
        self.unknown: frozenset[TopicPartition] = frozenset()
        self.trouble = ""  # why the last position ask failed, while any is unknown
        self.pending = True  # no assignment restored yet

    # -- rebalance -------------------------------------------------------------------------
    def apply(
        self,
        events: Iterable[tuple[str, set[TopicPartition]]],
        checkpoint: Callable[[set[int]], None],
    ) -> set[int]:
        """Rebalance events in order (``checkpoint(parts)`` saves revoked partitions first);
        then the next offsets still unknown are asked again. Returns the partitions restored."""
        asked, restored = False, set()  # a restore asks
        for kind, tps in events:
            if kind in ("revoked", "lost"):
                parts = {tp.partition for tp in tps}
                self.revoke(parts, checkpoint if kind == "revoked" else None)
                log.info("partitions %s %s", sorted(parts), kind)
            else:
                restored |= self.restore(tps)
                asked = True
        if self.unknown and not asked:
            self.ask_positions()
        if self.pending and self.consumer.assignment():
            self.pending = False
        return restored

    def revoke(self, parts: set[int], checkpoint: Callable[[set[int]], None] | None) -> None:
        mine = parts & self.owned
        if checkpoint is not None and mine:
            checkpoint(mine)
        for p in mine:
            self.engine.drop_partition(p)
        self.next_offsets = {
            tp: o for tp, o in self.next_offsets.items() if tp.partition not in parts
        }
        self.unknown = frozenset(tp for tp in self.unknown if tp.partition not in parts)
        if not self.unknown:
            self.trouble = ""
        self.owned -= parts

    def restore(self, tps: set[TopicPartition]) -> set[int]:
        """Restore each newly assigned partition and seek its topics; then resume those whose
        next offset is known (the others once the broker gives their position)."""
        assigned = self.consumer.assignment()  # a later rebalance may have taken some away:
        moved = {tp.partition for tp in tps if tp not in assigned}  # their revocation is queued
        if moved:
            log.info("partitions %s moved away before their restore", sorted(moved))
        restored = sorted({tp.partition for tp in tps} - self.owned - moved)
        sources: dict[int, str] = {}
        for p in restored:
            cp = self.load(p, restored)
            foreign = sorted(set(cp.offsets) - set(self.k.input_topics)) if cp else []
            if foreign:  # its counts came from a topic not read now: not this deployment's
                raise CheckpointError(
                    f"checkpoint partition {p} holds offsets of {', '.join(foreign)}, which "
                    f"this configuration does not read ({', '.join(self.k.input_topics)}): "
                    "it belongs to another deployment, or a topic was renamed (its counts "
                    "would be mixed with the new topic's); move the checkpoint aside"
                )
            if cp is not None:
                try:
                    self.engine.import_partition(p, cp.meta, cp.arrays)
                except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
                    raise CheckpointError(
                        f"checkpoint partition {p} cannot be restored: {exc}"
                    ) from None
            self.owned.add(p)
            try:
                for topic in self.k.input_topics:
                    tp = TopicPartition(topic, p)
                    if tp not in tps:
                        continue
                    if cp is not None and topic in cp.offsets:
                        self.consumer.seek(tp, cp.offsets[topic])
                        self.next_offsets[tp] = cp.offsets[topic]
                    else:
                        self.reset(tp)
                        self.unknown |= {tp}  # its position, asked below
            except ValueError:  # kafka-python's "Unassigned partition": moved away meanwhile
                log.info("partition %d moved away during its restore", p)
                self.revoke({p}, None)
                continue
            sources[p] = "checkpoint" if cp else "no checkpoint"
        self.ask_positions()
        for p, src in sources.items():
            offsets = self.offsets_of(p)
            log.info(
                "partition %d restored (%s) from offsets %s%s", p, src, offsets, self.unsure(p)
            )
        # the listener paused them on assignment; fetching starts at the sought offsets
        self._resume(tp for tp in tps if tp.partition in self.owned and tp not in self.unknown)
        self.pending = False
        return set(sources)

    def reset(self, tp: TopicPartition) -> None:
        """Seek by ``auto_offset_reset`` (no I/O: the broker is asked by ``position``)."""
        if self.k.auto_offset_reset == "earliest":
            self.consumer.seek_to_beginning(tp)
        else:
            self.consumer.seek_to_end(tp)

    def ask_positions(self) -> None:
        """Ask the position of each (topic, partition) whose next offset is unknown; resume
        those answered. A Kafka error or no answer leaves it and the rest unknown (paused) for
        the next call (each ask may block). An outage's first failure is logged."""
        for tp in sorted(self.unknown & self.consumer.assignment()):
            exc: KafkaError | None = None
            why = f"no position within {POSITION_TIMEOUT_MS} ms"
            try:
                pos = self.consumer.position(tp, timeout_ms=POSITION_TIMEOUT_MS)
            except KafkaError as e:
                pos, exc, why = None, e, f"{type(e).__name__}: {e}"
            if pos is None:
                if not self.trouble:
                    what = f"position of {tp.topic}[{tp.partition}]"
                    log.warning(
                        "%s unknown, asked again next loop turn: %s", what, why, exc_info=exc
                    )
                self.trouble = why
                return
            self.unknown -= {tp}
            self.next_offsets[tp] = pos
            self._resume([tp])
            if self.trouble:
                log.info("position of %s[%d] known again: %d", tp.topic, tp.partition, pos)
        if not self.unknown:
            self.trouble = ""

    def unsure(self, partition: int) -> str:
        names = sorted(tp.topic for tp in self.unknown if tp.partition == partition)
        return f"; {', '.join(names)} unknown yet ({self.trouble})" if names else ""

    def not_ready(self) -> str | None:
        """Why the service is not ready because a next offset is unknown, if it is not."""
        unknown, why = self.unknown, self.trouble
        if not unknown:
            return None
        names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(unknown))
        return f"next offset unknown (Kafka did not give the position) of {names}: {why}"

    # -- records ---------------------------------------------------------------------------
    def accept(
        self, batch: dict[TopicPartition, list[Any]], stale: Collection[int] = ()
    ) -> Accepted:
        """The records to apply, per partition: none below the offset expected next, none of
        a partition not restored yet or restored since the poll (``stale``: from an older
        checkpoint, they would skip what lies between), all fetched again after the seek;
        none whose next offset is unknown (paused: should some arrive, the reset seek is made
        again, so they are fetched again once its position is known)."""
        out: Accepted = {}
        for tp, records in batch.items():
            expected = None if tp.partition in stale else self.next_offsets.get(tp)
            if expected is None or not records:
                if records and tp in self.unknown:
                    with contextlib.suppress(ValueError):  # unless it moved away meanwhile
                        self.reset(tp)
                continue
            if records[0].offset < expected:
                records = [r for r in records if r.offset >= expected]
                if not records:
                    continue
            raw = ConsumerBatch(records, tp.topic, tp.partition)
            got, k = out.get(tp.partition, Inputs()), self.k
            field = {k.predictions_topic: "predictions", k.labels_topic: "labels"}.get(tp.topic)
            if field is None:
                field = "attributes" if tp.topic == k.attributes_topic else "responses"
            out[tp.partition] = got._replace(**{field: raw})
            self.next_offsets[tp] = records[-1].offset + 1
        return out

    def offsets_of(self, partition: int) -> dict[str, int]:
        return {tp.topic: o for tp, o in self.next_offsets.items() if tp.partition == partition}

    def select(self, partitions: set[int] | None = None) -> list[int]:
        """The owned partitions among ``partitions`` (all owned ones for None), sorted."""
        return sorted(self.owned if partitions is None else partitions & self.owned)

    # -- what the consumer knows -----------------------------------------------------------
    def started(self) -> bool:
        """Has every owned partition either delivered predictions or is it known to be empty?
        Alert evaluation waits until then: otherwise the low watermark would pass boundaries
        whose data still sits unread in a partition not fetched yet."""
        decisions = self.k.prediction_topics
        if any(tp.topic in decisions for tp in self.unknown):
            return False
        assigned = self.consumer.assignment()  # a revoked one waits to be dropped
        for tp, nxt in self.next_offsets.items():
            if tp.topic not in decisions or tp not in assigned:
                continue
            st = self.engine.partitions.get(tp.partition)
            if st is not None and any(r.head is not None for r in st.rings):
                continue
            high = self.consumer.highwater(tp)
            if high is None or high > nxt:
                return False
        return True

    def lag(self) -> dict[tuple[str, int], int]:
        """Records behind the partition end, per assigned (topic, partition), as of the last
        fetch (kafka-python raises for a revoked one still in ``next_offsets``)."""
        out, assigned = {}, self.consumer.assignment()
        for tp, nxt in self.next_offsets.items():
            high = self.consumer.highwater(tp) if tp in assigned else None
            if high is not None:
                out[(tp.topic, tp.partition)] = max(0, high - nxt)
        return out

    def connected(self) -> bool:
        return not self._coordinator("coordinator_unknown")

    def rebalancing(self) -> bool:
        return self._coordinator("rebalance_in_progress")

    def _coordinator(self, ask: str) -> bool:
        """A question to kafka-python's coordinator, a private API: never let a probe crash."""
        try:
            return bool(getattr(self.consumer._coordinator, ask)())
        except Exception:
            return False

    # -- consumer actions ------------------------------------------------------------------
    def commit(self, parts: list[int]) -> None:
        """Commit checkpointed offsets, for lag monitoring only (the checkpoint is the source
        of truth). Not while the group rebalances (the revoke path, or a rebalance the
        coordinator reports): such a commit fails anyway."""
        if self.rebalancing():
            return
        offsets = {
            tp: OffsetAndMetadata(o, "", -1)
            for tp, o in self.next_offsets.items()
            if tp.partition in parts
        }
        try:
            self.consumer.commit(offsets=offsets)
        except Exception as exc:
            log.warning("offset commit failed (checkpoint is saved): %s", exc)

    def settle(self, outcome: Outcome, parts: list[int], *, commit: bool) -> None:
        """What a checkpoint's outcome asks of the consumer: pause everything after too many
        failures, resume the owned partitions once a write succeeds again, and commit the
        offsets of a good checkpoint (unless ``commit`` is off: the revoke path)."""
        if outcome == "paused":
            self.pause_all()
        elif outcome == "resumed":
            self.resume_owned()
        if commit and outcome in ("saved", "resumed"):
            self.commit(parts)

    def pause_all(self) -> None:
        """Every assigned partition, including ones assigned and not restored yet."""
        for tp in self.consumer.assignment():  # one taken away meanwhile raises, as in _resume
            with contextlib.suppress(KeyError):
                self.consumer.pause(tp)

    def resume_owned(self) -> None:
        """Restored ones only: a partition assigned meanwhile waits for its restore, one
        whose next offset is unknown for its position."""
        owned = (tp for tp in self.consumer.assignment() if tp.partition in self.owned)
        self._resume(tp for tp in owned if tp not in self.unknown)

    def _resume(self, tps: Iterable[TopicPartition]) -> None:
        """Each one still assigned: the network thread may take one away at any moment (then
        kafka-python raises ``KeyError``); its revocation is queued and handled next."""
        for tp in set(tps) & self.consumer.assignment():
            with contextlib.suppress(KeyError):
                self.consumer.resume(tp)

    def close(self) -> None:
        """Leave the group (no offset commit: the checkpoint holds the truth)."""
        try:
            self.consumer.close(autocommit=False, timeout_ms=5000)
        except Exception as exc:
            log.warning("closing the consumer: %s", exc)
