"""The state topic's segment settings (``state/kafka_segments.py``): what a topic is created
with, and when an existing one's are reported (unbounded segments), with what to set."""

from __future__ import annotations

from monitor.config.settings import CheckpointSpec
from monitor.state.kafka_segments import SEGMENT_MS, to_set, topic_configs

CP = CheckpointSpec(store="kafka", state_segment_bytes=16 << 20)
BROKER_DEFAULTS = {
    "segment.bytes": str(1 << 30),
    "segment.ms": str(7 * 24 * 3600 * 1000),
    "max.compaction.lag.ms": str(2**63 - 1),
    "min.cleanable.dirty.ratio": "0.5",
}


def test_a_created_topic_has_bounded_segments() -> None:
    assert topic_configs(CP) == {
        "cleanup.policy": "compact",
        "segment.bytes": str(16 << 20),
        "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.1",
        "delete.retention.ms": "600000",
    }
    assert to_set(topic_configs(CP), CP) == {}  # what it creates, it accepts


def test_the_brokers_defaults_are_unbounded_and_every_setting_is_named() -> None:
    assert to_set(BROKER_DEFAULTS, CP) == {
        "segment.bytes": str(16 << 20),
        "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.1",
    }


def test_bounded_by_bytes_is_enough_and_a_compaction_lag_bounds_the_roll_time() -> None:
    assert to_set({**BROKER_DEFAULTS, "segment.bytes": str(8 << 20)}, CP) == {}
    lagged = {
        **BROKER_DEFAULTS,
        "max.compaction.lag.ms": "60000",
        "min.cleanable.dirty.ratio": "0.05",
    }
    assert to_set(lagged, CP) == {"segment.bytes": str(16 << 20)}


def test_nothing_is_claimed_when_the_broker_does_not_say() -> None:
    assert to_set({}, CP) == {}
    assert to_set({"segment.bytes": "odd"}, CP) == {}
