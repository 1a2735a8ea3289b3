"""Checkpoint faults: corruption follows ``checkpoint.on_corrupt``; a full disk or a read-only
volume is a clean error naming the file (exit 2 at start, no ``on_corrupt`` hint), and a full
disk mid-run neither stops the service nor loses or double-counts a record; the WAL stays
bounded. Real files, a real small filesystem (tmpfs) when root, no broker (a stand-in consumer
records what the service asks of Kafka)."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from kafka import TopicPartition

from monitor import cli
from monitor.app.service import CHECKPOINT_FAILURES_BEFORE_PAUSE, Monitor
from monitor.config.spec import parse_config
from monitor.state.checkpoint import (
    CheckpointCorrupt,
    CheckpointStore,
    CheckpointUnavailable,
    encode,
    open_store,
)
from monitor.state.engine import Engine
from tests.conftest import require
from tests.helpers import T0, pred, run

PRED, LAB = "preds", "labels"


def config(path: Path, on_corrupt: str = "refuse", interval: int = 1) -> Any:
    return parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m"}},
            "kafka": {"predictions_topic": PRED, "labels_topic": LAB},
            "checkpoint": {"path": str(path), "on_corrupt": on_corrupt, "interval": interval},
        }
    )


def write_checkpoint(path: Path, partitions: int = 6, size: int = 60_000) -> None:
    """A checkpoint with some megabytes of state (random, so it does not compress)."""
    store = CheckpointStore(path)
    rng = np.random.default_rng(1)
    for p in range(partitions):
        blob = encode({"p": p}, {"x": rng.random(size)})
        store.save([(p, {PRED: 100 + p}, blob)])
    store.close()


def asides(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".corrupt-*"))


def run_cli(cfg_path: Path, path: Path, on_corrupt: str, capsys: Any) -> tuple[int, str]:
    cfg_path.write_text(
        json.dumps(  # JSON is YAML
            {
                "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}},
                "checkpoint": {"path": str(path), "on_corrupt": on_corrupt},
                "service": {"http_port": 0},
            }
        )
    )
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        code = cli.main(["run", "--config", str(cfg_path)])  # sets up logging to stderr
    finally:
        root.handlers[:], root.level = handlers, level
    return code, capsys.readouterr().err


# -- corruption ----------------------------------------------------------------------------------
def garbage_mid_file(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2)
        f.write(np.random.default_rng(7).bytes(200_000))


def truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 3)


def wrong_type(path: Path) -> None:
    path.write_bytes(b"PK\x03\x04 this is a zip archive, not a checkpoint" * 3000)


DAMAGES = [garbage_mid_file, truncated, wrong_type]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
def test_corrupt_file_with_fresh_is_moved_aside_and_the_service_starts_fresh(
    tmp_path: Path, damage: Any, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "cp.sqlite"
    write_checkpoint(path)
    damage(path)
    damaged = path.read_bytes()
    m = Monitor(config(path, "fresh"))
    try:
        assert m.store.partitions() == []  # fresh, and writable
        (aside,) = asides(path)
        assert aside.read_bytes() == damaged  # the evidence is kept as it was
        assert str(path) in caplog.text and str(aside) in caplog.text
        print(f"{damage.__name__}: moved to {aside.name}; log: {caplog.records[-1].message[:160]}")
    finally:
        m.store.close()


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
def test_corrupt_file_with_refuse_is_a_clean_error_naming_it(
    tmp_path: Path, damage: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cp.sqlite"
    write_checkpoint(path)
    damage(path)
    with pytest.raises(CheckpointCorrupt, match=str(path)):
        Monitor(config(path, "refuse"))
    code, err = run_cli(tmp_path / "c.yaml", path, "refuse", capsys)
    print(f"{damage.__name__}: exit {code}: {err.strip()[:200]}")
    assert code == 2 and str(path) in err and "on_corrupt: fresh" in err
    assert "Traceback" not in err and not asides(path)


class Rec(NamedTuple):
    offset: int
    value: bytes
    timestamp: int


class FakeConsumer:
    """What the service asks of Kafka, recorded."""

    def __init__(self, tps: set[TopicPartition]) -> None:
        self.tps = tps
        self.paused: set[TopicPartition] = set()
        self.commits: list[dict[TopicPartition, int]] = []
        self.sought: dict[TopicPartition, int] = {}

    def assignment(self) -> set[TopicPartition]:
        return set(self.tps)

    def pause(self, *tps: TopicPartition) -> None:
        self.paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused -= set(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.sought[tp] = offset

    def seek_to_beginning(self, tp: TopicPartition) -> None:
        self.sought[tp] = 0

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int:
        return self.sought[tp]

    def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        self.commits.append({tp: o.offset for tp, o in offsets.items()})

    def highwater(self, tp: TopicPartition) -> int | None:
        return None


def test_a_row_found_corrupt_at_load_follows_on_corrupt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """quick_check passes (the pages are sound, a state blob is not): the damage shows only
    when partition 1 is restored, and on_corrupt applies there too."""
    path = tmp_path / "cp.sqlite"
    engine = Engine(config(path))
    run(engine, [pred(f"p{i}", T0 + i, "ab"[i % 2], i % 2) for i in range(50)])
    store = CheckpointStore(path)
    store.save([(p, {PRED: 100 + p}, encode(*engine.export_partition(0))) for p in (0, 1)])
    store.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE partitions SET state = ? WHERE partition = 1", (b"PK\x03\x04garbage",))
    db.commit()
    db.close()
    tps = {TopicPartition(t, p) for t in (PRED, LAB) for p in (0, 1)}

    m = Monitor(config(path, "refuse"))
    m.ownership.consumer = FakeConsumer(tps)
    with pytest.raises(CheckpointCorrupt, match=rf"{path}.*partition 1"):
        m.ownership.restore(tps)
    m.store.close()

    m = Monitor(config(path, "fresh"))
    m.ownership.consumer = FakeConsumer(tps)
    m.ownership.restore(tps)
    (aside,) = asides(path)
    assert str(path) in caplog.text and str(aside) in caplog.text
    assert m.ownership.owned == {0, 1}
    assert m.ownership.consumer.sought[TopicPartition(PRED, 0)] == 100  # from the checkpoint
    assert m.ownership.consumer.sought[TopicPartition(PRED, 1)] == 0  # fresh: from the beginning
    assert m.store.partitions() == []  # a new file, written at the next checkpoint
    m.store.close()


# -- a small real filesystem ----------------------------------------------------------------------
@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)])
    require(r.returncode == 0, "root and mount(8), for a small real filesystem (tmpfs)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> Path:
    """Write a file until the filesystem is full."""
    filler = directory / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with contextlib.suppress(OSError), open(directory / "filler2", "wb") as f:
        while True:  # the last partial block
            f.write(b"\0" * 512)
            f.flush()
    return filler


def test_disk_full_at_start_is_a_clean_error_without_the_on_corrupt_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tmpfs(tmp_path / "small", "2m") as d:
        path = d / "cp.sqlite"
        write_checkpoint(path, partitions=1, size=1000)
        before = path.read_bytes()
        fill(d)
        with pytest.raises(CheckpointUnavailable, match=str(path)):
            Monitor(config(path, "fresh"))
        code, err = run_cli(tmp_path / "c.yaml", path, "fresh", capsys)
        print(f"exit {code}: {err.strip()}")
        assert code == 2 and str(path) in err and "full" in err.replace(str(path), "")
        assert "on_corrupt" not in err and "Traceback" not in err
        assert not asides(path) and path.read_bytes() == before  # not "fresh": left alone


def test_read_only_is_a_clean_error_without_the_on_corrupt_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = os.geteuid() == 0  # root ignores permission bits: remount the filesystem instead
    with contextlib.ExitStack() as stack:
        d = stack.enter_context(tmpfs(tmp_path / "ro", "8m")) if root else tmp_path / "ro"
        d.mkdir(exist_ok=True)
        path = d / "cp.sqlite"
        write_checkpoint(path, partitions=1, size=1000)
        if root:
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        else:
            path.chmod(0o444)
            d.chmod(0o555)
            stack.callback(d.chmod, 0o755)
        with pytest.raises(CheckpointUnavailable, match=str(path)):
            Monitor(config(path, "fresh"))
        code, err = run_cli(tmp_path / "c.yaml", path, "fresh", capsys)
        print(f"exit {code}: {err.strip()}")
        assert code == 2 and str(path) in err
        assert ("read-only" if root else "permission") in err.replace(str(path), "")
        assert "on_corrupt" not in err and "Traceback" not in err and not asides(path)


def feed(m: Monitor, start: int, n: int) -> None:
    """Hand the monitor ``n`` predictions (and labels for half) from offset ``start`` on."""
    preds = [
        Rec(
            start + i,
            json.dumps(
                {
                    "prediction_id": f"p{start + i}",
                    "model_id": "m",
                    "timestamp": T0 + start + i,
                    "attributes": {"g": "ab"[i % 2]},
                    "prediction": i % 3 % 2,
                }
            ).encode(),
            int((T0 + start + i) * 1000),  # the producer's record time
        )
        for i in range(n)
    ]
    labels = [
        Rec(
            start // 2 + j,
            json.dumps(
                {
                    "prediction_id": f"p{start + 2 * j}",
                    "timestamp": T0 + start + 2 * j + 1,
                    "label": j % 2,
                }
            ).encode(),
            int((T0 + start + 2 * j + 1) * 1000),
        )
        for j in range(n // 2)
    ]
    m._process({TopicPartition(PRED, 0): preds, TopicPartition(LAB, 0): labels})


def stored(path: Path, cfg: Any) -> tuple[dict[str, int], dict[str, int]]:
    """Counters and offsets in the file, as a restarted monitor would restore them."""
    store = CheckpointStore(path)
    cp = store.load(0)
    store.close()
    assert cp is not None
    engine = Engine(cfg)
    engine.import_partition(0, cp.meta, cp.arrays)
    return engine.counters(), cp.offsets


def test_disk_full_mid_run_the_service_survives_and_resumes_without_loss(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "small", "4m") as d:
        path = d / "cp.sqlite"
        now = [0.0]
        cfg = config(path, interval=5)
        m = Monitor(cfg, clock=lambda: now[0])
        tps = {TopicPartition(PRED, 0), TopicPartition(LAB, 0)}
        m.ownership.consumer = FakeConsumer(tps)
        m.ownership.pending = False
        m.ownership.owned = {0}
        m.ownership.next_offsets = {TopicPartition(PRED, 0): 0, TopicPartition(LAB, 0): 0}

        def tick(seconds: float) -> None:
            now[0] += seconds
            if m.checkpoints.due():
                m.checkpoint()

        feed(m, 0, 400)
        tick(5)
        assert m.ownership.consumer.commits[-1] == {
            TopicPartition(PRED, 0): 400,
            TopicPartition(LAB, 0): 200,
        }
        good = stored(path, cfg)
        filler = fill(d)

        feed(m, 400, 400)  # consumption goes on while the disk is full
        tick(5)
        ok, why = m.ready()
        print(f"disk full: ready={ok}: {why}")
        assert not ok and str(path) in why and "full" in why.replace(str(path), "")
        assert (
            m.checkpoints.failures == 1 and len(m.ownership.consumer.commits) == 1
        )  # nothing committed
        assert stored(path, cfg) == good  # the last good checkpoint is intact
        tick(1)
        assert m.checkpoints.failures == 1  # retried once per interval, not every loop
        for _ in range(CHECKPOINT_FAILURES_BEFORE_PAUSE - 1):
            feed(m, 400 + 400 * (_ + 1), 400)
            tick(5)
        assert m.checkpoints.failures == CHECKPOINT_FAILURES_BEFORE_PAUSE
        assert m.ownership.consumer.paused == tps and m.checkpoints.paused  # bounded run-ahead
        assert "paused" in m.ready()[1]
        text = metrics(m)
        assert f"fairness_checkpoint_failures_total {CHECKPOINT_FAILURES_BEFORE_PAUSE}.0" in text
        assert f"fairness_checkpoint_failing {CHECKPOINT_FAILURES_BEFORE_PAUSE}.0" in text

        filler.unlink()
        (d / "filler2").unlink(missing_ok=True)
        tick(5)  # space is back: the retry succeeds, with no new record in between
        ok, why = m.ready()
        assert ok, why
        assert not m.ownership.consumer.paused and not m.checkpoints.paused
        total = 400 * (1 + CHECKPOINT_FAILURES_BEFORE_PAUSE)
        assert m.ownership.consumer.commits[-1] == {
            TopicPartition(PRED, 0): total,
            TopicPartition(LAB, 0): total // 2,
        }

        # the same records, once, with no fault: the counts must be identical
        ref = Monitor(config(tmp_path / "ref.sqlite"))
        ref.ownership.next_offsets = {TopicPartition(PRED, 0): 0, TopicPartition(LAB, 0): 0}
        for k in range(1 + CHECKPOINT_FAILURES_BEFORE_PAUSE):
            feed(ref, 400 * k, 400)
        counters, offsets = stored(path, cfg)
        print(f"resumed: offsets {offsets}, counters {counters}")
        assert offsets == {PRED: total, LAB: total // 2}
        assert (
            counters == ref.engine.counters()
            and counters["awaiting_label"] + counters["labelled_kept_until_ttl"] > 0
        )
        m.store.close()
        ref.store.close()


def metrics(m: Monitor) -> str:
    from prometheus_client import generate_latest

    m.publish(force=True)  # what a scrape reads is the loop's published snapshot
    return generate_latest(m.registry).decode()


# -- the WAL -------------------------------------------------------------------------------------
def wal(path: Path) -> int:
    w = Path(f"{path}-wal")
    return w.stat().st_size if w.exists() else 0


def test_the_wal_stays_bounded_over_many_saves(tmp_path: Path) -> None:
    """1 MB saves: SQLite's default auto-checkpoint (1000 pages of 64 KiB) let the WAL reach
    64 MB; the store keeps it at most one save (at rest: empty), and a reader that held a
    snapshot (the WAL had to grow meanwhile) is caught up on at the next save."""
    path = tmp_path / "cp.sqlite"
    store = CheckpointStore(path)
    rng = np.random.default_rng(3)
    blobs = [encode({}, {"x": rng.random(130_000)}) for _ in range(4)]  # ~1 MB each
    one = len(blobs[0])
    peak = 0
    for i in range(120):
        store.save([(i % 8, {PRED: i}, blobs[i % 4])])
        peak = max(peak, wal(path))
    print(f"120 saves of {one / 1e6:.2f} MB: WAL peak after a save {peak} bytes")
    assert peak == 0
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM partitions").fetchall()  # holds a snapshot
    t = time.perf_counter()
    for i in range(10):
        store.save([(i % 8, {PRED: i}, blobs[i % 4])])
    blocked = time.perf_counter() - t
    held = wal(path)
    reader.execute("COMMIT")
    reader.close()
    store.save([(0, {PRED: 0}, blobs[0])])
    print(
        f"WAL while a reader held a snapshot: {held} bytes (10 saves in {blocked:.2f}s); "
        f"after it let go: {wal(path)}"
    )
    assert blocked < 10  # the saves never wait for the reader (30 s busy timeout each)
    assert held > one and wal(path) <= 8 << 20
    assert wal(path) == 0
    store.close()


def test_open_store_is_writable_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "cp.sqlite"
    store = open_store(path)
    assert store.conn.execute("SELECT value FROM meta WHERE key='opened_at'").fetchone()
    store.close()


def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Found by a review: checkpoint.path pointing at another application's SQLite database
    added the monitor's tables to it and wrote there. It is refused as unavailable, so
    ``on_corrupt: fresh`` does not move another program's file aside either; untouched."""
    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (name TEXT)")
        db.execute("INSERT INTO users VALUES ('ada')")
    db.close()
    before = path.read_bytes()
    with pytest.raises(CheckpointUnavailable, match="not a fairness-monitor checkpoint"):
        CheckpointStore(path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "app.sqlite"
    ]
