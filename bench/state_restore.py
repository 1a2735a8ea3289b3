"""Restore time of one partition's checkpoint vs its state size, for the SQLite file and the
Kafka state topic (with and without ``checkpoint.state_transactions``): the first part of
``bench/state_store.py`` (its docstring says what is measured and how to run it).
"""

from __future__ import annotations

import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from kafka import KafkaAdminClient

from bench.common import bench_config, register_groups, workload
from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.ingest.events import LabelBatch
from monitor.state.checkpoint import encode
from monitor.state.engine import Engine
from monitor.state.kafka_store import KafkaStateStore
from monitor.state.stores import StateStore, open_state_store
from tests.kafka_helpers import end_offsets

STORES = ("sqlite", "kafka", "kafka-tx")
MB = 1_000_000


def partition_state(target: int, seed: int = 0) -> tuple[bytes, int, Engine]:
    """Partition 0's encoded state once it reaches ``target`` bytes, the predictions that took
    and the engine: predictions only (their labels have not come yet), so the pending table grows."""
    engine = Engine(bench_config())
    register_groups(engine)
    preds, _ = workload(target // 10 + 10_000, seconds=3600, seed=seed)
    n, blob = 0, encode(*engine.export_partition(0))
    while len(blob) < target:
        per = len(blob) / n if n else 40.0  # bytes per prediction so far
        step = max(500, int((target - len(blob)) / per * 0.9))
        if n + step > len(preds):
            raise RuntimeError(f"{len(preds):,} predictions are not {target:,} bytes of state")
        engine.apply(0, preds.take(np.arange(n, n + step)), LabelBatch())
        n += step
        blob = encode(*engine.export_partition(0))
    return blob, n, engine


def settings(side: str, tmp: Path, chunk: int) -> CheckpointSpec:
    """A fresh file or topic for ``side``."""
    name = uuid.uuid4().hex[:10]
    if side == "sqlite":
        return CheckpointSpec(path=str(tmp / f"{name}.sqlite"))
    return CheckpointSpec(
        store="kafka",
        state_topic=f"bench-state-{name}",
        state_chunk_bytes=chunk,
        state_transactions=side == "kafka-tx",
    )


def restore(
    cp: CheckpointSpec, kafka: KafkaSpec, offsets: dict[str, int]
) -> tuple[float, float, int]:
    """(open, load) seconds of partition 0 by a new store instance, as a restart does, and
    the records the load read of the state topic (0 for SQLite)."""
    t0 = time.perf_counter()
    store = open_state_store(cp, kafka)
    t1 = time.perf_counter()
    before = getattr(store, "records_read", 0)
    got = store.load(0)
    t2 = time.perf_counter()
    records = getattr(store, "records_read", 0) - before
    store.close()
    if got is None or got.offsets != offsets:
        raise RuntimeError(f"{cp.store} restored {got and got.offsets}, not {offsets}")
    return t1 - t0, t2 - t1, records


def restore_round(
    side: str, blob: bytes, kafka: KafkaSpec, tmp: Path, chunk: int
) -> dict[str, float]:
    cp = settings(side, tmp, chunk)
    offsets = {"predictions": 12_345, "labels": 6_789}
    store: StateStore = open_state_store(cp, kafka)
    try:
        store.save([(0, offsets, blob)])  # the previous generation
        t = time.perf_counter()
        store.save([(0, offsets, blob)])
        save = time.perf_counter() - t
    finally:
        store.close()
    opened, loaded, records = restore(cp, kafka, offsets)
    return {
        "save": save,
        "open": opened,
        "load": loaded,
        "restore": opened + loaded,
        "records": records,
    }


def unbounded_topic(kafka: KafkaSpec, cp: CheckpointSpec) -> None:
    """The state topic as the monitor created it before: compacted, the broker's segments
    (1 GiB, 7 days)."""
    admin = KafkaAdminClient(bootstrap_servers=list(kafka.bootstrap_servers))
    try:
        topic = {"num_partitions": 1, "replication_factor": 1}
        admin.create_topics({cp.state_topic: {**topic, "configs": {"cleanup.policy": "compact"}}})
    finally:
        admin.close()


def compacted_bound(cp: CheckpointSpec, size: int) -> int:
    """Records an index pass reads once the cleaner has caught up: each live key (two
    generations' chunks, the head, meta) in the cleaned segments and again in the active one,
    which holds at most ``segment.bytes`` of chunks and their heads."""
    chunks = -(-size // cp.state_chunk_bytes)
    live = 2 * chunks + 2
    segment = -(-cp.state_segment_bytes // cp.state_chunk_bytes)
    return 2 * live + segment + -(-segment // chunks)


def wait_compacted(cp: CheckpointSpec, kafka: KafkaSpec, bound: int) -> tuple[float, int]:
    """Seconds until an index pass reads at most ``bound`` records (the cleaner has cleaned the
    rolled segments; at most 120 s), and what it read then."""
    t, records = time.monotonic(), 0
    reader = KafkaStateStore(cp, kafka, read_only=True)
    try:
        while True:
            before = reader.records_read
            reader.partitions()  # one index pass
            records = reader.records_read - before
            if records <= bound or time.monotonic() - t > 120:
                return time.monotonic() - t, records
            time.sleep(1.0)
    finally:
        reader.close()


def grown_restore(
    blob: bytes, saves: int, kafka: KafkaSpec, tmp: Path, chunk: int
) -> tuple[dict[str, dict[str, float]], int]:
    """Restore after ``saves`` saves of ``blob``: from a topic with the broker's segments (as
    the monitor created it before), and from one the monitor creates (bounded segments), right
    after the saves and once the cleaner has caught up. Returns each's seconds and records the
    load read; and the records written."""
    offsets = {"predictions": 1, "labels": 1}
    out: dict[str, dict[str, float]] = {}
    written = 0
    for kind in ("unbounded", "bounded"):
        cp = settings("kafka", tmp, chunk)
        if kind == "unbounded":
            unbounded_topic(kafka, cp)
        store = open_state_store(cp, kafka)
        try:
            for _ in range(saves):
                store.save([(0, offsets, blob)])
        finally:
            store.close()
        opened, loaded, records = restore(cp, kafka, offsets)
        out[kind] = {"restore": opened + loaded, "records": records}
        written = sum(end_offsets(kafka.bootstrap_servers[0], [cp.state_topic]).values())
    waited, _ = wait_compacted(cp, kafka, compacted_bound(cp, len(blob)))
    opened, loaded, records = restore(cp, kafka, offsets)
    out["compacted"] = {"restore": opened + loaded, "records": records, "waited": waited}
    return out, written


def restore_bench(
    bootstrap: str,
    sizes: list[int],
    *,
    rounds: int = 5,
    grown: int = 10,
    chunk: int = CheckpointSpec.state_chunk_bytes,
    tmp: Path,
) -> dict[int, dict[str, Any]]:
    """Per size: the state's bytes and predictions, per store the medians of each phase, the
    rounds' paired Kafka/SQLite restore and save ratios, and the grown topic's restore."""
    kafka = KafkaSpec(bootstrap_servers=(bootstrap,))
    out: dict[int, dict[str, Any]] = {}
    for size in sizes:
        blob, n, engine = partition_state(size)
        meta_arrays = engine.export_partition(0)
        t = time.perf_counter()
        Engine(bench_config()).import_partition(0, *meta_arrays)
        imported = time.perf_counter() - t
        print(
            f"state {len(blob) / MB:.2f} MB ({n:,} pending predictions); engine import "
            f"{imported * 1e3:.1f} ms (the same after either store)"
        )
        runs: dict[str, list[dict[str, float]]] = {s: [] for s in STORES}
        for r in range(rounds):
            order = STORES[r % len(STORES) :] + STORES[: r % len(STORES)]
            for side in order:
                runs[side].append(restore_round(side, blob, kafka, tmp, chunk))
            print(
                "  round",
                r + 1,
                ", ".join(
                    f"{s} save {runs[s][-1]['save'] * 1e3:.0f} / restore "
                    f"{runs[s][-1]['restore'] * 1e3:.0f} ms"
                    for s in STORES
                ),
            )
        res: dict[str, Any] = {"bytes": len(blob), "predictions": n, "import": imported}
        for side in STORES:
            res[side] = {k: statistics.median(x[k] for x in runs[side]) for k in runs[side][0]}
            if side != "sqlite":
                for k in ("save", "restore"):
                    pairs = [a[k] / b[k] for a, b in zip(runs[side], runs["sqlite"], strict=True)]
                    res[side][f"{k}_ratio"] = statistics.median(pairs)
        if grown:
            res["grown"], res["grown_records"] = grown_restore(blob, grown, kafka, tmp, chunk)
        out[size] = res
        report_restore(res, grown)
    return out


def report_restore(res: dict[str, Any], grown: int) -> None:
    print(
        f"  medians at {res['bytes'] / MB:.2f} MB (open + load = restore; ratio: the "
        "median of the rounds' own ratios to SQLite):"
    )
    for side in STORES:
        m = res[side]
        ratio = (
            ""
            if side == "sqlite"
            else (f"  kafka/sqlite save {m['save_ratio']:.1f}x, restore {m['restore_ratio']:.1f}x")
        )
        read = f"; load read {m['records']:.0f} records" if side != "sqlite" else ""
        print(
            f"    {side:8} save {m['save'] * 1e3:7.1f} ms  restore {m['restore'] * 1e3:7.1f} ms "
            f"(open {m['open'] * 1e3:.1f} + load {m['load'] * 1e3:.1f}){ratio}{read}"
        )
    if grown:
        two, two_n = res["kafka"]["restore"], res["kafka"]["records"]
        print(
            f"  kafka restore after {grown} saves to one topic ({res['grown_records']} records "
            f"written; the two-generation topic: {two * 1e3:.0f} ms, load read {two_n:.0f}):"
        )
        for kind, what in (
            ("unbounded", "broker's segments (1 GiB, 7 days), as created before"),
            ("bounded", "bounded segments, right after the saves"),
            ("compacted", "bounded segments, once the cleaner caught up"),
        ):
            g = res["grown"][kind]
            waited = f" ({g['waited']:.0f} s later)" if "waited" in g else ""
            print(
                f"    {what}{waited}: {g['restore'] * 1e3:.0f} ms, "
                f"{g['restore'] / two:.1f}x; load read {g['records']:.0f} records"
            )
