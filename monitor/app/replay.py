"""Replay: run the engine over recorded prediction and label records in event-time order.

The records are decoded with the same :class:`~monitor.ingest.decoder.Decoder` as the Kafka path and
applied with the same :meth:`Engine.apply`, in batches, so a replay of the events a live
monitor consumed gives the same counts (as long as nothing was late for the live monitor).
"""

from __future__ import annotations

import itertools
import sys
import time
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


def far_ahead(engine: Engine, preds: PredictionBatch, *, share: float = 0.01) -> list[str]:
    """Per model, a warning when its newest predictions come after a gap longer than the ring
    (the longest window with its lag, plus lateness) and are fewer than ``share`` of all: the
    report's windows end at them and hold them alone (one row with a mistyped year empties the
    whole report). Counted as they are: a pause in the data looks the same, only the user can
    tell (live, the record's Kafka time bounds such an outlier; a file has no second clock)."""
    out = []
    for m, spec in enumerate(engine.models):
        ts = np.sort(preds.ts[preds.model == m])
        span = spec.ring_buckets * spec.bucket
        gaps = np.flatnonzero(np.diff(ts) > span)
        if not len(gaps) or len(ts) - (cut := int(gaps[-1]) + 1) >= share * len(ts):
            continue
        days = (ts[cut] - ts[cut - 1]) / 86400
        out.append(
            f"model {spec.name}: the newest {len(ts) - cut} of {len(ts)} predictions (from "
            f"{_day(ts[cut])}) come {days:,.0f} days after the others (to {_day(ts[cut - 1])}), "
            f"more than the windows and lateness span: every window ends at them and holds "
            f"them alone. Check their timestamps; leave them out to judge the rest."
        )
    return out


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))


def replay(
    engine: Engine,
    predictions: Sequence[RawRecord],
    labels: Sequence[RawRecord],
    *,
    batch_size: int = 10_000,
    progress: Callable[[int, int], None] | None = None,
    evaluator: AlertEvaluator | None = None,
    warnings: list[str] | None = None,
) -> list[DeadLetter]:
    """Apply all records to partition 0 in event-time order; return the dead letters.

    With an ``evaluator``, alert rules are evaluated at every closed bucket on the way (a
    backtest: its ``history`` holds the transitions the live monitor would have produced).
    ``warnings`` gets what the report should say about the data (:func:`far_ahead`).
    """
    preds, labs, dead = decode(engine, predictions, labels)
    if warnings is not None:
        warnings += far_ahead(engine, preds)
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
    if evaluator is not None and warnings is not None:
        warnings += unjudged(engine, evaluator, preds, labs)
    return dead


def unjudged(
    engine: Engine, evaluator: AlertEvaluator, preds: PredictionBatch, labs: LabelBatch
) -> list[str]:
    """What the backtest's alerts did not judge, when it matters (5 % of the labels or more):
    a boundary closes when predictions pass it, so labels that came after the last one are in
    the tables but judged by no rule or detector (found by a review: COMPAS's outcomes come two
    years after its last screening, and the report said "No alert fired" beside a significant
    equalized-odds gap). The live monitor judges them as later predictions close those buckets."""
    model = np.full(len(labs), -1)  # each label's model: its prediction's (none: -1)
    if len(preds):
        order = np.argsort(preds.key, kind="stable")
        at = np.minimum(np.searchsorted(preds.key, labs.key, sorter=order), len(order) - 1)
        hit = preds.key[order[at]] == labs.key
        model[hit] = preds.model[order[at]][hit]
    out = []
    for m, spec in enumerate(engine.models):
        last, mine = evaluator.last.get(m), labs.ts[model == m]
        if last is None or not len(mine):
            continue
        through = last * spec.bucket
        late = int((mine >= through).sum())
        if late >= 0.05 * len(mine):
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(through))
            out.append(
                f"model {spec.name}: {late:,} of its {len(mine):,} labels ({late / len(mine):.0%})"
                f" came after {when}, the last boundary its predictions closed: they are in the "
                "tables, but no alert rule or detector judged them"
            )
    return out


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
