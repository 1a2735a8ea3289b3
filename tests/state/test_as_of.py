"""Counts *as of* a boundary: labels by their own time, whatever the poll batches carried.

The reference is an engine that never saw the labels from after the boundary; the engine under
test got every event, in random interleavings of the two topics (labels before their
predictions, whole label topic first, tiny batches), and through a checkpoint round trip.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from monitor.state.checkpoint import decode, encode
from monitor.state.engine import Engine
from monitor.state.windows import CAL
from tests.helpers import T0, config, label, pred, run

BUCKET = 60


def events(seed: int) -> tuple[list, list]:  # type: ignore[type-arg]
    rng = random.Random(seed)
    preds, labels = [], []
    for i in range(600):
        t = T0 + i * 10  # 100 minutes of predictions
        score = rng.random()
        preds.append((t, pred(f"p{i}", t, "ab"[rng.random() < 0.3], int(score > 0.5), score)))
        if rng.random() < 0.8:
            lt = t + rng.uniform(0, 1800)
            labels.append((lt, label(f"p{i}", lt, int(rng.random() < 0.5))))
    labels.sort(key=lambda x: x[0])
    return preds, labels


def interleaved(preds: list, labels: list, rng: random.Random) -> list[tuple[list, list]]:  # type: ignore[type-arg]
    """Poll batches: each takes a random number of the next predictions and labels."""
    out, i, j = [], 0, 0
    while i < len(preds) or j < len(labels):
        a, b = rng.randint(0, 80), rng.randint(0, 120)
        out.append(([e for _, e in preds[i : i + a]], [e for _, e in labels[j : j + b]]))
        i, j = i + a, j + b
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counts_as_of_a_boundary_leave_out_later_labels(seed: int) -> None:
    cfg = config(windows=["1h"], bucket="1m", score_bins=4)
    preds, labels = events(seed)
    rng = random.Random(seed)
    live = Engine(cfg)
    live.track_label_times = True
    batches = interleaved(preds, labels, rng)
    cut = len(batches) // 2
    for p, lab in batches[:cut]:
        run(live, p, lab)
    restored = Engine(cfg)  # through a checkpoint, half-way
    meta, arrays = decode(encode(*live.export_partition(0)))
    restored.import_partition(0, meta, arrays)
    restored.track_label_times = True
    for p, lab in batches[cut:]:
        run(restored, p, lab)
    kept_out = 0
    for k in range(int(T0 // BUCKET) + 30, int(T0 // BUCKET) + 100, 7):
        ref = Engine(cfg)
        run(ref, [e for _, e in preds], [e for t, e in labels if t < k * BUCKET])
        want = ref.counts_between(0, k - 60, k)
        got = restored.counts_between(0, k - 60, k, as_of=k)
        # the cells alert rules read (decisions and the confusion matrix); calibration is no
        # rule metric and keeps every label
        np.testing.assert_array_equal(got[:, :CAL], want[:, :CAL])
        kept_out += int((restored.counts_between(0, k - 60, k) - got).sum())
    assert kept_out > 0  # the labels after the boundaries were there to leave out


@pytest.mark.parametrize(
    ("label_minutes", "caught_up", "expected"),
    [
        (70, False, 70),  # waits for the labels...
        (20, False, 40),  # ...but at most the lateness (1 h) behind the predictions
        (70, True, 100),  # a drained label topic holds nothing back
        (None, False, 40),  # no label yet: the lateness bound
    ],
)
def test_boundaries_wait_for_labels_at_most_the_lateness(
    label_minutes: int | None, caught_up: bool, expected: int
) -> None:
    from monitor.alerts.evaluator import AlertEvaluator

    cfg = config(windows=["1h"], bucket="1m", lateness="1h")
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine)
    base = int(T0 // BUCKET)
    preds = [pred(f"p{i}", T0 + i * BUCKET, "ab"[i % 2], i % 2) for i in range(101)]
    labs = [] if label_minutes is None else [label("p0", T0 + label_minutes * BUCKET, 1)]
    run(engine, preds, labs)
    ev.advance(lambda p: caught_up)
    assert ev.last[0] - base == expected


@pytest.mark.parametrize("label_time", ["arrival", "prediction"])
def test_a_label_stamped_before_its_prediction_counts_alike_however_the_topics_are_read(
    label_time: str,
) -> None:
    """Found by reviews: a label is known no earlier than its prediction's bucket. Released
    from the early table at its own earlier time, it fell into boundaries already judged; then
    fixed for early labels only, the same label read with or after its prediction kept its own
    time, so in arrival mode its bucket and delay, and in cohort mode the boundary where the
    detectors saw it, depended on the order the two topics were read."""
    from monitor.state.windows import TP

    p, lab = pred("a", T0 + 630, "x", 1), label("a", T0 + 30, 1)  # buckets 10 and 0

    def seen(order: str) -> tuple[Any, ...]:
        e = Engine(config(label_time=label_time, bucket="1m"))
        e.track_label_times = True
        if order == "together":
            run(e, [p], [lab])
        elif order == "label after":
            run(e, [p])
            run(e, [], [lab])
        else:  # the label first: held as early, released by its prediction
            run(e, [], [lab])
            run(e, [p])
        b0 = int(T0 // 60)
        tp = [int(e.counts_between(0, b, b + 1)[:, TP].sum()) for b in range(b0, b0 + 12)]
        known = [int(e.label_arrivals(0, b).sum() > 0) for b in range(b0, b0 + 12)]
        return tp, known, e.label_delays()[1], e.counters()["late_labels"]

    assert seen("together") == seen("label after") == seen("label first")
    tp, known, _, _ = seen("together")
    assert tp.index(1) == 10 and known.index(1) == 11  # its prediction's bucket, known after it
