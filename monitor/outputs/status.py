"""The status page: ``/`` (a static, dependency-free HTML page) and ``/api/status`` (its data).

Grafana is the full UI; this page is for the demo and for a quick look when Grafana is not at
hand. The data is the report of the snapshot that ``/metrics`` renders (same numbers), the
recent history of the headline disparities at closed bucket boundaries (sparklines), and the
alerts that are firing, with their evidence. A metric the counts cannot measure (selective
labels, :mod:`monitor.metrics.blindness`) carries ``blind`` in the report and the page reads
"blind: selective labels" there, never a (green) number.

The evidence detectors' rows (:class:`EvidenceRow`) go out as ``evidence``: per group and
detector the log e-value against its threshold, the state and the expected time to detect, so a
small group's silence reads as "not enough volume yet", not as fairness.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from monitor.alerts.evaluator import SeriesPoint
from monitor.alerts.evidence_alerts import EvidenceRow
from monitor.alerts.lifecycle import Alert
from monitor.alerts.sinks import alert_json
from monitor.config.rules import AlertRule
from monitor.metrics.registry import METRICS, bounds
from monitor.outputs.report import build_report
from monitor.state.engine import Snapshot


@dataclass(frozen=True)
class StatusState:
    """What the main loop publishes for the page (read by the HTTP thread, never mutated)."""

    snapshot: Snapshot | None
    series: dict[tuple[str, str, str], list[SeriesPoint]]
    alerts: list[Alert]
    recent: list[dict[str, Any]]  # the latest transitions, newest first (alert_json)
    evidence: tuple[
        EvidenceRow, ...
    ] = ()  # the evidence detectors' rows (EvidenceTracker.snapshot)
    # wall time the loop published it: what "Updated" shows (stamped at the first view, a
    # stalled loop's old state read as fresh: found by a review); None: the endpoint's clock
    published_at: float | None = None


def page_html() -> bytes:
    return resources.files("monitor").joinpath("static/status.html").read_bytes()


def _bounds(rules: Sequence[AlertRule]) -> dict[str, float]:
    """The bound each metric is judged against: the first configured rule per metric (a rule
    on an alias such as ``equal_opportunity_difference`` bounds its gap, ``tpr_gap``, too),
    else the registry's default."""
    configured: dict[str, float] = {}
    for r in rules:
        configured.setdefault(r.metric, r.bound)
    for r in rules:
        if METRICS[r.metric].attribute in METRICS:  # an alias's gap (not disparate_impact)
            configured.setdefault(METRICS[r.metric].attribute, r.bound)
    return bounds(configured)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def evidence_json(rows: Sequence[EvidenceRow]) -> list[dict[str, Any]]:
    """The evidence rows for the page: non-finite numbers become ``null`` (no data, or a
    detector still warming up); a blind row carries no evidence and no expected time at all
    (its "silence" is not measured, so no number may read as good news)."""
    out = []
    for r in rows:
        blind = r.state.startswith("blind")
        out.append(
            {
                "model": r.model,
                "attribute": r.attribute,
                "group": r.group,
                "detector": r.detector,
                "state": r.state,
                "blind": blind,
                "log_e": None if blind else _finite(r.log_e),
                "log_threshold": _finite(r.log_threshold),
                "expected_seconds": None if blind else _finite(r.expected_seconds),
            }
        )
    return out


def status_json(
    state: StatusState, *, confidence: float, rules: Sequence[AlertRule], now: float
) -> dict[str, Any]:
    """The page's data: per model/window/attribute the groups (only those with predictions
    in the window, as on ``/metrics``), the disparities, their recent history, the alerts, the
    evidence detectors' rows."""
    models: dict[str, Any] = {}
    if state.snapshot is not None:
        report = build_report(state.snapshot, confidence=confidence)
        for model, mrep in report["models"].items():
            for wname, w in mrep["windows"].items():
                for attr, a in w["attributes"].items():
                    a["groups"] = {g: r for g, r in a["groups"].items() if r["n"]}
                    # the rules that judge this card (a rule scoped to other windows or
                    # attribute sets does not colour it: found by a review)
                    a["bounds"] = _bounds([r for r in rules if r.applies(wname, attr)])
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
        "evidence": evidence_json(state.evidence),
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
            at = state.published_at if state.published_at is not None else self.clock()
            doc = status_json(state, confidence=self.confidence, rules=self.rules, now=at)
            body = json.dumps(doc, allow_nan=False).encode()
            self._cache = (state, body)
        return body, "application/json"
