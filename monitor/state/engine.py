"""The engine: applies decoded batches to per-partition windows and the label join.

State is kept per input partition (``partition.py``: rings, pending store, early labels,
counters); :meth:`Engine.snapshot` sums it into a ``snapshot.Snapshot`` for every reader.

Every step is vectorized over the batch; the only Python loops are over models.

Counting rules (each outcome is counted, none is silent):

* a prediction whose id is already pending (or repeated in the batch) is a *duplicate*; when
  that id is another model's prediction, a *shared id* (labels could not tell them apart);
* a prediction too old for the ring is *late*;
* a label is counted in the bucket of its prediction (``label_time: prediction``, the cohort
  view) or of its own time, never before its prediction's (``label_time: arrival``); if that
  bucket has left the ring the label is *late*;
* a second label for the same prediction is a *duplicate label*;
* a label whose prediction is unknown is held as *early* until no prediction for it could still
  be counted (the watermark is a ring span plus ``early_label_grace`` past the label's time) or
  the table is full, then becomes an *orphan*;
* pending predictions leave the store after the TTL (*expired*) or, past the size cap, oldest
  first (*evicted*).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.spec import Config, ModelSpec
from monitor.ingest.decoder import Decoder
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.ingest.groups import GroupRegistry
from monitor.state.fingerprint import fingerprint
from monitor.state.join import LABELLED, PENDING, first_occurrences, key_order, other_model
from monitor.state.join import NO_SCORE as STORED_NO_SCORE
from monitor.state.label_counting import fold_labels
from monitor.state.label_times import arrivals
from monitor.state.partition import COUNTERS, DELAY_BOUNDS, HELD, PartitionState
from monitor.state.process_totals import ProcessTotals
from monitor.state.score_cells import NO_SCORE, prediction_block, score_micros
from monitor.state.snapshot import (
    ModelSnapshot,
    Snapshot,
    WindowCounts,
    counters,
    invalid,
    label_delays,
    take_snapshot,
)
from monitor.state.view import Idle
from monitor.state.window_sums import WindowSums
from monitor.state.windows import late_on_arrival, n_cells

I64 = npt.NDArray[np.int64]

# the names readers import from here (snapshot and partition types live in their own modules)
__all__ = ["COUNTERS", "DELAY_BOUNDS", "HELD", "Engine", "ModelSnapshot", "Snapshot"]
__all__ += ["WindowCounts"]


class Engine:
    """Holds all state; :meth:`apply` folds in decoded batches, :meth:`snapshot` reads out."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.models: list[ModelSpec] = list(config.models.values())
        self.registries = [
            GroupRegistry(m, max_label_length=config.limits.max_value_length) for m in self.models
        ]
        self.decoder = Decoder(config, self.registries, clock=clock)
        self.n_sets = max(len(m.attribute_sets) for m in self.models)
        self.partitions: dict[int, PartitionState] = {}
        self.moved = ProcessTotals(len(DELAY_BOUNDS) + 1)  # /metrics' counters only grow
        # set by an alert evaluator: keep label times for counts as of a boundary (as_of)
        self.track_label_times = False
        self._window_sums = [WindowSums() for _ in self.models]
        self._ttl = np.array([m.join.ttl // m.bucket for m in self.models], dtype=np.int64)
        # An early label waits while its prediction could still come and be counted: an orphan
        # once the watermark is a ring span (plus the grace) past the label's own time
        self._early_horizon = max(
            m.ring_buckets * m.bucket + m.join.early_label_grace for m in self.models
        )

    def partition(self, p: int) -> PartitionState:
        st = self.partitions.get(p)
        if st is None:
            st = self.partitions[p] = PartitionState(self.models, self.n_sets)
        return st

    # -- applying batches ----------------------------------------------------------------------
    def apply(self, partition: int, preds: PredictionBatch, labels: LabelBatch) -> None:
        """Fold one poll batch of one partition into the state (predictions first)."""
        st = self.partition(partition)
        if len(preds):
            self._predictions(st, preds)
        if len(labels):
            st.label_watermark = max(st.label_watermark, float(labels.ts.max()))
            self._labels(st, labels.key, labels.ts, labels.label)
        self._expire(st)

    def _predictions(self, st: PartitionState, b: PredictionBatch) -> None:
        # one sort of the batch's keys serves the duplicate check, the lookups and the insert
        order = key_order(b.key)
        old = late_on_arrival(st.rings, [m.bucket for m in self.models], b.model, b.ts)
        found = st.pending.find(b.key, order)
        dup = ~first_occurrences(b.key, order, ~old) | (found >= 0)
        other = np.zeros_like(dup)  # a second sort only where a model can meet another's id
        if len(self.models) > 1 and dup.any():
            other = other_model(b.key, b.model, dup, st.pending.models_of(found))
        st.count("duplicate_predictions", (dup & ~other).sum())
        st.count("shared_id_predictions", other.sum())  # another model's id (join.other_model)
        kept = ~dup
        b = b.take(kept)  # arrival order is kept: lateness depends on it
        if not len(b):
            return
        order = (np.cumsum(kept) - 1)[order[kept[order]]]  # the key order of the kept events
        st.watermark = max(st.watermark, float(b.ts.max()))
        admitted = np.zeros(len(b), dtype=bool)
        buckets = np.zeros(len(b), dtype=np.int64)
        u = score_micros(b.score)
        for m in np.unique(b.model):
            spec, ring = self.models[m], st.rings[m]
            ring.grow(len(self.registries[m]))
            sel = np.flatnonzero(b.model == m)
            st.arrived[m] += len(sel)  # app/idle.py: a model's decisions keep it busy here
            bk = (b.ts[sel] // spec.bucket).astype(np.int64)
            late, gone = ring.admit(bk)
            st.count("late_predictions", late.sum())
            k = len(spec.attribute_sets)
            groups = b.groups[sel, :k]
            fav = (b.pred[sel] == spec.favourable).astype(np.int64)
            cells, weights = prediction_block(u[sel], b.pred[sel], fav, spec.score_bins)
            ring.scatter(bk, groups, cells, weights, ~late & ~gone, gone)
            admitted[sel[~late]] = True
            buckets[sel] = bk
        idx = order[admitted[order]]  # admitted events, in key order
        st.count("predictions", len(idx))
        rows = np.zeros(len(idx), dtype=st.pending.main.dtype)
        rows["key"], rows["bucket"] = b.key[idx], buckets[idx]
        rows["score"] = np.where(u[idx] == NO_SCORE, STORED_NO_SCORE, u[idx])
        rows["groups"] = b.groups[idx, : self.n_sets]
        rows["model"] = b.model[idx]
        rows["pred"] = b.pred[idx]
        rows["state"] = PENDING
        evicted = st.pending.insert(rows, presorted=True)
        st.count("evicted_pending", (evicted["state"] == PENDING).sum())
        in_order = np.arange(len(rows))
        hit, early = st.early.take(rows["key"], in_order)
        if len(hit):  # sorted too: held labels come back in the order of their keys
            self._labels(st, early["key"], early["ts"], early["label"], in_order[: len(hit)])

    def _labels(
        self,
        st: PartitionState,
        key: npt.NDArray[np.uint64],
        ts: npt.NDArray[np.float64],
        label: npt.NDArray[np.uint8],
        order: npt.NDArray[np.int64] | None = None,
    ) -> None:
        if order is None:
            order = key_order(key)
        first = first_occurrences(key, order)
        idx = st.pending.find(key, order)
        found = idx >= 0
        already = np.zeros(len(key), dtype=bool)
        already[found] = st.pending.rows(idx[found])["state"] == LABELLED
        unknown = first & ~found
        held_before = np.zeros(len(key), dtype=bool)
        ask = order[unknown[order]]  # in key order
        held_before[ask] = st.early.find(key[ask], np.arange(len(ask))) >= 0
        st.count("duplicate_labels", (~first | already | held_before).sum())
        match = np.flatnonzero(first & found & ~already)
        hold = order[(unknown & ~held_before)[order]]  # in key order
        if len(hold):
            rows = np.zeros(len(hold), dtype=st.early.main.dtype)
            rows["key"], rows["ts"], rows["label"] = key[hold], ts[hold], label[hold]
            st.count("early_labels", len(hold))
            st.count("orphan_labels", len(st.early.insert(rows, presorted=True)))
        if not len(match):
            return
        entries = st.pending.rows(idx[match])
        st.pending.label(idx[match], entries)
        fold_labels(st, self.models, entries, label[match], ts[match], self.track_label_times)

    def _expire(self, st: PartitionState) -> None:
        heads = np.array(
            [r.head if r.head is not None else np.iinfo(np.int64).min // 2 for r in st.rings],
            dtype=np.int64,
        )
        st.count("expired_pending", st.pending.expire(heads - self._ttl))
        if np.isfinite(st.watermark):
            st.count("orphan_labels", len(st.early.expire(st.watermark - self._early_horizon)))

    # -- reading -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return take_snapshot(
            self.models, self.registries, list(self.partitions.values()), self.counters()
        )

    def low_watermark(self, m: int, idle: Idle | None = None) -> int | None:
        """Oldest head bucket over the partitions with data for model ``m``: every bucket before
        it is closed everywhere (in-order streams), so windows ending there are final. A partition
        ``idle(p, m)`` holds none back (all idle: the newest head, which none holds back)."""
        heads = {p: st.rings[m].head for p, st in self.partitions.items()}
        live = {p: h for p, h in heads.items() if h is not None}
        busy = [h for p, h in live.items() if idle is None or not idle(p, m)]
        return (min(busy) if busy else max(live.values())) if live else None

    def first_bucket(self, m: int) -> int | None:
        firsts = [st.rings[m].first for st in self.partitions.values()]
        live = [f for f in firsts if f is not None]
        return min(live) if live else None

    def ring_holds(self, m: int, start: int, *, at: int) -> bool:
        """Whether every partition's ring of model ``m`` still holds what it counted from bucket
        ``start`` on (``at``: the boundary being read, which the rings have reached). Buckets
        the head jumped over (a silence) held nothing: a window over them is whole."""
        rings = [st.rings[m] for st in self.partitions.values()]
        gone = [r.head - r.n_buckets if r.gone_through is None else r.gone_through for r in rings
                if r.head is not None]  # fmt: skip
        return all(start > g for g in gone)

    def counts_between(self, m: int, start: int, end: int, *, as_of: int | None = None) -> I64:
        """Summed ``counts[group, cell]`` of model ``m`` over buckets ``start <= b < end``.

        With ``as_of`` (a bucket boundary), labels whose time (their own, never before their
        prediction's bucket) is at or after it are left out: what was known then. Which labels
        a poll batch carries past a boundary depends on how the two topics interleave; those
        times do not, so label-based alert rules give the same answer live and in a replay.
        """
        g = len(self.registries[m])
        out = np.zeros((g, n_cells(self.models[m].score_bins)), dtype=np.int64)
        for st in self.partitions.values():
            ring = st.rings[m]
            ring.grow(g)
            out += ring.window(start, end)
            if as_of is not None:
                out -= st.ledgers[m].known_after(ring, as_of, start, end)
        return out

    def label_arrivals(self, m: int, k: int) -> I64:
        """``[group, cell]`` label increments that became known at boundary ``k``."""
        if self.models[m].label_time == "arrival":  # then: simply bucket k - 1
            return arrivals(self.partitions.values(), m, k, self.counts_between(m, k - 1, k))
        g = len(self.registries[m])  # else the ledgers' (no bucket to sum: the empty range
        for st in self.partitions.values():  # counts_between(m, k, k) was, every boundary)
            st.rings[m].grow(g)
        zeros = np.zeros((g, n_cells(self.models[m].score_bins)), dtype=np.int64)
        return arrivals(self.partitions.values(), m, k, zeros)

    def windows_as_of(self, m: int, windows: list[tuple[int, int]], as_of: int) -> list[I64]:
        """:meth:`counts_between` ``(m, start, end, as_of=as_of)`` of several windows, kept up to
        date from one call to the next (``window_sums.py``): for reading at each boundary."""
        g, c = len(self.registries[m]), n_cells(self.models[m].score_bins)
        return self._window_sums[m].read(self.partitions, m, g, c, windows, as_of)

    def label_frontier(self, m: int, p: int) -> int | None:
        """The bucket of model ``m`` that partition ``p``'s labels have reached (None: none)."""
        st = self.partitions.get(p)
        if st is None or not np.isfinite(st.label_watermark):
            return None
        return int(st.label_watermark // self.models[m].bucket)

    def label_delays(self) -> tuple[npt.NDArray[np.int64], float]:
        """Label-delay histogram (counts per ``DELAY_BOUNDS`` bucket, last = beyond) and sum."""
        return label_delays(self.partitions.values())

    def counters(self) -> dict[str, int]:
        """Event counters summed over partitions (cheap: no window sums)."""
        return counters(self.partitions.values())

    def labels_ahead(self) -> int:
        """Labels counted whose own time is after the last boundary read as of: kept to leave
        them out of it (``label_times.py``); many while a partition holds boundaries back."""
        return sum(len(ledger) for st in self.partitions.values() for ledger in st.ledgers)

    @property
    def invalid(self) -> dict[str, int]:
        """Dead-lettered records by reason, over all partitions."""
        return invalid(self.partitions.values())

    def count_invalid(self, partition: int, reasons: list[str]) -> None:
        inv = self.partition(partition).invalid
        for r in reasons:
            inv[r] = inv.get(r, 0) + 1

    # -- state for checkpoints (see checkpoint.py) ---------------------------------------------
    def drop_partition(self, p: int) -> None:
        """Forget a revoked partition (its new owner restores it; ``moved`` keeps its counts)."""
        self.moved.left(self.partitions.pop(p, None))

    def fingerprint(self) -> list[dict[str, Any]]:
        """What a checkpoint's arrays depend on; a mismatch makes a checkpoint incompatible."""
        return fingerprint(self.models, self.n_sets)

    def export_partition(self, p: int) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
        """(JSON-able metadata, arrays) describing partition ``p`` completely."""
        return self.partition(p).export(self.registries, self.fingerprint())

    def import_partition(
        self, p: int, meta: dict[str, Any], arrays: dict[str, npt.NDArray[Any]]
    ) -> None:
        """Restore partition ``p``, remapping group indices onto this engine's registries."""
        st = PartitionState.restore(self.models, self.n_sets, self.registries, meta, arrays)
        self.moved.left(self.partitions.get(p))  # a partition it replaces (found by a review)
        self.moved.arrived(st)  # before what it releases now (this process counts that)
        self.partitions[p] = st
        held, st.unread_attributes = st.unread_attributes, None
        if held is not None:  # decisions released without attributes (partition.py)
            self.apply(p, held, LabelBatch())
