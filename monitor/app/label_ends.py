"""Is a partition's label input read to its end, as the broker says *after* its newest
prediction was read?

A boundary may close without waiting out the lateness once the partition's labels are drained:
every label already in the topic when the boundary's predictions were read is then counted. The
consumer's ``highwater`` cannot say so on its own: kafka-python updates it when it *parses* a
fetched batch, lazily, so a poll may return a partition's predictions while the labels fetched
with them (or in flight from another broker) still sit unparsed behind them, and the highwater
is that of an older fetch. Labels produced just before their predictions were then missed by
the live boundary and counted by ``replay`` (which reads in time order).

So the claim is confirmed by asking the broker for the label partitions' end offsets after the
predictions were read (one ListOffsets request for all owned partitions, at most once per
``every`` seconds of the injected clock), and holds until the partition's next predictions are
read (its predictions' next offset moves). Between confirmations a partition's boundaries wait
for its label frontier (bounded by the lateness), as they would with labels still being read. A
broker that answers ListOffsets short of the log's end (Tansu, the demo's broker) leaves the
fetch highwater as the only check: an ask is made only once the labels are read up to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafka import TopicPartition
from kafka.errors import KafkaError

from monitor.app.ownership import PartitionOwnership

log = logging.getLogger("monitor.app.label_ends")

ASK_TIMEOUT_MS = 2000  # one unanswered ask blocks the loop at most this long
ASK_EVERY_SECONDS = 1.0
OUTAGE_BACKOFF = 10  # intervals between asks after one went unanswered


class LabelEnds:
    """Per owned partition: the label end offset the broker gave, and the predictions' next
    offset when it was asked (the answer covers the predictions read before it)."""

    def __init__(
        self,
        ownership: PartitionOwnership,
        clock: Callable[[], float],
        *,
        every: float = ASK_EVERY_SECONDS,
    ) -> None:
        self.own, self.clock, self.every = ownership, clock, every
        # p -> (the decisions' next offsets, label end)
        self.confirmed: dict[int, tuple[tuple[int | None, ...], int]] = {}
        self.next_ask = -float("inf")
        self.asks = 0  # ListOffsets requests made (for tests and the curious)

    def caught_up(self, partition: int) -> bool:
        """Partition ``partition``'s labels are read up to an end the broker gave after its
        newest predictions were read. (After a rebalance the offsets come from a checkpoint:
        an answer still holds if the predictions restored are those it covered.)"""
        nxt = self.own.next_offsets.get(self._tp(self.own.k.labels_topic, partition))
        if nxt is None:
            return False
        if self._holds(partition, nxt):
            return True
        if not self._drained(partition, nxt) or self.clock() < self.next_ask:
            return False
        self._ask()
        return self._holds(partition, nxt)

    def _read(self, p: int) -> tuple[int | None, ...]:
        """Where the partition's decisions are read to (requests and, on a topic of their own,
        responses): an answer covers what was read before it was asked."""
        nxt = self.own.next_offsets
        return tuple(nxt.get(self._tp(t, p)) for t in self.own.k.prediction_topics)

    def _holds(self, p: int, nxt: int) -> bool:
        got = self.confirmed.get(p)
        return got is not None and got[0] == self._read(p) and nxt >= got[1]

    def _drained(self, p: int, nxt: int) -> bool:
        """As of the last fetch parsed: worth asking the broker only then. A partition the
        group took away since the last drain is not (kafka-python raises for it: its
        revocation is queued, handled on the next loop turn)."""
        tp = self._tp(self.own.k.labels_topic, p)
        if tp not in self.own.consumer.assignment():
            return False
        high = self.own.consumer.highwater(tp)
        return high is not None and nxt >= high

    def _ask(self) -> None:
        self.next_ask = self.clock() + self.every
        read = {p: self._read(p) for p in sorted(self.own.owned)}  # before the answer
        self.asks += 1
        try:
            ends = self.own.consumer.end_offsets(
                [self._tp(self.own.k.labels_topic, p) for p in read], timeout_ms=ASK_TIMEOUT_MS
            )
        except KafkaError as exc:  # an outage: boundaries wait for the label frontier, and
            # the loop does not block on an ask every second meanwhile
            self.next_ask = self.clock() + OUTAGE_BACKOFF * self.every
            log.debug("label end offsets not answered: %s", exc)
            return
        self.confirmed = {}
        for tp, end in ends.items():
            at = read.get(tp.partition)
            if at is not None and end is not None:
                self.confirmed[tp.partition] = (at, int(end))

    @staticmethod
    def _tp(topic: str, p: int) -> TopicPartition:
        return TopicPartition(topic, p)
