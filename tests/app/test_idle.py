"""An owned partition is idle — it holds no alert boundary back — only once no decision came
from it for ``kafka.idle_partition_timeout``, it is not paused, and it is read to its end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition

from monitor.app.idle import IdlePartitions
from monitor.app.ownership import Inputs
from monitor.ingest.events import ConsumerBatch
from tests.app.fake_consumer import FakeConsumer
from tests.app.test_label_ends import Clock
from tests.app.test_ownership import PRED, cfg, owner, tps

P0, P1 = TopicPartition(PRED, 0), TopicPartition(PRED, 1)


def setup(timeout: float = 300.0) -> tuple[IdlePartitions, FakeConsumer, Clock, Any]:
    consumer = FakeConsumer(tps(0, 1), high={P0: 10, P1: 1})
    own = owner(cfg(), {}, consumer)
    own.restore(tps(0, 1))
    own.next_offsets.update({P0: 10, P1: 1})
    clock = Clock()
    return IdlePartitions(own, clock, timeout), consumer, clock, own


def decisions(p: int, n: int = 1) -> dict[int, Inputs]:
    recs = [type("R", (), {"value": b"{}", "offset": i, "timestamp": 0})() for i in range(n)]
    return {p: Inputs(predictions=ConsumerBatch(recs, PRED, p))}


def test_a_partition_is_idle_only_after_the_timeout_without_decisions() -> None:
    idle, _, clock, _ = setup()
    assert not idle(1)  # the timer starts when the partition is first asked about
    clock.t += 299
    assert not idle(1)
    clock.t += 2
    assert idle(1)
    idle.saw(decisions(1))  # a decision: busy again, for another timeout
    assert not idle(1)
    clock.t += 301
    assert idle(1)
    idle.saw({1: Inputs()})  # a poll without decisions (labels only) changes nothing
    assert idle(1)


def test_a_backlog_or_a_pause_is_never_idle() -> None:
    """A partition behind its highwater (records to read) or paused (a restore, a failing
    checkpoint store) is waited for, however long it has been quiet."""
    idle, consumer, clock, own = setup()
    idle(0), idle(1)
    clock.t += 1000
    assert idle(0) and idle(1)
    consumer.high[P1] = 5  # four records fetched and not yet read
    assert not idle(1)
    own.next_offsets[P1] = 5
    assert idle(1)
    consumer.pause(P0)
    assert not idle(0)
    consumer.resume(P0)
    assert idle(0)


def test_a_timeout_of_zero_means_never() -> None:
    idle, _, clock, _ = setup(timeout=0)
    idle(1)
    clock.t += 10**9
    assert not idle(1)


def test_one_record_on_an_idle_partition_no_longer_stops_the_alerts_or_grows_the_ledger() -> None:
    """Found by a review: one prediction on partition 1, then nothing there, held the low
    watermark for good — no boundary judged again, and the label ledger of the busy partition,
    settled only by those reads, grew by every label (10,721 entries after 10 h)."""
    import numpy as np

    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.config.spec import parse_config
    from monitor.ingest.events import LabelBatch, PredictionBatch
    from monitor.state.engine import Engine
    from tests.helpers import T0

    model = {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m", "lateness": "5m"}
    config = parse_config({"models": {"m": model}})

    def minute(engine: Engine, p: int, m: int, key0: int, n: int) -> None:
        keys = np.arange(key0, key0 + n, dtype=np.uint64)
        ts = T0 + m * 60 + np.linspace(0, 59, n)
        reg = engine.registries[0]
        g = np.array([reg.index(0, "ab"[i % 2]) for i in range(n)], np.int32).reshape(-1, 1)
        pb = PredictionBatch(key=keys, model=np.zeros(n, np.uint16), ts=ts,
                             pred=(np.arange(n) % 3 == 0).astype(np.uint8),
                             score=np.full(n, np.nan), groups=g)  # fmt: skip
        old = keys - 20 * n  # the labels of decisions made twenty minutes before
        lb = LabelBatch(old[old > 0], ts[old > 0], np.ones(int((old > 0).sum()), np.uint8))
        engine.apply(p, pb, lb)

    def run(idle: Any) -> tuple[int, int]:
        engine = Engine(config)
        ev = AlertEvaluator(config, engine)
        ev.idle = idle
        for m in range(300):
            minute(engine, 0, m, 1 + 10 * m, 10)
            if m == 60:
                minute(engine, 1, 0, 10**9, 1)  # one ordinary decision, an hour old
            ev.advance()
        return ev.last[0] - int(T0 // 60), len(engine.partitions[0].ledgers[0])

    stuck, grown = run(None)  # as before: partition 1 holds every boundary back
    assert stuck <= 60 and grown > 2000
    last, ledger = run(lambda p: p == 1)
    assert last == 299 and ledger < 200


@pytest.mark.integration
def test_a_partition_that_had_one_record_does_not_stop_the_alerts_on_kafka(
    kafka: Any, tmp_path: Path
) -> None:
    """On a real broker: partition 1 of the predictions topic holds one decision (an hour
    older than the rest), partition 0 three hours of them. With the timeout at 2 s the
    boundaries are judged up to partition 0's head; before, they stopped at partition 1's."""
    import json
    import threading
    import uuid

    from kafka import KafkaProducer

    from monitor.app.service import Monitor
    from monitor.config.spec import load_config
    from tests.app.test_replay import make_events
    from tests.helpers import T0, wait_for
    from tests.kafka_helpers import create_topics

    tag = uuid.uuid4().hex[:8]
    pred, lab = f"pred-{tag}", f"lab-{tag}"
    create_topics(kafka.bootstrap, {pred: 2, lab: 2}, client=kafka.client)
    preds, _ = make_events(5, n=3000, span=3 * 3600)
    stray = {**preds[0], "prediction_id": "stray", "timestamp": T0 - 3600}
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, **kafka.client, acks=1)
    sent = [producer.send(pred, json.dumps(e).encode(), partition=0) for e in preds]
    sent.append(producer.send(pred, json.dumps(stray).encode(), partition=1))
    producer.flush(60)
    producer.close()
    assert all(f.succeeded() for f in sent)
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        f"""
models:
  credit: {{attributes: {{sex: {{}}}}, threshold: 0.5, windows: [1h], bucket: 1m,
            lateness: 5m}}
