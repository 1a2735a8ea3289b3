"""What the alert evaluator reads: :class:`CountsView`.

Two things provide it: the :class:`~monitor.state.engine.Engine` (this process's partitions) and
the global view over every replica's boundary partials (``alerts/global_view.py``). The
evaluator, the drift cohorts and the evidence detectors are written against this protocol, so
one replica judging all partitions runs the very code a single instance runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from monitor.config.spec import ModelSpec
from monitor.ingest.groups import GroupRegistry
from monitor.state.windows import I64

# (partition, model) -> whether that partition holds no boundary of the model back: no
# decisions of it there for a while, nothing left to read (app/idle.py)
Idle = Callable[[int, int], bool]


class CountsView(Protocol):
    track_label_times: bool  # set by the evaluator: label counts as of a boundary

    @property
    def models(self) -> Sequence[ModelSpec]: ...

    @property
    def registries(self) -> Sequence[GroupRegistry]: ...

    @property
    def partitions(self) -> Mapping[int, object]: ...

    def low_watermark(self, m: int, idle: Idle | None = None) -> int | None:
        """The newest boundary every partition with data for model ``m`` has closed (those
        ``idle(partition, m)`` names aside)."""
        ...

    def first_bucket(self, m: int) -> int | None: ...

    def label_frontier(self, m: int, p: int) -> int | None: ...

    def ring_holds(self, m: int, start: int, *, at: int) -> bool:
        """Whether every partition still holds bucket ``start`` when boundary ``at`` is read."""
        ...

    def counts_between(self, m: int, start: int, end: int, *, as_of: int | None = None) -> I64: ...

    def windows_as_of(self, m: int, windows: list[tuple[int, int]], as_of: int) -> list[I64]: ...

    def label_arrivals(self, m: int, k: int) -> I64: ...
