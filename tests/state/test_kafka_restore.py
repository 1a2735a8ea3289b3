"""The state topic's segments and restores against a real Apache Kafka broker: the topic is
created with bounded segments (an unbounded one is warned about, not refused), so once a
segment rolls and the cleaner runs a restore reads the live state, not every save since the
topic began; and a replica restoring several partitions reads the topic once for all of them,
with the results of one-by-one restores (torn and damaged generations included)."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from kafka import KafkaAdminClient

from monitor.app.checkpointing import Checkpointer
from monitor.state import kafka_store
from monitor.state.checkpoint import encode
from monitor.state.kafka_restore import commits
from monitor.state.kafka_segments import DELETE_RETENTION_MS, DIRTY_RATIO, SEGMENT_MS
from monitor.state.kafka_store import CHUNK, MAGIC, KafkaStateStore, chunk_key, head_key
from tests.helpers import wait_for
from tests.state.test_kafka_store import arrays, assert_same, raw_send, settings, topic_config

pytestmark = pytest.mark.integration


def restore_reads(cp: Any, k: Any, partition: int = 0) -> tuple[int, Any]:
    """(records a new replica's restore of ``partition`` reads, what it restores)."""
    s = KafkaStateStore(cp, k)
    try:
        before = s.records_read
        got = s.load(partition)
        return s.records_read - before, got
    finally:
        s.close()


def test_the_topic_is_created_with_bounded_segments(kafka, caplog) -> None:  # type: ignore[no-untyped-def]
    cp, k = settings(kafka, state_segment_bytes=2 << 20)
    with caplog.at_level(logging.WARNING):
        KafkaStateStore(cp, k).close()
        KafkaStateStore(cp, k).close()  # an existing bounded topic: nothing to say
    assert topic_config(kafka, cp.state_topic, "cleanup.policy") == "compact"
    assert topic_config(kafka, cp.state_topic, "segment.bytes") == str(2 << 20)
    assert topic_config(kafka, cp.state_topic, "segment.ms") == str(SEGMENT_MS)
    assert topic_config(kafka, cp.state_topic, "min.cleanable.dirty.ratio") == str(DIRTY_RATIO)
    assert topic_config(kafka, cp.state_topic, "delete.retention.ms") == str(DELETE_RETENTION_MS)
    assert "segment" not in caplog.text


def unbounded_topic(kafka: Any) -> str:
    """A state topic as the monitor created it before: compacted, the broker's segments."""
    topic = f"unbounded-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    configs = {"cleanup.policy": "compact"}
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1, "configs": configs}})
    admin.close()
    return topic


def test_an_unbounded_topic_is_warned_about_not_refused(kafka, caplog) -> None:  # type: ignore[no-untyped-def]
    topic = unbounded_topic(kafka)
    with caplog.at_level(logging.WARNING, logger="monitor.state.kafka_segments"):
        store = KafkaStateStore(*settings(kafka, topic))
    try:
        store.save([(0, {"pred": 1}, encode({}, arrays(1)))])
        got = store.load(0)
        assert got is not None and got.offsets == {"pred": 1}
    finally:
        store.close()
    text = caplog.text
    assert f"state topic {topic} has segment.bytes=1073741824" in text
    assert "segment.bytes=16777216 (now 1073741824)" in text
    assert f"segment.ms={SEGMENT_MS} (now 604800000)" in text
    assert f"min.cleanable.dirty.ratio={DIRTY_RATIO} (now 0.5)" in text
    assert (
        f"kafka-configs --bootstrap-server {kafka.bootstrap} --alter --entity-type topics "
        f"--entity-name {topic} --add-config segment.bytes=16777216,segment.ms={SEGMENT_MS},"
        f"min.cleanable.dirty.ratio={DIRTY_RATIO}"
    ) in text


def test_after_many_saves_and_a_roll_a_restore_reads_far_fewer_records(kafka) -> None:  # type: ignore[no-untyped-def]
    """30 saves of a 4-chunk state (~6 MB) to a topic with 1 MiB segments and to one with the
    broker's 1 GiB: the unbounded one is read whole by every restore (150 records of saves);
    the bounded one rolls every few saves, and once the cleaner has run a restore reads the
    two live generations plus at most the active segment."""
    bounded = settings(kafka, state_segment_bytes=1 << 20, state_chunk_bytes=64 * 1024)
    unbounded = settings(kafka, unbounded_topic(kafka), state_chunk_bytes=64 * 1024)
    saves = 30
    for cp, k in (bounded, unbounded):
        store = KafkaStateStore(cp, k)
        try:
            for i in range(saves):
                store.save([(0, {"pred": i}, encode({"i": i}, arrays(i, n=3000)))])
        finally:
            store.close()
    for cp, k in (bounded, unbounded):  # every save is there (not compacted away yet)
        got = restore_reads(cp, k)[1]
        assert got is not None and got.offsets == {"pred": saves - 1}
        assert_same(got.arrays, arrays(saves - 1, n=3000))
    whole, _ = restore_reads(*unbounded)
    assert whole >= saves * 5  # 4 chunks and a head per save: nothing could be cleaned
    # live: 8 chunk keys, the head and meta/opened_at, kept in the cleaned segments (as their
    # last value there) and again in the active one (at most 1 MiB: ~16 chunks, their heads)
    _, got = wait_for(
        lambda: (r := restore_reads(*bounded))[0] <= whole // 4 and r,
        120,
        lambda: f"the cleaner to compact the rolled segments (the unbounded topic: {whole})",
        every=1,
    )
    assert got is not None and got.offsets == {"pred": saves - 1} and got.meta == {"i": saves - 1}
    assert_same(got.arrays, arrays(saves - 1, n=3000))
    assert restore_reads(*unbounded)[0] >= whole  # never rolled: still every save


