"""Which owned partitions are idle: no decisions for a while, and nothing left to read.

Why: a boundary closes once every partition with data has passed it (the low watermark), so a
partition that received one record and then nothing (a backfill that wrote once, a producer
keyed onto a few partitions) held every boundary back for good — the alerts stopped judging,
silently, and the label ledger, settled only by those reads, grew with every label. A partition
is idle once ``kafka.idle_partition_timeout`` (wall clock) has passed without a decision record
from it, it is not paused, and its decision topics are read to the highwater the broker last
gave (a backlog is never idle). An idle partition holds no boundary back (Flink's
``withIdleness``, in the watermark's terms; when every partition is idle, the newest head
closes the boundaries: nothing more is there to wait for); its next decision makes it busy
again, and one stamped before boundaries already judged is counted like any late event.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka import TopicPartition

from monitor.app.ownership import Accepted, PartitionOwnership


class IdlePartitions:
    """``idle(p)`` for the alert evaluator; ``saw(accepted)`` after each poll."""

    def __init__(
        self, ownership: PartitionOwnership, clock: Callable[[], float], timeout: float
    ) -> None:
        self.own, self.clock, self.timeout = ownership, clock, timeout
        self.seen: dict[int, float] = {}  # partition -> when a decision record last came

    def saw(self, accepted: Accepted) -> None:
        now = self.clock()
        for p, got in accepted.items():
            if any(b is not None and len(b) for b in (got.predictions, got.responses)):
                self.seen[p] = now
        for p in [p for p in self.seen if p not in self.own.owned]:
            del self.seen[p]  # given away: owned again later, its timer starts afresh

    def __call__(self, p: int) -> bool:
        if self.timeout <= 0:
            return False
        since = self.seen.setdefault(p, self.clock())  # owned since: the timer starts now
        if self.clock() - since < self.timeout:
            return False
        paused, assigned = self.own.consumer.paused(), self.own.consumer.assignment()
        for topic in self.own.k.prediction_topics:
            tp = TopicPartition(topic, p)
            if tp in paused or tp not in assigned:  # (taken away since the last drain)
                return False
            high, nxt = self.own.consumer.highwater(tp), self.own.next_offsets.get(tp)
            if high is None or nxt is None or nxt < high:  # not fetched yet, or a backlog
                return False
        return True
