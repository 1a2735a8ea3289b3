"""`fairness-monitor run` with ``checkpoint.store: kafka`` against a real Apache Kafka broker:
a monitor killed mid-stream is replaced by another process with a data directory of its own,
which restores every partition from the state topic; the counts equal `replay`'s exactly."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from monitor.config.settings import CheckpointSpec, KafkaSpec
from monitor.config.spec import load_config
from monitor.outputs.report import build_report
from monitor.state.engine import Engine
from monitor.state.kafka_store import KafkaStateStore
from tests.app.test_replay import make_events
from tests.kafka_helpers import (
    MonitorProcess,
    create_topics,
    end_offsets,
    own_tracebacks,
    produce,
    replay_report,
)

pytestmark = pytest.mark.integration


def reached(store: KafkaStateStore) -> dict[tuple[str, int], int]:
    return {(t, p): o for p, offs in store.offsets().items() for t, o in offs.items()}


def wait_state(
    store: KafkaStateStore, done: Any, procs: list[MonitorProcess], timeout: float = 180
) -> dict[tuple[str, int], int]:
    deadline = time.monotonic() + timeout
    got: dict[tuple[str, int], int] = {}
    while time.monotonic() < deadline:
        got = reached(store)
        if done(got):
            return got
        for p in procs:
            assert p.proc is not None and p.proc.poll() is None, p.log.read_text()[-3000:]
        time.sleep(0.3)
    raise AssertionError(f"the state topic reached {got} only")


def test_a_replica_without_shared_files_restores_from_the_state_topic(
    kafka, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
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
        found = b.wait_log(rf"partition \d restored from state topic {state} generation \d+")
        assert found
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
