"""The alert evaluator's state as an explicit, versioned JSON document (no pickle).

Why persisted: a restart must not re-page alerts that were firing (the lifecycle book), must not
re-evaluate boundaries already judged (``last``), and must not lose a drift detector's baseline
and the evidence it has gathered (a restarted detector would be blind for ``min_values`` hours).
Why a schema: a pickle ties the checkpoint to this code's classes and module paths (the package
layout moved; river's ADWIN is a Rust object) and runs code when read.

The checkpoint stores this document in the same SQLite transaction as the partition rows it was
evaluated from (``Monitor.checkpoint``); the service restores it at start. Version 4::

    {"version": 4,
     "last": [[model_index, bucket], ...],          # last evaluated boundary per model
     "alerts": [{name, labels, state, since, at, value, annotations}, ...],
     "quiet": [[[model, attribute, metric], n], ...],
     "trackers": [{key, metric, detector, history, warmup, warmup_se, baseline, scale, seen,
                   fed}, ...],
     "evidence": [{model, sets, labels, refs, first, pool_block,
                   arrays: {name: {dtype, shape, data}}}, ...],
     "owed": [{name, labels, state, since, at, value, annotations}, ...],
     "owed_sinks": [[sink, ...], ...]}      # [] : every sink

``owed``: the notifications judged before the checkpoint and not yet known delivered to every
sink (the newest state of each alert), sent again after a restart to the sinks that still owe it
(``owed_sinks``, one list per ``owed`` entry): a page owed through a receiver's outage survives
the restart (delivered twice at worst, with one notification id), and a sink that had it does not
get it again at every restart while another is down (found by a review: a crash loop during an
Alertmanager outage paged the webhook once per restart). Versions 1 (no ``evidence``), 2 (no
``owed``) and 3 (no ``owed_sinks``: every sink owes) are still read: the evidence detectors then
start afresh, nothing is owed. The
evidence detectors' state is their arrays as they are (``alerts/evidence.py``: evidence per
arm, recovery evidence, the arm that fired, frozen baselines, the hourly baseline blocks and the
last hour's buckets), with the group labels per slot; a model whose attribute sets or baseline
length changed since starts its detectors afresh.

A drift detector (river's Page-Hinkley or ADWIN) is not serialised field by field: its state is
a pure function of the values it was fed since it last restarted, so those values (``fed``) are
stored and replayed into a new detector on restore, of the kind configured now: a tracker whose
detector kind changed keeps its baseline, scale and history (started afresh, it took its baseline
from values already degraded and resolved a firing alert as "back at its baseline").
"""

from __future__ import annotations

import json
import math
from collections import deque
from typing import Literal

import msgspec
import numpy as np

from monitor.alerts.drift import DriftTracker
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.evidence import ModelEvidence
from monitor.alerts.evidence_alerts import EvidenceTracker
from monitor.alerts.lifecycle import Alert, AlertBook

VERSION = 4
READS = (1, 2, 3, 4)  # 1: no evidence detectors yet; 2: no owed notifications; 3: no owed_sinks


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


class ArrayState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    dtype: Literal["int64", "float64"]
    shape: list[int]
    data: list[float]  # row-major; -Infinity / NaN as the JSON extensions


class EvidenceState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    model: str
    sets: list[str]
    labels: list[list[str]]  # per set, the group of each slot
    refs: list[int]  # per set, the reference's slot (-1: none yet)
    first: int  # the first baseline block
    pool_block: int  # the block whose counts the pair tests pool
    arrays: dict[str, ArrayState]


class EvaluatorState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    last: list[tuple[int, int]]
    alerts: list[AlertState]
    quiet: list[tuple[tuple[str, str, str], int]]
    trackers: list[TrackerState]
    evidence: list[EvidenceState] = []
    # version 3: notifications judged and not yet known delivered (the newest state of each
    # alert), sent again after a restart — a page owed during a receiver's outage survives it
    owed: list[AlertState] = []
    owed_sinks: list[list[str]] = []  # version 4: per owed notification, the sinks owing it


def evidence_to_state(me: ModelEvidence) -> EvidenceState:
    arrays = {
        k: ArrayState(str(v.dtype), list(v.shape), v.ravel().tolist())  # type: ignore[arg-type]
        for k, v in sorted(me.arrays.items())
    }
    labels = [list(x) for x in me.labels]
    return EvidenceState(
        me.spec.name, list(me.set_names), labels, me.refs.tolist(), me.first, me.pool_block, arrays
    )


def evidence_from_state(
    tracker: EvidenceTracker, s: EvidenceState
) -> tuple[int, ModelEvidence] | None:
    """A model's detectors from ``s`` (None: the model or its layout changed: start afresh)."""
    names = [m.name for m in tracker.engine.models]
    if s.model not in names:
        return None
    m = names.index(s.model)
    reg = tracker.engine.registries[m]
    me = ModelEvidence(tracker.engine.models[m], list(reg.set_names), tracker.spec, tracker.bounds)
    if s.sets != me.set_names or len(s.labels) != len(s.sets):
        return None
    me.labels, me.refs, me.first = [list(x) for x in s.labels], np.array(s.refs), s.first
    for i, name in enumerate(me.set_names):  # a reference group configured since: the pairs
        want, r = me.spec.reference_groups.get(name), int(me.refs[i])  # and baselines were
        if want is not None and r >= 0 and me.labels[i][r] != want:  # another's (a review:
            return None  # the pages kept quoting the old reference)
    me.pool_block = s.pool_block
    me.grow(max((len(x) for x in s.labels), default=0))
    # runs held back ("withheld") came later: a state without them (with the run lengths that
    # came before, "streak") starts with none held back
    arrays = {k: a for k, a in s.arrays.items() if k != "streak"}
    if set(arrays) != set(me.arrays) and set(arrays) != set(me.arrays) - {"withheld"}:
        return None
    for k, a in arrays.items():
        if tuple(a.shape) != me.arrays[k].shape or len(a.data) != me.arrays[k].size:
            return None
        me.arrays[k] = np.array(a.data, dtype=a.dtype).reshape(a.shape)
    return m, me


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


