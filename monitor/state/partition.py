"""The state of one input partition, and its serialisation for checkpoints.

State is kept per input partition so that, in a consumer group, a partition's state can move
with it: for each model a :class:`~monitor.state.windows.WindowRing` and a label-time ledger,
plus one pending-prediction store and one early-label table shared by the partition's models
(labels carry no model id; the prediction they join tells the model), its event counters, its
label-delay histogram and its dead letters by reason.

:meth:`PartitionState.export` gives JSON-able metadata and numpy arrays (``checkpoint.py``
stores them without pickle); :meth:`PartitionState.restore` reads them back into another
engine, remapping group indices by label (an instance that saw other groups first numbers
them differently).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec
from monitor.ingest.attribute_events import attribute_dtype
from monitor.ingest.events import PredictionBatch
from monitor.ingest.groups import GroupRegistry
from monitor.ingest.serving_decode import RESPONSE_DTYPE
from monitor.state.attribute_join import COUNTS as ATTRIBUTE_COUNTS
from monitor.state.attribute_join import (
    AttributeJoin,
    as_predictions,
    per_model,
    without_attributes,
)
from monitor.state.fingerprint import differences, fingerprint
from monitor.state.halves import COUNTS as HALF_COUNTS
from monitor.state.halves import HalfJoin
from monitor.state.join import EarlyLabels
from monitor.state.label_times import LabelLedger
from monitor.state.pending import PendingStore
from monitor.state.windows import WindowRing, n_cells

log = logging.getLogger("monitor.state.partition")

# label delay histogram bounds (seconds): a minute ... a month
DELAY_BOUNDS = (60.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0, 30 * 86400.0)

COUNTERS = (
    "predictions",
    "labels",
    "duplicate_predictions",
    "shared_id_predictions",  # another model's prediction id (join.other_model)
    "late_predictions",
    "duplicate_labels",
    "late_labels",
    "early_labels",
    "orphan_labels",
    "evicted_pending",
    "expired_pending",
    *HALF_COUNTS,  # a serving stack's requests and responses (halves.py)
    *ATTRIBUTE_COUNTS,  # decisions and their attributes from a stream (attribute_join.py)
)
# What the join holds now (gauges, not event counts), by what each row waits for
HELD = {
    "awaiting_label": "predictions awaiting their label",
    "labelled_kept_until_ttl": "labelled predictions kept until their TTL, to recognise a "
    "repeated prediction or label",
    "awaiting_attributes": "decisions awaiting their attributes (attributes topic)",
}


class PartitionState:
    """Everything the engine keeps for one input partition."""

    def __init__(self, models: Sequence[ModelSpec], n_sets: int) -> None:
        self.rings = [
            WindowRing(n_buckets=m.ring_buckets, n_cells=n_cells(m.score_bins)) for m in models
        ]
        self.pending = PendingStore(n_sets, max_size=sum(m.join.max_pending for m in models))
        self.early = EarlyLabels(max_size=max(m.join.max_early_labels for m in models))
        self.halves = HalfJoin(n_sets, max_size=sum(m.join.max_pending for m in models))
        self.attributes = _attribute_join(models, n_sets)
        # restored decisions that waited for attributes their model no longer reads (the
        # engine applies them without, once restored)
        self.unread_attributes: PredictionBatch | None = None
        self.watermark = -np.inf
        self.arrived = np.zeros(len(models), np.int64)  # decisions, halves: app/idle.py
        self.label_watermark = -np.inf  # newest label time seen (alert evaluation waits on it)
        # per model: label increments by label time, for counts as of a boundary (as_of)
        self.ledgers = [
            LabelLedger(
                n_buckets=m.ring_buckets,
                n_cells=n_cells(m.score_bins),
                n_sets=n_sets,
                k=len(m.attribute_sets),
            )
            for m in models
        ]
        # per model: the last boundary whose partial was published (alerts/partials.py), so a
        # partition's new owner goes on from there
        self.published: list[int | None] = [None for _ in models]
        self.counters = dict.fromkeys(COUNTERS, 0)
        # per model reading the attributes topic: decisions counted [with, without] attributes
        self.attribute_outcomes: dict[str, list[int]] = {}
        self.delay_counts = np.zeros(len(DELAY_BOUNDS) + 1, dtype=np.int64)
        self.delay_sum = 0.0
        self.invalid: dict[str, int] = {}

    def count(self, name: str, value: int | np.integer[Any]) -> None:
        self.counters[name] += int(value)

    def count_attributes(self, names: Sequence[str], outcomes: npt.NDArray[np.int64]) -> None:
        """Add ``outcomes[model] = [with, without]`` to each model's attribute coverage."""
        for m in np.flatnonzero(outcomes.any(axis=1)).tolist():
            kept = self.attribute_outcomes.setdefault(names[m], [0, 0])
            kept[0] += int(outcomes[m, 0])
            kept[1] += int(outcomes[m, 1])

    def _unread(
        self,
        rows: npt.NDArray[Any],
        models: Sequence[ModelSpec],
        registries: Sequence[GroupRegistry],
        n_sets: int,
    ) -> None:
        """Restored decisions that waited for attributes their model no longer reads (its
        ``input.attributes`` changed): never dropped, they go on as if theirs had not come."""
        if not len(rows):
            return
        log.warning(
            "%d decisions waited for attributes from the attributes topic, which their model "
            "no longer reads: counted without them (__missing__)",
            len(rows),
        )
        self.count("unattributed_decisions", len(rows))
        without = per_model(rows, len(models))
        self.count_attributes(
            [m.name for m in models], np.stack([np.zeros_like(without), without], axis=1)
        )
        joined = without_attributes(models, registries, rows, n_sets)
        self.unread_attributes = as_predictions([joined], n_sets)

    # -- checkpoints ---------------------------------------------------------------------------
    def export(
        self, registries: Sequence[GroupRegistry], fingerprint: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
        """(JSON-able metadata, arrays) describing this partition completely."""
        for m, r in enumerate(self.rings):
            r.grow(len(registries[m]))  # every registered group has a column
        meta: dict[str, Any] = {
            "fingerprint": fingerprint,
            "counters": self.counters,
            "attribute_outcomes": self.attribute_outcomes,
            "delay_counts": self.delay_counts.tolist(),
            "delay_sum": self.delay_sum,
            "invalid": self.invalid,
            "watermark": None if not np.isfinite(self.watermark) else self.watermark,
            "heads": [r.head for r in self.rings],
            "firsts": [r.first for r in self.rings],
            "gone_through": [r.gone_through for r in self.rings],
            "half_clocks": [c if np.isfinite(c) else None for c in self.halves.clocks.values()],
            "groups": [[list(reg.set_of), list(reg.labels)] for reg in registries],
            "overflow": [list(reg.overflow) for reg in registries],
            "published": self.published,
        }
        arrays: dict[str, npt.NDArray[Any]] = {
            "pending": self.pending.data,
            "early": self.early.data,
            "half_requests": self.halves.requests.data,
            "half_responses": self.halves.responses.data,
        }
        if self.attributes is not None:
            clock = self.attributes.newest_attributes
            meta["attributes_clock"] = clock if np.isfinite(clock) else None
            newest = self.attributes.newest
            meta["decisions_clock"] = newest if np.isfinite(newest) else None
            arrays["attr_decisions"] = self.attributes.decisions.data
            arrays["attr_records"] = self.attributes.attributes.data
        for m, r in enumerate(self.rings):
            arrays[f"counts{m}"] = r.counts
            arrays[f"expired{m}"] = r.expired
            arrays[f"ledger{m}"] = self.ledgers[m].export()
        meta["label_watermark"] = (
            None if not np.isfinite(self.label_watermark) else self.label_watermark
        )
        return meta, arrays

    @classmethod
    def restore(
        cls,
        models: Sequence[ModelSpec],
        n_sets: int,
        registries: Sequence[GroupRegistry],
        meta: dict[str, Any],
        arrays: dict[str, npt.NDArray[Any]],
    ) -> PartitionState:
        """A partition's state from :meth:`export`'s output, its group indices remapped onto
        ``registries`` (groups it names that they lack are registered)."""
        differs = differences(meta["fingerprint"], fingerprint(models, n_sets))
        if differs is not None:
            raise ValueError(
                "it was written for a different model configuration "
                f"({differs}); a changed configuration (or a "
                "version whose count cells differ) cannot reuse it: move the checkpoint file "
                "aside to start over"
            )
        st = cls(models, n_sets)
        remaps = []
        for m, (set_of, labels) in enumerate(meta["groups"]):
            reg = registries[m]
            remap = np.array(
                [reg.index(s, lab) for s, lab in zip(set_of, labels, strict=True)], dtype=np.int64
            )
            remaps.append(remap)
            ring = st.rings[m]
            ring.grow(len(reg))
            counts, expired = arrays[f"counts{m}"], arrays[f"expired{m}"]
            want = (ring.n_buckets, len(remap), ring.n_cells)
            if counts.shape != want or expired.shape != want[1:]:  # never broadcast into counts
                raise ValueError(
                    f"counts{m} {counts.shape} / expired{m} {expired.shape} do not fit "
                    f"{len(remap)} groups of {ring.n_buckets} buckets × {ring.n_cells} cells: "
                    "the checkpoint is damaged"
                )
            if len(np.unique(remap)) == len(remap):
                ring.counts[:, remap] = counts
                ring.expired[remap] = expired
            else:  # groups of the checkpoint that fold into one here (__other__) add up
                for old, new in enumerate(remap.tolist()):
                    ring.counts[:, new] += counts[:, old]
                    ring.expired[new] += expired[old]
            ring.head = _bucket(meta["heads"][m])
            ring.first = _bucket(meta.get("firsts", meta["heads"])[m])
            gone = meta.get("gone_through")
            ring.gone_through = None if gone is None else _bucket(gone[m])
            ledger = arrays.get(f"ledger{m}")
            if ledger is not None:
                st.ledgers[m].load(ring, ledger, remap)
        pending = arrays["pending"].copy()
        if len(pending):
            groups = pending["groups"].astype(np.int64)
            for m, remap in enumerate(remaps):
                rows = pending["model"] == m
                g = groups[rows]
                ok = g >= 0
                g[ok] = remap[g[ok]] if len(remap) else g[ok]
                groups[rows] = g
            pending["groups"] = groups
        st.pending.load(pending)
        asked = arrays.get("half_requests")
        if asked is not None and len(asked):
            asked = asked.copy()
            for m, remap in enumerate(remaps):
                rows = asked["model"] == m
                g = asked["groups"][rows]
                ok = g >= 0
                g[ok] = remap[g[ok]] if len(remap) else g[ok]
                asked["groups"][rows] = g
            st.halves.requests.load(asked)
        if arrays.get("half_responses") is not None:
            st.halves.responses.load(_as_dtype(arrays["half_responses"], RESPONSE_DTYPE))
        st.early.load(arrays["early"])
        for kind, c in zip(st.halves.clocks, meta.get("half_clocks") or (None, None), strict=True):
            st.halves.clocks[kind] = -np.inf if c is None else float(c)
        st.watermark = -np.inf if meta["watermark"] is None else float(meta["watermark"])
        lw = meta.get("label_watermark")
        st.label_watermark = -np.inf if lw is None else float(lw)
        st.counters.update(meta["counters"])
        st.attribute_outcomes = {  # none in a checkpoint older than the per-model counts
            k: [int(v[0]), int(v[1])] for k, v in (meta.get("attribute_outcomes") or {}).items()
        }
        if "delay_counts" in meta:
            st.delay_counts = np.array(meta["delay_counts"], dtype=np.int64)
            st.delay_sum = float(meta["delay_sum"])
        st.invalid = dict(meta["invalid"])
        st.published = list(meta.get("published") or st.published)
        st._restore_attributes(models, n_sets, registries, meta, arrays, remaps)
        return st

    def _restore_attributes(
        self,
        models: Sequence[ModelSpec],
        n_sets: int,
        registries: Sequence[GroupRegistry],
        meta: dict[str, Any],
        arrays: dict[str, npt.NDArray[Any]],
        remaps: list[npt.NDArray[np.int64]],
    ) -> None:
        """The attributes join's tables (after the counters: what it releases is counted)."""
        waiting = arrays.get("attr_decisions")
        if waiting is not None and len(waiting):
            # a model that no longer reads the attributes topic: its decisions go on without
            reads = np.array([m.serving is not None and m.serving.stream for m in models])
            unread = ~reads[waiting["model"].astype(np.int64)]
            self._unread(waiting[unread], models, registries, n_sets)
            waiting = waiting[~unread]
        if self.attributes is None and arrays.get("attr_records") is not None:
            self.count("orphan_attributes", len(arrays["attr_records"]))
        if self.attributes is not None and waiting is not None:
            self.attributes.decisions.load(waiting)
            records = arrays["attr_records"].copy()
            for m, remap in enumerate(remaps):
                g = records["groups"][:, m]
                ok = g >= 0
                g[ok] = remap[g[ok]] if len(remap) else g[ok]
                records["groups"][:, m] = g
            self.attributes.attributes.load(records)
            clock = meta.get("attributes_clock")
            self.attributes.newest_attributes = -np.inf if clock is None else float(clock)
            newest = meta.get("decisions_clock")
            self.attributes.newest = -np.inf if newest is None else float(newest)


def _attribute_join(models: Sequence[ModelSpec], n_sets: int) -> AttributeJoin | None:
    """The join of decisions with the attributes stream, when some model reads it."""
    ttls = [m.serving.attributes_ttl if m.serving is not None else 0 for m in models]
    if not any(m.serving is not None and m.serving.stream for m in models):
        return None
    return AttributeJoin(
        attribute_dtype(len(models), n_sets),
        ttls,
        [(m.ring_buckets - 2) * m.bucket for m in models],  # its bucket is still held
        max_size=sum(m.join.max_pending for m in models),
    )


def _as_dtype(rows: npt.NDArray[Any], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """``rows`` in ``dtype``: the fields an older checkpoint lacks are zero (an offset -1:
    unknown)."""
    if rows.dtype == dtype:
        return rows
    out = np.zeros(len(rows), dtype=dtype)
    if "offset" in (dtype.names or ()):
        out["offset"] = -1
    for name in rows.dtype.names or ():
        out[name] = rows[name]
    return out


def _bucket(value: object) -> int | None:
    """A ring's head or first bucket as stored (an int, or None for an empty ring)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"a ring bucket {value!r} is not an integer: the checkpoint is damaged")
