"""Labels count as read to their end only by an answer the broker gave after the partition's
newest predictions were read: the fetch highwater alone is stale while a fetched batch waits
unparsed (the live run then closed boundaries without labels that replay counted)."""

from __future__ import annotations

from kafka import TopicPartition

from monitor.app.label_ends import LabelEnds
from tests.app.fake_consumer import FakeConsumer
from tests.app.test_ownership import LAB, PRED, cfg, owner, tps


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def read_predictions(ends: LabelEnds, n: int = 5) -> None:
    ends.own.next_offsets[TopicPartition(PRED, 0)] += n


def setup(label_high: int, label_end: int) -> tuple[LabelEnds, FakeConsumer, Clock]:
    lab = TopicPartition(LAB, 0)
    consumer = FakeConsumer(tps(0), high={TopicPartition(PRED, 0): 10, lab: label_high})
    consumer.ends[lab] = label_end
    own = owner(cfg(), {}, consumer)
    own.restore(tps(0))
    own.next_offsets.update({TopicPartition(PRED, 0): 10, lab: label_high})
    clock = Clock()
    return LabelEnds(own, clock, every=1.0), consumer, clock


def test_a_stale_highwater_is_not_taken_for_the_end_of_the_labels() -> None:
    ends, consumer, _ = setup(label_high=4, label_end=6)  # 2 labels fetched, not parsed yet
    assert not ends.caught_up(0)
    assert len(consumer.end_asks) == 1
    ends.own.next_offsets[TopicPartition(LAB, 0)] = 6  # read them
    assert ends.caught_up(0)
    assert len(consumer.end_asks) == 1  # the answer still covers the predictions read


def test_predictions_read_after_the_answer_need_a_new_one_at_most_once_per_interval() -> None:
    ends, consumer, clock = setup(label_high=4, label_end=4)
    assert ends.caught_up(0)
    read_predictions(ends)  # newer predictions: their labels may have been produced since
    assert not ends.caught_up(0)
    assert len(consumer.end_asks) == 1  # asked under a second ago: wait
    clock.t += 1.0
    assert ends.caught_up(0)
    assert len(consumer.end_asks) == 2


def test_labels_behind_their_fetched_end_are_not_asked_about() -> None:
    ends, consumer, _ = setup(label_high=4, label_end=4)
    ends.own.next_offsets[TopicPartition(LAB, 0)] = 3
    assert not ends.caught_up(0)
    assert consumer.end_asks == []


def test_an_unanswered_ask_holds_boundaries_back_without_raising() -> None:
    ends, consumer, clock = setup(label_high=4, label_end=4)
    consumer.ends_fail = True
    assert not ends.caught_up(0)
    consumer.ends_fail = False
    clock.t += 1.0
    assert not ends.caught_up(0)  # backing off: one blocked ask per 10 s at most
    assert len(consumer.end_asks) == 1
    clock.t += 9.0
    assert ends.caught_up(0)


def test_a_partition_restored_elsewhere_in_its_log_needs_a_new_answer() -> None:
    ends, consumer, clock = setup(label_high=4, label_end=4)
    assert ends.caught_up(0)
    ends.own.next_offsets[TopicPartition(PRED, 0)] = 7  # revoked, restored from a checkpoint
    assert not ends.caught_up(0)  # asked under a second ago
    clock.t += 1.0
    assert ends.caught_up(0)
    assert len(consumer.end_asks) == 2
    assert not ends.caught_up(3)  # not owned: no next offset


def test_a_partition_taken_away_since_the_last_drain_is_not_caught_up_and_raises_nothing() -> None:
    """Found by a review: kafka-python moves a partition on its network thread; until the loop
    drains the revocation the partition is still owned here, and asking its highwater raised
    IllegalStateError out of the loop (the monitor died)."""
    ends, consumer, clock = setup(label_high=4, label_end=4)
    assert ends.caught_up(0)
    read_predictions(ends)
    clock.t += 1.0
    consumer.tps -= tps(0)  # the network thread's rebalance
    assert not ends.caught_up(0)
