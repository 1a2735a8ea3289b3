"""The global view: every partition's boundary partials summed, read as the engine is read.

Why: an :class:`~monitor.alerts.evaluator.AlertEvaluator` over a :class:`GlobalView` judges the
model over all partitions, whichever replicas own them, with the code a single instance runs
(``CountsView``). Partials arrive in any order (within two rings of buckets of each other: see
``_bound``) and more than once (a partition's new owner publishes again from its checkpoint):
the first copy of each (model, partition, boundary) is
kept, later ones are counted as duplicates and dropped — the copies are equal, because a
partition's terms at a closed boundary are final (``alerts/partials.py``).

A boundary is closed globally once every partition with data for the model has sent its
partial for it (or started after it): the same rule as the engine's low watermark, and the
reason the first partial of a partition is a marker sent as soon as it has data.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from monitor.alerts.partials import BoundaryPartial, window_ranges
from monitor.alerts.partials_codec import PartialError
from monitor.alerts.view_marks import read_hello, read_idle
from monitor.alerts.view_partition import ViewPartition
from monitor.config.spec import Config, ModelSpec
from monitor.ingest.groups import GroupRegistry
from monitor.state.view import Idle
from monitor.state.windows import I64, n_cells

log = logging.getLogger("monitor.alerts.global_view")
KEEP_RINGS = 2  # partials waiting per (model, partition), in rings of buckets


@dataclass
class _Boundary:
    """One boundary's sums over the partitions (group indices of the view's registry)."""

    k: int
    windows: list[I64]
    bucket: I64
    arrivals: I64
    cohorts: dict[tuple[int, int], I64] = field(default_factory=dict)
    held: dict[int, bool] = field(default_factory=dict)  # cohort start -> every ring held it
    gone: bool = False  # a partition's partial was let go unread: no window here is whole
    silent: bool = False  # every partition said it has nothing here (a silence)


class GlobalView:
    """A :class:`~monitor.state.view.CountsView` over partials from every partition."""

    def __init__(self, config: Config, *, partitions: int | None = None) -> None:
        """``partitions``: how many input partitions there are; nothing is judged before each
        has said whether it has data (a partial or :meth:`hello`), so a partition whose owner
        is slow to start is waited for rather than left out."""
        self.expected = partitions
        self._known: set[int] = set()
        self._idle: set[tuple[int, int]] = set()  # (partition, model) said idle, until a partial
        self.models = list(config.models.values())
        self.registries = [
            GroupRegistry(m, max_label_length=config.limits.max_value_length) for m in self.models
        ]
        self.track_label_times = False
        self._index = {m.name: i for i, m in enumerate(self.models)}
        self._parts: list[dict[int, ViewPartition]] = [{} for _ in self.models]
        self._read: list[_Boundary | None] = [None for _ in self.models]
        self.duplicates = 0  # partials dropped: a copy of one already here (or already read)
        self.missing = 0  # (partition, boundary) read as zero: its owner skipped the boundary
        self.dropped = 0  # partials let go unread: too many waited (_bound)
        self.unknown_models = 0

    # -- receiving -----------------------------------------------------------------------------
    def add(self, partial: BoundaryPartial, offset: int = -1) -> bool:
        """Take one partial (``offset``: where it was read, see :meth:`resume_offset`);
        ``False`` when it was a duplicate (or of an unknown model). :class:`PartialError` when
        it does not fit this monitor's configuration (another deployment's, or a replica on
        another configuration during a rolling update): judged, it crashed every replica."""
        if self.expected is not None and not 0 <= partial.partition < self.expected:
            raise PartialError(f"partition {partial.partition} of {self.expected}")
        m = self._index.get(partial.model)
        if m is None:
            self._known.add(partial.partition)
            self.unknown_models += 1
            return False
        if not partial.marker:
            _check_shape(self.models[m], partial)
            self._idle.discard((partial.partition, m))  # busy again
        self._known.add(partial.partition)
        parts = self._parts[m]
        st = parts.get(partial.partition)
        if st is None:
            st = parts[partial.partition] = ViewPartition(partial.first, partial.first)
        if partial.marker and partial.boundary > st.reached:  # nothing through it: a silence
            st.skipped = max(st.skipped, partial.boundary)
            st.settle()
            return True
        if partial.marker or partial.boundary <= st.reached or partial.boundary in st.waiting:
            self.duplicates += not partial.marker or partial.boundary != st.first
            return False
        st.waiting[partial.boundary] = (partial, self._remap(m, st, partial), offset)
        st.settle()
        self._bound(m, partial.partition, st)
        return True

    def _bound(self, m: int, p: int, st: ViewPartition) -> None:
        """At most two rings of partials wait per (model, partition): while another partition
        holds the boundaries back for longer (a stuck owner), the oldest are let go, counted
        and logged, and their boundaries read as windows not whole (skipped, as one instance
        skips windows that left its ring, after half the skew), never as counts without this
        partition. Within that, partials arrive in any order and are judged exactly."""
        spec = self.models[m]
        gone = st.let_go(KEEP_RINGS * spec.ring_buckets)
        if not gone:
            return
        self.dropped += gone
        log.error(
            "model %s: partition %d's partials through boundary %d were let go unread (%d so "
            "far): another partition held judgement back for over %d buckets",
            spec.name, p, st.dropped, self.dropped, KEEP_RINGS * spec.ring_buckets,
        )  # fmt: skip

    def hello(self, value: bytes | None) -> None:
        """A hello record (``view_marks.py``): a partition has an owner; each model with data
        there is waited for from its first bucket, even before its markers are read."""
        said = read_hello(value, self.expected)
        for name, first in said.first.items():
            m = self._index.get(name)
            if m is not None and said.partition not in self._parts[m]:
                self._parts[m][said.partition] = ViewPartition(first, first)
        self._known.add(said.partition)

    def idle(self, value: bytes | None) -> None:
        """An idle record (``view_marks.py``): the partition holds none of the model's
        boundaries back until its next partial of it (its owner's
        ``kafka.idle_partition_timeout`` passed without a decision of it)."""
        said = read_idle(value, self.expected)
        self._said_idle(said.partition, said.model)

    def _said_idle(self, p: int, model: str | None) -> None:
        """Partition ``p`` is idle for ``model`` (None: every model; one not configured here:
        none)."""
        every = range(len(self.models))
        self._idle |= {(p, m) for m in every if model in (None, self.models[m].name)}

    def resume_offset(self) -> int | None:
        """The lowest offset of a partial taken but not read yet: reading again from there
        (after a restart, with :meth:`progress`) loses nothing. ``None``: none is waiting."""
        offsets = [
            o for parts in self._parts for st in parts.values() for *_, o in st.waiting.values()
        ]
        return min(offsets) if offsets else None

    def progress(self, last: dict[int, int]) -> dict[str, object]:
        """What a restarted view needs besides the partials from :meth:`resume_offset` on:
        each partition's first bucket and the boundary read through (``last``: per model, the
        evaluator's last judged boundary), and the partitions known."""
        models: dict[str, dict[str, list[int]]] = {}
        for m, parts in enumerate(self._parts):
            done = last.get(m)
            models[self.models[m].name] = {str(p): st.saved(done) for p, st in parts.items()}
        # partitions idle for every model as bare numbers, as older versions wrote and read them
        n = len(self.models)
        every = {p for p, _ in self._idle if all((p, m) in self._idle for m in range(n))}
        some = sorted([p, self.models[m].name] for p, m in self._idle if p not in every)
        return {"known": sorted(self._known), "models": models, "idle": sorted(every),
                "idle_models": some}  # fmt: skip

    def restore(self, progress: dict[str, object]) -> None:
        """The inverse of :meth:`progress` (models no longer configured are left out)."""
        known = progress.get("known", [])
        models = progress.get("models", {})
        assert isinstance(known, list) and isinstance(models, dict)
        self._known = {int(p) for p in known}
        self._idle = set()
        self._parts = [{} for _ in self.models]  # (read again from the saved offset)
        self._read = [None for _ in self.models]
        every = cast("list[int]", progress.get("idle", []))  # absent: saved before idle records
        for p in every:  # idle for every model
            self._said_idle(int(p), None)
        for p, model in cast("list[list[Any]]", progress.get("idle_models", [])):
            self._said_idle(int(p), str(model))
        for name, parts in models.items():
            m = self._index.get(name)
            if m is None:
                continue
            self._parts[m] = {int(p): ViewPartition.restored(v) for p, v in parts.items()}

    # -- CountsView ----------------------------------------------------------------------------
    @property
    def partitions(self) -> dict[int, object]:
        return {p: None for parts in self._parts for p in parts}

    def low_watermark(self, m: int, idle: Idle | None = None) -> int | None:
        """Every partition's progress, but those their owners said are idle for the model, and
        those ``idle(p, m)`` names (this replica's own word is in its idle records already;
        ``lambda p, m: True`` gives the newest partition's)."""
        parts = self._parts[m]
        if not parts or (self.expected is not None and len(self._known) < self.expected):
            return None
        busy = [
            st.reached
            for p, st in parts.items()
            if (p, m) not in self._idle and (idle is None or not idle(p, m))
        ]
        return min(busy) if busy else max(st.reached for st in parts.values())

    def silent_through(self, m: int) -> int:
        """The newest boundary every partition skipped (past its ring, after a silence): one
        instance owning them all would not judge it either."""
        parts = self._parts[m]
        return min((st.skipped for st in parts.values()), default=-(2**62))

    def first_bucket(self, m: int) -> int | None:
        parts = self._parts[m]
        return min(st.first for st in parts.values()) if parts else None

    def label_frontier(self, m: int, p: int) -> int | None:
        st = self._parts[m].get(p)
        return None if st is None else st.reached

    def ring_holds(self, m: int, start: int, *, at: int) -> bool:
        b = self._boundary(m, at)
        return not b.gone and b.held.get(start, True)

    def counts_between(self, m: int, start: int, end: int, *, as_of: int | None = None) -> I64:
        if as_of is None:
            raise ValueError("the global view holds counts as of closed boundaries only")
        b = self._boundary(m, as_of)
        got = b.bucket if (start, end) == (as_of - 1, as_of) else b.cohorts.get((start, end))
        if got is None and b.silent:  # nothing was published in a silence: nothing counted
            got = np.zeros_like(b.bucket)
        if got is None:
            raise KeyError(f"buckets {start}..{end} as of {as_of} were not published")
        return got.copy()

    def windows_as_of(self, m: int, windows: list[tuple[int, int]], as_of: int) -> list[I64]:
        if windows != window_ranges(self.models[m], as_of):
            raise KeyError(f"windows {windows} are not the model's windows at {as_of}")
        return [w.copy() for w in self._boundary(m, as_of).windows]

    def label_arrivals(self, m: int, k: int) -> I64:
        return self._boundary(m, k).arrivals.copy()

    # -- summing -------------------------------------------------------------------------------
    def _remap(self, m: int, st: ViewPartition, p: BoundaryPartial) -> I64:
        """The owner's group indices → this view's (groups it lacks are registered)."""
        n = len(st.labels)
        if p.labels[:n] != st.labels:  # another owner, another numbering
            st.labels, st.remap, n = (), np.zeros(0, np.int64), 0
        if len(p.labels) > n:
            reg = self.registries[m]
            extra = [reg.index(s, lab) for s, lab in zip(p.set_of[n:], p.labels[n:], strict=True)]
            st.remap = np.concatenate([st.remap, np.array(extra, dtype=np.int64)])
            st.labels = p.labels
        return st.remap

    def _boundary(self, m: int, k: int) -> _Boundary:
        cached = self._read[m]
        if cached is not None and cached.k == k:
            return cached
        spec = self.models[m]
        taken: list[tuple[I64, BoundaryPartial]] = []
        silent, gone = 0, False
        for p, st in self._parts[m].items():
            for old in [b for b in st.waiting if b < k]:
                del st.waiting[old]  # read before (boundaries are read in order)
            if st.first >= k:
                continue  # nothing of this partition is older than k
            got = st.waiting.pop(k, None)
            if got is None and k <= st.dropped:
                gone = True  # let go unread (_bound)
                continue
            if got is None and (k <= st.skipped or (p, m) in self._idle):
                silent += k <= st.skipped
                continue  # nothing published through a silence, or by an idle partition
            if got is None:
                self.missing += 1
                log.warning("model %s: partition %d sent nothing for boundary %d", spec.name, p, k)
                continue
            taken.append((got[1], got[0]))
        g, c = len(self.registries[m]), n_cells(spec.score_bins)
        b = _Boundary(
            k,
            [np.zeros((g, c), np.int64) for _ in spec.windows],
            np.zeros((g, c), np.int64),
            np.zeros((g, c), np.int64),
        )
        b.silent, b.gone = not taken and silent > 0, gone
        for remap, partial in taken:
            assert partial.windows is not None
            assert partial.bucket is not None and partial.arrivals is not None
            for out, w in zip(b.windows, partial.windows, strict=True):
                np.add.at(out, remap[: len(w)], w)
            np.add.at(b.bucket, remap[: len(partial.bucket)], partial.bucket)
            np.add.at(b.arrivals, remap[: len(partial.arrivals)], partial.arrivals)
            for i, (rng, held) in enumerate(zip(partial.cohorts, partial.cohort_held, strict=True)):
                assert partial.cohort_counts is not None
                sums = b.cohorts.setdefault(rng, np.zeros((g, c), np.int64))
                np.add.at(sums, remap[: len(partial.cohort_counts[i])], partial.cohort_counts[i])
                b.held[rng[0]] = b.held.get(rng[0], True) and held
        self._read[m] = b
        return b


def _check_shape(spec: ModelSpec, p: BoundaryPartial) -> None:
    """A partial's arrays as this model's configuration makes them: its windows, its cells per
    group, its attribute sets (the codec checks only that a record agrees with itself)."""
    assert p.windows is not None and p.bucket is not None and p.arrivals is not None
    g, c = len(p.labels), n_cells(spec.score_bins)
    sets = len(spec.attribute_sets)
    if p.windows.shape != (len(spec.windows), g, c) or p.bucket.shape != (g, c):
        raise PartialError(
            f"model {spec.name}: arrays {p.windows.shape} where this configuration has "
            f"{len(spec.windows)} windows of {c} cells"
        )
    if any(not 0 <= s < sets for s in p.set_of):
        raise PartialError(f"model {spec.name}: an attribute set outside 0..{sets - 1}")