kafka: {{bootstrap_servers: {kafka.bootstrap}, group_id: g-{pred}, predictions_topic: {pred},
        labels_topic: {lab}, idle_partition_timeout: 2s}}
checkpoint: {{path: {tmp_path / "cp.sqlite"}}}
"""
    )
    m = Monitor(load_config(cfg))
    th = threading.Thread(target=m.run, daemon=True)
    th.start()
    newest = int(max(e["timestamp"] for e in preds) // 60)
    try:
        wait_for(
            lambda: m.evaluator.last.get(0, 0) >= newest - 6,
            120,
            lambda: (
                f"boundaries judged up to {newest - 6} (at {m.evaluator.last}, "
                f"predictions read {m.engine.counters().get('predictions')})"
            ),
        )
    finally:
        m.request_stop()
        th.join(30)
    assert m.engine.partitions[1].rings[0].head == int((T0 - 3600) // 60)  # it was read


def test_a_partition_taken_away_or_given_back_is_not_idle_until_read_to_its_end() -> None:
    """Found by a review: a partition moved away on kafka-python's thread (its revocation not
    drained yet) raised IllegalStateError from its highwater; one given back after more than
    the timeout kept its old timer and was idle at once, its backlog unread, so boundaries
    were judged without it."""
    idle, consumer, clock, own = setup()
    idle(1)
    clock.t += 1000
    assert idle(1)
    consumer.tps -= tps(1)  # taken away, revocation still queued
    assert not idle(1)
    own.revoke({1}, None)
    idle.saw({})
    clock.t += 5000
    consumer.tps |= tps(1)  # given back, nothing fetched yet: no highwater
    del consumer.high[P1]
    own.restore(tps(1))
    assert not idle(1)  # the timer starts afresh...
    clock.t += 1000
    assert not idle(1)  # ...and a partition not fetched yet is never idle
    consumer.high[P1] = 0  # fetched: nothing there
    assert idle(1)
