"""Decisions joined with their protected attributes from a separate stream (issue 16).

For a model whose attributes are not model inputs (``input.attributes: stream``), a decision
(its request and response met in ``halves.py``) waits for the attribute record with its id
(``ingest/attribute_events.py``), and an attribute record waits for its decision; the same
bounded, checkpointed machinery as the other joins: two :class:`SortedTable` tables keyed by
the 64-bit key of the decision id, matched with one ``searchsorted`` per batch.

A decision waits until the attributes stream is ``attributes_ttl`` past it (event time, the
newest attribute record of the partition: the two topics are read at their own pace, so the
decisions' own clock would release decisions whose attributes are merely further back in the
other topic), and on the decisions' clock never longer than its model's ring holds its
bucket (``hold``: the longest window plus the lateness; this bounds the wait when the
attributes stream stalls, and is the most a backlog read at the two topics' own pace may skew
them), nor past ``max_size`` waiting decisions. Then it is released *without* attributes, into the
``__missing__`` groups, and counted (``unattributed_decisions``), never dropped:
``fairness_attribute_coverage_ratio`` is the share that had them. An attribute record waits as
long as a request waits for its response on the decisions' clock (its decision may still be
forming), then is counted as an orphan. Repeats of a waiting key are counted and dropped (the first is kept).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec
from monitor.ingest.events import PredictionBatch
from monitor.ingest.groups import GroupRegistry
from monitor.state.halves import Joined
from monitor.state.join import SortedTable, fresh_rows, take_rows

DECISION_DTYPE = np.dtype(
    [
        ("key", np.uint64),
        ("ts", np.float64),
        ("model", np.uint16),
        ("score", np.float64),
        ("pred", np.uint8),
    ]
)
COUNTS = (
    "attributed_decisions",  # released with their attributes
    "unattributed_decisions",  # released without them (TTL, or the table full)
    "repeated_attributes",  # a second record for a decision whose first still waits
    "orphan_attributes",  # never met their decision (expired or evicted)
)


class AttributeJoin:
    """Decisions and attribute records waiting for each other, per input partition."""

    def __init__(
        self,
        attribute_dtype: np.dtype[Any],
        ttls: npt.ArrayLike,
        holds: npt.ArrayLike,
        *,
        max_size: int,
    ) -> None:
        self.decisions = SortedTable(DECISION_DTYPE, max_size=max_size, age_field="ts")
        self.attributes = SortedTable(attribute_dtype, max_size=max_size, age_field="ts")
        self.ttls = np.asarray(ttls, dtype=np.float64)  # per model, seconds
        self.holds = np.asarray(holds, dtype=np.float64)  # per model, seconds
        self.counts: Counter[str] = Counter()
        # per model, decisions released with and without attributes (drained like ``counts``)
        self.outcomes = np.zeros((len(self.ttls), 2), dtype=np.int64)
        self.newest = -np.inf  # the newest decision's time
        self.newest_attributes = -np.inf  # the attributes stream's clock
        self.released: list[npt.NDArray[Any]] = []  # decisions going on without attributes

    def add_decisions(self, joined: Joined) -> Joined:
        """Decisions (their groups unset): those whose attributes wait are returned with them."""
        rows = np.zeros(len(joined), dtype=DECISION_DTYPE)
        for name in DECISION_DTYPE.names or ():
            rows[name] = getattr(joined, name)
        if len(rows):
            self.newest = max(self.newest, float(rows["ts"].max()))
        rows, repeats = fresh_rows(rows, self.decisions)
        self.counts["duplicate_predictions"] += repeats  # as the engine counts them
        idx = self.attributes.find(rows["key"])
        hit = idx >= 0
        self._release(self.decisions.insert(rows[~hit]))
        return self._met(rows[hit], take_rows(self.attributes, idx[hit]))

    def add_attributes(self, rows: npt.NDArray[Any]) -> Joined:
        """Attribute records: the decisions waiting for them are returned with their groups."""
        if len(rows):
            self.newest_attributes = max(self.newest_attributes, float(rows["ts"].max()))
        rows, repeats = fresh_rows(rows, self.attributes)
        self.counts["repeated_attributes"] += repeats
        idx = self.decisions.find(rows["key"])
        hit = idx >= 0
        self.counts["orphan_attributes"] += len(self.attributes.insert(rows[~hit]))
        return self._met(take_rows(self.decisions, idx[hit]), rows[hit])

    def expire(self, newest: float, attribute_wait: float) -> npt.NDArray[Any]:
        """Release the decisions the attributes stream is their model's TTL past, or the
        decisions' clock ``newest`` its hold (and those evicted since the last call); drop
        the attribute records ``attribute_wait`` older than ``newest``. The decisions
        released, to be counted without attributes."""
        if len(self.decisions):
            d = self.decisions.data
            m = d["model"]
            old = (d["ts"] < self.newest_attributes - self.ttls[m]) | (
                d["ts"] < newest - self.holds[m]
            )
            self._release(self.decisions.remove_mask(old))
        if len(self.attributes):
            old = self.attributes.data["ts"] < newest - attribute_wait
            self.counts["orphan_attributes"] += len(self.attributes.remove_mask(old))
        out = np.concatenate(self.released) if self.released else np.zeros(0, DECISION_DTYPE)
        self.released = []
        self.counts["unattributed_decisions"] += len(out)
        self.outcomes[:, 1] += per_model(out, len(self.outcomes))
        return out

    def _release(self, rows: npt.NDArray[Any]) -> None:
        if len(rows):
            self.released.append(rows)

    def _met(self, decided: npt.NDArray[Any], attrs: npt.NDArray[Any]) -> Joined:
        """Decisions and their attribute records, row for row: each takes its model's groups."""
        assert np.array_equal(decided["key"], attrs["key"])
        self.counts["attributed_decisions"] += len(decided)
        self.outcomes[:, 0] += per_model(decided, len(self.outcomes))
        groups = attrs["groups"][np.arange(len(attrs)), decided["model"].astype(np.int64)]
        return Joined(
            decided["key"].copy(),
            decided["ts"].copy(),
            decided["model"].copy(),
            decided["pred"].copy(),
            decided["score"].copy(),
            np.ascontiguousarray(groups, dtype=np.int32),
        )


