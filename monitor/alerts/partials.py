"""Boundary partials: what one partition adds to every number the alert evaluator reads.

Why: with several replicas each owns some partitions, but alerts, drift and evidence must judge
the model as a whole. The evaluator reads, at each closed bucket boundary ``k`` of a model,
sums over partitions: the windows as of ``k``, the drift cohorts, the bucket ``k − 1`` and the
labels that became known at ``k`` (:class:`~monitor.state.view.CountsView`). Each of those is a
sum of integer per-partition terms, so the owner of a partition computes its terms once the
partition has closed ``k`` and publishes them; whoever sums every partition's terms
(``alerts/global_view.py``) reads exactly what a single instance owning all partitions would
(``tests/alerts/test_global_view.py``). Small: windows × groups × cells integers, sent sparse.

A partition is *closed* at ``k`` as the evaluator decides for all of them
(``AlertEvaluator._frontier``), per partition: its predictions have reached ``k``, and its
labels too unless its label input is drained, held back by at most the model's lateness.

Group indices are the owner's; each partial names its groups by (attribute set, label), and the
reader maps them onto its own registry, as a checkpoint restore does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from monitor.alerts.drift_alerts import drift_cohorts
from monitor.config.spec import Config, ModelSpec
from monitor.state.engine import Engine
from monitor.state.label_times import arrivals
from monitor.state.partition import PartitionState
from monitor.state.window_sums import WindowSums
from monitor.state.windows import I64


@dataclass(frozen=True, eq=False)
class BoundaryPartial:
    """Partition ``partition``'s terms of model ``model`` at boundary ``boundary``.

    The first partial of a (model, partition) is a *marker* at its first bucket (``windows``
    is ``None``): it tells the reader the partition has data and where it starts, before the
    partition can close a boundary. A partition contributes nothing at boundaries up to its
    first bucket (no prediction of it is older)."""

    model: str
    partition: int
    boundary: int
    first: int
    set_of: tuple[int, ...]  # per group index of the owner: its attribute set
    labels: tuple[str, ...]  # and its label
    windows: I64 | None = None  # [window, group, cell], the model's windows as of the boundary
    bucket: I64 | None = None  # [group, cell] bucket boundary − 1 as of the boundary
    arrivals: I64 | None = None  # [group, cell] label increments that became known there
    cohorts: tuple[tuple[int, int], ...] = ()  # drift cohorts read at this boundary
    cohort_counts: I64 | None = None  # [cohort, group, cell] as of the boundary
    cohort_held: tuple[bool, ...] = ()  # whether this partition's ring still held each

    @property
    def marker(self) -> bool:
        return self.windows is None


def window_ranges(spec: ModelSpec, k: int) -> list[tuple[int, int]]:
    """The bucket ranges of the model's windows ending at boundary ``k`` (lags applied)."""
    out = []
    for w in spec.windows:
        end = k - w.lag // spec.bucket
        out.append((end - w.length // spec.bucket, end))
    return out


class PartialPublisher:
    """Computes the partials of the partitions an engine owns, boundary by boundary.

    It takes the place of the local evaluator as the reader of the engine's windows (it keeps
    their sums up to date the same way) and needs the label times the evaluator needs."""

    def __init__(self, config: Config, engine: Engine) -> None:
        self.config, self.engine = config, engine
        engine.track_label_times = True
        self._sums: dict[tuple[int, int], WindowSums] = {}

    def advance(
        self, labels_caught_up: Callable[[int], bool] | None = None, *, limit: int | None = None
    ) -> list[BoundaryPartial]:
        """The partials of every boundary closed since the last call, per partition in order
        (at most ``limit`` boundaries per partition and model)."""
        out: list[BoundaryPartial] = []
        for p, st in self.engine.partitions.items():
            for m, spec in enumerate(self.engine.models):
                ring = st.rings[m]
                if ring.head is None or ring.first is None:
                    continue
                last = st.published[m]  # checkpointed with the partition
                if last is None:
                    out.append(self._marker(p, m, ring.first))
                    last = st.published[m] = ring.first
                wm = self._frontier(p, m, spec, labels_caught_up)
                start = max(last + 1, ring.head - spec.ring_buckets + 1)
                if start > last + 1:  # boundaries past the ring (a silence): none will come
                    out.append(BoundaryPartial(spec.name, p, start - 1, ring.first, (), ()))
                if limit is not None:
                    wm = min(wm, start + limit - 1)
                for k in range(start, wm + 1):
                    out.append(self._partial(p, st, m, spec, k))
                st.published[m] = max(last, wm)
        return out

    def firsts(self, p: int) -> dict[str, int]:
        """Each model's first bucket in partition ``p`` (those with data): what its hello says,
        so that the view waits for its partials even if they are read after the hello."""
        st = self.engine.partitions.get(p)
        if st is None:
            return {}
        models = self.engine.models
        return {models[m].name: r.first for m, r in enumerate(st.rings) if r.first is not None}

    def forget(self, p: int) -> None:
        """A revoked partition: its new owner publishes from its checkpoint on."""
        for key in [key for key in self._sums if key[0] == p]:
            del self._sums[key]

    def _frontier(
        self, p: int, m: int, spec: ModelSpec, caught_up: Callable[[int], bool] | None
    ) -> int:
        head = self.engine.partitions[p].rings[m].head
        assert head is not None
        if caught_up is None or caught_up(p):
            return head
        reached = self.engine.label_frontier(m, p)
        wm = min(head, reached if reached is not None else -(2**62))
        return max(wm, head - spec.lateness // spec.bucket)

    def _groups(self, m: int, n: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
        reg = self.engine.registries[m]
        return tuple(reg.set_of[:n]), tuple(reg.labels[:n])

    def _marker(self, p: int, m: int, first: int) -> BoundaryPartial:
        name = self.engine.models[m].name
        return BoundaryPartial(name, p, first, first, (), ())

    def _partial(
        self, p: int, st: PartitionState, m: int, spec: ModelSpec, k: int
    ) -> BoundaryPartial:
        g = len(self.engine.registries[m])
        c = st.rings[m].n_cells
        sums = self._sums.get((p, m))
        if sums is None:
            sums = self._sums[(p, m)] = WindowSums()
        windows = np.stack(sums.read({p: st}, m, g, c, window_ranges(spec, k), k))
        ring, ledger = st.rings[m], st.ledgers[m]

        def as_of(start: int, end: int) -> I64:
            got: I64 = ring.window(start, end) - ledger.known_after(ring, k, start, end)
            return got

        bucket = as_of(k - 1, k)
        by_arrival = spec.label_time == "arrival"
        arrived = arrivals([st], m, k, ring.window(k - by_arrival, k))
        cohorts: list[tuple[int, int]] = []
        counts, held = [], []
        d = self.config.alerts.drift
        if d.enabled and (k * spec.bucket) % d.bucket == 0:
            for co in drift_cohorts(d, spec, k):
                cohorts.append((co.start, co.end))
                held.append(ring.head is None or co.start >= ring.head - ring.n_buckets + 1)
                counts.append(as_of(co.start, co.end))
        set_of, labels = self._groups(m, g)
        assert ring.first is not None
        return BoundaryPartial(
            spec.name,
            p,
            k,
            ring.first,
            set_of,
            labels,
            windows=windows,
            bucket=bucket,
            arrivals=arrived,
            cohorts=tuple(cohorts),
            cohort_counts=np.stack(counts) if counts else None,
            cohort_held=tuple(held),
        )