def several(kafka: Any) -> tuple[Any, Any, list[int]]:
    """Six partitions saved twice (several chunks each), then: partition 2 torn (a writer
    killed after one chunk of generation 3, in generation 1's slot), partition 3 damaged
    (generation 2's first chunk replaced), partition 4 a head only in name (corrupt)."""
    cp, k = settings(kafka, state_chunk_bytes=32 * 1024)
    parts = [0, 1, 2, 3, 4, 5]
    store = KafkaStateStore(cp, k)
    try:
        for gen in (1, 2):
            store.save(
                [
                    (
                        p,
                        {"pred": 10 * p + gen},
                        encode({"p": p, "gen": gen}, arrays(p + gen, n=900 + 100 * p)),
                    )
                    for p in parts
                ],
                alerts=json.dumps({"gen": gen}),
            )
    finally:
        store.close()
    raw_send(kafka, cp.state_topic, chunk_key("p/2", 3, 0), CHUNK.pack(MAGIC, 3, 0, 3) + b"torn")
    raw_send(kafka, cp.state_topic, chunk_key("p/3", 2, 0), CHUNK.pack(MAGIC, 6, 0, 3) + b"odd")
    raw_send(kafka, cp.state_topic, head_key("p/4"), b"{not json")
    return cp, k, parts


def test_restoring_n_partitions_reads_the_topic_once_with_the_one_by_one_results(
    kafka, caplog, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(kafka_store, "REREAD_S", 0.01)  # partition 4 is read again (corrupt)
    cp, k, parts = several(kafka)
    fresh = Checkpointer(type(cp)(**{**cp.__dict__, "on_corrupt": "fresh"}), kafka=k)
    one, batch = {}, {}
    try:
        store = fresh.store
        assert isinstance(store, KafkaStateStore)
        passes, records = store.passes, store.records_read
        with caplog.at_level(logging.INFO):
            for p in parts:
                one[p] = fresh.load(p)
        one_log = caplog.text
        # one pass per partition, plus two more reads of the corrupt one
        assert store.passes - passes == len(parts) + 2
        per_pass = (store.records_read - records) // (store.passes - passes)
        caplog.clear()
        passes, records = store.passes, store.records_read
        with caplog.at_level(logging.INFO):
            for p in parts:
                batch[p] = fresh.load(p, parts)
                if p == 0:  # after the first load: only what the others' heads name
                    assert sorted(store.gathered) == [f"p/{q}" for q in parts[1:]]
                    for q in (1, 5):
                        found = store.gathered[f"p/{q}"]
                        named = {
                            chunk_key(f"p/{q}", int(c["generation"]), i)
                            for c in commits(found.head or b"")
                            for i in range(int(c["chunks"]))
                        }
                        assert set(found.table) == named and len(named) > 4
        # the six restored from one pass; the corrupt one read again twice on its own
        assert store.passes - passes == 1 + 2
        assert store.records_read - records == 3 * per_pass
        assert store.gathered == {}
        batch_log = caplog.text
    finally:
        fresh.close()
    for p in parts:
        a, b = one[p], batch[p]
        if p == 4:
            assert a is None and b is None  # on_corrupt: fresh
            continue
        assert a is not None and b is not None
        assert (a.offsets, a.meta) == (b.offsets, b.meta)
        assert_same(b.arrays, a.arrays)
    assert batch[2].offsets == {"pred": 22}  # the torn generation 3 is not restored
    assert batch[3].offsets == {"pred": 31} and batch[3].meta == {"p": 3, "gen": 1}
    assert_same(batch[3].arrays, arrays(3 + 1, n=1200))
    for text in (one_log, batch_log):
        assert "generation 2 is not intact: chunk 0 of 3 holds generation 6" in text
        assert "restoring the previous generation 1" in text
        assert "partition 4: the head record is corrupt" in text
    assert "read once for 6 restores" in batch_log


def test_a_save_between_the_pass_and_a_load_is_not_hidden(kafka) -> None:  # type: ignore[no-untyped-def]
    """What a pass gathered for a partition is dropped when this store saves it meanwhile."""
    cp, k = settings(kafka)
    store = KafkaStateStore(cp, k)
    try:
        store.save([(p, {"pred": p}, encode({}, arrays(p))) for p in (0, 1)])
        assert store.load(0, [0, 1]) is not None and "p/1" in store.gathered
        store.save([(1, {"pred": 99}, encode({}, arrays(99)))])
        got = store.load(1, [0, 1])
        assert got is not None and got.offsets == {"pred": 99}
        assert_same(got.arrays, arrays(99))
    finally:
        store.close()


def test_status_reads_every_partition_in_one_pass(kafka) -> None:  # type: ignore[no-untyped-def]
    from monitor.outputs.checkpoint_report import restore

    cp, k = settings(kafka)
    store = KafkaStateStore(cp, k)
    try:
        store.save([(p, {"pred": p}, encode({}, arrays(p))) for p in range(4)])
    finally:
        store.close()
    reader = KafkaStateStore(cp, k, read_only=True)
    try:
        calls: list[int] = []

        class Engine:
            def __init__(self, cfg: Any) -> None:
                pass

            def import_partition(self, p: int, meta: Any, arrs: Any) -> None:
                calls.append(p)
                assert_same(arrs, arrays(p))

        before = reader.passes
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("monitor.outputs.checkpoint_report.Engine", Engine)
            _, offsets = restore(None, reader)  # type: ignore[arg-type]
        assert calls == [0, 1, 2, 3] and offsets == {str(p): {"pred": p} for p in range(4)}
        assert reader.passes - before == 2  # the heads (partitions()), then one for all four
    finally:
        reader.close()
