"""The status page: ``/`` (a static, dependency-free HTML page) and ``/api/status`` (its data).

Grafana is the full UI; this page is for the demo and for a quick look when Grafana is not at
hand. The data is the report of the snapshot that ``/metrics`` renders (same numbers), the
recent history of the headline disparities at closed bucket boundaries (sparklines), and the
alerts that are firing, with their evidence. A metric the counts cannot measure (selective
labels, :mod:`monitor.metrics.blindness`) carries ``blind`` in the report and the page reads
"blind: selective labels" there, never a (green) number.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from monitor.alerts.evaluator import SeriesPoint
from monitor.alerts.lifecycle import Alert
from monitor.alerts.sinks import alert_json
from monitor.config.rules import AlertRule
from monitor.metrics.registry import bounds
from monitor.outputs.report import build_report
from monitor.state.engine import Snapshot


@dataclass(frozen=True)
class StatusState:
    """What the main loop publishes for the page (read by the HTTP thread, never mutated)."""

    snapshot: Snapshot | None
    series: dict[tuple[str, str, str], list[SeriesPoint]]
    alerts: list[Alert]
    recent: list[dict[str, Any]]  # the latest transitions, newest first (alert_json)
    evidence: tuple[Any, ...] = ()  # the evidence detectors' rows (EvidenceTracker.snapshot)


def page_html() -> bytes:
    return resources.files("monitor").joinpath("static/status.html").read_bytes()


def _bounds(rules: Sequence[AlertRule]) -> dict[str, float]:
    """The bound each metric is judged against: the first configured rule per metric, else
    the registry's default."""
    configured: dict[str, float] = {}
    for r in rules:
        configured.setdefault(r.metric, r.bound)
    return bounds(configured)


def status_json(
    state: StatusState, *, confidence: float, rules: Sequence[AlertRule], now: float
) -> dict[str, Any]:
    """The page's data: per model/window/attribute the groups (only those with predictions
    in the window, as on ``/metrics``), the disparities, their recent history, the alerts."""
    models: dict[str, Any] = {}
    if state.snapshot is not None:
        report = build_report(state.snapshot, confidence=confidence)
        for model, mrep in report["models"].items():
            for wname, w in mrep["windows"].items():
                for attr, a in w["attributes"].items():
                    a["groups"] = {g: r for g, r in a["groups"].items() if r["n"]}
                    a["history"] = [
                        {"t": p.at, "dir": p.dir, "eod": p.eod}
                        for p in state.series.get((model, wname, attr), [])
                    ]
            models[model] = mrep
        counters = report["counters"]
    else:
        counters = {}
    return {
        "generated_at": now,
        "confidence": confidence,
        "bounds": _bounds(rules),
        "models": models,
        "counters": counters,
        "alerts": [alert_json(a) for a in state.alerts],
        "recent_transitions": state.recent,
    }


class StatusEndpoint:
    """``/api/status``: rendered once per published state (scrapes of an idle page are free)."""

    def __init__(
        self,
        source: Callable[[], StatusState],
        *,
        confidence: float,
        rules: Sequence[AlertRule],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.confidence = confidence
        self.rules = rules
        self.clock = clock
        self._cache: tuple[Any, bytes] = (None, b"")

    def __call__(self) -> tuple[bytes, str]:
        state = self.source()
        cached, body = self._cache
        if cached is not state:
            doc = status_json(state, confidence=self.confidence, rules=self.rules, now=self.clock())
            body = json.dumps(doc, allow_nan=False).encode()
            self._cache = (state, body)
        return body, "application/json"
