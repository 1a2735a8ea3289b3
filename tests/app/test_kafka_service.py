"""`fairness-monitor run` against a real Apache Kafka broker.

Every test runs the monitor as a child process, exactly as deployed, and compares the counts
in its checkpoint with the file `replay` of the same events (the uninterrupted reference).
"""

from __future__ import annotations

import random
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.app.test_replay import make_events
from tests.helpers import wait_for
from tests.kafka_helpers import (
    MonitorProcess,
    checkpoint_offsets,
    create_topics,
    end_offsets,
    own_tracebacks,
    produce,
    replay_report,
    settled_end_offsets,
    status,
    wait_consumed,
    wait_progress,
)

pytestmark = pytest.mark.integration


def topics(kafka, partitions: int = 3, labels_partitions: int | None = None) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:8]
    pred, lab = f"pred-{tag}", f"lab-{tag}"
    create_topics(
        kafka.bootstrap,
        {pred: partitions, lab: labels_partitions or partitions},
        client=kafka.client,
    )
    return pred, lab


def shuffled_labels(labels: list[dict], seed: int) -> list[dict]:
    """Labels out of order: each moved by a random amount."""
    rng = random.Random(seed)
    keyed = [(i + rng.uniform(-200, 200), e) for i, e in enumerate(labels)]
    return [e for _, e in sorted(keyed, key=lambda x: x[0])]


def assert_same_models(got: dict, expected: dict) -> None:
    assert got["models"] == expected["models"]


def broker(request: pytest.FixtureRequest, name: str) -> Any:
    """The Apache Kafka test broker, or Tansu (the demo's broker): same contract."""
    return request.getfixturevalue("kafka" if name == "apache" else "tansu")


def session_ms(name: str) -> int:
    from tests.broker import Tansu

    return Tansu.SESSION_TIMEOUT_MS if name == "tansu" else 10_000


def consume_to_the_end_like_replay(
    m: MonitorProcess,
    kafka: Any,
    tmp_path: Path,
    preds: list[dict],
    labels: list[dict],
    before_stop: Callable[[], object] | None = None,
) -> dict:
    """Let a started monitor read both topics to their end, stop it with SIGTERM, and check
    its checkpoint against the file replay of the same events; returns its status.
    ``before_stop`` is called once everything is consumed, while the monitor still runs."""
    m.wait_ready()
    pred, lab = m.pred, m.lab
    ends = settled_end_offsets(
        kafka.bootstrap, {pred: len(preds), lab: len(labels)}, client=kafka.client
    )
    wait_consumed(m.checkpoint, ends, procs=[m])
    if before_stop is not None:
        before_stop()
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    got = status(m.config, m.checkpoint)
    assert got["counters"]["predictions"] == len(preds)
    assert got["counters"]["labels"] == len(labels)
    assert_same_models(got, replay_report(tmp_path, m.config, preds, labels))
    return got


