"""Checkpoints: each partition's state together with the input offsets it reflects.

Why together, atomically: on restart the consumer seeks to the checkpointed offsets (not the
group's committed offsets), so the state and the position in the stream always agree — a crash
at any moment neither loses nor double-counts an event. One SQLite transaction writes all the
partitions of a checkpoint (embedded default; the file lives on a volume that survives
restarts). Offsets are committed to Kafka only *after* a checkpoint, for lag monitoring.

A partition's state is stored as an ``.npz`` archive (no pickle) plus JSON metadata, so a
checkpoint written by one instance can be restored by another (after a rebalance), with group
indices remapped by label.

Faults are told apart, because the remedy differs (``cli.py`` and ``service.py`` act on the
class): :class:`CheckpointCorrupt` (damaged or foreign file, an undecodable row, another schema
version — ``checkpoint.on_corrupt`` decides whether to move it aside) and
:class:`CheckpointUnavailable` (disk full, read-only, permissions, I/O — moving the file aside
would not help; the operator must fix the volume). Every message names the file.

The WAL stays small: 64 KiB pages make SQLite's default auto-checkpoint (1000 pages) a 64 MB
WAL, so the store lowers it, caps the WAL file kept after a reset (``journal_size_limit``) and
truncates the WAL after each save (``wal_checkpoint(TRUNCATE)``). At rest the WAL is empty; a
reader holding a snapshot (``status`` on the same file) can make it grow until it lets go,
after which the next save truncates it again.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sqlite3
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

SCHEMA_VERSION = 1
WAL_AUTOCHECKPOINT_PAGES = 64  # 4 MiB of 64 KiB pages (SQLite's default 1000 would be 64 MB)
JOURNAL_SIZE_LIMIT = 8 << 20  # bytes of WAL file kept after a reset
BUSY_TIMEOUT_MS = 30_000  # waiting for another connection's write lock
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)

log = logging.getLogger("monitor.state.checkpoint")


class CheckpointError(Exception):
    """The checkpoint cannot be used (corrupt, or written by an incompatible version/config)."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else str(path)


class CheckpointCorrupt(CheckpointError):
    """The file's content is unusable: ``checkpoint.on_corrupt`` applies (move aside/refuse)."""


class CheckpointUnavailable(CheckpointError):
    """The file cannot be opened or written (disk full, read-only, permissions, I/O error):
    moving it aside would not help, so ``on_corrupt`` does not apply."""


