"""A partition assigned while Kafka cannot give its position (a broker outage during a
rebalance): ``position()`` raising a Kafka error (or giving no answer) mid-restore must neither
escape (the service would exit) nor leave the partition half restored (records lost or counted
twice). It stays owned, paused and not ready with the reason; the position is asked again on
the next loop turns; once Kafka answers, every record is counted exactly once."""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError

from monitor.app.service import Monitor
from monitor.config.spec import parse_config
from monitor.state.checkpoint import PartitionCheckpoint
from monitor.state.engine import Engine
from tests.app.fake_consumer import FakeConsumer, Rec
from tests.helpers import T0, records_accounted

PRED, LAB = "preds", "labels"
P0, L0 = TopicPartition(PRED, 0), TopicPartition(LAB, 0)
N = 30  # predictions; a label for every other one


class OutageConsumer(FakeConsumer):
    """A fake broker log per (topic, partition). ``poll`` hands out the records of each
    assigned, unpaused partition from its fetch position on (kafka-python fetches no paused
    partition); ``position`` raises the queued errors first (None: no answer in time)."""

    def __init__(self, log: dict[TopicPartition, list[Rec]], errors: list[Any]) -> None:
        super().__init__(set(log), high={tp: len(recs) for tp, recs in log.items()})
        self.log, self.errors, self.asked = log, errors, 0

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int | None:
        self.asked += 1
        if self.errors:
            err = self.errors.pop(0)
            if err is None:
                return None
            raise err
        return super().position(tp)

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[Rec]]:
        out = {}
        for tp in sorted(self.tps - self.paused):
            at = self.sought.get(tp)
            records = [] if at is None else self.log[tp][at : at + 7]
            if records:
                out[tp] = records
                self.sought[tp] = records[-1].offset + 1
        return out


def topics() -> dict[TopicPartition, list[Rec]]:
    def rec(offset: int, event: dict[str, Any]) -> Rec:
        return Rec(offset, json.dumps(event).encode(), int(event["timestamp"] * 1000))

    preds = [
        rec(
            i,
            {
                "prediction_id": f"p{i}",
                "model_id": "m",
                "timestamp": T0 + i,
                "attributes": {"g": "ab"[i % 2]},
                "prediction": i % 3 % 2,
            },
        )
        for i in range(N)
    ]
    labels = [
        rec(j, {"prediction_id": f"p{2 * j}", "timestamp": T0 + 2 * j + 1, "label": j % 2})
        for j in range(N // 2)
    ]
    return {P0: preds, L0: labels}


def monitor(tmp_path: Path, consumer: OutageConsumer) -> Monitor:
    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m"}},
            "kafka": {"predictions_topic": PRED, "labels_topic": LAB},
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)
    m.ownership.consumer = m.listener.consumer = consumer
    return m


def turn(m: Monitor) -> None:
    """One turn of ``Monitor.run``'s loop: poll, rebalance events, records."""
    batch = m.polls.poll(m.ownership.consumer)
    restored = m.ownership.apply(m.listener.drain(), partial(m.checkpoint, commit=False))
    if batch:
        m._process(batch, restored)


