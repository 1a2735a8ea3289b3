"""Reports read from a run's checkpoint instead of from the input topics: the ``status``
command's report (with the offsets each partition had reached) and the data of the ``report``
command's audit.

A checkpoint holds the engine's state per partition; restoring it into a fresh engine gives
the same snapshot the running monitor would publish. The checkpoint is a SQLite file (no broker
needed) or, with ``checkpoint.store: kafka``, the state topic, read without writing to it
(``stores.open_for_reading``): safe beside running replicas. ``path`` names a SQLite file and
overrides the configured store; None reads the configured one.
"""

from __future__ import annotations

from typing import Any

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.receivers import alert_json
from monitor.config.durations import iso_utc
from monitor.config.spec import Config
from monitor.outputs.report import build_report
from monitor.state.checkpoint import CheckpointError
from monitor.state.engine import Engine
from monitor.state.stores import StateStore, open_for_reading


def restore(cfg: Config, store: StateStore) -> tuple[Engine, dict[str, Any]]:
    """The engine state (and offsets) held in a run's checkpoint."""
    engine = Engine(cfg)
    offsets = {}
    parts = store.partitions()
    for p in parts:
        cp = store.load(p, parts)  # the state topic: one read for all
        if cp is None:  # gone since the partitions were listed
            continue
        try:
            engine.import_partition(p, cp.meta, cp.arrays)
        except (KeyError, TypeError, IndexError) as exc:  # a row that decodes, malformed
            raise CheckpointError(f"checkpoint partition {p} is damaged ({exc!r})") from None
        offsets[str(p)] = cp.offsets
    return engine, offsets


def status_report(cfg: Config, path: str | None = None) -> dict[str, Any]:
    """``status``: the report of the checkpoint's state, with its offsets."""
    store = open_for_reading(cfg.checkpoint, cfg.kafka, path)
    try:
        engine, offsets = restore(cfg, store)
    finally:
        store.close()
    report = build_report(
        engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid, audit=True
    )
    report["offsets"] = offsets
    return report


def checkpoint_audit(cfg: Config, path: str | None = None) -> tuple[dict[str, Any], AlertEvaluator]:
    """``report --checkpoint``: the report with the alerts firing when the checkpoint was
    written, and an evaluator holding the retained span's history (evaluated afresh)."""
    store = open_for_reading(cfg.checkpoint, cfg.kafka, path)
    try:
        engine, _ = restore(cfg, store)
        alerts = store.load_alerts()
    finally:
        store.close()
    saved = AlertEvaluator(cfg, engine)
    persist.restore(saved, alerts)
    # a firing alert keeps the time it fired, but its value and notes are those of the last
    # boundary judged: said so, not passed off as the firing time's (found by a review)
    judged = {spec.name: saved.last[m] * spec.bucket for m, spec in enumerate(engine.models)
              if m in saved.last}  # fmt: skip
    fired = [
        alert_json(a) | as_of(judged.get(a.labels.get("model", ""))) for a in saved.book.firing()
    ]
    # the history of the retained span: its closed boundaries, evaluated afresh
    evaluator = AlertEvaluator(cfg, engine, series_points=None)
    evaluator.advance()
    report = build_report(
        engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid, audit=True
    )
    report["alerts"] = fired
    return report, evaluator


def as_of(at: float | None) -> dict[str, str]:
    """``{"numbers_as_of": iso time}`` of an alert's refreshed numbers (none: unknown)."""
    return {} if at is None else {"numbers_as_of": iso_utc(at)}
