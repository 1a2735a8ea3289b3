"""`fairness-monitor run` with ``checkpoint.store: kafka`` against a real Apache Kafka broker:
a monitor killed mid-stream is replaced by another process with a data directory of its own,
which restores every partition from the state topic; the counts equal `replay`'s exactly."""

from __future__ import annotations

import contextlib
import re
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.config.spec import load_config
from monitor.outputs.report import build_report
from monitor.state.engine import Engine
from monitor.state.kafka_store import KafkaStateStore
from tests.app.test_replay import make_events
from tests.helpers import wait_for
from tests.kafka_helpers import (
    MonitorProcess,
    create_topics,
    end_offsets,
    own_tracebacks,
    produce,
    replay_report,
)

RESTORED = r"partition (\d+) restored from state topic {} generation (\d+)"

pytestmark = pytest.mark.integration


def reached(store: KafkaStateStore) -> dict[tuple[str, int], int]:
    return {(t, p): o for p, offs in store.offsets().items() for t, o in offs.items()}


def wait_state(
    store: KafkaStateStore, done: Any, procs: list[MonitorProcess], timeout: float = 180
) -> dict[tuple[str, int], int]:
    def check() -> tuple[dict[tuple[str, int], int]] | None:
        for p in procs:
            assert p.proc is not None and p.proc.poll() is None, p.log.read_text()[-3000:]
        got = reached(store)
        return (got,) if done(got) else None

    def said() -> str:  # a stall of a live replica leaves no other trace: its threads' stacks
        live = [p for p in procs if p.proc is not None and p.proc.poll() is None]
        for p in live:  # (SIGUSR1: faulthandler's dump into its log) and its log's last lines
            p.signal(signal.SIGUSR1)
        for p in live:  # the dumps written (a failure message: no wait can fail it)
            with contextlib.suppress(AssertionError):
                p.wait_log(r"most recent call first", timeout=5)
        logs = [(p.log.name, p.log.read_text() if p.log.exists() else "") for p in procs]
        tails = [f"\n--- {name}, last lines ---\n" + "\n".join(text.splitlines()[-60:])
                 for name, text in logs]  # fmt: skip
        return f"the state topic to reach it (at {reached(store)}){''.join(tails)}"

    (got,) = wait_for(check, timeout, said, every=0.3)
    return got


@pytest.mark.parametrize("transactions", [False, True], ids=["plain", "transactions"])
def test_a_replica_without_shared_files_restores_from_the_state_topic(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path, transactions: bool
) -> None:
    """With transactions the killed replica may leave one open: the broker aborts it after
    the writer's transaction timeout, and until then readers see the state before it."""
    tag = uuid.uuid4().hex[:8]
    pred, lab, state = f"pred-{tag}", f"lab-{tag}", f"state-{tag}"
    create_topics(kafka.bootstrap, {pred: 3, lab: 3})
    preds, labels = make_events(17, n=60_000)
    produce(kafka.bootstrap, pred, preds)
    produce(kafka.bootstrap, lab, labels)
    target = end_offsets(kafka.bootstrap, [pred, lab])
    env = {
        "FAIRNESS_MONITOR__CHECKPOINT__STORE": "kafka",
        "FAIRNESS_MONITOR__CHECKPOINT__STATE_TOPIC": state,
        "FAIRNESS_MONITOR__CHECKPOINT__STATE_TRANSACTIONS": str(transactions).lower(),
    }
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    a = MonitorProcess(
        dirs[0], kafka.bootstrap, name="a", pred=pred, lab=lab, env=env, checkpoint_every=5_000
    ).start()
    a.wait_ready()
    store = KafkaStateStore(
        CheckpointSpec(store="kafka", state_topic=state), KafkaSpec((kafka.bootstrap,))
    )
    try:
        total = sum(target.values())
        wait_state(store, lambda got: sum(got.values()) >= 0.3 * total, [a])
        a.signal(signal.SIGKILL)  # no last checkpoint, no leaving the group
        a.wait(10)
        before = reached(store)
        assert sum(before.values()) < total, "killed before the end, as intended"
        # another process, its own directory: only the state topic carries the state over
        b = MonitorProcess(dirs[1], kafka.bootstrap, name="b", pred=pred, lab=lab, env=env)
        b.start()
        assert b.wait_log(RESTORED.format(state))
        wait_state(store, lambda got: all(got.get(k, 0) >= v for k, v in target.items()), [b])
        b.signal(signal.SIGTERM)
        assert b.wait(15) == 0
        assert not own_tracebacks(b.log.read_text())
        assert not any(d.joinpath("checkpoint.sqlite").exists() for d in dirs)  # no file used
        # the counts in the state topic, as `status` reports a checkpoint
        cfg = load_config(b.config)
        engine = Engine(cfg)
        for p in store.partitions():
            cp = store.load(p)
            assert cp is not None
            engine.import_partition(p, cp.meta, cp.arrays)
    finally:
        store.close()
    got = build_report(
        engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid, audit=True
    )
    expected = replay_report(tmp_path, b.config, preds, labels)
    assert got["counters"]["predictions"] == len(preds)
    assert got["counters"]["labels"] == len(labels)
    assert got["models"] == expected["models"]


