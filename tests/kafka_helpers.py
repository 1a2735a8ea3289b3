"""Helpers for the Kafka integration tests: topics, producing events, running the monitor."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.broker import free_port

ROOT = Path(__file__).resolve().parents[1]

MODEL = """
models:
  credit:
    attributes: {sex: {}, age: {bins: [30, 50]}}
    intersections: [[sex, age]]
    threshold: 0.5
    windows: [1h, 6h]
    bucket: 1m
    lateness: 6h
    min_samples: 5
"""


def create_topics(
    bootstrap: str, partitions: dict[str, int], *, client: Mapping[str, Any] | None = None
) -> None:
    """``client``: kafka-python security settings (a secured test broker's ``client``)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **(client or {}))
    try:
        admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()])
    finally:
        admin.close()


def produce(
    bootstrap: str,
    topic: str,
    events: list[Any],
    *,
    key: str = "prediction_id",
    compression: str | None = None,
    client: Mapping[str, Any] | None = None,
) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        **(client or {}),
        linger_ms=20,
        batch_size=256 * 1024,
        acks=1,
        compression_type=compression,
    )
    futures = []
    for e in events:
        if isinstance(e, bytes):
            futures.append(producer.send(topic, value=e, key=str(uuid.uuid4()).encode()))
        else:
            futures.append(
                producer.send(topic, value=json.dumps(e).encode(), key=str(e[key]).encode())
            )
    producer.flush(60)
    # A failed send is otherwise silent: the topic would hold fewer events than the reference
    # replay, and a consumer that reads the whole topic would look as if it lost them.
    failed = [
        f.exception if f.is_done else "not acknowledged" for f in futures if not f.succeeded()
    ]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(events)} sends to {topic} failed: {failed[0]}")
    producer.close()