def alert_to_state(a: Alert) -> AlertState:
    return AlertState(
        a.name, _text(a.labels), a.state, a.since, a.at, a.value, _text(a.annotations)
    )


def alert_from_state(s: AlertState) -> Alert:
    return Alert(s.name, dict(s.labels), s.state, s.since, s.at, s.value, dict(s.annotations))


def to_state(
    ev: AlertEvaluator, owed: list[Alert] | None = None, sinks: list[list[str]] | None = None
) -> EvaluatorState:
    return EvaluatorState(
        version=VERSION,
        last=sorted(ev.last.items()),
        alerts=[alert_to_state(a) for a in ev.book.active.values()],
        quiet=sorted(ev.drift_quiet.items()),
        trackers=[tracker_to_state(k, t) for k, t in sorted(ev.trackers.items())],
        evidence=[evidence_to_state(me) for _, me in sorted(ev.evidence.models.items())],
        owed=[alert_to_state(a) for a in owed or ()],
        owed_sinks=[sorted(s) for s in sinks] if sinks is not None else [[] for _ in owed or ()],
    )


def from_state(ev: AlertEvaluator, s: EvaluatorState) -> None:
    """Replace the evaluator's state by ``s`` (everything built first: all or nothing)."""
    book = AlertBook()
    for a in s.alerts:
        alert = alert_from_state(a)
        book.active[alert.key] = alert
    drift = ev.spec.drift
    trackers = {t.key: tracker_from_state(DriftTracker(drift, t.metric), t) for t in s.trackers}
    tracker, afresh = EvidenceTracker(ev.config, ev.engine), set()
    for e in s.evidence:
        got = evidence_from_state(tracker, e)
        if got is not None:
            tracker.models[got[0]] = got[1]
        else:  # its firing evidence alerts are resolved (retire.py): nothing would judge them
            afresh.add(e.model)
    ev.book, ev.last, ev.trackers, ev.evidence = book, dict(s.last), trackers, tracker
    ev.restored, ev.evidence_afresh = True, afresh
    sinks = s.owed_sinks or [[] for _ in s.owed]  # version 3, or an empty list: every sink
    ev.owed_at_restore = [
        (alert_from_state(a), frozenset(w) or None) for a, w in zip(s.owed, sinks, strict=True)
    ]
    ev.drift_quiet = {k: n for k, n in s.quiet}


def encode(state: EvaluatorState) -> str:
    """JSON text (NaN kept as the JSON extension ``NaN``: a metric can be undefined)."""
    return json.dumps(msgspec.to_builtins(state), separators=(",", ":"))


def dumps(
    ev: AlertEvaluator, owed: list[Alert] | None = None, sinks: list[list[str]] | None = None
) -> str:
    """The evaluator's state as stored (with the notifications still ``owed`` and, for each, the
    ``sinks`` that owe it; None: every sink)."""
    return encode(to_state(ev, owed, sinks))


def loads(text: str) -> EvaluatorState:
    """Parse and validate stored text; :class:`AlertStateError` says what is wrong with it."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise AlertStateError(
            "alert state is not JSON (written by a monitor before schema version 1?)"
        ) from None
    version = doc.get("version") if isinstance(doc, dict) else None
    if version not in READS:
        raise AlertStateError(
            f"alert state has version {version!r}, this monitor reads {', '.join(map(str, READS))}"
        )
    if version == 1 and isinstance(doc, dict) and "evidence" in doc:
        raise AlertStateError("alert state does not match schema version 1: evidence in it")
    if version in (1, 2) and isinstance(doc, dict) and "owed" in doc:
        raise AlertStateError(f"alert state does not match schema version {version}: owed in it")
    if version in (1, 2, 3) and isinstance(doc, dict) and "owed_sinks" in doc:
        raise AlertStateError(
            f"alert state does not match schema version {version}: owed_sinks in it"
        )
    try:
        state = msgspec.convert(doc, EvaluatorState)
    except msgspec.ValidationError as exc:
        raise AlertStateError(
            f"alert state does not match schema version {version}: {exc}"
        ) from None
    if version == 4 and len(state.owed_sinks) != len(state.owed):
        raise AlertStateError("alert state has owed notifications without their sinks")
    if any(
        not math.isfinite(a.since) or not math.isfinite(a.at) for a in state.alerts + state.owed
    ):
        raise AlertStateError("alert state has an alert without a finite time")
    return state


def restore(ev: AlertEvaluator, text: str | None) -> None:
    """Load stored text (None: nothing stored, the evaluator keeps its fresh state)."""
    if text is not None:
        from_state(ev, loads(text))
