"""Replay: run the engine over recorded prediction and label records in event-time order.

The records are decoded with the same :class:`~monitor.ingest.decoder.Decoder` as the Kafka path and
applied with the same :meth:`Engine.apply`, in batches, so a replay of the events a live
monitor consumed gives the same counts (as long as nothing was late for the live monitor).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Sequence

import numpy as np

from monitor.alerts.evaluator import AlertEvaluator
from monitor.ingest.events import DeadLetter, LabelBatch, PredictionBatch, RawRecord
from monitor.state.engine import Engine

DECODE_CHUNK = 50_000


def _concat_preds(parts: list[PredictionBatch]) -> PredictionBatch:
    if not parts:
        return PredictionBatch()
    return PredictionBatch(
        *(
            np.concatenate([getattr(p, f) for p in parts])
            for f in ("key", "model", "ts", "pred", "score", "groups")
        )
    )


def _concat_labels(parts: list[LabelBatch]) -> LabelBatch:
    if not parts:
        return LabelBatch()
    return LabelBatch(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in ("key", "ts", "label"))
    )


def decode(
    engine: Engine, predictions: Sequence[RawRecord], labels: Sequence[RawRecord]
) -> tuple[PredictionBatch, LabelBatch, list[DeadLetter]]:
    """Decode every record with the engine's decoder (which registers the groups it meets)."""
    dead: list[DeadLetter] = []
    pparts, lparts = [], []
    for i in range(0, len(predictions), DECODE_CHUNK):
        b, d = engine.decoder.decode_predictions(predictions[i : i + DECODE_CHUNK])
        pparts.append(b)
        dead += d
    for i in range(0, len(labels), DECODE_CHUNK):
        lb, d = engine.decoder.decode_labels(labels[i : i + DECODE_CHUNK])
        lparts.append(lb)
        dead += d
    return _concat_preds(pparts), _concat_labels(lparts), dead


def replay(
    engine: Engine,
    predictions: Sequence[RawRecord],
    labels: Sequence[RawRecord],
    *,
    batch_size: int = 10_000,
    progress: Callable[[int, int], None] | None = None,
    evaluator: AlertEvaluator | None = None,
) -> list[DeadLetter]:
    """Apply all records to partition 0 in event-time order; return the dead letters.

    With an ``evaluator``, alert rules are evaluated at every closed bucket on the way (a
    backtest: its ``history`` holds the transitions the live monitor would have produced).
    """
    preds, labs, dead = decode(engine, predictions, labels)
    engine.count_invalid(0, [d.reason.value for d in dead])
    # stable sort on time; predictions before labels at equal times
    ts = np.concatenate([preds.ts, labs.ts])
    order = np.argsort(ts, kind="stable")
    n_pred = len(preds)
    total = len(order)
    cuts = set(range(0, total, batch_size))
    if evaluator is not None and total and engine.models:
        # the rules judge every bucket as the stream reaches it, whatever --batch-size: a batch
        # spanning more than lateness moved the rings past windows not yet judged
        step = min(spec.bucket for spec in engine.models)
        crossed = np.flatnonzero(np.diff(np.floor_divide(ts[order], step))) + 1
        cuts.update(crossed.tolist())
    bounds = [*sorted(cuts), total]
    for start, stop in itertools.pairwise(bounds):
        chunk = order[start:stop]
        pi = chunk[chunk < n_pred]
        li = chunk[chunk >= n_pred] - n_pred
        engine.apply(0, preds.take(pi), labs.take(li))
        if evaluator is not None:
            evaluator.advance()
        if progress is not None:
            progress(stop, total)
    return dead


def stderr_progress(done: int, total: int) -> None:
    """A one-line progress bar on stderr when it is a terminal."""
    if not sys.stderr.isatty() or total == 0:
        return
    width = 30
    filled = width * done // total
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} events")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
