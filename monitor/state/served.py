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

from monitor.ingest.events import LabelBatch
from monitor.state.attribute_join import (
    AttributeJoin,
    as_predictions,
    per_model,
    without_attributes,
)
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
    for half in (requests, responses):  # a call's half keeps its model busy (app/idle.py)
        st.arrived += np.bincount(half["model"], minlength=len(st.arrived))
    h = st.halves
    met = h.add(requests, responses)
    wait = max(m.lateness + m.bucket for m in engine.models)  # a half's longest wait
    a = st.attributes
    if a is not None:  # some models' decisions wait for their attributes
        stream = np.flatnonzero([m.serving is not None and m.serving.stream for m in engine.models])
        met = [j for joined in met for j in _split(joined, stream, a)]
        if attributes is not None:
            met.append(a.add_attributes(attributes))
        newest = max(st.watermark, h.newest, a.newest)
        if np.isfinite(newest):
            met.append(
                without_attributes(
                    engine.models, engine.registries, a.expire(newest, wait), engine.n_sets
                )
            )
        _counted(st, a.counts)
        st.count_attributes([m.name for m in engine.models], a.outcomes)
        a.outcomes[:] = 0
    engine.apply(p, as_predictions(met, engine.n_sets), labels)
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


def attribute_coverage(engine: Engine) -> dict[str, tuple[int, int, int]]:
    """Per model reading the attributes topic: its decisions counted with and without their
    attributes, and those waiting for them now (summed over this instance's partitions)."""
    out = {m.name: [0, 0, 0] for m in engine.models if m.serving is not None and m.serving.stream}
    index = {m.name: i for i, m in enumerate(engine.models)}
    for st in engine.partitions.values():
        for name, (with_, without) in st.attribute_outcomes.items():
            if name in out:
                out[name][0] += with_
                out[name][1] += without
        if st.attributes is not None and len(st.attributes.decisions):
            waiting = per_model(st.attributes.decisions.data, len(engine.models))
            for name, row in out.items():
                row[2] += int(waiting[index[name]])
    return {name: (a, b, c) for name, (a, b, c) in out.items()}