def per_model(rows: npt.NDArray[Any], n_models: int) -> npt.NDArray[np.int64]:
    """How many of the decision ``rows`` each model made."""
    return np.bincount(rows["model"].astype(np.intp), minlength=n_models)


def without_attributes(
    models: Sequence[ModelSpec],
    registries: Sequence[GroupRegistry],
    rows: npt.NDArray[Any],
    n_sets: int,
) -> Joined:
    """Decisions released without attributes (``DECISION_DTYPE`` rows), in each model's
    ``__missing__`` groups."""
    groups = np.full((len(rows), n_sets), -1, dtype=np.int32)
    for m in np.unique(rows["model"]).tolist():
        at = rows["model"] == m
        n = int(at.sum())
        enc = registries[m].encode([[None] * n for _ in models[m].attributes])
        groups[np.flatnonzero(at)[:, None], np.arange(enc.shape[1])] = enc
    return Joined(rows["key"], rows["ts"], rows["model"], rows["pred"], rows["score"], groups)


def as_predictions(met: Sequence[Joined], n_sets: int) -> PredictionBatch:
    """Joined decisions in request-time order (as a producer would have sent them)."""
    ts = np.concatenate([j.ts for j in met])
    order = np.argsort(ts, kind="stable")
    groups = np.concatenate([j.groups for j in met]) if len(ts) else np.zeros((0, n_sets), np.int32)
    return PredictionBatch(
        key=np.concatenate([j.key for j in met])[order],
        model=np.concatenate([j.model for j in met])[order],
        ts=ts[order],
        pred=np.concatenate([j.pred for j in met])[order],
        score=np.concatenate([j.score for j in met])[order],
        groups=groups[order].astype(np.int32),
    )
