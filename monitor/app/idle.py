"""Which owned partitions are idle: no decisions for a while, and nothing left to read.

Why: a boundary closes once every partition with data has passed it (the low watermark), so a
partition that received one record and then nothing (a backfill that wrote once, a producer
keyed onto a few partitions) held every boundary back for good — the alerts stopped judging,
silently, and the label ledger, settled only by those reads, grew with every label. A partition
is idle for a model once ``kafka.idle_partition_timeout`` (wall clock) has passed without a
decision of that model from it, it is not paused, and its decision topics are read to the
highwater the broker last gave (a backlog is never idle; the attributes topic's counts too).
Per model, because each model's boundaries close on their own: a partition that got one
decision of model A and then only B's (a producer that moved A elsewhere) held A's boundaries
back for good, busy as it was. An idle partition holds no boundary back (Flink's
``withIdleness``, in the watermark's terms; when every partition is idle, the newest head
closes the boundaries: nothing more is there to wait for); its next decision (or served half)
makes it busy again in the same loop turn, and one stamped before boundaries already judged is
counted like any late event. Decisions waiting in a join for their other half or their
attributes do not keep a partition busy once its topics are read to their end: what completes
them later than the timeout counts like a late event (waiting for them instead would let one
unanswered request hold the model back until it expires, which needs new data to happen).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from kafka import TopicPartition

from monitor.app.ownership import PartitionOwnership
from monitor.state.engine import Engine


class IdlePartitions:
    """``idle(p, m)`` for the alert evaluator; ``saw()`` after each poll."""

    def __init__(
        self,
        ownership: PartitionOwnership,
        engine: Engine,
        clock: Callable[[], float],
        timeout: float | None = None,
    ) -> None:
        """``timeout``: ``kafka.idle_partition_timeout`` unless given."""
        self.own, self.clock = ownership, clock
        self.timeout = ownership.k.idle_partition_timeout if timeout is None else timeout
        self.arrivals = arrivals_of(engine)
        self.seen: dict[tuple[int, int], float] = {}  # (partition, model) -> a decision came
        self.counts: dict[int, tuple[int, ...]] = {}  # partition -> arrivals when last looked

    def saw(self) -> None:
        """After a poll's records are applied: each model whose count moved is busy now."""
        now = self.clock()
        for p in self.own.owned:
            got = self.arrivals(p)
            if got is None:
                continue
            before, self.counts[p] = self.counts.get(p), tuple(int(n) for n in got)
            for m, n in enumerate(self.counts[p]):
                if n != (before[m] if before is not None else 0):
                    self.seen[(p, m)] = now
        for p in [p for p in self.counts if p not in self.own.owned]:
            del self.counts[p]  # given away: owned again later, its timers start afresh
        for key in [k for k in self.seen if k[0] not in self.own.owned]:
            del self.seen[key]

    def __call__(self, p: int, m: int) -> bool:
        if self.timeout <= 0:
            return False
        since = self.seen.setdefault((p, m), self.clock())  # owned since: the timer starts now
        if self.clock() - since < self.timeout:
            return False
        paused, assigned = self.own.consumer.paused(), self.own.consumer.assignment()
        k = self.own.k
        for topic in (*k.prediction_topics, *([k.attributes_topic] if k.attributes_topic else [])):
            tp = TopicPartition(topic, p)
            if tp in paused or tp not in assigned:  # (taken away since the last drain)
                return False
            high, nxt = self.own.consumer.highwater(tp), self.own.next_offsets.get(tp)
            if high is None or nxt is None or nxt < high:  # not fetched yet, or a backlog
                return False
        return True


def arrivals_of(engine: Engine) -> Callable[[int], npt.NDArray[np.int64] | None]:
    """Each partition's count per model of decisions and served halves so far (a change
    counter; None before the partition has state)."""
    parts = engine.partitions
    return lambda p: st.arrived if (st := parts.get(p)) is not None else None
