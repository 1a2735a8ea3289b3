"""Partition ownership without a broker: restore + seek on assign, checkpoint + drop on revoke
(not on lost), records below the expected offset skipped, commits never during a rebalance, and
a checkpoint's outcome applied to the consumer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition

from monitor.app.ownership import PartitionOwnership
from monitor.config.spec import parse_config
from monitor.state.checkpoint import CheckpointError, PartitionCheckpoint
from monitor.state.engine import Engine
from tests.app.fake_consumer import FakeConsumer, Rec
from tests.helpers import T0, pred, run

PRED, LAB = "preds", "labels"


def cfg(reset: str = "earliest") -> Any:
    return parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m"}},
            "kafka": {"predictions_topic": PRED, "labels_topic": LAB, "auto_offset_reset": reset},
        }
    )


def tps(*parts: int) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t in (PRED, LAB) for p in parts}


def saved_state(c: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    engine = Engine(c)
    run(engine, [pred(f"p{i}", T0 + i, "ab"[i % 2], i % 2) for i in range(20)])
    return engine.export_partition(0)


def owner(c: Any, checkpoints: dict[int, PartitionCheckpoint], consumer: FakeConsumer) -> Any:
    loads: list[tuple[int, list[int]]] = []  # (partition, the partitions restored with it)

    def load(p: int, along: Any) -> PartitionCheckpoint | None:
        loads.append((p, sorted(along)))
        return checkpoints.get(p)

    own = PartitionOwnership(c.kafka, Engine(c), load)
    own.consumer = consumer
    own.loads = loads
    return own


def test_assign_restores_and_seeks_to_the_checkpointed_offsets_then_resumes() -> None:
    c = cfg()
    meta, arrays = saved_state(c)
    cp = PartitionCheckpoint(0, {PRED: 120, LAB: 60}, meta, arrays, 0.0)
    consumer = FakeConsumer(tps(0, 1))
    consumer.paused = tps(0, 1)  # as the rebalance listener leaves them
    own = owner(c, {0: cp}, consumer)
    assert own.pending
    own.apply([("assigned", tps(0, 1))], lambda parts: None)
    assert own.owned == {0, 1} and not own.pending
    # each load is told the whole batch (a state topic reads it once for all)
    assert own.loads == [(0, [0, 1]), (1, [0, 1])]
    assert consumer.sought == {
        TopicPartition(PRED, 0): 120,
        TopicPartition(LAB, 0): 60,
        TopicPartition(PRED, 1): 0,  # no checkpoint: auto_offset_reset earliest
        TopicPartition(LAB, 1): 0,
    }
    assert own.offsets_of(0) == {PRED: 120, LAB: 60}
    assert consumer.paused == set()  # fetching starts at the sought offsets
    assert own.engine.counters()["predictions"] == 20  # the state came back


def test_latest_without_a_checkpoint_starts_at_the_end() -> None:
    c = cfg("latest")
    consumer = FakeConsumer(tps(0), high={TopicPartition(PRED, 0): 500})
    own = owner(c, {}, consumer)
    own.restore(tps(0))
    assert own.offsets_of(0) == {PRED: 500, LAB: 0}


def test_records_below_the_expected_offset_and_of_unrestored_partitions_are_skipped() -> None:
    c = cfg()
    own = owner(c, {}, FakeConsumer(tps(0, 1)))
    own.restore(tps(0))
    own.next_offsets[TopicPartition(PRED, 0)] = 5
    value = json.dumps({"prediction_id": "x"}).encode()
    batch = {
        TopicPartition(PRED, 0): [Rec(o, value) for o in range(3, 9)],  # 3, 4 were counted
        TopicPartition(LAB, 0): [],
        TopicPartition(PRED, 1): [Rec(0, value)],  # not restored yet: fetched again later
    }
    accepted = own.accept(batch)
    assert list(accepted) == [0]
    preds, labels, responses, attributes = accepted[0]
    assert preds is not None and labels is None and responses is None and attributes is None
    assert [r.offset for r in preds.records] == [5, 6, 7, 8]
    assert own.offsets_of(0) == {PRED: 9, LAB: 0}
    assert own.accept({TopicPartition(PRED, 0): [Rec(8, value)]}) == {}  # a re-delivery


def test_revoke_checkpoints_first_and_drops_lost_does_not_checkpoint() -> None:
    c = cfg()
    meta, arrays = saved_state(c)
    cps = {p: PartitionCheckpoint(p, {PRED: 10}, meta, arrays, 0.0) for p in (0, 1, 2)}
    own = owner(c, cps, FakeConsumer(tps(0, 1, 2)))
    own.restore(tps(0, 1, 2))
    saved: list[set[int]] = []

    def checkpoint(parts: set[int]) -> None:
        assert parts <= own.owned and all(p in own.engine.partitions for p in parts)
        saved.append(parts)

    own.apply([("revoked", {TopicPartition(PRED, 0), TopicPartition(LAB, 0)})], checkpoint)
    assert saved == [{0}] and own.owned == {1, 2} and 0 not in own.engine.partitions
    assert own.offsets_of(0) == {}
    own.apply([("lost", tps(1))], checkpoint)  # another instance may own it already
    assert saved == [{0}] and own.owned == {2} and 1 not in own.engine.partitions
    own.apply([("revoked", tps(7))], checkpoint)  # never owned: nothing to save
    assert saved == [{0}]


def test_commits_the_checkpointed_offsets_but_not_during_a_rebalance() -> None:
    c = cfg()
    consumer = FakeConsumer(tps(0, 1))
    own = owner(c, {}, consumer)
    own.restore(tps(0, 1))
    own.next_offsets[TopicPartition(PRED, 0)] = 40
    own.settle("saved", [0], commit=True)
    assert consumer.commits == [{TopicPartition(PRED, 0): 40, TopicPartition(LAB, 0): 0}]
    consumer._coordinator.rebalancing = True
    own.settle("saved", [0], commit=True)
    assert len(consumer.commits) == 1  # it would fail (and once stalled the rejoin)
    consumer._coordinator.rebalancing = False
    own.settle("saved", [0], commit=False)  # the revoke path
    own.settle("failed", [0], commit=True)  # nothing past the last good checkpoint
    assert len(consumer.commits) == 1


def test_a_checkpoint_outcome_pauses_everything_and_resumes_only_owned_partitions() -> None:
    c = cfg()
    consumer = FakeConsumer(tps(0))
    own = owner(c, {}, consumer)
    own.restore(tps(0))
    consumer.tps |= tps(1)  # assigned meanwhile, not restored yet
    own.settle("paused", [0], commit=True)
    assert consumer.paused == tps(0, 1) and consumer.commits == []
    own.settle("resumed", [0], commit=True)
    assert consumer.paused == tps(1)  # waits for its restore
    assert len(consumer.commits) == 1


def test_started_and_lag_read_the_fetch_watermarks() -> None:
    c = cfg()
    high = {TopicPartition(PRED, 0): 10, TopicPartition(LAB, 0): 4}
    consumer = FakeConsumer(tps(0), high=high)
    own = owner(c, {}, consumer)
    own.restore(tps(0))
    assert not own.started()  # partition 0 has unread predictions and no data yet
    assert own.lag() == {(PRED, 0): 10, (LAB, 0): 4}
    own.next_offsets.update({TopicPartition(PRED, 0): 10, TopicPartition(LAB, 0): 4})
    assert own.started()
    assert own.lag() == {(PRED, 0): 0, (LAB, 0): 0}
    assert own.select() == [0] and own.select({0, 5}) == [0]
    consumer.tps = set()  # revoked, its last checkpoint not yet written: lag must not raise
    assert own.lag() == {}


def test_connected_follows_the_coordinator(tmp_path: Path) -> None:
    own = owner(cfg(), {}, FakeConsumer(tps(0)))
    assert own.connected()
    own.consumer._coordinator.unknown = True
    assert not own.connected()


def test_a_responses_topic_is_owned_sought_and_read_with_its_partition() -> None:
    """``kafka.responses_topic`` (a serving stack's responses on a topic of their own): partition
    p of it is restored, sought and handed over with partition p of the others."""
    resp = "outputs"
    c = parse_config(
        {
            "models": {
                "m": {
                    "attributes": {"g": {}},
                    "windows": ["1h"],
                    "bucket": "1m",
                    "threshold": 0.5,
                    "input": {"score": {"tensor": "p"}, "attributes": {"g": {"tensor": "g"}}},
                }
            },
            "kafka": {"predictions_topic": PRED, "labels_topic": LAB, "responses_topic": resp},
        }
    )
    assert c.kafka.input_topics == (PRED, resp, LAB)
    assigned = {TopicPartition(t, p) for t in (PRED, resp, LAB) for p in (0, 1)}
    consumer = FakeConsumer(assigned, high={TopicPartition(resp, 0): 40})
    cp = PartitionCheckpoint(0, {PRED: 12, resp: 30, LAB: 7}, *saved_state(c), 0.0)
    own = owner(c, {0: cp}, consumer)
    own.apply([("assigned", assigned)], lambda parts: None)
    assert own.offsets_of(0) == {PRED: 12, resp: 30, LAB: 7}
    assert consumer.sought[TopicPartition(resp, 1)] == 0  # no checkpoint: earliest
    value = b"{}"
    accepted = own.accept(
        {
            TopicPartition(resp, 0): [Rec(o, value) for o in range(28, 33)],  # 28, 29 were read
            TopicPartition(PRED, 1): [Rec(0, value)],
        }
    )
    got = accepted[0]
    assert got.predictions is None and got.labels is None and got.responses is not None
    assert [r.offset for r in got.responses.records] == [30, 31, 32]
    assert accepted[1].predictions is not None and accepted[1].responses is None
    assert own.offsets_of(0)[resp] == 33


def test_an_attributes_topic_is_owned_sought_and_read_with_its_partition() -> None:
    """``kafka.attributes_topic`` (protected attributes by decision id): partition p of it is
    restored, sought and handed over with partition p of the others, its records apart."""
    attrs = "attributes"
    c = parse_config(
        {
            "models": {
                "m": {
                    "attributes": {"g": {}},
                    "windows": ["1h"],
                    "bucket": "1m",
                    "threshold": 0.5,
                    "input": {"score": {"tensor": "p"}, "attributes": "stream"},
                }
            },
            "kafka": {"predictions_topic": PRED, "labels_topic": LAB, "attributes_topic": attrs},
        }
    )
    assert c.kafka.input_topics == (PRED, LAB, attrs)
    assigned = {TopicPartition(t, p) for t in (PRED, LAB, attrs) for p in (0, 1)}
    consumer = FakeConsumer(assigned)
    cp = PartitionCheckpoint(0, {PRED: 12, LAB: 7, attrs: 50}, *saved_state(c), 0.0)
    own = owner(c, {0: cp}, consumer)
    own.apply([("assigned", assigned)], lambda parts: None)
    assert own.offsets_of(0) == {PRED: 12, LAB: 7, attrs: 50}
    assert consumer.sought[TopicPartition(attrs, 1)] == 0  # no checkpoint: earliest
    accepted = own.accept({TopicPartition(attrs, 0): [Rec(o, b"{}") for o in range(49, 52)]})
    got = accepted[0]
    assert got.predictions is None and got.responses is None and got.attributes is not None
    assert [r.offset for r in got.attributes.records] == [50, 51]
    assert own.offsets_of(0)[attrs] == 52


def test_a_checkpoint_of_a_topic_not_read_now_is_refused_naming_both() -> None:
    """Found by a review: a checkpoint written reading ``preds`` restored under
    ``predictions_topic: preds-v2`` was taken with its 20 counts, and the new topic was read
    from the start on top of them (everything twice if it is the same stream, a mirror or a
    rename), logged as "restored (checkpoint)"."""
    c = cfg()
    meta, arrays = saved_state(c)
    cp = PartitionCheckpoint(0, {"preds-old": 120, LAB: 60}, meta, arrays, 0.0)
    own = owner(c, {0: cp}, FakeConsumer(tps(0)))
    with pytest.raises(CheckpointError, match="offsets of preds-old, which this configuration"):
        own.apply([("assigned", tps(0))], lambda parts: None)
    assert own.engine.counters()["predictions"] == 0  # nothing restored


def test_a_partition_taken_away_before_its_queued_assignment_is_handled_is_left_alone() -> None:
    """kafka-python rebalances on its network thread: by the time the loop handles an
    assignment, a second rebalance may have moved some of it to another replica (seen in CI:
    the monitor died seeking a partition no longer assigned). Those are not restored; the rest
    are, and the queued revocation and new assignment then apply as usual."""
    c = cfg()
    meta, arrays = saved_state(c)
    cps = {p: PartitionCheckpoint(p, {PRED: 10, LAB: 4}, meta, arrays, 0.0) for p in range(4)}
    consumer = FakeConsumer(tps(0, 1))  # the second rebalance's outcome: 2 and 3 went away
    consumer.paused = tps(0, 1)
    own = owner(c, cps, consumer)
    saved: list[set[int]] = []
    own.apply([("revoked", set()), ("assigned", tps(0, 1, 2, 3))], saved.append)
    assert own.owned == {0, 1} and set(own.engine.partitions) == {0, 1}
    assert [p for p, _ in own.loads] == [0, 1]  # 2 and 3 were never loaded
    assert set(consumer.sought) == tps(0, 1) and consumer.paused == set()
    # the queued events of the second rebalance
    own.apply([("revoked", tps(0, 1, 2, 3)), ("assigned", tps(0, 1))], saved.append)
    assert saved == [{0, 1}] and own.owned == {0, 1}
    assert own.offsets_of(1) == {PRED: 10, LAB: 4}


def test_a_partition_taken_away_during_its_restore_is_dropped_not_owned() -> None:
    """The race's narrowest form: assigned when asked, gone at the seek."""
    c = cfg()
    meta, arrays = saved_state(c)
    cps = {p: PartitionCheckpoint(p, {PRED: 10, LAB: 4}, meta, arrays, 0.0) for p in (0, 1)}

    class Moving(FakeConsumer):
        def seek(self, tp: TopicPartition, offset: int) -> None:
            if tp.partition == 1:
                self.tps -= tps(1)  # the network thread's rebalance, right now
            super().seek(tp, offset)

    consumer = Moving(tps(0, 1))
    consumer.paused = tps(0, 1)
    own = owner(c, cps, consumer)
    own.apply([("assigned", tps(0, 1))], lambda parts: None)
    assert own.owned == {0} and set(own.engine.partitions) == {0}
    assert own.offsets_of(1) == {} and not own.unknown
    assert not consumer.paused & consumer.assignment() and own.not_ready() is None
    own.pause_all()
    own.resume_owned()  # neither raises for the partition that left
    assert not consumer.paused & consumer.assignment()


def test_records_polled_before_a_restore_from_an_older_checkpoint_are_fetched_again() -> None:
    """Found by a review: a poll returned records 20-29 of partition 0, then the drain
    restored it from a checkpoint at 10 (its revocation's checkpoint had failed, or it was
    lost and came back); 20-29 were accepted, the offset moved to 30, and 10-19, fetched
    again from the seek, were skipped as read: lost for good."""
    c = cfg()
    meta, arrays = saved_state(c)
    consumer = FakeConsumer(tps(0))
    own = owner(c, {0: PartitionCheckpoint(0, {PRED: 10, LAB: 0}, meta, arrays, 0.0)}, consumer)
    own.restore(tps(0))
    own.next_offsets[TopicPartition(PRED, 0)] = 20  # read on to 20 since
    value = json.dumps({"prediction_id": "x"}).encode()
    polled = {TopicPartition(PRED, 0): [Rec(o, value) for o in range(20, 30)]}
    restored = own.apply([("lost", tps(0)), ("assigned", tps(0))], lambda parts: None)
    assert restored == {0} and own.offsets_of(0)[PRED] == 10
    assert own.accept(polled, restored) == {}  # stale: fetched again from 10
    assert own.offsets_of(0)[PRED] == 10
    again = {TopicPartition(PRED, 0): [Rec(o, value) for o in range(10, 30)]}
    (got,) = own.accept(again, set()).values()
    assert got.predictions is not None and len(got.predictions.records) == 20
