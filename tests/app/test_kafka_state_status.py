"""`status` and `report --checkpoint` with ``checkpoint.store: kafka`` against a real Apache
Kafka broker: they read the state topic while a monitor is writing it, report exactly what it
saved (the counts `replay` gives for the same events, the offsets of its heads), write nothing,
and leave the writer saving — a transactional one included (not fenced)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient

from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.state.kafka_store import KafkaStateStore
from tests.app.test_kafka_state_service import reached, wait_state
from tests.app.test_replay import make_events
from tests.kafka_helpers import (
    MODEL,
    MonitorProcess,
    create_topics,
    end_offsets,
    own_tracebacks,
    produce,
    replay_report,
)

pytestmark = pytest.mark.integration


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )


def status(config: Path, env: dict[str, str], *, before_first: bool = False) -> dict[str, Any]:
    """``status --format json``; ``before_first``: a checkpoint file not written yet reads as
    no offsets (``status`` refuses to read a file that is not there)."""
    r = cli("status", "-c", str(config), "--format", "json", env=env)
    if before_first and r.returncode == 2 and "no checkpoint file at" in r.stderr:
        return {"offsets": {}}
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def offsets(report: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): o for p, offs in report["offsets"].items() for t, o in offs.items()}


@pytest.mark.parametrize("transactions", [False, True], ids=["plain", "transactions"])
def test_status_and_report_read_a_running_monitors_state_topic(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path, transactions: bool
) -> None:
    tag = uuid.uuid4().hex[:8]
    pred, lab, state = f"pred-{tag}", f"lab-{tag}", f"state-{tag}"
    create_topics(kafka.bootstrap, {pred: 3, lab: 3})
    preds, labels = make_events(23, n=30_000)
    first = [e for e in labels if int(e["prediction_id"][3:]) < 15_000]
    produce(kafka.bootstrap, pred, preds[:15_000])
    produce(kafka.bootstrap, lab, first)
    env = {
        "FAIRNESS_MONITOR__CHECKPOINT__STORE": "kafka",
        "FAIRNESS_MONITOR__CHECKPOINT__STATE_TOPIC": state,
        "FAIRNESS_MONITOR__CHECKPOINT__STATE_TRANSACTIONS": str(transactions).lower(),
    }
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab, env=env)
    watch = None
    try:
        m.start().wait_ready()
        watch = KafkaStateStore(
            CheckpointSpec(store="kafka", state_topic=state),
            KafkaSpec((kafka.bootstrap,)),
            read_only=True,
        )
        target = end_offsets(kafka.bootstrap, [pred, lab])
        wait_state(watch, lambda got: all(got.get(k, 0) >= v for k, v in target.items()), [m])

        # the monitor runs on (saving every second) while status reads its state topic
        got = status(m.config, env)
        assert offsets(got) == reached(watch) == target
        expected = replay_report(tmp_path, m.config, preds[:15_000], first)
        assert got["models"] == expected["models"]
        assert got["counters"]["predictions"] == 15_000
        assert got["counters"]["labels"] == len(first)
        html = tmp_path / "audit.html"
        r = cli("report", "-c", str(m.config), "--checkpoint", "-o", str(html), env=env)
        assert r.returncode == 0, r.stderr
        assert f"state topic {state}" in html.read_text()

        # the writer keeps saving after the readers came and went (a transactional one was
        # not fenced): the state topic reaches the rest of the stream
        produce(kafka.bootstrap, pred, preds[15_000:])
        produce(kafka.bootstrap, lab, [e for e in labels if int(e["prediction_id"][3:]) >= 15_000])
        target = end_offsets(kafka.bootstrap, [pred, lab])
        wait_state(watch, lambda got: all(got.get(k, 0) >= v for k, v in target.items()), [m])
        got = status(m.config, env)
        assert offsets(got) == target
        assert got["models"] == replay_report(tmp_path, m.config, preds, labels)["models"]
        m.signal(signal.SIGTERM)
        assert m.wait(15) == 0
        log = m.log.read_text()
        assert not own_tracebacks(log)
        assert "checkpoint failed" not in log.lower() and "fenced" not in log.lower()
    finally:
        if watch is not None:
            watch.close()
        if m.proc is not None and m.proc.poll() is None:
            m.signal(signal.SIGKILL)
            m.wait(10)


def test_status_on_a_missing_state_topic_says_so_and_creates_nothing(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path
) -> None:
    state = f"state-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "monitor.yaml"
    config.write_text(
        MODEL
        + f"""
kafka:
  bootstrap_servers: {kafka.bootstrap}
  predictions_topic: p
  labels_topic: l
checkpoint:
  store: kafka
  state_topic: {state}
"""
    )
    r = cli("status", "-c", str(config), env={})
    assert r.returncode == 2 and not r.stdout
    assert f"state topic {state} does not exist" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = cli("report", "-c", str(config), "--checkpoint", "-o", str(tmp_path / "a.html"), env={})
    assert r.returncode == 2 and "does not exist" in r.stderr, r.stderr
    assert not (tmp_path / "a.html").exists()
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        assert state not in admin.list_topics()
    finally:
        admin.close()
