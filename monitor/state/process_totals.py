"""Counters this process exports: the partitions' own, less what they had counted when they
arrived, plus what the partitions that left had counted here.

Why: a partition's counters (events, label delays, decisions with attributes) live in its
state, so they move with it in a rebalance. Summed over the partitions a replica owns they fell
when one was revoked and jumped by its lifetime total when one was assigned; Prometheus reads
both as increments, and tickets such as ``FairnessPredictionIdsShared`` fired after any
rebalance (found by a review). Per process they only grow (a restart starts them again, which
Prometheus reads as a counter reset). The partitions' own sums stay what reports, replays and
checkpoints read (``Engine.counters``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from monitor.state.partition import COUNTERS, PartitionState
from monitor.state.windows import I64


class ProcessTotals:
    """What moved in and out of this process (added when a partition leaves, taken off when
    one arrives)."""

    def __init__(self, delay_buckets: int) -> None:
        self.counts: Counter[str] = Counter()
        self.delays: I64 = np.zeros(delay_buckets, dtype=np.int64)
        self.delay_sum = 0.0
        self.attributes: dict[str, list[int]] = {}
        self._last_sum = 0.0

    def left(self, st: PartitionState | None) -> None:
        """A partition this process drops: what it counted stays counted here."""
        self._add(st, 1)

    def arrived(self, st: PartitionState) -> None:
        """A partition restored here: what it counted elsewhere (or before a restart) is not
        this process's."""
        self._add(st, -1)

    def _add(self, st: PartitionState | None, sign: int) -> None:
        if st is None:
            return
        for k in COUNTERS:
            self.counts[k] += sign * st.counters.get(k, 0)
        self.counts["invalid"] += sign * sum(st.invalid.values())
        self.delays += sign * st.delay_counts
        self.delay_sum += sign * st.delay_sum
        for name, (with_, without) in st.attribute_outcomes.items():
            row = self.attributes.setdefault(name, [0, 0])
            row[0] += sign * with_
            row[1] += sign * without

    def counters(self, owned: dict[str, int]) -> dict[str, int]:
        """``Engine.counters()`` of the partitions owned now, as this process's counters (the
        gauges of what the joins hold are left as they are)."""
        return {k: v + self.counts.get(k, 0) for k, v in owned.items()}

    def label_delays(self, owned: tuple[I64, float]) -> tuple[I64, float]:
        """The histogram, and its sum never below the last one read: ``(x + y) − y`` in floats
        may come out just under ``x`` (found by a review), which Prometheus reads as a reset."""
        total = max(owned[1] + self.delay_sum, self._last_sum)
        self._last_sum = total
        return owned[0] + self.delays, total

    def coverage(self, owned: dict[str, tuple[int, int, int]]) -> dict[str, tuple[int, int, int]]:
        """``attribute_coverage``: with and without attributes per process; waiting as is."""
        out = {}
        for name, (with_, without, waiting) in owned.items():
            moved = self.attributes.get(name, [0, 0])
            out[name] = (with_ + moved[0], without + moved[1], waiting)
        return out
