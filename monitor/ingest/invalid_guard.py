"""The invalid-ratio guard: stop when most recent records of a partition are invalid.

Why: a few malformed records are dead-lettered and counted, but a stream where most records fail
to decode means a wrong topic or a wrong field mapping (``fields.*``), and dead-lettering the
whole stream would bury the real data. Like a dead-letter limit, the guard judges each input
partition on its own: a partition fed by a broken producer trips it even while the others are
healthy (a global ratio would dilute it by the healthy partitions' volume), and one partition's
good records do not excuse another's garbage.

Per partition the guard keeps the most recent records, whole batches at a time, until dropping
the oldest batch would leave fewer than ``min_events``; it trips when that window holds at least
``min_events`` records and ``invalid / total > max_ratio`` (``service.max_invalid_ratio`` and
``service.invalid_ratio_min_events``).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field


class InvalidRatioExceeded(RuntimeError):
    """Too many invalid records on one partition: the service stops (exit code 3)."""


@dataclass
class _Window:
    batches: deque[tuple[int, Counter[str]]] = field(default_factory=deque)  # (total, reasons)
    total: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def invalid(self) -> int:
        return self.reasons.total()


class InvalidRatioGuard:
    """Sliding per-partition windows of (records, invalid reasons); :meth:`observe` raises
    :class:`InvalidRatioExceeded` when a partition's window is over the limit."""

    def __init__(self, max_ratio: float, min_events: int, where: str) -> None:
        self.max_ratio = max_ratio
        self.min_events = min_events
        self.where = where  # the topics, for the message
        self.windows: dict[int, _Window] = {}

    def observe(self, partition: int, total: int, reasons: Sequence[str]) -> None:
        """One batch of ``total`` records of ``partition``, ``reasons`` one per invalid one."""
        w = self.windows.setdefault(partition, _Window())
        batch = Counter(reasons)
        w.batches.append((total, batch))
        w.total += total
        w.reasons.update(batch)
        while len(w.batches) > 1 and w.total - w.batches[0][0] >= self.min_events:
            t, r = w.batches.popleft()
            w.total -= t
            w.reasons.subtract(r)
        w.reasons = +w.reasons  # drop reasons that left the window
        if w.total >= self.min_events and w.invalid / w.total > self.max_ratio:
            top = ", ".join(f"{r} ({n})" for r, n in w.reasons.most_common(3))
            raise InvalidRatioExceeded(
                f"{w.invalid} of the last {w.total} records on {self.where} partition "
                f"{partition} were invalid ({w.invalid / w.total:.0%} > "
                f"service.max_invalid_ratio {self.max_ratio:.0%}); most common reasons: "
                f"{top}. Stopping instead of dead-lettering the whole stream: check the topic "
                "names and the field mapping (fields.*). No checkpoint was written, so a "
                "restart after the fix re-reads these records."
            )

    def forget(self, partitions: set[int]) -> None:
        """Partitions revoked: their new owner judges them afresh."""
        for p in partitions:
            self.windows.pop(p, None)

    def ratio(self, partition: int) -> float:
        """The current window's invalid share (0 for a partition not seen)."""
        w = self.windows.get(partition)
        return w.invalid / w.total if w is not None and w.total else 0.0
