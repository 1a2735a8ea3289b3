"""The Kafka state store (``checkpoint.store: kafka``) against a real Apache Kafka broker:
round trips, chunking, torn writes, another replica's restore, the topic's policy, faults."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType

from monitor.app.checkpointing import Checkpointer
from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.state import kafka_topic
from monitor.state.checkpoint import CheckpointCorrupt, CheckpointUnavailable, decode, encode
from monitor.state.kafka_store import CHUNK, MAGIC, KafkaStateStore, chunk_key, head_key
from monitor.state.kafka_topic import StateTopicError
from tests.broker import free_port
from tests.helpers import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def settings(kafka: Any, topic: str | None = None, **more: Any) -> tuple[CheckpointSpec, KafkaSpec]:
    cp = CheckpointSpec(store="kafka", state_topic=topic or f"state-{uuid.uuid4().hex[:8]}", **more)
    return cp, KafkaSpec(bootstrap_servers=(kafka.bootstrap,))


def arrays(seed: int, n: int = 1000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "counts": rng.integers(0, 2**40, size=(n, 7), dtype=np.int64),
        "keys": rng.integers(0, 2**63, size=n, dtype=np.uint64),
        "scores": rng.random(n).astype(np.float32),
        "flags": rng.random(n) < 0.5,
    }


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert np.array_equal(got[k], v), k


def raw_send(kafka: Any, topic: str, key: str, value: bytes | None) -> None:
    p = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    p.send(topic, key=key.encode(), value=value).get(30)
    p.close()


def topic_config(kafka: Any, topic: str, key: str) -> str | None:
    from monitor.ingest.kafka import _config_value

    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        found = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=None)], config_filter="all"
        )
        return _config_value(found, topic, key)
    finally:
        admin.close()


def newest(store: KafkaStateStore) -> dict[str, bytes]:
    """The topic as compaction leaves it: key -> newest value (tombstoned keys gone)."""
    table: dict[str, bytes] = {}

    def visit(key: str, value: bytes | None) -> None:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    store.reader.read(visit, store._own_writes())
    return table


@pytest.fixture
def store(kafka):  # type: ignore[no-untyped-def]
    s = KafkaStateStore(*settings(kafka))
    s.check_writable()
    yield s
    s.close()


@pytest.fixture(params=[False, True], ids=["plain", "transactions"])
def any_store(kafka, request):  # type: ignore[no-untyped-def]
    s = KafkaStateStore(*settings(kafka, state_transactions=request.param))
    s.check_writable()
    yield s
    s.close()


def test_round_trip_of_partitions_and_alert_state(kafka, any_store: KafkaStateStore) -> None:  # type: ignore[no-untyped-def]
    store = any_store
    items = [(p, {"pred": 100 + p, "lab": 50 + p}, encode({"p": p}, arrays(p))) for p in range(4)]
    alerts = json.dumps({"version": 1, "book": {"x": [1, 2.5, "é"]}})
    store.save(items, alerts=alerts)
    assert store.partitions() == [0, 1, 2, 3]
    for p in range(4):
        cp = store.load(p)
        assert cp is not None and cp.partition == p
        assert cp.offsets == {"pred": 100 + p, "lab": 50 + p}
        assert cp.meta == {"p": p}
        assert_same(cp.arrays, arrays(p))
    assert store.load_alerts() == alerts
    assert store.load(9) is None
    # a later save of some partitions and no alert state keeps the rest as it was
    store.save([(2, {"pred": 999}, encode({"p": "new"}, arrays(22)))])
    two = store.load(2)
    assert two is not None and two.offsets == {"pred": 999}
    assert_same(two.arrays, arrays(22))
    one = store.load(1)
    assert one is not None and one.offsets == {"pred": 101, "lab": 51}
    assert store.load_alerts() == alerts


def test_state_of_several_chunks_restores_exactly(kafka) -> None:  # type: ignore[no-untyped-def]
    cp, k = settings(kafka, state_chunk_bytes=256 * 1024)
    big = arrays(7, n=120_000)  # ~8 MB of .npz: about 30 chunks
    blob = encode({"big": True}, big)
    assert len(blob) > 6 * 2**20
    a = KafkaStateStore(cp, k)
    try:
        for round_ in range(3):  # slots reused: chunks of older generations are superseded
            a.save([(0, {"pred": round_}, blob)], alerts="x" * 700_000)
    finally:
        a.close()
    b = KafkaStateStore(cp, k)  # another replica: a fresh object reading the topic
    try:
        got = b.load(0)
        assert got is not None and got.offsets == {"pred": 2} and got.meta == {"big": True}
        assert_same(got.arrays, big)
        assert b.load_alerts() == "x" * 700_000
        # smaller again, in both slots: the longer generations' extra chunks are tombstoned
        for round_ in (3, 4):
            b.save([(0, {"pred": round_}, encode({}, arrays(round_)))])
        assert not any(k.startswith("p/0/") and "/c1" in k for k in newest(b))
    finally:
        b.close()
    c = KafkaStateStore(cp, k)
    try:
        got = c.load(0)
        assert got is not None and got.offsets == {"pred": 4}
        assert_same(got.arrays, arrays(4))
    finally:
        c.close()


def test_another_replica_restores_what_the_first_wrote(kafka, caplog) -> None:  # type: ignore[no-untyped-def]
    cp, k = settings(kafka)
    a = KafkaStateStore(cp, k)
    for gen in range(1, 6):
        a.save([(p, {"pred": gen * 10 + p}, encode({"gen": gen}, arrays(gen + p))) for p in (0, 3)])
    a.close()
    b = KafkaStateStore(cp, k)
    try:
        assert b.partitions() == [0, 3]
        with caplog.at_level(logging.INFO, logger="monitor.state.kafka_store"):
            got = b.load(3)
        assert got is not None and got.offsets == {"pred": 53} and got.meta == {"gen": 5}
        assert_same(got.arrays, arrays(8))
        assert f"partition 3 restored from state topic {cp.state_topic} generation 5" in caplog.text
        # the new owner writes on from there, and the first replica's object reads it back
        b.save([(3, {"pred": 60}, encode({"gen": 6}, arrays(1)))])
    finally:
        b.close()
    c = KafkaStateStore(cp, k)
    try:
        got = c.load(3)
        assert got is not None and got.offsets == {"pred": 60}
    finally:
        c.close()


WRITER = """
import os, sys
import numpy as np
from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.state.checkpoint import encode
from monitor.state.kafka_store import KafkaStateStore

