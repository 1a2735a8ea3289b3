"""Counting matched labels: each joined label folded into its model's ring (and, for alert
rules read as of a boundary, into the label-time ledger).

Why apart from ``engine.py``: the engine decides *which* labels count (duplicates, early,
orphans); this decides *where* a counted label goes, which is per model and the subtle part:

* the bucket is the prediction's (``label_time: prediction``, the cohort view) or the label's
  own time's (``label_time: arrival``), never before its prediction's bucket;
* a label whose bucket left the ring is *late*;
* its delay (label time minus the start of its prediction's bucket) feeds the delay histogram;
* the confusion cell follows the stored decision: TP/FP for predicted 1, FN/TN for 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec
from monitor.state.join import NO_SCORE as STORED_NO_SCORE
from monitor.state.partition import DELAY_BOUNDS, PartitionState
from monitor.state.score_cells import NO_SCORE, label_block
from monitor.state.windows import FN, FP, TN, TP


def fold_labels(
    st: PartitionState,
    models: Sequence[ModelSpec],
    entries: npt.NDArray[np.void],
    label: npt.NDArray[np.uint8],
    ts: npt.NDArray[np.float64],
    track_label_times: bool,
) -> None:
    """Count labels ``label`` (their times ``ts``) of the pending predictions ``entries``."""
    lab = label.astype(np.int64)
    for m in np.unique(entries["model"]):
        spec, ring = models[m], st.rings[m]
        sel = np.flatnonzero(entries["model"] == m)
        e = entries[sel]
        y = lab[sel]
        # a label is known no earlier than its prediction's bucket, however it was joined
        t = np.maximum(ts[sel], e["bucket"] * float(spec.bucket))  # (reviews 64, 66)
        if spec.label_time == "prediction":
            bk = e["bucket"]
            late = ~ring.is_live(bk)
            gone = np.zeros(len(bk), dtype=bool)
        else:
            bk = (t // spec.bucket).astype(np.int64)
            late, gone = ring.admit(bk)
        st.count("late_labels", late.sum())
        st.count("labels", (~late).sum())
        delay = np.maximum(t - e["bucket"] * float(spec.bucket), 0.0)
        st.delay_counts += np.bincount(
            np.searchsorted(DELAY_BOUNDS, delay, side="left"), minlength=len(DELAY_BOUNDS) + 1
        )
        st.delay_sum += float(delay.sum())
        pred = e["pred"].astype(np.int64)
        cell = np.where(pred == 1, np.where(y == 1, TP, FP), np.where(y == 1, FN, TN))
        u = np.where(e["score"] == STORED_NO_SCORE, NO_SCORE, e["score"].astype(np.int64))
        cells, weights = label_block(u, pred, y, cell, spec.score_bins)
        k = len(spec.attribute_sets)
        live = ~late & ~gone
        ring.scatter(bk, e["groups"][:, :k], cells, weights, live, gone)
        # Labels counted in their own bucket (label_time: arrival) are never in a window ending
        # before their time: only cohort counting needs the label-time ledger. Alert rules read
        # the confusion cells only (calibration is not a rule metric).
        if track_label_times and spec.label_time == "prediction":
            st.ledgers[m].record(
                ring,
                (t[live] // spec.bucket).astype(np.int64),
                bk[live],
                e["groups"][live, :k],
                cell[live],
            )