@pytest.mark.parametrize("flavour", ["apache", "tansu"])
def test_counts_equal_replay(request: pytest.FixtureRequest, flavour: str, tmp_path: Path) -> None:
    kafka = broker(request, flavour)
    pred, lab = topics(kafka)
    preds, labels = make_events(11, n=4000)
    half = len(labels) // 2
    produce(kafka.bootstrap, pred, preds[: len(preds) // 2])
    produce(kafka.bootstrap, lab, shuffled_labels(labels[:half], 1))  # some before predictions
    produce(kafka.bootstrap, pred, preds[len(preds) // 2 :])
    produce(kafka.bootstrap, lab, shuffled_labels(labels[half:], 2))
    m = MonitorProcess(
        tmp_path,
        kafka.bootstrap,
        pred=pred,
        lab=lab,
        session_timeout_ms=session_ms(flavour),
    ).start()
    consume_to_the_end_like_replay(m, kafka, tmp_path, preds, labels)


def test_crash_at_random_moments_loses_and_doubles_nothing(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pred, lab = topics(kafka)
    preds, labels = make_events(12, n=120_000)  # 120k predictions + ~96k labels > 200k events
    produce(kafka.bootstrap, pred, preds)
    produce(kafka.bootstrap, lab, labels)
    assert len(preds) + len(labels) >= 200_000
    target = end_offsets(kafka.bootstrap, [pred, lab])
    total = sum(target.values())
    rng = random.Random(5)
    m = MonitorProcess(
        tmp_path,
        kafka.bootstrap,
        pred=pred,
        lab=lab,
        checkpoint_every=10_000,  # progress visible in steps of ~5% of the stream
    )
    # Kill moments follow the progress, not the clock (the monitor reads ~100 k records/s
    # here: a timer would often kill it after the end or before it starts reading): each run
    # is killed once its checkpoint has moved a random 3-8% of the stream past where it
    # started, after a random extra delay. Restarts resume from the last checkpoint, so the
    # records read since it are read and applied again: that must not double count.
    progress = []  # (checkpointed when started, when killed)
    for _ in range(6):
        before = sum(checkpoint_offsets(m.checkpoint).values())
        m.start()
        mark = min(before + rng.uniform(0.03, 0.08) * total, 0.9 * total)
        wait_progress(m.checkpoint, mark, procs=[m])
        time.sleep(rng.uniform(0.0, 0.1))  # jitter of the kill moment, not a wait
        m.signal(signal.SIGKILL)
        m.wait(10)
        progress.append((before, sum(checkpoint_offsets(m.checkpoint).values())))
    mid_stream = [(a, b) for a, b in progress if a < b < total]
    assert len(mid_stream) >= 5, (progress, total)  # killed while consuming, not after
    m.start()
    wait_consumed(m.checkpoint, target, timeout=240, procs=[m])
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    got = status(m.config, m.checkpoint)
    expected = replay_report(tmp_path, m.config, preds, labels)
    assert got["counters"]["predictions"] == len(preds)
    assert got["counters"]["duplicate_predictions"] == 0
    assert_same_models(got, expected)


def test_sigterm_exits_cleanly_with_a_checkpoint_and_resumes(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pred, lab = topics(kafka)
    preds, labels = make_events(13, n=150_000)
    produce(kafka.bootstrap, pred, preds)
    produce(kafka.bootstrap, lab, labels)
    target = end_offsets(kafka.bootstrap, [pred, lab])
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab).start()
    m.wait_ready()
    # SIGUSR1 (runbook: "the monitor seems stuck"): every thread's stack in the log, and on
    m.signal(signal.SIGUSR1)
    m.wait_log(r"Thread 0x[0-9a-f]+ \(most recent call first\):\n(  File .*\n)+", timeout=30)
    # the main loop's stack is in it (the threads are written one after another: wait for it,
    # a read right after the first thread's block missed it once on a loaded machine)
    m.wait_log(r"  File \S*monitor/app/service\.py", timeout=30)
    assert m.proc is not None and m.proc.poll() is None, "SIGUSR1's default would end it"
    wait_progress(m.checkpoint, 0.2 * sum(target.values()), procs=[m])  # heavy consumption
    t = time.monotonic()
    m.signal(signal.SIGTERM)
    assert m.wait(10) == 0
    assert time.monotonic() - t < 10
    saved = checkpoint_offsets(m.checkpoint)
    assert sum(saved.values()) > 0
    assert sum(saved.values()) < sum(target.values()), "stopped before the end, as intended"
    m.start()
    wait_consumed(m.checkpoint, target, timeout=180, procs=[m])
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    assert_same_models(
        status(m.config, m.checkpoint), replay_report(tmp_path, m.config, preds, labels)
    )


@pytest.mark.parametrize("codecs", [("gzip", "lz4"), ("zstd", "snappy")])
def test_compressed_topics_count_like_replay(kafka, tmp_path: Path, codecs) -> None:  # type: ignore[no-untyped-def]
    """Producers often compress (lz4 and zstd are common). The monitor's record reader
    decompresses every codec Kafka has; kafka-python alone reads only gzip without extra
    packages. Predictions and labels are each written half with one codec, half with the
    other."""
    pred, lab = topics(kafka)
    preds, labels = make_events(13, n=3000)
    for topic, events in ((pred, preds), (lab, labels)):
        half = len(events) // 2
        for codec, part in zip(codecs, (events[:half], events[half:]), strict=True):
            produce(kafka.bootstrap, topic, part, compression=codec)
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab).start()
    got = consume_to_the_end_like_replay(m, kafka, tmp_path, preds, labels)
    assert got["counters"]["invalid"] == 0


@pytest.mark.parametrize("flavour", ["apache", "tansu"])
def test_second_instance_joins_and_leaves_without_loss(
    request: pytest.FixtureRequest, flavour: str, tmp_path: Path
) -> None:
    kafka = broker(request, flavour)
    pred, lab = topics(kafka, partitions=4)
    preds, labels = make_events(14, n=60_000)
    produce(kafka.bootstrap, pred, preds[:30_000])
    produce(kafka.bootstrap, lab, [e for e in labels if int(e["prediction_id"][3:]) < 30_000])
    group = f"g-{pred}"
    ms = session_ms(flavour)
    a = MonitorProcess(
        tmp_path,
        kafka.bootstrap,
        name="a",
        pred=pred,
        lab=lab,
        group=group,
        session_timeout_ms=ms,
    )
    b = MonitorProcess(
        tmp_path,
        kafka.bootstrap,
        name="b",
        pred=pred,
        lab=lab,
        group=group,
        checkpoint=a.checkpoint,
        session_timeout_ms=ms,
    )
    a.start().wait_ready()
    b.start()
    b.wait_log(r"partition \d+ restored", timeout=90)  # b owns partitions now
    first_half = 30_000 + sum(int(e["prediction_id"][3:]) < 30_000 for e in labels)
    produce(kafka.bootstrap, pred, preds[30_000:])
    produce(kafka.bootstrap, lab, [e for e in labels if int(e["prediction_id"][3:]) >= 30_000])
    # consumption of the second half has begun while both own partitions
    wait_progress(a.checkpoint, first_half + 1, procs=[a, b])
    t_stop = time.monotonic()
    b.signal(signal.SIGTERM)  # leaves the group: its partitions move back to a
    assert b.wait(15) == 0
    print(f"b stopped {time.monotonic() - t_stop:.1f}s after SIGTERM")
    ends = settled_end_offsets(
        kafka.bootstrap, {pred: len(preds), lab: len(labels)}, client=kafka.client
    )
    wait_consumed(a.checkpoint, ends, procs=[a])
    a.signal(signal.SIGTERM)
    assert a.wait(15) == 0
    assert "restored" in b.log.read_text()  # b really owned partitions
    got = status(a.config, a.checkpoint)
    assert got["counters"]["predictions"] == len(preds)
    assert_same_models(got, replay_report(tmp_path, a.config, preds, labels))


def test_mismatched_partition_counts_refuse_to_start(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pred, lab = topics(kafka, partitions=3, labels_partitions=2)
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab).start()
    assert m.wait(60) == 2
    text = m.log.read_text()
    assert f"prediction topic '{pred}' has 3 partitions" in text
    assert f"label topic '{lab}' has 2" in text
    assert own_tracebacks(text) == []


def test_poison_records_go_to_the_dead_letter_topic(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kafka import KafkaConsumer

    pred, lab = topics(kafka, partitions=2)
    dlq = f"dlq-{pred}"
    from tests.kafka_helpers import create_topics as ct

    ct(kafka.bootstrap, {dlq: 1})
    preds, labels = make_events(15, n=4000)
    rng = random.Random(3)
    mixed: list = []
    bad = 0
    for e in preds:
        mixed.append(e)
        if rng.random() < 0.05:
            mixed.append(
                rng.choice(
                    [
                        b"{oops",
                        b'{"prediction_id": "x"}',
                        b"[]",
                        b'{"prediction_id":"y","timestamp":"never","prediction":1}',
                    ]
                )
            )
            bad += 1
    produce(kafka.bootstrap, pred, mixed)
    produce(kafka.bootstrap, lab, labels)
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab, dlq=dlq).start()
    m.wait_ready()
    wait_consumed(m.checkpoint, end_offsets(kafka.bootstrap, [pred, lab]), procs=[m])
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    c = KafkaConsumer(
        dlq,
        bootstrap_servers=kafka.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    got = list(c)
    c.close()
    assert len(got) == bad
    reasons = set()
    for r in got:
        h = dict(r.headers)
        reasons.add(h["fm.reason"].decode())
        assert h["fm.source.topic"].decode() == pred
        assert int(h["fm.source.offset"]) >= 0 and h["fm.source.partition"] in (b"0", b"1")
    assert (
        reasons
        <= {"not_json", "not_object", "missing_timestamp", "bad_timestamp", "missing_prediction"}
        and len(reasons) >= 3
    )
    # the valid ones are counted exactly
    assert_same_models(
        status(m.config, m.checkpoint), replay_report(tmp_path, m.config, preds, labels)
    )


def test_all_garbage_trips_the_invalid_ratio_limit(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pred, lab = topics(kafka, partitions=1)
    produce(kafka.bootstrap, pred, [b'{"id": %d, "when": "now"}' % i for i in range(3000)])
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab).start()
    assert m.wait(60) == 3
    text = m.log.read_text()
    assert "were invalid" in text and "max_invalid_ratio" in text and "missing_id" in text
    assert own_tracebacks(text) == []


def test_broker_outage_not_ready_then_recovers_exactly(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if not hasattr(kafka, "proc"):
        pytest.skip("needs a broker the tests started (not FM_KAFKA_BOOTSTRAP)")
    pred, lab = topics(kafka, partitions=2)
    preds, labels = make_events(16, n=40_000)
    produce(kafka.bootstrap, pred, preds[:20_000])
    produce(kafka.bootstrap, lab, [e for e in labels if int(e["prediction_id"][3:]) < 20_000])
    m = MonitorProcess(tmp_path, kafka.bootstrap, pred=pred, lab=lab).start()
    m.wait_ready()
    wait_progress(m.checkpoint, 1, procs=[m])  # consuming (and checkpointing) before the outage
    kafka.stop()
    try:

        def not_ready() -> bool:
            # alive: the loop keeps running, no crash (a slow answer under load is not a death)
            assert m.proc is not None and m.proc.poll() is None, "the monitor exited"
            return m.get("/readyz")[0] == 503

        # readiness must drop while the broker is unreachable
        wait_for(not_ready, 60, "/readyz to fail during the outage", every=0.5)
        wait_for(lambda: m.get("/healthz")[0] == 200, 30, "/healthz to answer 200 in the outage")
    finally:
        kafka.start()  # whatever happened: the session's broker serves the next tests
    produce(kafka.bootstrap, pred, preds[20_000:])
    produce(kafka.bootstrap, lab, [e for e in labels if int(e["prediction_id"][3:]) >= 20_000])
    m.wait_ready(timeout=120)
    wait_consumed(m.checkpoint, end_offsets(kafka.bootstrap, [pred, lab]), timeout=180, procs=[m])
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    got = status(m.config, m.checkpoint)
    assert got["counters"]["predictions"] == len(preds)
    assert_same_models(got, replay_report(tmp_path, m.config, preds, labels))


@pytest.mark.parametrize("flavour", ["apache", "tansu"])
def test_end_offsets_helper_reads_the_log_end(request: pytest.FixtureRequest, flavour: str) -> None:
    """The tests' notion of "everything produced" is the log end on both brokers (Tansu's
    ListOffsets answers the last batch's base offset + 1; the helper reads fetch watermarks)."""
    kafka = broker(request, flavour)
    pred, lab = topics(kafka, partitions=2)
    preds, _ = make_events(16, n=600)
    for part in (preds[:200], preds[200:400], preds[400:]):  # several batches per partition
        produce(kafka.bootstrap, pred, part)
    ends = end_offsets(kafka.bootstrap, [pred, lab])
    assert sum(o for (t, _), o in ends.items() if t == pred) == len(preds)
    assert all(o == 0 for (t, _), o in ends.items() if t == lab)


def test_a_fresh_start_reads_each_record_once(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Partitions wait (paused) until restored and sought: the fetcher's first read is not
    thrown away and read again (it was: 10,000 records per partition, ~3% of a benchmark)."""
    read_each_record_once_in_process(kafka, tmp_path)


def test_a_join_completed_while_the_loop_is_busy_is_applied(
    kafka: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stall of the fresh-start and SIGTERM tests under load, provoked: every poll returns
    before the group join has completed, and the loop polls again only once it has. The
    monitor is assigned by that join and reads everything once (kafka-python 3.0.12 alone
    re-sent each finished join, or forgot it when a metadata change had started it, and the
    monitor ended owning no partition)."""
    import monitor.app.service as service
    from monitor.ingest.kafka import make_consumer
    from tests.ingest.test_kafka_join import wait_join_done

    made = []

    def busy_consumer(spec: Any) -> Any:
        consumer = make_consumer(spec)
        poll = consumer.poll

        def busy_poll(timeout_ms: int = 0, **kw: Any) -> Any:
            out = poll(timeout_ms=1, **kw)  # returns before a join completes...
            wait_join_done(consumer)  # ...and the loop is busy until it has
            return out

        consumer.poll = busy_poll
        made.append(consumer)
        return consumer

    monkeypatch.setattr(service, "make_consumer", busy_consumer)
    read_each_record_once_in_process(kafka, tmp_path)
    joins = made[0].finished_joins
    assert joins is None or joins.finished >= 1  # None: a kafka-python that needs no help


def read_each_record_once_in_process(kafka: Any, tmp_path: Path) -> None:
    """A monitor on a thread of the test reads two fresh topics to their end: each record is
    delivered once (nothing fetched twice) and counted once."""
    import threading

    from monitor.app.service import Monitor
    from monitor.config.spec import load_config
    from tests.kafka_helpers import MODEL

    pred, lab = topics(kafka, partitions=2)
    preds, labels = make_events(21, n=30_000)
    produce(kafka.bootstrap, pred, preds)
    produce(kafka.bootstrap, lab, labels)
    target = {(t, p): o for (t, p), o in end_offsets(kafka.bootstrap, [pred, lab]).items()}
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        MODEL
        + f"""
kafka: {{bootstrap_servers: {kafka.bootstrap}, group_id: g-{pred}, predictions_topic: {pred},
        labels_topic: {lab}, max_poll_records: 2000}}
checkpoint: {{path: {tmp_path / "cp.sqlite"}}}
"""
    )
    delivered: list[int] = []

    class Counting(Monitor):
        def _process(self, batch: dict[Any, list[Any]], stale: Any = ()) -> None:
            delivered.append(sum(len(r) for r in batch.values()))
            super()._process(batch, stale)

    m = Counting(load_config(cfg))
    th = threading.Thread(target=m.run, daemon=True)
    th.start()

    def read_to_the_end() -> bool:
        got = {(tp.topic, tp.partition): o for tp, o in dict(m.ownership.next_offsets).items()}
        return all(got.get(k, -1) >= v for k, v in target.items())

    def where() -> str:  # what the monitor had when it timed out (a stalled group join?)
        own = m.ownership
        got = {f"{tp.topic}[{tp.partition}]": o for tp, o in dict(own.next_offsets).items()}
        return (
            f"the monitor to read both topics to their end {target}: owned {sorted(own.owned)}, "
            f"restored {not own.pending}, next offsets {got}, delivered {sum(delivered)}"
        )

    wait_for(read_to_the_end, 120, where)
    m.request_stop()
    th.join(30)
    assert not th.is_alive()
    assert sum(target.values()) == len(preds) + len(labels)
    assert sum(delivered) == len(preds) + len(labels)  # nothing fetched twice
    assert m.engine.counters()["predictions"] == len(preds)
