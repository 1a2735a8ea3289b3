"""Reports read from a run's checkpoint instead of from Kafka: the ``status`` command's report
(with the offsets each partition had reached) and the data of the ``report`` command's audit.

A checkpoint holds the engine's state per partition; restoring it into a fresh engine gives
the same snapshot the running monitor would publish, so these reports need no broker.
"""

from __future__ import annotations

from typing import Any

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.sinks import alert_json
from monitor.config.spec import Config
from monitor.outputs.report import build_report
from monitor.state.checkpoint import CheckpointStore
from monitor.state.engine import Engine


def restore(cfg: Config, path: str) -> tuple[Engine, dict[str, Any], CheckpointStore]:
    """The engine state (and offsets, and the store) held in a run's checkpoint."""
    engine = Engine(cfg)
    store = CheckpointStore(path)
    offsets = {}
    for p in store.partitions():
        cp = store.load(p)
        assert cp is not None
        engine.import_partition(p, cp.meta, cp.arrays)
        offsets[str(p)] = cp.offsets
    return engine, offsets, store


def status_report(cfg: Config, path: str) -> dict[str, Any]:
    """``status``: the report of the checkpoint's state, with its offsets."""
    engine, offsets, _ = restore(cfg, path)
    report = build_report(
        engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid, audit=True
    )
    report["offsets"] = offsets
    return report


def checkpoint_audit(cfg: Config, path: str) -> tuple[dict[str, Any], AlertEvaluator]:
    """``report --checkpoint``: the report with the alerts firing when the checkpoint was
    written, and an evaluator holding the retained span's history (evaluated afresh)."""
    engine, _, store = restore(cfg, path)
    saved = AlertEvaluator(cfg, engine)
    persist.restore(saved, store.load_alerts())
    fired = [alert_json(a) for a in saved.book.firing()]
    # the history of the retained span: its closed boundaries, evaluated afresh
    evaluator = AlertEvaluator(cfg, engine, series_points=None)
    evaluator.advance()
    report = build_report(
        engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid, audit=True
    )
    report["alerts"] = fired
    return report, evaluator
