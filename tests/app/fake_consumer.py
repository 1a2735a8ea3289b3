"""A stand-in for kafka-python's consumer: records what the service asks of Kafka."""

from __future__ import annotations

from typing import Any, NamedTuple

from kafka import TopicPartition
from kafka.errors import IllegalStateError, KafkaTimeoutError


class Rec(NamedTuple):
    offset: int
    value: bytes
    timestamp: int = 0
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


class Coordinator:
    def __init__(self) -> None:
        self.rebalancing = False
        self.unknown = False

    def rebalance_in_progress(self) -> bool:
        return self.rebalancing

    def coordinator_unknown(self) -> bool:
        return self.unknown


class Paused(set[TopicPartition]):
    """The paused partitions, read as a set by tests and called as kafka-python's
    ``KafkaConsumer.paused()`` by the code under test."""

    def __call__(self) -> set[TopicPartition]:
        return set(self)


class FakeConsumer:
    def __init__(self, tps: set[TopicPartition], high: dict[TopicPartition, int] | None = None):
        self.tps = set(tps)
        self.high = dict(high or {})
        self.paused: set[TopicPartition] = Paused()
        self.commits: list[dict[TopicPartition, int]] = []
        self.sought: dict[TopicPartition, int] = {}
        self.ends: dict[TopicPartition, int] = {}  # the broker's end offsets (else ``high``)
        self.end_asks: list[set[TopicPartition]] = []
        self.ends_fail = False  # end_offsets times out, as in a broker outage
        self._coordinator = Coordinator()

    def assignment(self) -> set[TopicPartition]:
        return set(self.tps)

    def _assigned(self, tps: tuple[TopicPartition, ...], exc: type[Exception]) -> None:
        """kafka-python refuses a partition not assigned (now): ``KeyError`` from pause and
        resume, ``ValueError`` from the seeks."""
        for tp in tps:
            if tp not in self.tps:
                raise exc(f"Unassigned partition: {tp}")

    def pause(self, *tps: TopicPartition) -> None:
        self._assigned(tps, KeyError)
        self.paused = Paused(self.paused | set(tps))

    def resume(self, *tps: TopicPartition) -> None:
        self._assigned(tps, KeyError)
        self.paused = Paused(self.paused - set(tps))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._assigned((tp,), ValueError)
        self.sought[tp] = offset

    def seek_to_beginning(self, tp: TopicPartition) -> None:
        self._assigned((tp,), ValueError)
        self.sought[tp] = 0

    def seek_to_end(self, tp: TopicPartition) -> None:
        self._assigned((tp,), ValueError)
        self.sought[tp] = self.high.get(tp, 0)

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int | None:
        return self.sought[tp]

    def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        self.commits.append({tp: o.offset for tp, o in offsets.items()})

    def end_offsets(
        self, tps: list[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        self.end_asks.append(set(tps))
        if self.ends_fail:
            raise KafkaTimeoutError("end offsets not answered")
        return {tp: self.ends.get(tp, self.high.get(tp, 0)) for tp in tps}

    def highwater(self, tp: TopicPartition) -> int | None:
        if tp not in self.tps:  # as kafka-python does
            raise IllegalStateError(f"Partition {tp} is not assigned")
        return self.high.get(tp)
