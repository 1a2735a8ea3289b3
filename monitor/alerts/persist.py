"""The alert evaluator's state as an explicit, versioned JSON document (no pickle).

Why persisted: a restart must not re-page alerts that were firing (the lifecycle book), must not
re-evaluate boundaries already judged (``last``), and must not lose a drift detector's baseline
and the evidence it has gathered (a restarted detector would be blind for ``min_values`` hours).
Why a schema: a pickle ties the checkpoint to this code's classes and module paths (the package
layout moved; river's ADWIN is a Rust object) and runs code when read.

The checkpoint stores this document in the same SQLite transaction as the partition rows it was
evaluated from (``Monitor.checkpoint``); the service restores it at start. Version 1::

    {"version": 1,
     "last": [[model_index, bucket], ...],          # last evaluated boundary per model
     "alerts": [{name, labels, state, since, at, value, annotations}, ...],
     "quiet": [[[model, attribute, metric], n], ...],
     "trackers": [{key, metric, detector, history, warmup, warmup_se, baseline, scale, seen,
                   fed}, ...]}

A drift detector (river's Page-Hinkley or ADWIN) is not serialised field by field: its state is
a pure function of the values it was fed since it last restarted, so those values (``fed``) are
stored and replayed into a new detector on restore. A tracker whose detector kind no longer
matches the configuration starts afresh.
"""

from __future__ import annotations

import json
import math
from collections import deque
from typing import Literal

import msgspec

from monitor.alerts.drift import DriftTracker
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.lifecycle import Alert, AlertBook

VERSION = 1


class AlertStateError(ValueError):
    """The stored alert state cannot be used: unknown version, not this schema, damaged."""


class AlertState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    labels: dict[str, str]
    state: Literal["pending", "firing", "resolved"]
    since: float
    at: float
    value: float
    annotations: dict[str, str] = {}


class TrackerState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    key: tuple[str, str, str]  # (model, attribute, metric)
    metric: str
    detector: str
    history: list[tuple[float, float]]
    warmup: list[float]
    warmup_se: list[float]
    baseline: float
    scale: float
    seen: int
    fed: list[float]  # values fed to the current detector (after the warm-up, raw)


class EvaluatorState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    last: list[tuple[int, int]]
    alerts: list[AlertState]
    quiet: list[tuple[tuple[str, str, str], int]]
    trackers: list[TrackerState]


def tracker_to_state(key: tuple[str, str, str], t: DriftTracker) -> TrackerState:
    return TrackerState(
        key=key,
        metric=t.metric,
        detector=t.spec.detector,
        history=list(t.history),
        warmup=list(t.warmup),
        warmup_se=list(t.warmup_se),
        baseline=t.baseline,
        scale=t.scale,
        seen=t.seen,
        fed=list(t.fed),
    )


def tracker_from_state(t: DriftTracker, s: TrackerState) -> DriftTracker:
    """Fill a new tracker (built from the current config) with the saved state."""
    t.history = deque(s.history, maxlen=t.history.maxlen)
    t.warmup, t.warmup_se = list(s.warmup), list(s.warmup_se)
    t.baseline, t.scale, t.seen = s.baseline, s.scale, s.seen
    t.fed = []
    for value in s.fed:  # the detector's state is what it was fed since it (re)started
        t._feed(value)
    return t


def _text(d: dict[str, str]) -> dict[str, str]:
    return {str(k): str(v) for k, v in d.items()}  # the schema's type, whatever a caller put


def to_state(ev: AlertEvaluator) -> EvaluatorState:
    return EvaluatorState(
        version=VERSION,
        last=sorted(ev.last.items()),
        alerts=[
            AlertState(
                a.name, _text(a.labels), a.state, a.since, a.at, a.value, _text(a.annotations)
            )
            for a in ev.book.active.values()
        ],
        quiet=sorted(ev.drift_quiet.items()),
        trackers=[tracker_to_state(k, t) for k, t in sorted(ev.trackers.items())],
    )


def from_state(ev: AlertEvaluator, s: EvaluatorState) -> None:
    """Replace the evaluator's state by ``s`` (everything built first: all or nothing)."""
    book = AlertBook()
    for a in s.alerts:
        alert = Alert(a.name, dict(a.labels), a.state, a.since, a.at, a.value, dict(a.annotations))
        book.active[alert.key] = alert
    drift = ev.spec.drift
    trackers = {
        t.key: tracker_from_state(DriftTracker(drift, t.metric), t)
        for t in s.trackers
        if t.detector == drift.detector
    }
    ev.book, ev.last, ev.trackers = book, dict(s.last), trackers
    ev.drift_quiet = {k: n for k, n in s.quiet}


def encode(state: EvaluatorState) -> str:
    """JSON text (NaN kept as the JSON extension ``NaN``: a metric can be undefined)."""
    return json.dumps(msgspec.to_builtins(state), separators=(",", ":"))


def dumps(ev: AlertEvaluator) -> str:
    """The evaluator's state as stored."""
    return encode(to_state(ev))


def loads(text: str) -> EvaluatorState:
    """Parse and validate stored text; :class:`AlertStateError` says what is wrong with it."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise AlertStateError(
            "alert state is not JSON (written by a monitor before schema version 1?)"
        ) from None
    version = doc.get("version") if isinstance(doc, dict) else None
    if version != VERSION:
        raise AlertStateError(f"alert state has version {version!r}, this monitor reads {VERSION}")
    try:
        state = msgspec.convert(doc, EvaluatorState)
    except msgspec.ValidationError as exc:
        raise AlertStateError(
            f"alert state does not match schema version {VERSION}: {exc}"
        ) from None
    if any(not math.isfinite(a.since) or not math.isfinite(a.at) for a in state.alerts):
        raise AlertStateError("alert state has an alert without a finite time")
    return state


def restore(ev: AlertEvaluator, text: str | None) -> None:
    """Load stored text (None: nothing stored, the evaluator keeps its fresh state)."""
    if text is not None:
        from_state(ev, loads(text))
