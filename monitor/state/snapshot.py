"""Snapshots: a consistent copy of the summed counts, what every reader above ``state/`` gets.

Taking one sums each window over the partitions' rings once; the copy is cheap to take and
safe to read later (on another thread, after more batches were applied).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec, WindowSpec
from monitor.ingest.groups import GroupRegistry
from monitor.state.partition import COUNTERS, DELAY_BOUNDS, PartitionState
from monitor.state.windows import n_cells

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class WindowCounts:
    """Summed counts of one window of one model: ``counts[group, cell]``."""

    window: WindowSpec
    start: float  # epoch seconds, inclusive
    end: float  # epoch seconds, exclusive
    counts: I64


@dataclass(frozen=True)
class ModelSnapshot:
    spec: ModelSpec
    set_names: list[str]
    groups: list[tuple[I64, list[str]]]  # per attribute set: group indices and labels
    windows: dict[str, WindowCounts]
    totals: I64  # everything accepted since start (ring + expired), [group, cell]


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy of the engine's summed counts: cheap to take, safe to read later."""

    models: dict[str, ModelSnapshot]
    counters: dict[str, int]


def model_snapshot(
    m: int, spec: ModelSpec, reg: GroupRegistry, partitions: Iterable[PartitionState]
) -> ModelSnapshot:
    """Model ``m``'s windows, each ending at the newest bucket any partition has reached
    (less the window's lag), summed over the partitions."""
    g = len(reg)
    rings = [st.rings[m] for st in partitions]
    for r in rings:
        r.grow(g)
    heads = [r.head for r in rings if r.head is not None]
    windows: dict[str, WindowCounts] = {}
    for w in spec.windows:
        counts = np.zeros((g, n_cells(spec.score_bins)), dtype=np.int64)
        start = end = 0
        if heads:
            end = max(heads) + 1 - w.lag // spec.bucket
            start = end - w.length // spec.bucket
            for r in rings:
                counts += r.window(start, end)
        windows[w.name] = WindowCounts(w, start * spec.bucket, end * spec.bucket, counts)
    totals = sum((r.total() for r in rings), np.zeros((g, n_cells(spec.score_bins)), np.int64))
    return ModelSnapshot(
        spec=spec,
        set_names=reg.set_names,
        groups=[reg.groups_of_set(s) for s in range(len(reg.sets))],
        windows=windows,
        totals=totals,
    )


def take_snapshot(
    models: Sequence[ModelSpec],
    registries: Sequence[GroupRegistry],
    partitions: Sequence[PartitionState],
    counters: dict[str, int],
) -> Snapshot:
    return Snapshot(
        models={
            spec.name: model_snapshot(m, spec, registries[m], partitions)
            for m, spec in enumerate(models)
        },
        counters=counters,
    )


def label_delays(parts: Iterable[PartitionState]) -> tuple[I64, float]:
    """Label-delay histogram (counts per ``DELAY_BOUNDS`` bucket, last = beyond) and sum."""
    counts = np.zeros(len(DELAY_BOUNDS) + 1, dtype=np.int64)
    total = 0.0
    for st in parts:
        counts += st.delay_counts
        total += st.delay_sum
    return counts, total


def counters(parts: Iterable[PartitionState]) -> dict[str, int]:
    """Event counters summed over partitions, and what the joins hold now."""
    parts = list(parts)
    out = dict.fromkeys(COUNTERS, 0)
    for st in parts:
        for k, v in st.counters.items():
            out[k] += v
    awaiting = sum(st.pending.awaiting_label() for st in parts)
    out["awaiting_label"] = awaiting
    out["labelled_kept_until_ttl"] = sum(len(st.pending) for st in parts) - awaiting
    joins = [st.attributes for st in parts if st.attributes is not None]
    if joins:  # only where the attributes come on a topic of their own
        out["awaiting_attributes"] = sum(len(j.decisions) for j in joins)
    out["invalid"] = sum(sum(st.invalid.values()) for st in parts)
    return out


def invalid(parts: Iterable[PartitionState]) -> dict[str, int]:
    """Dead-lettered records by reason, over all partitions."""
    out: dict[str, int] = {}
    for st in parts:
        for k, v in st.invalid.items():
            out[k] = out.get(k, 0) + v
    return out