def _fault(path: Path, exc: sqlite3.Error | OSError, doing: str) -> CheckpointError:
    """The SQLite (or OS) error as a checkpoint error of the right class, naming the file."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        name = getattr(exc, "sqlite_errorname", None)
        if code is not None and code & 0xFF in _CORRUPT_CODES:
            return CheckpointCorrupt(f"checkpoint {path} is corrupt ({exc})", path)
        detail = f"{exc}, {name}" if name else str(exc)
    else:
        detail = exc.strerror or str(exc)
    return CheckpointUnavailable(
        f"checkpoint {path}: cannot {doing} it ({detail}{_volume(path)})", path
    )


def _volume(path: Path) -> str:
    """Why SQLite's own words may not say it (a full disk shows as an I/O error on the
    shared-memory file, a read-only mount as "unable to open")."""
    d = path if path.is_dir() else path.parent
    try:
        st = os.statvfs(d)
    except OSError:
        return ""
    if st.f_flag & os.ST_RDONLY:
        return "; the filesystem is mounted read-only"
    free = st.f_bavail * st.f_frsize
    if free < 1 << 20:
        return f"; the filesystem is full ({free} bytes free)"
    if not os.access(d, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "; no write permission"
    return ""


@dataclass(frozen=True)
class PartitionCheckpoint:
    partition: int
    offsets: dict[str, int]  # topic -> next offset to read
    meta: dict[str, Any]
    arrays: dict[str, npt.NDArray[Any]]
    saved_at: float


def encode(meta: dict[str, Any], arrays: dict[str, npt.NDArray[Any]]) -> bytes:
    buf = io.BytesIO()
    payload: dict[str, Any] = dict(arrays)
    payload["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(buf, **payload)
    return buf.getvalue()


def decode(blob: bytes) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes().decode())
    return meta, arrays


class CheckpointStore:
    """SQLite file holding one row per partition (state + offsets), written transactionally."""

    def __init__(self, path: str | Path, *, check: bool = True) -> None:
        """Open (or create) the file; ``check`` runs ``PRAGMA quick_check`` (reads every page
        once: ~tens of ms for a checkpoint of tens of MB), so damage is found at open, where
        ``on_corrupt`` can still act, rather than at some partition's load."""
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _fault(self.path.parent, exc, "create the directory of") from None
        self.db: sqlite3.Connection | None = None
        try:
            self.db = db = sqlite3.connect(
                self.path,
                isolation_level=None,
                timeout=BUSY_TIMEOUT_MS / 1000,
                check_same_thread=False,
            )
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if tables - {"meta", "partitions"}:  # another program's: never taken over or moved
                raise CheckpointUnavailable(
                    f"checkpoint {self.path} is not a fairness-monitor checkpoint (it has the "
                    f"tables {', '.join(sorted(tables))}): set checkpoint.path to a file of "
                    "its own",
                    self.path,
                )
            # State blobs are megabytes: 64 KiB pages write them 3-4x faster than the default
            # 4 KiB (takes effect when the file is created; older files keep their size)
            db.execute("PRAGMA page_size=65536")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
            db.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
            if check:
                problems = [r[0] for r in db.execute("PRAGMA quick_check(5)")]
                if problems != ["ok"]:
                    first = "; ".join(" ".join(p.split()) for p in problems)[:300]
                    raise CheckpointCorrupt(
                        f"checkpoint {self.path} is corrupt (quick_check: {first})", self.path
                    )
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS partitions (partition INTEGER PRIMARY KEY, "
                "saved_at REAL, offsets TEXT, state BLOB)"
            )
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                db.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
                )
            elif row[0] != str(SCHEMA_VERSION):
                raise CheckpointCorrupt(
                    f"checkpoint {self.path} has schema version {row[0]}, this monitor reads "
                    f"version {SCHEMA_VERSION}",
                    self.path,
                )
        except sqlite3.Error as exc:
            self.close()
            raise _fault(self.path, exc, "open") from None
        except CheckpointError:
            self.close()
            raise

    @property
    def conn(self) -> sqlite3.Connection:
        if self.db is None:
            raise CheckpointUnavailable(f"checkpoint {self.path} is closed", self.path)
        return self.db

    def check_writable(self) -> None:
        """A real write (one meta row), so a full disk or a read-only mount is found at start
        rather than at the first checkpoint."""
        db = self.conn
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('opened_at', ?)", (str(time.time()),))
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise _fault(self.path, exc, "write") from None
        self._truncate_wal()

    def _rollback(self) -> None:
        db = self.conn
        if db.in_transaction:
            # SQLite may have rolled back by itself (e.g. after SQLITE_FULL)
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")

    def _truncate_wal(self) -> None:
        """Copy the WAL into the database and empty it. The save is already durable in the
        WAL, so a failure here (a reader's snapshot, a full disk) only defers it: not raised.
        Never waits: TRUNCATE calls the busy handler while readers hold old snapshots (30 s
        each with the connection's timeout), so the timeout is 0 meanwhile and SQLite copies
        what it can, as a passive checkpoint does."""
        db = self.conn
        try:
            db.execute("PRAGMA busy_timeout=0")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            log.debug("checkpoint %s: WAL not truncated (%s)", self.path, exc)
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")

    def save(
        self, items: list[tuple[int, dict[str, int], bytes]], *, alerts: str | None = None
    ) -> None:
        """Write (partition, offsets, state blob) rows and the alert state evaluated from them
        (JSON text, if given) in one transaction. Raises :class:`CheckpointError` (naming the
        file) when it cannot."""
        now = time.time()
        db = self.conn
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT OR REPLACE INTO partitions VALUES (?, ?, ?, ?)",
                [(p, now, json.dumps(off), sqlite3.Binary(blob)) for p, off, blob in items],
            )
            if alerts is not None:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('alerts', ?)", (alerts,))
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise _fault(self.path, exc, "write") from None
        except BaseException:
            self._rollback()
            raise
        self._truncate_wal()

    def load(self, partition: int, along: Collection[int] = ()) -> PartitionCheckpoint | None:
        """One partition's row (``along``, the partitions restored with it, matters to the
        state topic only: one read for all)."""
        try:
            row = self.conn.execute(
                "SELECT saved_at, offsets, state FROM partitions WHERE partition=?", (partition,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise _fault(self.path, exc, "read") from None
        if row is None:
            return None
        try:
            offsets = {str(k): int(v) for k, v in json.loads(row[1]).items()}
            meta, arrays = decode(bytes(row[2]))
        except Exception as exc:  # any decoding problem means the row is unusable
            raise CheckpointCorrupt(
                f"checkpoint {self.path}, partition {partition}, is corrupt ({exc})", self.path
            ) from None
        return PartitionCheckpoint(partition, offsets, meta, arrays, float(row[0]))

    def save_alerts(self, alerts: str) -> None:
        """The alert state alone (``save`` writes it with the partitions it was evaluated from)."""
        self.save([], alerts=alerts)

    def load_alerts(self) -> str | None:
        """The alert state written by the newest save (its schema: ``alerts/persist.py``)."""
        try:
            row = self.conn.execute("SELECT value FROM meta WHERE key='alerts'").fetchone()
        except sqlite3.Error as exc:
            raise _fault(self.path, exc, "read") from None
        return None if row is None else str(row[0])

    def partitions(self) -> list[int]:
        try:
            return [r[0] for r in self.conn.execute("SELECT partition FROM partitions ORDER BY 1")]
        except sqlite3.Error as exc:
            raise _fault(self.path, exc, "read") from None

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


def move_aside(path: str | Path) -> Path:
    """Rename a corrupt checkpoint (and its WAL) to ``<name>.corrupt-<UTC time>``; the
    shared-memory index is rebuilt from the WAL, so it is removed."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    try:
        if path.exists():
            os.replace(path, aside)
        wal = Path(f"{path}-wal")
        if wal.exists():
            os.replace(wal, f"{aside}-wal")
        Path(f"{path}-shm").unlink(missing_ok=True)
    except OSError as exc:
        raise _fault(path, exc, "move aside") from None
    return aside


def open_store(path: str | Path, on_corrupt: str = "refuse") -> CheckpointStore:
    """The service's store: checked (quick_check) and writable. A corrupt file is moved aside
    and replaced by an empty one with ``on_corrupt: fresh``, else :class:`CheckpointCorrupt`
    is raised; a file that cannot be written raises :class:`CheckpointUnavailable`."""
    try:
        store = CheckpointStore(path)
    except CheckpointCorrupt as exc:
        if on_corrupt != "fresh":
            raise
        aside = move_aside(path)
        log.error("%s; moved it to %s and starting fresh", exc, aside)
        store = CheckpointStore(path)
    try:
        store.check_writable()
    except CheckpointError:
        store.close()
        raise
    return store
