"""The engine: applies decoded batches to per-partition windows and the label join.

State is kept per input partition (so that, in a consumer group, a partition's state can move
with it): for each model a :class:`~monitor.state.windows.WindowRing`, plus one pending-prediction
store and one early-label table shared by the partition's models (labels carry no model id;
the prediction they join tells the model).

Every step is vectorized over the batch; the only Python loops are over models.

Counting rules (each outcome is counted, none is silent):

* a prediction whose id is already pending (or repeated in the batch) is a *duplicate*;
* a prediction too old for the ring is *late*;
* a label is counted in the bucket of its prediction (``label_time: prediction``, the cohort
  view) or of its own arrival (``label_time: arrival``); if that bucket has left the ring the
  label is *late*;
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
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.spec import Config, ModelSpec, WindowSpec
from monitor.ingest.decoder import Decoder
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.ingest.groups import GroupRegistry
from monitor.state.join import (
    LABELLED,
    NO_SCORE,
    PENDING,
    EarlyLabels,
    PendingStore,
    first_occurrences,
    key_order,
)
from monitor.state.label_times import LabelLedger
from monitor.state.windows import CAL, FAV, FN, FP, SCORE_SCALE, TN, TP, N, WindowRing, n_cells

I64 = npt.NDArray[np.int64]

# label delay histogram bounds (seconds): a minute ... a month
DELAY_BOUNDS = (60.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0, 30 * 86400.0)

COUNTERS = (
    "predictions",
    "labels",
    "duplicate_predictions",
    "late_predictions",
    "duplicate_labels",
    "late_labels",
    "early_labels",
    "orphan_labels",
    "evicted_pending",
    "expired_pending",
)


class PartitionState:
    """Everything the engine keeps for one input partition."""

    def __init__(self, models: list[ModelSpec], n_sets: int) -> None:
        self.rings = [
            WindowRing(n_buckets=m.ring_buckets, n_cells=n_cells(m.score_bins)) for m in models
        ]
        self.pending = PendingStore(n_sets, max_size=sum(m.join.max_pending for m in models))
        self.early = EarlyLabels(max_size=max(m.join.max_early_labels for m in models))
        self.watermark = -np.inf
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
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.delay_counts = np.zeros(len(DELAY_BOUNDS) + 1, dtype=np.int64)
        self.delay_sum = 0.0
        self.invalid: dict[str, int] = {}

    def count(self, name: str, value: int | np.integer[Any]) -> None:
        self.counters[name] += int(value)


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
        # set by an alert evaluator: keep label times for counts as of a boundary (as_of)
        self.track_label_times = False
        self._ttl = np.array([m.join.ttl // m.bucket for m in self.models], dtype=np.int64)
        # An early label can still meet its prediction while that prediction would be counted:
        # its time is at most the label's, and predictions older than the ring are late anyway.
        # So it is an orphan once the watermark is a ring span (plus the grace) past it.
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
        dup = ~first_occurrences(b.key, order) | (st.pending.find(b.key, order) >= 0)
        st.count("duplicate_predictions", dup.sum())
        kept = ~dup
        b = b.take(kept)  # arrival order is kept: lateness depends on it
        if not len(b):
            return
        order = (np.cumsum(kept) - 1)[order[kept[order]]]  # the key order of the kept events
        st.watermark = max(st.watermark, float(b.ts.max()))
        admitted = np.zeros(len(b), dtype=bool)
        buckets = np.zeros(len(b), dtype=np.int64)
        for m in np.unique(b.model):
            spec, ring = self.models[m], st.rings[m]
            ring.grow(len(self.registries[m]))
            sel = np.flatnonzero(b.model == m)
            bk = (b.ts[sel] // spec.bucket).astype(np.int64)
            late, gone = ring.admit(bk)
            st.count("late_predictions", late.sum())
            k = len(spec.attribute_sets)
            groups = b.groups[sel, :k]
            fav = (b.pred[sel] == spec.favourable).astype(np.int64)
            n = len(sel)
            cells = np.concatenate([np.full(n, N), np.full(n, FAV)])
            weights = np.concatenate([np.ones(n, np.int64), fav])
            both = np.concatenate([np.arange(n), np.arange(n)])
            self._scatter(
                ring, bk[both], groups[both], cells, weights, (~late & ~gone)[both], gone[both]
            )
            admitted[sel[~late]] = True
            buckets[sel] = bk
        idx = order[admitted[order]]  # admitted events, in key order
        st.count("predictions", len(idx))
        rows = np.zeros(len(idx), dtype=st.pending.main.dtype)
        rows["key"] = b.key[idx]
        rows["bucket"] = buckets[idx]
        score = b.score[idx]
        ok = np.isfinite(score) & (score >= 0) & (score <= 1)
        rows["score"] = np.where(ok, np.rint(np.where(ok, score, 0) * SCORE_SCALE), NO_SCORE)
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
        st.pending.set_field(idx[match], "state", LABELLED)
        lab = label[match].astype(np.int64)
        t_match = ts[match]
        for m in np.unique(entries["model"]):
            spec, ring = self.models[m], st.rings[m]
            sel = np.flatnonzero(entries["model"] == m)
            e = entries[sel]
            y = lab[sel]
            t = t_match[sel]  # label times
            if spec.label_time == "prediction":
                bk = e["bucket"]
                late = ~ring.is_live(bk)
                gone = np.zeros(len(bk), dtype=bool)
            else:
                bk = (t // spec.bucket).astype(np.int64)
                late, gone = ring.admit(bk)
            st.count("late_labels", late.sum())
            st.count("labels", (~late).sum())
            # label delay: label time minus the start of its prediction's bucket
            delay = np.maximum(t - e["bucket"] * float(spec.bucket), 0.0)
            st.delay_counts += np.bincount(
                np.searchsorted(DELAY_BOUNDS, delay, side="left"), minlength=len(DELAY_BOUNDS) + 1
            )
            st.delay_sum += float(delay.sum())
            pred = e["pred"].astype(np.int64)
            cell = np.where(pred == 1, np.where(y == 1, TP, FP), np.where(y == 1, FN, TN))
            parts_row = [np.arange(len(e))]
            parts_cell = [cell]
            parts_w = [np.ones(len(e), np.int64)]
            scored = np.flatnonzero(e["score"] != NO_SCORE)
            if len(scored):
                s = e["score"][scored].astype(np.int64)
                b_ = np.minimum(s * spec.score_bins // SCORE_SCALE, spec.score_bins - 1)
                base = CAL + 3 * b_
                parts_row += [scored, scored, scored]
                parts_cell += [base, base + 1, base + 2]
                parts_w += [np.ones(len(scored), np.int64), y[scored], s]
            rows_ = np.concatenate(parts_row)
            k = len(spec.attribute_sets)
            live = ~late & ~gone
            self._scatter(
                ring,
                bk[rows_],
                e["groups"][rows_, :k],
                np.concatenate(parts_cell),
                np.concatenate(parts_w),
                live[rows_],
                gone[rows_],
            )
            # Labels counted in their own bucket (label_time: arrival) are never in a window
            # ending before their time: only cohort counting needs the label-time ledger. Alert
            # rules read the confusion cells only (calibration is not a rule metric).
            if self.track_label_times and spec.label_time == "prediction":
                st.ledgers[m].record(
                    ring,
                    (t[live] // spec.bucket).astype(np.int64),
                    bk[live],
                    e["groups"][live, :k],
                    cell[live],
                )

    @staticmethod
    def _scatter(
        ring: WindowRing,
        buckets: I64,
        groups: npt.NDArray[Any],
        cells: I64,
        weights: I64,
        live: npt.NDArray[np.bool_],
        gone: npt.NDArray[np.bool_],
    ) -> None:
        """Add ``weights`` to ``cells`` of every attribute set's group of each event."""
        k = groups.shape[1]
        rep = np.repeat
        live_r = rep(live, k)
        gone_r = rep(gone, k)
        g = groups.reshape(-1)
        b = rep(buckets, k)
        c = rep(cells, k)
        w = rep(weights, k)
        ring.add(b[live_r], g[live_r], c[live_r], w[live_r])
        ring.add_expired(g[gone_r], c[gone_r], w[gone_r])

    def _expire(self, st: PartitionState) -> None:
        heads = np.array(
            [r.head if r.head is not None else np.iinfo(np.int64).min // 2 for r in st.rings],
            dtype=np.int64,
        )
        gone = st.pending.expire(heads - self._ttl)
        st.count("expired_pending", (gone["state"] == PENDING).sum())
        if np.isfinite(st.watermark):
            st.count("orphan_labels", len(st.early.expire(st.watermark - self._early_horizon)))

    # -- reading -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        models: dict[str, ModelSnapshot] = {}
        for m, spec in enumerate(self.models):
            reg = self.registries[m]
            g = len(reg)
            rings = [st.rings[m] for st in self.partitions.values()]
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
            totals = sum(
                (r.total() for r in rings), np.zeros((g, n_cells(spec.score_bins)), np.int64)
            )
            models[spec.name] = ModelSnapshot(
                spec=spec,
                set_names=reg.set_names,
                groups=[reg.groups_of_set(s) for s in range(len(reg.sets))],
                windows=windows,
                totals=totals,
            )
        return Snapshot(models=models, counters=self.counters())

    def low_watermark(self, m: int) -> int | None:
        """Oldest head bucket over the partitions that have data for model ``m``: every bucket
        before it is closed everywhere (for in-order streams), so windows ending there are final.
        """
        heads = [st.rings[m].head for st in self.partitions.values()]
        live = [h for h in heads if h is not None]
        return min(live) if live else None

    def first_bucket(self, m: int) -> int | None:
        firsts = [st.rings[m].first for st in self.partitions.values()]
        live = [f for f in firsts if f is not None]
        return min(live) if live else None

    def counts_between(self, m: int, start: int, end: int, *, as_of: int | None = None) -> I64:
        """Summed ``counts[group, cell]`` of model ``m`` over buckets ``start <= b < end``.

        With ``as_of`` (a bucket boundary), labels whose own time is at or after the boundary
        are left out: what was known at that moment of event time. Which labels a live poll
        batch carries past a boundary depends on how the two topics interleave; the labels'
        own times do not, so alert rules on label-based metrics give the same answer live and
        in a replay.
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

    def label_frontier(self, m: int, p: int) -> int | None:
        """The bucket of model ``m`` that partition ``p``'s labels have reached (None: none)."""
        st = self.partitions.get(p)
        if st is None or not np.isfinite(st.label_watermark):
            return None
        return int(st.label_watermark // self.models[m].bucket)

    def label_delays(self) -> tuple[npt.NDArray[np.int64], float]:
        """Label-delay histogram (counts per ``DELAY_BOUNDS`` bucket, last = beyond) and sum."""
        counts = np.zeros(len(DELAY_BOUNDS) + 1, dtype=np.int64)
        total = 0.0
        for st in self.partitions.values():
            counts += st.delay_counts
            total += st.delay_sum
        return counts, total

    def counters(self) -> dict[str, int]:
        """Event counters summed over partitions (cheap: no window sums)."""
        counters = dict.fromkeys(COUNTERS, 0)
        for st in self.partitions.values():
            for k, v in st.counters.items():
                counters[k] += v
        counters["pending"] = sum(len(st.pending) for st in self.partitions.values())
        counters["invalid"] = sum(sum(st.invalid.values()) for st in self.partitions.values())
        return counters

    @property
    def invalid(self) -> dict[str, int]:
        """Dead-lettered records by reason, over all partitions."""
        out: dict[str, int] = {}
        for st in self.partitions.values():
            for k, v in st.invalid.items():
                out[k] = out.get(k, 0) + v
        return out

    def count_invalid(self, partition: int, reasons: list[str]) -> None:
        inv = self.partition(partition).invalid
        for r in reasons:
            inv[r] = inv.get(r, 0) + 1

    # -- state for checkpoints (see checkpoint.py) ---------------------------------------------
    def drop_partition(self, p: int) -> None:
        """Forget a partition's state (after it was revoked: its new owner restores it)."""
        self.partitions.pop(p, None)

    def fingerprint(self) -> list[dict[str, Any]]:
        """What a checkpoint's arrays depend on; a mismatch makes a checkpoint incompatible."""
        return [
            {
                "model": m.name,
                "bucket": m.bucket,
                "ring_buckets": m.ring_buckets,
                "cells": n_cells(m.score_bins),
                "sets": ["&".join(s) for s in m.attribute_sets],
                "n_sets": self.n_sets,
            }
            for m in self.models
        ]

    def export_partition(self, p: int) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
        """(JSON-able metadata, arrays) describing partition ``p`` completely."""
        st = self.partition(p)
        for m, r in enumerate(st.rings):
            r.grow(len(self.registries[m]))  # every registered group has a column
        meta: dict[str, Any] = {
            "fingerprint": self.fingerprint(),
            "counters": st.counters,
            "delay_counts": st.delay_counts.tolist(),
            "delay_sum": st.delay_sum,
            "invalid": st.invalid,
            "watermark": None if not np.isfinite(st.watermark) else st.watermark,
            "heads": [r.head for r in st.rings],
            "firsts": [r.first for r in st.rings],
            "groups": [[list(reg.set_of), list(reg.labels)] for reg in self.registries],
            "overflow": [list(reg.overflow) for reg in self.registries],
        }
        arrays: dict[str, npt.NDArray[Any]] = {"pending": st.pending.data, "early": st.early.data}
        for m, r in enumerate(st.rings):
            arrays[f"counts{m}"] = r.counts
            arrays[f"expired{m}"] = r.expired
            arrays[f"ledger{m}"] = st.ledgers[m].export()
        meta["label_watermark"] = (
            None if not np.isfinite(st.label_watermark) else st.label_watermark
        )
        return meta, arrays

    def import_partition(
        self, p: int, meta: dict[str, Any], arrays: dict[str, npt.NDArray[Any]]
    ) -> None:
        """Restore partition ``p``, remapping group indices onto this engine's registries."""
        if meta["fingerprint"] != self.fingerprint():
            raise ValueError("it was written for a different model configuration")
        st = PartitionState(self.models, self.n_sets)
        remaps = []
        for m, (set_of, labels) in enumerate(meta["groups"]):
            reg = self.registries[m]
            remap = np.array(
                [reg.index(s, lab) for s, lab in zip(set_of, labels, strict=True)], dtype=np.int64
            )
            remaps.append(remap)
            ring = st.rings[m]
            ring.grow(len(reg))
            counts, expired = arrays[f"counts{m}"], arrays[f"expired{m}"]
            if len(np.unique(remap)) == len(remap):
                ring.counts[:, remap] = counts
                ring.expired[remap] = expired
            else:  # groups of the checkpoint that fold into one here (__other__) add up
                for old, new in enumerate(remap.tolist()):
                    ring.counts[:, new] += counts[:, old]
                    ring.expired[new] += expired[old]
            ring.head = meta["heads"][m]
            ring.first = meta.get("firsts", meta["heads"])[m]
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
        st.early.load(arrays["early"])
        st.watermark = -np.inf if meta["watermark"] is None else float(meta["watermark"])
        lw = meta.get("label_watermark")
        st.label_watermark = -np.inf if lw is None else float(lw)
        st.counters.update(meta["counters"])
        if "delay_counts" in meta:
            st.delay_counts = np.array(meta["delay_counts"], dtype=np.int64)
            st.delay_sum = float(meta["delay_sum"])
        st.invalid = dict(meta["invalid"])
        self.partitions[p] = st
