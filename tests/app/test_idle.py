"""An owned partition is idle — it holds no alert boundary back — only once no decision came
from it for ``kafka.idle_partition_timeout``, it is not paused, and it is read to its end."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from kafka import TopicPartition

from monitor.app.idle import IdlePartitions, arrivals_of
from tests.app.fake_consumer import FakeConsumer
from tests.app.test_label_ends import Clock
from tests.app.test_ownership import PRED, cfg, owner, tps

P0, P1 = TopicPartition(PRED, 0), TopicPartition(PRED, 1)


ARRIVED: dict[int, np.ndarray] = {}  # what the engine counted: decisions per model


def setup(timeout: float = 300.0) -> tuple[IdlePartitions, FakeConsumer, Clock, Any]:
    consumer = FakeConsumer(tps(0, 1), high={P0: 10, P1: 1})
    own = owner(cfg(), {}, consumer)
    own.restore(tps(0, 1))
    own.next_offsets.update({P0: 10, P1: 1})
    clock = Clock()
    counts = {0: np.zeros(2, np.int64), 1: np.zeros(2, np.int64)}
    engine = SimpleNamespace(partitions={p: SimpleNamespace(arrived=a) for p, a in counts.items()})
    idle = IdlePartitions(own, engine, clock, timeout)  # type: ignore[arg-type]
    return idle, consumer, clock, counts


def test_a_partition_is_idle_for_a_model_only_after_the_timeout_without_its_decisions() -> None:
    idle, _, clock, counts = setup()
    idle.saw()
    assert not idle(1, 0)  # the timer starts when the partition is first asked about
    clock.t += 299
    assert not idle(1, 0)
    clock.t += 2
    assert idle(1, 0)
    counts[1][0] += 1  # a decision of model 0: busy again, for another timeout
    idle.saw()
    assert not idle(1, 0)
    clock.t += 301
    assert idle(1, 0)
    idle.saw()  # a poll without decisions (labels only) changes nothing
    assert idle(1, 0)
    counts[1][1] += 5  # another model's decisions keep that model busy, not this one
    idle.saw()
    assert idle(1, 0) and not idle(1, 1)


def test_a_partitions_first_decisions_make_it_busy_at_once() -> None:
    """Found in review: the first look at a partition only noted its counts, so decisions it
    already had (its first ones, or the first after a restore) did not make it busy; a
    partition whose timer ran out before it had any data stayed idle through them."""
    idle, _, clock, counts = setup()
    assert idle(0, 0) is idle(0, 1) is False  # asked before any look: the timers start
    clock.t += 301
    assert idle(0, 0) and idle(0, 1)  # quiet, read to its end
    counts[0][0] += 3  # its first decisions, applied before the first look
    idle.saw()
    assert not idle(0, 0) and idle(0, 1)


def test_a_backlog_or_a_pause_is_never_idle() -> None:
    """A partition behind its highwater (records to read) or paused (a restore, a failing
    checkpoint store) is waited for, however long it has been quiet."""
    idle, consumer, clock, _ = setup()
    own = idle.own
    idle(0, 0), idle(1, 0)
    clock.t += 1000
    assert idle(0, 0) and idle(1, 0)
    consumer.high[P1] = 5  # four records fetched and not yet read
    assert not idle(1, 0)
    own.next_offsets[P1] = 5
    assert idle(1, 0)
    consumer.pause(P0)
    assert not idle(0, 0)
    consumer.resume(P0)
    assert idle(0, 0)


def test_a_timeout_of_zero_means_never() -> None:
    idle, _, clock, _ = setup(timeout=0)
    idle(1, 0)
    clock.t += 10**9
    assert not idle(1, 0)


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
    last, ledger = run(lambda p, m: p == 1)
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
    idle, consumer, clock, _ = setup()
    own = idle.own
    idle(1, 0)
    clock.t += 1000
    assert idle(1, 0)
    consumer.tps -= tps(1)  # taken away, revocation still queued
    assert not idle(1, 0)
    own.revoke({1}, None)
    idle.saw()
    clock.t += 5000
    consumer.tps |= tps(1)  # given back, nothing fetched yet: no highwater
    del consumer.high[P1]
    own.restore(tps(1))
    assert not idle(1, 0)  # the timer starts afresh...
    clock.t += 1000
    assert not idle(1, 0)  # ...and a partition not fetched yet is never idle
    consumer.high[P1] = 0  # fetched: nothing there
    assert idle(1, 0)


def test_a_partition_busy_with_another_model_does_not_hold_this_ones_boundaries_back() -> None:
    """Found in review: idleness was per partition, the watermark per model. Partition 1 got
    one decision of model a, then only model b's: busy, it held a's boundaries back for good
    (no page for a, its label ledger growing, evaluation_behind reading 0). Idle per model,
    a is judged on to partition 0's head after the timeout; b is judged throughout."""
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.app.published import alerts_behind
    from monitor.config.spec import parse_config
    from monitor.ingest.events import LabelBatch, PredictionBatch
    from monitor.state.engine import Engine
    from tests.helpers import T0

    model = {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m", "lateness": "5m"}
    config = parse_config({"models": {"a": model, "b": model}})

    def minute(engine: Engine, p: int, minute: int, key0: int, model: int, n: int = 10) -> None:
        keys = np.arange(key0, key0 + n, dtype=np.uint64)
        reg = engine.registries[model]
        g = np.array([reg.index(0, "xy"[i % 2]) for i in range(n)], np.int32).reshape(-1, 1)
        pb = PredictionBatch(key=keys, model=np.full(n, model, np.uint16),
                             ts=T0 + minute * 60 + np.linspace(0, 59, n),
                             pred=(np.arange(n) % 3 == 0).astype(np.uint8),
                             score=np.full(n, np.nan), groups=g)  # fmt: skip
        engine.apply(p, pb, LabelBatch())

    def run(per_model: bool) -> tuple[int, int, float]:
        engine = Engine(config)
        idle, _, clock, _ = setup()
        idle.arrivals = arrivals_of(engine)
        ev = AlertEvaluator(config, engine)
        # as it was: a partition with any decision is busy for every model
        ev.idle = idle if per_model else (lambda p, m: idle(p, 0) and idle(p, 1))
        for t in range(120):
            for m in (0, 1):
                minute(engine, 0, t, 1 + 100 * t + 10 * m, m)
            minute(engine, 1, t if t else 0, 10**9 + 100 * t, 1 if t else 0)  # a once, then b
            idle.saw()
            clock.t += 60
            ev.advance()
        behind = alerts_behind(engine, ev)["a"]
        return ev.last[0] - int(T0 // 60), ev.last[1] - int(T0 // 60), behind

    stuck_a, b, behind = run(per_model=False)
    assert stuck_a <= 1 and b >= 118 and behind > 100 * 60  # and the stall now shows
    a, b, behind = run(per_model=True)
    assert a >= 118 and b >= 118 and behind <= 60
