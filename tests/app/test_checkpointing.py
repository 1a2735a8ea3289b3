"""Checkpoint policy without a broker: when a checkpoint is due, what failures do (retry once
per interval, pause after a few in a row, resume on the first full success), and what an
unreadable alert state does under each ``on_corrupt``; alert state and partition rows share one
transaction."""

from __future__ import annotations

import logging
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.app.checkpointing import FAILURES_BEFORE_PAUSE, Checkpointer
from monitor.config.settings import CheckpointSpec
from monitor.state.checkpoint import (
    CheckpointCorrupt,
    CheckpointStore,
    CheckpointUnavailable,
    encode,
)
from monitor.state.engine import Engine
from tests.alerts.streams import alert_config, evaluate_stream


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Failing:
    """A store whose writes fail while ``broken`` (a full disk)."""

    def __init__(self, real: CheckpointStore) -> None:
        self.real, self.broken = real, False

    def save(self, items: Any, *, alerts: str | None = None) -> None:
        if self.broken:
            raise CheckpointUnavailable("checkpoint x: cannot write it (disk full)")
        self.real.save(items, alerts=alerts)

    def close(self) -> None:
        self.real.close()


def policy(tmp_path: Path, **kw: Any) -> tuple[Checkpointer, Clock]:
    clock = Clock()
    settings = CheckpointSpec(path=str(tmp_path / "cp.sqlite"), **kw)
    return Checkpointer(settings, clock=clock), clock


def test_due_after_every_events_or_an_interval_with_records(tmp_path: Path) -> None:
    cp, clock = policy(tmp_path, interval=10, every_events=1000)
    clock.now = 100
    assert not cp.due()  # idle: nothing to save, however long
    cp.record(999)
    assert cp.due()  # the interval passed with records
    clock.now = 0
    assert not cp.due()
    cp.record(1)
    assert cp.due()  # every_events reached
    assert cp.save([], None, full=True) == "saved"
    assert cp.events_since == 0 and cp.last_wall is not None and not cp.due()
    # a revoke's write of some partitions saves none of the others' records: still due, and
    # the last full checkpoint's age is kept (found by a review: it reset both)
    wall = cp.last_wall
    cp.record(1000)
    assert cp.save([], None, full=False) == "saved"
    assert cp.due() and cp.events_since == 1000 and cp.last_wall == wall
    assert cp.save([], None, full=True) == "saved" and not cp.due()
    cp.close()


def test_failures_retry_once_per_interval_pause_then_resume_on_a_full_success(
    tmp_path: Path,
) -> None:
    cp, clock = policy(tmp_path, interval=5)
    store = cp.store = Failing(cp.store)  # type: ignore[assignment]
    store.broken = True
    cp.record(10)
    outcomes = []
    for i in range(FAILURES_BEFORE_PAUSE):
        clock.now = 5.0 * (i + 1)
        assert cp.due()
        outcomes.append(cp.save([], None, full=True))
        assert not cp.due()  # not again before the interval (records or not)
        clock.now += 4.9
        assert not cp.due()
    assert outcomes == ["failed"] * (FAILURES_BEFORE_PAUSE - 1) + ["paused"]
    assert cp.failures == cp.failed_in_row == FAILURES_BEFORE_PAUSE and cp.paused
    why = cp.not_ready()
    assert why is not None and "disk full" in why and "paused" in why
    assert cp.events_since == 10  # nothing was saved
    store.broken = False
    assert cp.save([], None, full=False) == "saved"  # a revoke's partial write: still failing
    assert cp.paused and cp.not_ready() is not None
    assert cp.save([], None, full=True) == "resumed"
    assert not cp.paused and cp.not_ready() is None and cp.failed_in_row == 0
    assert cp.failures == FAILURES_BEFORE_PAUSE  # the total stays (exported as a counter)
    cp.close()


def firing_evaluator() -> AlertEvaluator:
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
    _, ev = evaluate_stream(60, lambda m: 0.2, cfg=cfg, per_min_b=20, seed=5)
    assert ev.book.firing()
    return ev


def test_alert_state_is_written_in_the_partition_transaction(tmp_path: Path) -> None:
    ev = firing_evaluator()
    cp, _ = policy(tmp_path)
    cp.save([(0, {"preds": 5}, encode({"p": 0}, {}))], persist.dumps(ev), full=True)
    db = sqlite3.connect(tmp_path / "cp.sqlite")
    db.execute(  # the next partition write fails inside the transaction
        "CREATE TRIGGER boom BEFORE INSERT ON partitions BEGIN SELECT RAISE(ABORT, 'boom'); END"
    )
    db.commit()
    db.close()
    empty = AlertEvaluator(ev.config, ev.engine)
    assert (
        cp.save([(0, {"preds": 9}, encode({"p": 1}, {}))], persist.dumps(empty), full=True)
        == "failed"
    )
    restarted = AlertEvaluator(ev.config, Engine(ev.config))
    cp.restore_alerts(restarted)  # the alert state of the last good checkpoint, not the failed
    assert [a.labels for a in restarted.book.firing()] == [a.labels for a in ev.book.firing()]
    saved = cp.store.load(0)
    assert saved is not None and saved.offsets == {"preds": 5} and saved.meta == {"p": 0}
    cp.close()


BAD_ROWS = {
    "pickle_of_an_older_monitor": pickle.dumps(({}, {}, {}, {})).hex(),
    "unknown_version": '{"version": 99}',
    "corrupt": '{"version": 1, "last": [[0, "x"]]',
}


@pytest.mark.parametrize("row", BAD_ROWS.values(), ids=BAD_ROWS.keys())
def test_an_unreadable_alert_row_follows_on_corrupt(
    tmp_path: Path, row: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path / "cp.sqlite")
    store.save([(0, {"preds": 5}, encode({"p": 0}, {}))], alerts=row)
    store.close()
    ev = firing_evaluator()
    refuse, _ = policy(tmp_path, on_corrupt="refuse")
    with pytest.raises(CheckpointCorrupt, match=f"{tmp_path / 'cp.sqlite'}: alert state") as err:
        refuse.restore_alerts(AlertEvaluator(ev.config, ev.engine))
    print(err.value)
    refuse.close()
    fresh, _ = policy(tmp_path, on_corrupt="fresh")
    restarted = AlertEvaluator(ev.config, ev.engine)
    with caplog.at_level(logging.ERROR):
        fresh.restore_alerts(restarted)  # no crash: the alert state starts fresh
    assert restarted.book.active == {} and restarted.last == {}
    assert "alert state starts fresh" in caplog.text
    assert fresh.store.load(0) is not None  # the partition state is kept
    fresh.close()