cp = CheckpointSpec(
    store="kafka", state_topic={topic!r}, state_chunk_bytes=64 * 1024, state_transactions={tx}
)
store = KafkaStateStore(cp, KafkaSpec(bootstrap_servers=({bootstrap!r},)))
rng = np.random.default_rng(1)
for gen in (1, 2):
    store.save([(0, {{"pred": gen}}, encode({{"gen": gen}}, {{"a": rng.random(200_000)}}))])
send, sent = store.writer.send, []

def killed_after_three(key, value):
    send(key, value)
    sent.append(key)
    if len(sent) == 3:  # three chunks of generation 3 acknowledged, then the writer dies
        store.writer.flush()
        print(sent, flush=True)
        os._exit(9)

store.writer.send = killed_after_three
store.save([(0, {{"pred": 3}}, encode({{"gen": 3}}, {{"a": rng.random(200_000)}}))])
"""


@pytest.mark.parametrize("transactions", [False, True])
def test_a_writer_killed_between_chunks_restores_the_previous_generation(  # type: ignore[no-untyped-def]
    kafka, caplog, transactions: bool
) -> None:
    """Without transactions the generations fence the torn write; with them, it is also an
    open transaction that readers (read_committed) never see."""
    cp, k = settings(kafka, state_transactions=transactions)
    script = WRITER.format(topic=cp.state_topic, bootstrap=kafka.bootstrap, tx=transactions)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=120
    )
    assert done.returncode == 9, done.stderr.decode()[-2000:]
    assert "p/0/s1/c2" in done.stdout.decode()  # generation 3 went into slot 1, generation 1's
    expected = np.random.default_rng(1)
    expected.random(200_000)  # generation 1's
    gen2 = expected.random(200_000)
    store = KafkaStateStore(cp, k)
    try:
        with caplog.at_level(logging.INFO, logger="monitor.state.kafka_store"):
            got = store.load(0)
        assert got is not None and got.offsets == {"pred": 2} and got.meta == {"gen": 2}
        assert np.array_equal(got.arrays["a"], gen2)
        assert f"restored from state topic {cp.state_topic} generation 2" in caplog.text
        # the next save does not touch generation 2's slot, and is what a restore takes then
        # (with transactions, once the broker has aborted the dead writer's: until then
        # readers stop at the last stable offset, before it)
        store.save([(0, {"pred": 4}, encode({"gen": 4}, {"a": np.arange(3)}))])
        got = store.load(0)
        if transactions and got is not None and got.offsets != {"pred": 4}:
            got = wait_for(
                lambda: (g := store.load(0)) is not None and g.offsets == {"pred": 4} and g,
                90,
                "the dead writer's transaction aborted and generation 4 readable",
                every=1,
            )
        assert got is not None and got.offsets == {"pred": 4} and got.meta == {"gen": 4}
    finally:
        store.close()


def test_a_damaged_generation_falls_back_to_the_previous_one(kafka, store, caplog) -> None:  # type: ignore[no-untyped-def]
    for gen in (1, 2):
        store.save([(5, {"pred": gen}, encode({"gen": gen}, arrays(gen)))])
    # generation 2's only chunk replaced by one of another generation (a zombie writer, say)
    raw_send(kafka, store.topic, chunk_key("p/5", 2, 0), CHUNK.pack(MAGIC, 4, 0, 1) + b"junk")
    fresh = KafkaStateStore(*settings(kafka, store.topic))
    try:
        with caplog.at_level(logging.INFO, logger="monitor.state.kafka_store"):
            got = fresh.load(5)
        assert got is not None and got.offsets == {"pred": 1}
        assert_same(got.arrays, arrays(1))
        assert "generation 2 is not intact: chunk 0 of 1 holds generation 4" in caplog.text
        assert "restoring the previous generation 1" in caplog.text
        # a hash mismatch is caught too: the right generation with other bytes
        raw_send(kafka, store.topic, chunk_key("p/5", 1, 0), CHUNK.pack(MAGIC, 1, 0, 1) + b"x")
        with pytest.raises(CheckpointCorrupt, match="partition 5: no intact generation"):
            fresh.load(5)
        # the next save starts a generation above all of them, and restores
        fresh.save([(5, {"pred": 9}, encode({"gen": 9}, arrays(9)))])
        got = fresh.load(5)
        assert got is not None and got.offsets == {"pred": 9}
    finally:
        fresh.close()


def test_chunks_without_a_head_count_as_no_checkpoint(kafka, store, caplog) -> None:  # type: ignore[no-untyped-def]
    raw_send(kafka, store.topic, chunk_key("p/1", 1, 0), CHUNK.pack(MAGIC, 1, 0, 2) + b"half")
    with caplog.at_level(logging.WARNING, logger="monitor.state.kafka_store"):
        assert store.load(1) is None
    assert "partition 1" in caplog.text and "treated as having no checkpoint" in caplog.text


def test_a_corrupt_head_follows_on_corrupt(kafka, caplog) -> None:  # type: ignore[no-untyped-def]
    cp, k = settings(kafka)
    store = KafkaStateStore(cp, k)
    store.save([(0, {"pred": 1}, encode({}, arrays(0)))], alerts='{"version": 1}')
    store.close()
    raw_send(kafka, cp.state_topic, head_key("p/0"), b"{not json")
    raw_send(kafka, cp.state_topic, head_key("alerts"), b"\xff")
    refuse = Checkpointer(cp, kafka=k)
    try:
        with pytest.raises(CheckpointCorrupt, match=f"state topic {cp.state_topic}, partition 0"):
            refuse.load(0)
    finally:
        refuse.close()
    fresh = Checkpointer(CheckpointSpec(**{**cp.__dict__, "on_corrupt": "fresh"}), kafka=k)
    try:
        with caplog.at_level(logging.ERROR, logger="monitor.app.checkpointing"):
            assert fresh.load(0) is None
        assert "partition 0 starts fresh" in caplog.text
        fresh.save([(0, {"pred": 2}, encode({}, arrays(2)))], None, full=True)
        got = fresh.load(0)
        assert got is not None and got.offsets == {"pred": 2}
    finally:
        fresh.close()


def test_the_topic_is_created_compacted(kafka) -> None:  # type: ignore[no-untyped-def]
    cp, k = settings(kafka, state_topic_partitions=2)
    store = KafkaStateStore(cp, k)
    store.close()
    assert topic_config(kafka, cp.state_topic, "cleanup.policy") == "compact"
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        assert len(admin.describe_topics([cp.state_topic])[0]["partitions"]) == 2
    finally:
        admin.close()
    KafkaStateStore(cp, k).close()  # an existing compacted topic is used as it is


def test_a_topic_that_is_not_compacted_is_refused(kafka) -> None:  # type: ignore[no-untyped-def]
    topic = f"plain-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    admin.close()
    with pytest.raises(StateTopicError) as err:
        KafkaStateStore(*settings(kafka, topic))
    assert f"state topic {topic} has cleanup.policy=delete, it must be compact" in str(err.value)


def test_a_chunk_larger_than_the_topic_allows_is_refused(kafka) -> None:  # type: ignore[no-untyped-def]
    topic = f"small-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    configs = {"cleanup.policy": "compact", "max.message.bytes": "200000"}
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1, "configs": configs}})
    admin.close()
    with pytest.raises(StateTopicError, match=r"exceeds the topic.s max\.message\.bytes 200000"):
        KafkaStateStore(*settings(kafka, topic))
    KafkaStateStore(*settings(kafka, topic, state_chunk_bytes=128 * 1024)).close()


def test_an_unreachable_cluster_is_unavailable(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(kafka_topic, "BOOTSTRAP_TIMEOUT_MS", 2000)
    cp = CheckpointSpec(store="kafka", state_topic="nowhere")
    k = KafkaSpec(bootstrap_servers=(f"127.0.0.1:{free_port()}",))
    with pytest.raises(CheckpointUnavailable, match="state topic nowhere: cannot reach Kafka at"):
        KafkaStateStore(cp, k)


def test_decoded_payload_is_the_encoded_blob(store) -> None:  # type: ignore[no-untyped-def]
    """The stored blob is `checkpoint.encode`'s, so the engine's import reads it unchanged."""
    meta, arrs = {"cells": 12, "groups": ["a", "b"]}, arrays(3)
    store.save([(0, {"pred": 1}, encode(meta, arrs))])
    got = store.load(0)
    assert got is not None
    m2, a2 = decode(encode(got.meta, got.arrays))
    assert m2 == meta
    assert_same(a2, arrs)


def test_the_store_uses_the_kafka_sections_sasl_and_tls(kafka_scram) -> None:  # type: ignore[no-untyped-def]
    """The store's clients are built like the consumer's: SCRAM over TLS works unchanged."""
    k = KafkaSpec(
        bootstrap_servers=(kafka_scram.bootstrap,),
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password=kafka_scram.users["alice"],
        ssl_cafile=str(kafka_scram.ca.cert),
    )
    cp = CheckpointSpec(store="kafka", state_topic=f"state-{uuid.uuid4().hex[:8]}")
    a = KafkaStateStore(cp, k)
    try:
        a.check_writable()
        a.save([(1, {"pred": 3}, encode({"tls": True}, arrays(4)))], alerts="{}")
    finally:
        a.close()
    b = KafkaStateStore(cp, k)
    try:
        got = b.load(1)
        assert got is not None and got.offsets == {"pred": 3}
        assert_same(got.arrays, arrays(4))
        assert b.load_alerts() == "{}"
    finally:
        b.close()


def test_a_broker_outage_fails_a_save_in_bounded_time_then_it_works(kafka) -> None:  # type: ignore[no-untyped-def]
    """The service retries a failed checkpoint (app/checkpointing.py): the store must fail,
    not hang past the loop's liveness timeout, and work again once the broker is back."""
    if not hasattr(kafka, "proc"):
        pytest.skip("needs a broker the tests started (not FM_KAFKA_BOOTSTRAP)")
    cp, k = settings(kafka)
    store = KafkaStateStore(cp, k)
    try:
        store.save([(0, {"pred": 1}, encode({}, arrays(1)))])
        kafka.stop()
        try:
            t = time.monotonic()
            with pytest.raises(CheckpointUnavailable, match=f"state topic {cp.state_topic}"):
                store.save([(0, {"pred": 2}, encode({}, arrays(2)))])
            assert time.monotonic() - t < 45
        finally:
            kafka.start()  # whatever happened: the session's broker serves the next tests

        errors: list[str] = []

        got = None

        def saved_and_read() -> bool:  # the clients reconnect on their own
            nonlocal got
            try:
                store.save([(0, {"pred": 3}, encode({}, arrays(3)))])
                got = store.load(0)
            except CheckpointUnavailable as exc:
                errors.append(str(exc))
                return False
            return True

        wait_for(
            saved_and_read,
            120,
            lambda: f"a save and a load once the broker is back ({errors[-1:]})",
            every=1,
        )
        assert got is not None and got.offsets == {"pred": 3}
        assert_same(got.arrays, arrays(3))
    finally:
        store.close()


