"""A restarted service neither re-pages an alert that was firing nor forgets it: the alert state
written with the last checkpoint comes back with the partitions (no broker: a stand-in
consumer)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from kafka import TopicPartition

from monitor.alerts.lifecycle import Transition
from monitor.app.service import Monitor
from monitor.config.spec import parse_config
from tests.alerts.streams import run_stream
from tests.app.fake_consumer import FakeConsumer

PRED, LAB = "preds", "labels"
TPS = {TopicPartition(PRED, 0), TopicPartition(LAB, 0)}


def config(path: Path) -> Any:
    return parse_config(
        {
            "models": {
                "credit": {
                    "attributes": {"group": {}},
                    "windows": ["1h"],
                    "bucket": "1m",
                    "lateness": "5m",
                    "min_samples": 30,
                }
            },
            "kafka": {"predictions_topic": PRED, "labels_topic": LAB},
            "checkpoint": {"path": str(path)},
            "alerts": {
                "rules": [
                    {
                        "name": "FourFifthsRule",
                        "metric": "disparate_impact_ratio",
                        "op": "<",
                        "bound": 0.8,
                        "for": "5m",
                        "min_samples": 30,
                    }
                ],
                "sinks": {"log": False},
            },
        }
    )


def started(path: Path) -> Monitor:
    """A monitor as ``run`` leaves it after start-up and the first assignment."""
    m = Monitor(config(path))
    handed: list[Transition] = []
    submit = m.dispatcher.submit
    m.dispatcher.submit = lambda t, only=None: handed.append(t) or submit(t, only)  # type: ignore[method-assign]
    m.handed = handed  # type: ignore[attr-defined]
    m.ownership.consumer = FakeConsumer(TPS)
    m.checkpoints.restore_alerts(m.evaluator)
    m.ownership.restore(TPS)
    return m


def pages(m: Monitor) -> list[str]:
    """Evaluate as the loop does, turn after turn until the boundaries are judged; the firing
    transitions handed to the sinks."""
    before = None
    while m.evaluator.last != before:
        before = dict(m.evaluator.last)
        m._alerts()
    out = [t.alert.name for t in m.handed if t.alert.state == "firing"]  # type: ignore[attr-defined]
    m.handed.clear()  # type: ignore[attr-defined]
    return out


def test_a_restart_does_not_page_again_for_an_alert_that_was_firing(tmp_path: Path) -> None:
    path = tmp_path / "cp.sqlite"
    m = started(path)
    # judged as the loop does, after each poll (a backlog judged at once skips the windows
    # that have left the ring: tests/app/test_replay.py)
    run_stream(m.engine, 90, 0.5, lambda _: 0.2, per_min_b=20, seed=5,
               on_minute=lambda _: m._alerts())  # fmt: skip
    assert pages(m) == ["FourFifthsRule"]
    firing = [a.labels for a in m.evaluator.book.firing()]
    m.checkpoint()  # partitions and the alert state, one transaction
    m.checkpoints.close()

    again = started(path)
    assert [a.labels for a in again.evaluator.book.firing()] == firing
    assert again.evaluator.last == m.evaluator.last
    assert pages(again) == []  # still firing: no second page
    again.publish(force=True)
    assert [a.labels for a in again.status.alerts] == firing  # the status page shows it
    again.checkpoints.close()

    # the control: without the alert state the same restart pages again
    db = sqlite3.connect(path)
    db.execute("DELETE FROM meta WHERE key = 'alerts'")
    db.commit()
    db.close()
    forgetful = started(path)
    run_stream(forgetful.engine, 15, 0.5, lambda _: 0.2, per_min_b=20, seed=6, first_minute=90,
               on_minute=lambda _: forgetful._alerts())  # fmt: skip
    assert pages(forgetful) == ["FourFifthsRule"]
    forgetful.checkpoints.close()


def rate(minute: int) -> float:
    return 0.2 if minute < 60 else 0.5


def turn(evaluate: Any) -> Any:
    return lambda minute: evaluate() if minute < 100 else None


def test_a_backlog_of_boundaries_is_judged_over_several_turns_with_the_same_result(
    tmp_path: Path,
) -> None:
    """One loop turn judges at most ALERT_BOUNDARIES_PER_TURN boundaries (a SIGTERM waited
    over 15 s for a backlog); turn by turn the transitions are those of judging it at once."""
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.app.service import ALERT_BOUNDARIES_PER_TURN
    from monitor.state.engine import Engine

    m = started(tmp_path / "cp.sqlite")
    at_once = AlertEvaluator(m.config, Engine(m.config))  # the same stream, its own engine
    # judged minute by minute for 100 minutes (the small group's rate drops: an alert
    # fires), then 60 minutes arrive unjudged (it recovers): a backlog of ~60 boundaries
    run_stream(m.engine, 160, 0.5, rate, per_min_b=20, seed=5, on_minute=turn(m._alerts))
    run_stream(
        at_once.engine,
        160,
        0.5,
        rate,
        per_min_b=20,
        seed=5,
        on_minute=turn(lambda: at_once.advance(lambda p: False)),
    )
    assert m.evaluator.last == at_once.last
    judged = len(m.evaluator.history)
    expected = [t.alert for t in at_once.advance(lambda p: False)]
    turns = 0
    while m.evaluator.last != at_once.last:
        before = dict(m.evaluator.last)
        m._alerts()
        turns += 1
        moved = [m.evaluator.last[k] - before[k] for k in before]
        assert all(0 < d <= ALERT_BOUNDARIES_PER_TURN for d in moved), moved
    print(f"backlog: {len(expected)} transitions over {turns} turns")
    assert turns >= 2
    assert [t.alert for t in m.evaluator.history[judged:]] == expected
    assert "resolved" in {a.state for a in expected}
    m.checkpoints.close()


def test_a_revoke_checkpoints_without_asking_kafka_about_revoked_partitions(
    tmp_path: Path,
) -> None:
    """kafka-python raises for a partition no longer assigned (``highwater``, ``pause``...);
    the revoke path checkpoints partitions that already are (a publish there crashed it)."""
    m = started(tmp_path / "cp.sqlite")
    run_stream(m.engine, 30, 0.5, lambda _: 0.5, per_min_b=20, seed=5)
    m.publish(force=True)
    assert m.ops.lag == {}  # highwater unknown in the stand-in
    m.ownership.consumer.tps = set()  # what kafka-python's assignment is during the revoke
    m.last_publish = -1e18  # a publish is due in this turn
    m.ownership.apply([("revoked", TPS)], lambda parts: m.checkpoint(parts, commit=False))
    m.publish()
    assert m.ownership.owned == set() and m.store.partitions() == [0]
    m.checkpoints.close()
