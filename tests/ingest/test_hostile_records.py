"""Hostile records through `fairness-monitor run` on a real Apache Kafka broker.

Each case here once stopped, blinded or bloated the monitor: a tombstone or a JSON ``null``
(crash loop), 1,000-deep nesting (RecursionError), a 400-digit timestamp (OverflowError), a
record over the dead-letter topic's size limit (MessageSizeTooLargeError), a dead-letter topic
that does not exist (blocked a minute, then died), one event stamped a day ahead (emptied the
windows), 5 MB and 10 kB attribute values (a 480 MB ``/metrics``). Now every record is counted
or dead-lettered with its reason, and the counts equal ``replay`` of the valid events.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from tests.app.test_replay import make_events
from tests.kafka_helpers import (
    MonitorProcess,
    end_offsets,
    own_tracebacks,
    replay_report,
    status,
    wait_consumed,
)

pytestmark = pytest.mark.integration

BIG = 8 * 2**20  # the input topics accept records up to 8 MiB; the dead-letter topic 1 MiB
# documented in docs/deploy.md ("Memory and size bounds") for this test's configuration
METRICS_BOUND = 4 * 2**20
RSS_BOUND = 600 * 2**20


def make_topics(bootstrap: str, partitions: int = 2) -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    pred, lab, dlq = f"pred-{tag}", f"lab-{tag}", f"dlq-{tag}"
    big = {"max.message.bytes": str(BIG)}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            [
                NewTopic(pred, partitions, 1, topic_configs=big),
                NewTopic(lab, partitions, 1, topic_configs=big),
                NewTopic(dlq, 1, 1),
            ]
        )
    finally:
        admin.close()
    return pred, lab, dlq


def send(bootstrap: str, topic: str, values: list[tuple[bytes, bytes | None]]) -> None:
    """(key, value) pairs, in order; ``None`` values are tombstones."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=BIG, acks=1)
    futures = [producer.send(topic, key=k, value=v) for k, v in values]
    producer.flush(60)
    assert all(f.succeeded() for f in futures), [f.exception for f in futures if f.failed()]
    producer.close()


def encoded(e: dict[str, Any]) -> tuple[bytes, bytes]:
    return str(e["prediction_id"]).encode(), json.dumps(e).encode()


def dead_letters(bootstrap: str, topic: str, expected: int) -> list[Any]:
    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
        max_partition_fetch_bytes=BIG,
        fetch_max_bytes=BIG,
    )
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        got += list(c)
    c.close()
    return got


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def run_to_the_end(
    kafka: Any,
    tmp_path: Path,
    predictions: tuple[str, list[tuple[bytes, bytes | None]]],
    labels: tuple[str, list[dict[str, Any]]],
    dlq: str,
) -> tuple[MonitorProcess, str, int]:
    """Produce, run the monitor until it has consumed both topics, scrape ``/metrics``, stop
    it (exit 0): the process, its metrics text and its peak RSS."""
    (pred, stream), (lab, events) = predictions, labels
    send(kafka.bootstrap, pred, stream)
    send(kafka.bootstrap, lab, [encoded(e) for e in events])
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab, dlq=dlq).start()
    m.wait_ready()
    wait_consumed(m.checkpoint, end_offsets(kafka.bootstrap, [pred, lab]), procs=[m])
    code, metrics = m.get("/metrics")
    assert code == 200
    assert m.proc is not None
    rss = peak_rss(m.proc.pid)
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    return m, metrics, rss