def test_a_head_of_another_version_is_refused(kafka, store) -> None:  # type: ignore[no-untyped-def]
    store.save([(0, {"pred": 1}, encode({}, arrays(1)))])
    raw_send(kafka, store.topic, head_key("p/0"), json.dumps({"version": 2}).encode())
    with pytest.raises(CheckpointCorrupt, match="version 2, this monitor reads 1"):
        store.load(0)


def test_a_head_without_an_intact_generation_is_read_again(kafka, store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Another replica between its chunks and its head (the previous owner's revoke save):
    the next read sees its head; only a head that stays broken is corrupt."""
    from monitor.state import kafka_store

    store.save([(0, {"pred": 1}, encode({}, arrays(1)))])
    first = store._restore_once
    calls = []

    def torn_once(entity: str, what: str, found):  # type: ignore[no-untyped-def]
        calls.append(entity)
        if len(calls) == 1:
            raise CheckpointCorrupt(f"{what}: no intact generation (simulated)")
        return first(entity, what, found)

    monkeypatch.setattr(kafka_store, "REREAD_S", 0.01)
    monkeypatch.setattr(store, "_restore_once", torn_once)
    passes = store.passes
    got = store.load(0)
    assert got is not None and got.offsets == {"pred": 1} and len(calls) == 2
    assert store.passes == passes + 2  # the second read is a read of the topic again


def test_the_service_alert_state_round_trips_and_a_damaged_one_follows_on_corrupt(  # type: ignore[no-untyped-def]
    kafka, caplog
) -> None:
    """Through the service's Checkpointer: firing alerts restored by another replica; an
    undecodable alert head stops the start under refuse, starts alerts fresh under fresh."""
    from monitor.alerts import persist
    from monitor.alerts.evaluator import AlertEvaluator
    from tests.app.test_checkpointing import firing_evaluator

    ev = firing_evaluator()
    cp, k = settings(kafka)
    a = Checkpointer(cp, kafka=k)
    assert a.save([(0, {"p": 1}, encode({}, arrays(0)))], persist.dumps(ev), full=True) == "saved"
    a.close()
    b = Checkpointer(cp, kafka=k)
    restarted = AlertEvaluator(ev.config, ev.engine)
    b.restore_alerts(restarted)
    assert [x.labels for x in restarted.book.firing()] == [x.labels for x in ev.book.firing()]
    b.close()
    raw_send(kafka, cp.state_topic, head_key("alerts"), b"\xff")
    refuse = Checkpointer(cp, kafka=k)
    try:
        with pytest.raises(CheckpointCorrupt, match=f"state topic {cp.state_topic}, the alert"):
            refuse.restore_alerts(AlertEvaluator(ev.config, ev.engine))
    finally:
        refuse.close()
    fresh = Checkpointer(CheckpointSpec(**{**cp.__dict__, "on_corrupt": "fresh"}), kafka=k)
    try:
        restarted = AlertEvaluator(ev.config, ev.engine)
        with caplog.at_level(logging.ERROR):
            fresh.restore_alerts(restarted)
        assert restarted.book.active == {} and "alert state starts fresh" in caplog.text
    finally:
        fresh.close()


# -- read-only (``status`` and ``report --checkpoint`` beside a running monitor) ---------------
def test_a_read_only_store_needs_the_topic_and_never_creates_it(kafka, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cp, k = settings(kafka)
    created: list[Any] = []
    monkeypatch.setattr(KafkaAdminClient, "create_topics", lambda self, *a, **kw: created.append(a))
    with pytest.raises(CheckpointUnavailable, match=f"state topic {cp.state_topic} does not exist"):
        KafkaStateStore(cp, k, read_only=True)
    assert created == []
    monkeypatch.undo()
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    try:
        assert cp.state_topic not in admin.list_topics()
    finally:
        admin.close()


def test_a_read_only_store_builds_no_producer_and_fences_no_transactional_writer(  # type: ignore[no-untyped-def]
    kafka, monkeypatch
) -> None:
    """A reader opened, read and closed while the writer's save is inside its transaction: the
    reader builds no producer (so initialises no transactional id), sees the last committed
    save, refuses to write; the writer's transaction then commits, and it keeps saving."""
    cp, k = settings(kafka, state_transactions=True)
    w = KafkaStateStore(cp, k)
    try:
        w.check_writable()
        w.save([(0, {"pred": 1}, encode({"g": 1}, arrays(1)))], alerts="alerts 1")

        def no_producer(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("a read-only store built a producer")

        monkeypatch.setattr(kafka_topic, "KafkaProducer", no_producer)
        seen: list[tuple[Any, ...]] = []
        commit = w.writer.commit

        def commit_after_a_read() -> None:
            r = KafkaStateStore(cp, k, read_only=True)
            try:
                got = r.load(0)
                assert got is not None
                assert_same(got.arrays, arrays(1))
                seen.append((got.offsets, got.meta, r.load_alerts(), r.partitions()))
                with pytest.raises(CheckpointUnavailable, match="read-only"):
                    r.save([(0, {"pred": 9}, b"x")])
                with pytest.raises(CheckpointUnavailable, match="read-only"):
                    r.check_writable()
            finally:
                r.close()
            commit()

        monkeypatch.setattr(w.writer, "commit", commit_after_a_read)
        w.save([(0, {"pred": 2}, encode({"g": 2}, arrays(2)))], alerts="alerts 2")
        assert seen == [({"pred": 1}, {"g": 1}, "alerts 1", [0])]  # the open save unseen
        monkeypatch.setattr(w.writer, "commit", commit)
        w.save([(0, {"pred": 3}, encode({"g": 3}, arrays(3)))])  # not fenced: still saving
        r = KafkaStateStore(cp, k, read_only=True)
        try:
            got = r.load(0)
            assert got is not None and (got.offsets, got.meta) == ({"pred": 3}, {"g": 3})
            assert_same(got.arrays, arrays(3))
            assert r.load_alerts() == "alerts 2"
        finally:
            r.close()
    finally:
        w.close()
