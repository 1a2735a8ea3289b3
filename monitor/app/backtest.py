"""The backtest behind ``replay`` and ``report``: recorded events (JSONL files, or CSV cases with
a column mapping) through the engine and the alert evaluator, in event-time order, giving the
report, the dead letters, and when each alert would have fired and resolved.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.sinks import alert_json
from monitor.app.replay import replay, stderr_progress
from monitor.config.spec import Config, ConfigError
from monitor.ingest.events import DeadLetter, RawRecord
from monitor.ingest.file import load_csv_mapping, read_csv, read_jsonl
from monitor.outputs.report import build_report
from monitor.outputs.timeline import attach
from monitor.state.engine import Engine


def read_inputs(
    cfg: Config,
    *,
    predictions: Sequence[str],
    labels: Sequence[str] = (),
    csv: Sequence[str] = (),
    csv_mapping: str | None = None,
    excluded: list[int] | None = None,
    dead: list[DeadLetter] | None = None,
    now: float | None = None,
) -> tuple[list[RawRecord], list[RawRecord]]:
    """The raw prediction and label records of the named JSONL and CSV files (``replay``,
    ``report`` and ``gate`` read them the one way); ``excluded`` gets the number of CSV rows
    the mapping's ``where`` left out, per file (an audit says how many cases it did not see);
    ``dead``, the CSV rows that could not be read (else the first one stops the reading);
    ``now``, the time the data is judged at (default: the clock)."""
    if not (predictions or csv):
        raise ConfigError("", "give --predictions FILE or --csv FILE")
    preds: list[RawRecord] = []
    labs: list[RawRecord] = []
    for path in predictions:
        preds.extend(read_jsonl(path))
    for path in labels:
        labs.extend(read_jsonl(path))
    if csv:
        if not csv_mapping:
            raise ConfigError("", "--csv needs --csv-mapping")
        mapping = load_csv_mapping(csv_mapping)
        binned = frozenset(a.name for m in cfg.models.values() for a in m.attributes if a.bins)
        for path in csv:
            # the decoder's bound on event times
            latest = (time.time() if now is None else now) + cfg.max_future
            p, lab, skipped = read_csv(
                path, mapping, cfg.fields, numeric=binned, dead=dead, latest=latest
            )
            if excluded is not None:
                excluded.append(skipped)
            preds += p
            labs += lab
    return preds, labs


def replay_files(
    cfg: Config,
    *,
    predictions: Sequence[str],
    labels: Sequence[str] = (),
    csv: Sequence[str] = (),
    csv_mapping: str | None = None,
    batch_size: int = 10_000,
    series_points: int | None = 0,
    timeline: str | None = None,
    now: float | None = None,
) -> tuple[dict[str, Any], list[DeadLetter], AlertEvaluator]:
    """Replay the named files: the report (with the backtest's alerts), dead letters, evaluator.

    ``timeline``: write every closed boundary's disparities and evidence there as JSON lines
    (``outputs/timeline.py``), streamed as the evaluator goes. ``now``: the time the data is
    judged at (what ``max_future`` counts from), instead of the clock: a rerun reads the same."""
    excluded: list[int] = []
    unread: list[DeadLetter] = []  # CSV rows that could not be read: dead letters too
    preds, labs = read_inputs(
        cfg,
        predictions=predictions,
        labels=labels,
        csv=csv,
        csv_mapping=csv_mapping,
        excluded=excluded,
        dead=unread,
        now=now,
    )
    engine = Engine(cfg) if now is None else Engine(cfg, clock=lambda: now)
    evaluator = AlertEvaluator(cfg, engine, series_points=series_points)
    warnings: list[str] = []  # what the report should say about the data
    with contextlib.ExitStack() as stack:
        if timeline is not None:
            attach(evaluator, stack.enter_context(open(timeline, "wb")), cfg)
        dead = unread + replay(
            engine,
            preds,
            labs,
            batch_size=batch_size,
            progress=stderr_progress,
            evaluator=evaluator,
            warnings=warnings,
        )
        evaluator.on_boundary = None
    report = build_report(
        engine.snapshot(),
        confidence=cfg.confidence,
        invalid=dict(Counter(d.reason.value for d in dead)),
        audit=True,
    )
    if csv:
        report["csv_rows_excluded"] = sum(excluded)  # by the mapping's where: never seen
    report["warnings"] = warnings
    # the backtest: when each alert would have fired and resolved, with its evidence
    report["alerts"] = [
        alert_json(t.alert) for t in evaluator.history if t.alert.state != "pending"
    ]
    return report, dead, evaluator


def write_dead_letters(path: str, dead: list[DeadLetter]) -> None:
    """The dead-lettered records as JSONL: reason, detail, source, offset and the raw value."""
    with open(path, "w", encoding="utf-8") as fh:
        for d in dead:
            raw = d.record.value
            # bytes that are not UTF-8 kept as \xNN (a CSV row dead-lettered for them)
            text = (
                raw.decode("utf-8", "backslashreplace")
                if isinstance(raw, bytes)
                else json.dumps(raw)
            )
            fh.write(
                json.dumps(
                    {
                        "reason": d.reason.value,
                        "detail": d.detail,
                        "source": d.record.topic,
                        "offset": d.record.offset,
                        "value": text,
                    }
                )
                + "\n"
            )