def test_hostile_records_are_dead_lettered_and_the_rest_counted(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # one partition: which 49 long values get a group of their own before the 50-group cap
    # folds the rest into __other__ depends on arrival order, which replay keeps
    pred, lab, dlq = make_topics(kafka.bootstrap, partitions=1)
    preds, labels = make_events(21, n=3000)
    t0 = preds[0]["timestamp"]
    # valid but oversized values: one group per distinct value, under a shortened name
    long_values = [
        {**preds[i], "attributes": {"sex": f"{i:05d}" + "v" * 10_000, "age": 30}}
        for i in range(300)
    ]
    control = {**preds[300], "attributes": {"sex": "\x1b[31mX\n\x00", "age": 40}}
    valid = [*long_values, control, *preds[301:]]
    ok = dict(preds[0])

    def with_raw(field: str, raw: bytes) -> bytes:
        return json.dumps({**ok, field: "@@"}).encode().replace(b'"@@"', raw)

    hostile: list[tuple[str, bytes | None]] = [
        ("tombstone", None),
        ("not_object", b"null"),
        ("too_deep", b"[" * 1000 + b"]" * 1000),
        ("too_deep", with_raw("extra", b"[" * 100_000 + b"]" * 100_000)),
        ("bad_timestamp", with_raw("timestamp", b"1" + b"0" * 400)),
        ("bad_score", with_raw("score", b"9" * 400)),
        ("not_json", b'{"prediction_id": "\xff\xfe"}'),
        ("id_too_long", json.dumps({**ok, "prediction_id": "i" * 1_000_000}).encode()),
        (
            "record_too_large",
            json.dumps({**ok, "attributes": {"sex": "x" * 5_000_000, "age": 30}}).encode(),
        ),
        ("timestamp_in_future", json.dumps({**ok, "timestamp": time.time() + 23 * 3600}).encode()),
    ]
    stream: list[tuple[bytes, bytes | None]] = []
    for i, e in enumerate(valid):
        stream.append(encoded(e))
        if i % 250 == 100 and hostile:
            reason, value = hostile.pop()
            stream.append((f"bad-{reason}-{i}".encode(), value))
    stream += [(b"bad-rest", v) for _, v in hostile]
    expected = Counter(
        r
        for r in [
            "tombstone",
            "not_object",
            "too_deep",
            "too_deep",
            "bad_timestamp",
            "bad_score",
            "not_json",
            "id_too_long",
            "record_too_large",
            "timestamp_in_future",
        ]
    )
    m, metrics, rss = run_to_the_end(kafka, tmp_path, (pred, stream), (lab, labels), dlq)
    log = m.log.read_text()
    assert not own_tracebacks(log), log[-3000:]

    got = dead_letters(kafka.bootstrap, dlq, sum(expected.values()))
    reasons = Counter(dict(r.headers)["fm.reason"].decode() for r in got)
    assert reasons == expected
    big = [r for r in got if dict(r.headers)["fm.reason"] == b"record_too_large"]
    headers = dict(big[0].headers)
    assert headers["fm.truncated"] == b"true"
    assert int(headers["fm.original.size"]) > 5_000_000 > len(big[0].value)
    tomb = [r for r in got if dict(r.headers)["fm.reason"] == b"tombstone"]
    assert tomb[0].value == b""
    for r in got:  # each keeps its record's key, and says when that record was written
        assert r.key is not None and r.key.startswith(b"bad-"), r.key
        assert abs(int(dict(r.headers)["fm.source.timestamp"]) / 1000 - time.time()) < 3600

    # the valid events, long values and control characters included, count as in replay
    expected_report = replay_report(tmp_path, m.config, valid, labels)
    assert status(m.config, m.checkpoint)["models"] == expected_report["models"]
    shortened = [
        line
        for line in metrics.splitlines()
        if line.startswith('fairness_group_values_shortened_total{attribute="sex"')
    ]
    assert shortened and float(shortened[0].split()[-1]) >= 49  # the 50-group cap folds the rest
    assert 'fairness_dead_letters_total{outcome="truncated"} 1.0' in metrics
    print(f"\n/metrics {len(metrics.encode()) / 2**20:.2f} MiB, peak RSS {rss / 2**20:.0f} MiB")
    assert len(metrics.encode()) < METRICS_BOUND
    assert rss < RSS_BOUND
    assert t0  # the stream started at the events' own time


def test_one_event_a_day_ahead_moves_no_window(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """400 events of the last hour and one stamped now+23 h (a producer with a wrong clock):
    the 1 h window holds the same counts as the stream without it; the outlier is
    dead-lettered as timestamp_in_future."""
    pred, lab, dlq = make_topics(kafka.bootstrap, partitions=1)
    now = time.time()
    preds, labels = make_events(22, n=400, span=3000)
    shift = now - 3300 - min(p["timestamp"] for p in preds)
    for e in preds + labels:
        e["timestamp"] = min(e["timestamp"] + shift, now - 60)
    outlier = {**preds[0], "prediction_id": "skewed", "timestamp": now + 23 * 3600}
    stream = [encoded(e) for e in preds[:10]] + [encoded(outlier)]
    stream += [encoded(e) for e in preds[10:]]
    m, metrics, _ = run_to_the_end(kafka, tmp_path, (pred, stream), (lab, labels), dlq)
    got = dead_letters(kafka.bootstrap, dlq, 1)
    assert [dict(r.headers)["fm.reason"] for r in got] == [b"timestamp_in_future"]
    assert json.loads(got[0].value)["prediction_id"] == "skewed"
    assert (
        status(m.config, m.checkpoint)["models"]
        == replay_report(tmp_path, m.config, preds, labels)["models"]
    )
    late = [line for line in metrics.splitlines() if 'outcome="late"' in line and pred in line]
    assert late and float(late[0].split()[-1]) == 0


def test_a_missing_dead_letter_topic_refuses_to_start(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pred, lab, _ = make_topics(kafka.bootstrap, partitions=1)
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab, dlq="no-such-dlq")
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "monitor", "run", "-c", str(m.config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert time.monotonic() - started < 30
    assert "dead_letter_topic 'no-such-dlq' does not exist" in out.stderr
    assert "Traceback" not in out.stderr
