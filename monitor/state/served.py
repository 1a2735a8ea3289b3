"""A serving stack's halves into the engine: join each partition's requests and responses
(``halves.py``), count what the join did, and apply the decisions that met as predictions.

Halves wait at most the models' lateness past the newest time seen (of a decision or a half) (a response later than
that would find its decision's bucket closed anyway); then an unanswered request or an orphan
response is counted, never silently dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine
from monitor.state.halves import Joined


def apply_served(
    engine: Engine,
    p: int,
    requests: npt.NDArray[Any],
    responses: npt.NDArray[Any],
    labels: LabelBatch,
) -> None:
    st = engine.partition(p)
    h = st.halves
    met = [h.add_responses(responses), h.add_requests(requests)]
    engine.apply(p, _predictions(met, engine.n_sets), labels)
    newest = max(st.watermark, h.newest)  # halves move time on even when none meet
    if np.isfinite(newest):
        h.expire(newest - max(m.lateness + m.bucket for m in engine.models))
    for name, n in h.counts.items():
        st.count(name, n)
    h.counts.clear()


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