def restored_from_topic(m: MonitorProcess, state: str) -> set[int]:
    return {int(p) for p, _ in re.findall(RESTORED.format(state), m.log.read_text())}


def test_partitions_move_between_running_replicas_through_the_state_topic(
    kafka, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Two replicas with data directories of their own: b joins (takes partitions a wrote),
    leaves (a takes them back, as b left them); the counts equal replay's exactly."""
    tag = uuid.uuid4().hex[:8]
    pred, lab, state = f"pred-{tag}", f"lab-{tag}", f"state-{tag}"
    create_topics(kafka.bootstrap, {pred: 4, lab: 4})
    preds, labels = make_events(14, n=60_000)
    first = [e for e in labels if int(e["prediction_id"][3:]) < 30_000]
    produce(kafka.bootstrap, pred, preds[:30_000])
    produce(kafka.bootstrap, lab, first)
    env = {
        "FAIRNESS_MONITOR__CHECKPOINT__STORE": "kafka",
        "FAIRNESS_MONITOR__CHECKPOINT__STATE_TOPIC": state,
    }
    ms: list[MonitorProcess] = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        ms.append(
            MonitorProcess(tmp_path / name, kafka.bootstrap, name=name, pred=pred, lab=lab, env=env)
        )
    a, b = ms
    store = KafkaStateStore(
        CheckpointSpec(store="kafka", state_topic=state), KafkaSpec((kafka.bootstrap,))
    )
    try:
        a.start().wait_ready()
        wait_state(store, lambda got: sum(got.values()) >= 30_000 + len(first), [a])
        b.start()
        b.wait_log(RESTORED.format(state), timeout=90)  # b restored partitions a had written
        produce(kafka.bootstrap, pred, preds[30_000:])
        produce(kafka.bootstrap, lab, [e for e in labels if int(e["prediction_id"][3:]) >= 30_000])
        moved = restored_from_topic(b, state)
        wait_state(store, lambda got: sum(got.values()) > 30_000 + len(first) + 1000, [a, b])
        b.signal(signal.SIGTERM)  # leaves the group: its partitions move back to a
        assert b.wait(15) == 0
        target = end_offsets(kafka.bootstrap, [pred, lab])
        wait_state(store, lambda got: all(got.get(k, 0) >= v for k, v in target.items()), [a])
        a.signal(signal.SIGTERM)
        assert a.wait(15) == 0
        assert moved and moved <= {0, 1, 2, 3}
        assert all(not own_tracebacks(m.log.read_text()) for m in ms)
        assert store.load_alerts() is not None  # readable after both replicas wrote it
        cfg = load_config(a.config)
        engine = Engine(cfg)
        for p in store.partitions():
            cp = store.load(p)
            assert cp is not None
            engine.import_partition(p, cp.meta, cp.arrays)
    finally:
        store.close()
    got = build_report(
        engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid, audit=True
    )
    assert got["counters"]["predictions"] == len(preds)
    assert got["models"] == replay_report(tmp_path, a.config, preds, labels)["models"]
