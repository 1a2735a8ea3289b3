"""Alert state as versioned JSON: a round trip restores the lifecycle book, the evaluated
boundaries and the drift detectors exactly (a restored detector answers every later value as
the original does), and stored text that is not version 1 is refused with a clear error."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest

from monitor.alerts import persist
from monitor.alerts.drift import DriftTracker
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.lifecycle import Alert
from monitor.config.rules import DriftSpec
from monitor.state.engine import Engine
from tests.alerts.streams import T0, alert_config, evaluate_stream, run_stream


@pytest.mark.parametrize("detector", ["page-hinkley", "adwin"])
def test_a_restored_drift_detector_answers_like_the_original(detector: str) -> None:
    spec = DriftSpec(detector=detector)  # type: ignore[arg-type]
    rng = np.random.default_rng(7)
    fair = 0.95 + 0.03 * rng.standard_normal(40)
    slide = np.linspace(0.95, 0.6, 60) + 0.03 * rng.standard_normal(60)
    values = np.concatenate([fair, slide])
    a = DriftTracker(spec, "disparate_impact_ratio")
    cut = 30  # past the warm-up, before the slide
    for i, v in enumerate(values[:cut]):
        a.update(T0 + 3600 * i, float(v), 0.02)
    saved = persist.tracker_to_state(("m", "g", "disparate_impact_ratio"), a)
    text = persist.encode(persist.EvaluatorState(persist.VERSION, [], [], [], [saved]))
    (state,) = persist.loads(text).trackers  # through JSON text, as stored
    b = persist.tracker_from_state(DriftTracker(spec, "disparate_impact_ratio"), state)
    signals_a, signals_b = [], []
    for i, v in enumerate(values[cut:], start=cut):
        signals_a.append(a.update(T0 + 3600 * i, float(v), 0.02))
        signals_b.append(b.update(T0 + 3600 * i, float(v), 0.02))
        assert a.still_worsening() == b.still_worsening()
    assert signals_a == signals_b
    assert any(s is not None for s in signals_a), "the slide was not detected at all"
    print(f"{detector}: detections at {[i for i, s in enumerate(signals_a) if s]}")


def test_evaluator_state_round_trips_through_json() -> None:
    """At minute 800 of a stream (an alert firing, drift detectors past their warm-up) the
    state goes through JSON into a second evaluator; from then on both judge the same
    stream and must give the same transitions (the small group recovers: a resolve)."""
    cfg = alert_config(
        rules=[
            {
                "name": "FourFifthsRule",
                "metric": "disparate_impact_ratio",
                "op": "<",
                "bound": 0.8,
                "for": "5m",
                "min_samples": 30,
            }
        ]
    )
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine)
    twin: list[AlertEvaluator] = []
    got: tuple[list[Alert], list[Alert]] = ([], [])

    def minute(m: int) -> None:
        if m < 800:
            ev.advance()
            return
        if not twin:
            twin.append(restored_copy(ev))
        for e, out in zip((ev, twin[0]), got, strict=True):
            out += [t.alert for t in e.advance()]

    run_stream(
        engine, 1100, 0.5, lambda m: 0.2 if m < 900 else 0.5, per_min_b=20, seed=5, on_minute=minute
    )
    assert got[0] == got[1]
    assert [a.state for a in got[0] if a.name == "FourFifthsRule"] == ["resolved"]


def restored_copy(ev: AlertEvaluator) -> AlertEvaluator:
    assert ev.book.firing() and ev.trackers
    text = persist.dumps(ev)
    assert text.isascii() and json.loads(text)["version"] == persist.VERSION
    ev2 = AlertEvaluator(ev.config, ev.engine)
    persist.restore(ev2, text)
    assert ev2.book.active == ev.book.active
    assert ev2.last == ev.last and ev2.drift_quiet == ev.drift_quiet
    assert set(ev2.trackers) == set(ev.trackers)
    for key, t in ev.trackers.items():
        r = ev2.trackers[key]
        assert list(r.history) == list(t.history) and r.fed == t.fed and r.seen == t.seen
        assert r.baseline == t.baseline or (math.isnan(r.baseline) and math.isnan(t.baseline))
    assert any(len(t.fed) for t in ev.trackers.values())  # detectors past their warm-up
    assert persist.dumps(ev2) == text  # nothing lost or added
    return ev2


@pytest.mark.parametrize(
    "text, why",
    [
        (pickle.dumps(({}, {}, {}, {})).hex(), "not JSON"),  # a monitor before version 1
        ('{"version": 5, "alerts": []}', "version 5"),
        (
            '{"version": 3, "last": [], "alerts": [], "quiet": [], "trackers": [], "owed": [],'
            ' "owed_sinks": []}',
            "owed_sinks in it",
        ),
        (
            '{"version": 2, "last": [], "alerts": [], "quiet": [], "trackers": [], "owed": []}',
            "owed in it",
        ),
        ('{"alerts": []}', "version None"),
        ("[1, 2]", "version None"),
        ('{"version": 1, "last": "x", "alerts": [], "quiet": [], "trackers": []}', "schema"),
        (
            '{"version": 1, "last": [], "alerts": [{"name": "x"}], "quiet": [], "trackers": []}',
            "schema",
        ),
        ("{trunc", "not JSON"),
    ],
)
def test_stored_text_of_another_version_or_damaged_is_a_clear_error(text: str, why: str) -> None:
    with pytest.raises(persist.AlertStateError, match=why) as err:
        persist.loads(text)
    print(err.value)
    ev = AlertEvaluator(alert_config(), evaluate_stream(1, lambda m: 0.5)[0])
    with pytest.raises(persist.AlertStateError):
        persist.restore(ev, text)
    assert ev.book.active == {} and ev.last == {}  # all or nothing: untouched


def test_a_version_3_document_owes_its_pages_to_every_sink_and_4_to_those_it_names() -> None:
    """Version 3 kept no sinks per owed page: each is owed to every sink (as it was sent then);
    version 4 names them, and a page without its sinks is refused as damaged."""
    a = ('{"name": "R", "labels": {"alertname": "R"}, "state": "firing", "since": 1.0,'
         ' "at": 1.0, "value": 0.5}')  # fmt: skip
    head = '"last": [], "alerts": [], "quiet": [], "trackers": [], "owed": [' + a + "]"
    ev = AlertEvaluator(alert_config(), evaluate_stream(1, lambda m: 0.5)[0])
    persist.restore(ev, '{"version": 3, ' + head + "}")
    assert [(x.name, sinks) for x, sinks in ev.owed_at_restore] == [("R", None)]
    persist.restore(ev, '{"version": 4, ' + head + ', "owed_sinks": [["webhook"]]}')
    assert [sinks for _, sinks in ev.owed_at_restore] == [frozenset({"webhook"})]
    with pytest.raises(persist.AlertStateError, match="without their sinks"):
        persist.loads('{"version": 4, ' + head + ', "owed_sinks": []}')


def test_a_version_2_document_is_read_owing_nothing() -> None:
    """Written before owed notifications were saved (version 3): read, nothing owed."""
    state = persist.loads('{"version": 2, "last": [], "alerts": [], "quiet": [], "trackers": []}')
    assert state.owed == [] and state.version == 2


def test_a_drift_detector_of_another_kind_after_a_restart_keeps_its_baseline() -> None:
    """Found by a review: a restart with ``drift.detector`` switched (page-hinkley → adwin)
    started the tracker afresh; it took its baseline from the hours already degraded and
    resolved the firing FairnessDrift as "back at its baseline" while the DIR stayed ~0.5. The
    new detector is fed the saved values; baseline, scale and history are kept."""

    def cfg(kind: str) -> object:
        return alert_config(
            rules=[],
            drift={"metrics": ["disparate_impact_ratio"], "detector": kind},
            evidence={"enabled": False},
        )

    engine = Engine(cfg("page-hinkley"))  # type: ignore[arg-type]
    box = [AlertEvaluator(cfg("page-hinkley"), engine)]  # type: ignore[arg-type]

    def rate_b(m: int) -> float:  # fair for a day, a 10-hour slide, then it stays at 0.25
        return 0.5 if m < 24 * 60 else max(0.25, 0.5 - (m / 60 - 24) * 0.025)

    def step(m: int) -> None:
        if m == 40 * 60:
            old = box[0]
            assert [a.name for a in old.book.firing()] == ["FairnessDrift"]
            box[0] = AlertEvaluator(cfg("adwin"), engine)  # type: ignore[arg-type]
            persist.restore(box[0], persist.dumps(old))
            baseline = next(iter(old.trackers.values())).baseline
            assert next(iter(box[0].trackers.values())).baseline == baseline
        box[0].advance()

    run_stream(engine, 72 * 60, 0.5, rate_b, per_min_a=20, per_min_b=20, seed=3, on_minute=step)
    assert [t.alert.state for t in box[0].history] == []  # nothing resolved after the restart
    assert [a.name for a in box[0].book.firing()] == ["FairnessDrift"]
