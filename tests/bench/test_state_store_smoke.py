"""The state-store benchmark (``bench/state_store.py``) at a tiny size against the test broker:
each store saves and restores real engine state of the size asked for, and the throughput part
runs the service loop with both stores over the same topics and pairs its rounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.kafka_throughput import make_topics
from bench.state_restore import STORES, partition_state, restore_bench
from bench.state_store import throughput_bench

pytestmark = pytest.mark.integration


def test_partition_state_reaches_the_size_asked_for() -> None:
    blob, n, _ = partition_state(2_000_000)
    assert 2_000_000 <= len(blob) < 2_100_000
    assert n > 0  # the pending table grew to get there


def test_restore_of_every_store(kafka: Any, tmp_path: Path) -> None:
    size = 1_200_000
    res = restore_bench(kafka.bootstrap, [size], rounds=1, grown=3, tmp=tmp_path)[size]
    assert res["bytes"] >= size
    for side in STORES:
        assert res[side]["save"] > 0 and res[side]["restore"] > res[side]["load"] > 0
    assert res["kafka"]["restore_ratio"] > 0 and res["kafka-tx"]["save_ratio"] > 0
    assert res["grown_records"] >= 3 * 2  # every save's chunk and head are still in the topic
    grown = res["grown"]
    assert grown["unbounded"]["records"] >= 3 * 2  # the broker's segments: every save is read
    # no roll at this size: as many (and the first restore's start-up record, meta/opened_at)
    assert grown["compacted"]["records"] == grown["bounded"]["records"] + 1


def test_throughput_pairs_each_kafka_round_with_sqlite(kafka: Any, tmp_path: Path) -> None:
    topics = make_topics(kafka.bootstrap, 2_000)
    out = throughput_bench(
        kafka.bootstrap, topics, ["sqlite", "kafka"], rounds=2, tmp=tmp_path, max_records=500
    )
    assert [len(out["runs"][s]) for s in ("sqlite", "kafka")] == [2, 2]
    assert all(r["steady"] > 0 for runs in out["runs"].values() for r in runs)
    assert len(out["kafka"]["steady"]) == 2 and out["kafka"]["median"] > 0
