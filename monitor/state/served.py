"""A serving stack's halves into the engine: join each partition's requests and responses
(``halves.py``), the decisions of models whose attributes come on a stream of their own with
those (``attribute_join.py``), count what the joins did, and apply the decisions that met as
predictions.

A half waits until the other kind's clock is the models' lateness (plus a bucket) past it, and
never longer than its decision's bucket stays in the window ring on its own kind's clock; then
an unanswered request or an orphan response is counted (and an orphan response's record
dead-lettered by the caller), never silently dropped.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.attribute_join import AttributeJoin
from monitor.state.engine import Engine
from monitor.state.halves import Joined
from monitor.state.partition import PartitionState


def apply_served(
    engine: Engine,
    p: int,
    requests: npt.NDArray[Any],
    responses: npt.NDArray[Any],
    labels: LabelBatch,
    attributes: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Returns the responses that will never meet their request (``RESPONSE_DTYPE`` rows:
    the caller dead-letters their records)."""
    st = engine.partition(p)
    h = st.halves
    met = [h.add_responses(responses), h.add_requests(requests)]
    wait = max(m.lateness + m.bucket for m in engine.models)  # a half's longest wait
    a = st.attributes
    if a is not None:  # some models' decisions wait for their attributes
        stream = np.flatnonzero([m.serving is not None and m.serving.stream for m in engine.models])
        met = [j for joined in met for j in _split(joined, stream, a)]
        if attributes is not None:
            met.append(a.add_attributes(attributes))
        newest = max(st.watermark, h.newest, a.newest)
        if np.isfinite(newest):
            met.append(_without_attributes(engine, a.expire(newest, wait)))
        _counted(st, a.counts)
    engine.apply(p, _predictions(met, engine.n_sets), labels)
    hold = min((m.ring_buckets - 2) * m.bucket for m in engine.models)  # still in the ring
    h.expire(wait, max(wait, hold))
    _counted(st, h.counts)
    return h.take_orphans()


def _counted(st: PartitionState, counts: Counter[str]) -> None:
    for name, n in counts.items():
        st.count(name, n)
    counts.clear()


def _split(joined: Joined, stream: npt.NDArray[np.int64], a: AttributeJoin) -> list[Joined]:
    """Decisions of models reading the attributes stream wait for them; the rest go on."""
    waits = np.isin(joined.model, stream)
    if not waits.any():
        return [joined]
    return [_rows(joined, ~waits), a.add_decisions(_rows(joined, waits))]


def _rows(j: Joined, mask: npt.NDArray[np.bool_]) -> Joined:
    return Joined(
        j.key[mask], j.ts[mask], j.model[mask], j.pred[mask], j.score[mask], j.groups[mask]
    )


def _without_attributes(engine: Engine, rows: npt.NDArray[Any]) -> Joined:
    """Decisions released without attributes, in each model's ``__missing__`` groups."""
    groups = np.full((len(rows), engine.n_sets), -1, dtype=np.int32)
    for m in np.unique(rows["model"]).tolist():
        at = rows["model"] == m
        n = int(at.sum())
        attrs = engine.models[m].attributes
        enc = engine.registries[m].encode([[None] * n for _ in attrs])
        groups[np.flatnonzero(at)[:, None], np.arange(enc.shape[1])] = enc
    return Joined(rows["key"], rows["ts"], rows["model"], rows["pred"], rows["score"], groups)


def _predictions(met: list[Joined], n_sets: int) -> PredictionBatch:
    """The joined decisions in request-time order (as a producer would have sent them)."""
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