def end_offsets(
    bootstrap: str, topics: list[str], *, client: Mapping[str, Any] | None = None
) -> dict[tuple[str, int], int]:
    """Log end offsets, read as the high watermark of a fetch response.

    Not ListOffsets(latest) alone: Tansu answers it with the last batch's *base* offset + 1
    (300 records produced in three batches of 100 read back as 201), while its fetch high
    watermark is right. Apache Kafka gives the same figure both ways.
    """
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **(client or {}))
    try:
        tps = [TopicPartition(t, p) for t in topics for p in c.partitions_for_topic(t)]
        listed = c.end_offsets(tps)
        c.assign(tps)
        for tp in tps:
            c.seek(tp, max(listed[tp] - 1, 0))  # inside the last batch: one small fetch
        deadline = time.monotonic() + 30
        while any(c.highwater(tp) is None for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError("no fetch response carried a high watermark")
            c.poll(timeout_ms=200)
        return {(tp.topic, tp.partition): c.highwater(tp) for tp in tps}
    finally:
        c.close()


def settled_end_offsets(
    bootstrap: str,
    produced: dict[str, int],
    timeout: float = 30.0,
    *,
    client: Mapping[str, Any] | None = None,
) -> dict[tuple[str, int], int]:
    """End offsets once the broker reports every produced record of these fresh topics.

    Waiting for the counts (rather than taking the first answer) keeps a broker that is slow to
    expose acknowledged records from passing for a consumer that lost them.
    """
    deadline = time.monotonic() + timeout
    while True:
        ends = end_offsets(bootstrap, list(produced), client=client)
        held = {t: sum(o for (tt, _), o in ends.items() if tt == t) for t in produced}
        if held == produced:
            return ends
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker holds {held} records, {produced} were produced")
        time.sleep(0.2)


class MonitorProcess:
    """``fairness-monitor run`` as a child process, as it is deployed.

    Every started process is also recorded in ``started``: a test that fails half-way leaves
    its monitors running, and the ``kill_leftover_monitors`` fixture ends them.
    """

    started: ClassVar[list[subprocess.Popen[bytes]]] = []

    def __init__(
        self,
        tmp: Path,
        bootstrap: str,
        *,
        name: str = "m",
        pred: str,
        lab: str,
        group: str | None = None,  # default: a group of its own, g-<prediction topic>
        checkpoint: Path | None = None,
        extra: str = "",
        dlq: str | None = None,
        session_timeout_ms: int = 10_000,
        checkpoint_every: int = 50_000,
        kafka_settings: Mapping[str, str] | None = None,  # more keys of the kafka: section
        env: Mapping[str, str] | None = None,  # more environment variables of the process
    ) -> None:
        self.port = free_port()
        self.pred, self.lab = pred, lab
        self.checkpoint = checkpoint or tmp / "checkpoint.sqlite"
        self.env = dict(env or {})
        security = "".join(f"  {k}: {v}\n" for k, v in (kafka_settings or {}).items())
        self.config = tmp / f"{name}.yaml"
        self.config.write_text(
            MODEL
            + f"""
kafka:
  bootstrap_servers: {bootstrap}
  group_id: {group or f"g-{pred}"}
  predictions_topic: {pred}
  labels_topic: {lab}
  max_poll_records: 2000
  session_timeout_ms: {session_timeout_ms}
{"  dead_letter_topic: " + dlq if dlq else ""}
{security}checkpoint:
  path: {self.checkpoint}
  interval: 1s
  every_events: {checkpoint_every}
service:
  http_host: 127.0.0.1
  http_port: {self.port}
{extra}
"""
        )
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MonitorProcess:
        log = open(self.log, "ab")  # noqa: SIM115 - owned by the child process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "monitor", "run", "-c", str(self.config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
        )
        MonitorProcess.started.append(self.proc)
        return self

    def signal(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def wait_log(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        """Until a line of the monitor's log matches ``pattern`` (a regular expression)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log.read_text(errors="replace"))
            if found:
                return found
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            time.sleep(0.05)
        raise AssertionError(f"no log line matching {pattern!r}: {self.log.read_text()[-3000:]}")

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get("/readyz")[0] == 200:
                return
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            time.sleep(0.2)
        raise AssertionError(
            f"monitor not ready within {timeout:.0f}s: {self.log.read_text()[-3000:]}"
        )


def checkpoint_offsets(path: Path) -> dict[tuple[str, int], int]:
    from monitor.state.checkpoint import CheckpointStore

    if not path.exists():
        return {}
    store = CheckpointStore(path)
    try:
        out = {}
        for p in store.partitions():
            cp = store.load(p)
            assert cp is not None
            for topic, off in cp.offsets.items():
                out[(topic, p)] = off
        return out
    finally:
        store.close()


def wait_progress(
    path: Path, events: float, procs: list[MonitorProcess], timeout: float = 120
) -> int:
    """Until the checkpoint reflects at least ``events`` records (both topics); returns how
    many. Polls often: the monitor reads ~100 k records per second here."""
    deadline = time.monotonic() + timeout
    done = 0
    while time.monotonic() < deadline:
        done = sum(checkpoint_offsets(path).values())
        if done >= events:
            return done
        for p in procs:
            assert p.proc is not None and p.proc.poll() is None, p.log.read_text()[-3000:]
        time.sleep(0.02)
    raise AssertionError(
        f"the checkpoint reached {done} records, not {events:.0f}, within {timeout:.0f}s"
    )


def wait_consumed(
    path: Path,
    target: dict[tuple[str, int], int],
    timeout: float = 120,
    procs: list[MonitorProcess] = (),
) -> None:  # type: ignore[assignment]
    """Until the checkpoint's offsets reach ``target`` (everything produced was applied)."""
    deadline = time.monotonic() + timeout
    got: dict[tuple[str, int], int] = {}
    while time.monotonic() < deadline:
        got = checkpoint_offsets(path)
        if all(got.get(k, 0) >= v for k, v in target.items()):
            return
        for p in procs:
            assert p.proc is not None and p.proc.poll() is None, p.log.read_text()[-3000:]
        time.sleep(0.3)
    raise AssertionError(f"not consumed in time: {got} < {target}")


def _cli_json(*args: str, timeout: float) -> dict[str, Any]:
    """Run ``python -m monitor ARGS --format json`` and parse its output."""
    out = subprocess.run(
        [sys.executable, "-m", "monitor", *args, "--format", "json"],
        capture_output=True,
        check=True,
        timeout=timeout,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def status(config: Path, checkpoint: Path) -> dict[str, Any]:
    return _cli_json("status", "-c", str(config), "--checkpoint", str(checkpoint), timeout=120)


def replay_report(
    tmp: Path, config: Path, preds: list[dict], labels: list[dict], *, timeline: Path | None = None
) -> dict:
    p, lab = tmp / "oracle-p.jsonl", tmp / "oracle-l.jsonl"
    p.write_text("".join(json.dumps(e) + "\n" for e in preds))
    lab.write_text("".join(json.dumps(e) + "\n" for e in labels))
    more = ["--timeline", str(timeline)] if timeline is not None else []
    return _cli_json("replay", "-c", str(config), "-p", str(p), "-l", str(lab), *more, timeout=300)


def own_tracebacks(log: str) -> list[str]:
    """Tracebacks in a monitor's log that are not kafka-python's own handled, logged errors.

    kafka-python 3 logs some shutdown races inside its network layer with `log.exception`
    (a socket closed under a pending read) and carries on; those are the client's business, not
    a monitor failure. Anything else is kept: a traceback logged by the monitor, one with a frame
    in the monitor package, or an uncaught one.
    """
    lines = log.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not line.startswith("Traceback (most recent call last):"):
            continue
        end = i + 1
        while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
            end += 1
        block = lines[i : end + 1]
        header = lines[i - 1] if i else ""
        from_kafka = " kafka." in header and re.match(r"^\d{4}-\d\d-\d\d ", header) is not None
        in_monitor = any(re.search(r'File ".*/monitor/[^"]*\.py"', b) for b in block)
        if in_monitor or not from_kafka:
            found.append("\n".join([header, *block]))
    return found