def test_a_position_error_mid_restore_waits_paused_then_counts_every_record_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    errors = [
        KafkaConnectionError("111 ECONNREFUSED"),
        NodeNotReadyError("node 1"),
        None,  # no answer within the timeout
        KafkaTimeoutError("Failed to get offsets by timestamps in 2000 ms"),
    ]
    consumer = OutageConsumer(topics(), errors)
    m = monitor(tmp_path, consumer)
    m.listener.on_partitions_assigned({P0, L0})  # pauses them, queues the event
    with caplog.at_level(logging.INFO, logger="monitor.app.ownership"):
        for _ in range(4):  # the broker is out: no exception escapes the restore
            turn(m)
            own = m.ownership
            assert own.owned == {0} and not own.pending and own.unknown == {P0, L0}
            assert own.offsets_of(0) == {} and consumer.paused == {P0, L0}  # nothing fetched
            ok, why = m.ready()
            assert not ok and why.startswith("next offset unknown") and "preds[0]" in why
            assert not own.started()  # alerts wait: the partition's data is unread
        assert consumer.asked == 4 and "KafkaTimeoutError" in why  # once per turn, latest reason
        m.checkpoint()  # mid-outage: no offset of an unknown position is written
        cp = m.store.load(0)
        assert cp is not None and cp.offsets == {}
        assert m.engine.counters()["predictions"] == 0

        turn(m)  # Kafka answers: the positions are filled in, the partitions resumed
        assert own.unknown == set() and own.offsets_of(0) == {PRED: 0, LAB: 0}
        assert consumer.paused == set() and m.ready() == (True, "ready: partitions [0]")
        for _ in range(10):
            turn(m)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "position of" in warnings[0].getMessage()  # logged once
    assert warnings[0].exc_info is not None  # with its traceback
    assert any("known again" in r.getMessage() for r in caplog.records)

    counters = m.engine.counters()
    assert own.offsets_of(0) == {PRED: N, LAB: N // 2} and own.started()
    assert counters["predictions"] == N and counters["labels"] == N // 2
    assert counters["duplicate_predictions"] == counters["duplicate_labels"] == 0
    assert records_accounted(counters) == N + N // 2  # each record once: none lost, none twice
    m.checkpoint()
    cp = m.store.load(0)
    assert cp is not None and cp.offsets == {PRED: N, LAB: N // 2}
    m.store.close()


def test_a_checkpointed_partition_goes_on_stray_records_are_read_again_revoke_forgets(
    tmp_path: Path,
) -> None:
    log = topics()
    p1, l1 = TopicPartition(PRED, 1), TopicPartition(LAB, 1)
    log.update({p1: [], l1: []})
    consumer = OutageConsumer(log, [KafkaConnectionError("broker down")] * 2)
    m = monitor(tmp_path, consumer)
    own = m.ownership
    meta, arrays = Engine(m.config).export_partition(1)
    saved = {1: PartitionCheckpoint(1, {PRED: 5, LAB: 2}, meta, arrays, 0.0)}
    own.load = lambda p, along=(): saved.get(p)  # (the batch being restored: not needed)
    consumer.paused = set(log)  # as the rebalance listener leaves them
    own.restore(set(log))
    assert own.unknown == {P0, L0} and own.offsets_of(1) == {PRED: 5, LAB: 2}
    assert consumer.paused == {P0, L0}  # partition 1 needs no position: it goes on
    # a fetch that slipped through for an unknown position: not counted, and fetched again
    consumer.sought[P0] = 7
    assert own.accept({P0: log[P0][3:7]}) == {}
    assert consumer.sought[P0] == 0  # the reset seek again (earliest)
    own.apply([], lambda parts: None)  # still out
    assert own.unknown == {P0, L0} and consumer.paused == {P0, L0}
    own.settle("resumed", [0, 1], commit=True)  # a checkpoint that succeeds again
    assert consumer.paused == {P0, L0}  # still waiting for their position
    assert consumer.commits[-1] == {p1: 5, l1: 2}  # no offset of an unknown position
    own.apply([], lambda parts: None)  # back
    assert own.unknown == set() and own.offsets_of(0) == {PRED: 0, LAB: 0}
    batch = own.accept({P0: log[P0][:5]})
    assert [r.offset for r in batch[0][0].records] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]

    # revoked while unknown: nothing of it is kept, and readiness no longer waits for it
    consumer.errors = [KafkaConnectionError("broker down")]
    own.revoke({0}, None)
    own.restore({P0, L0})
    assert own.unknown == {P0, L0} and own.not_ready() is not None
    own.apply([("lost", {P0, L0})], lambda parts: None)
    assert own.unknown == set() and own.not_ready() is None and own.trouble == ""
    m.store.close()
