"""Kafka record batches parsed in C for kafka-python's fetcher.

Why: kafka-python parses every record in pure Python (varints, a record object, a
``ConsumerRecord`` tuple, a generator step). Profiled on the throughput benchmark, that is 72%
of a poll-only consumer's time: ~3.3 µs of its ~4.6 µs per record. aiokafka ships the same
record-format reader compiled with Cython (``aiokafka.record``: v0/v1/v2 message formats, CRC
checks, every codec through cramjam). This module lets kafka-python's fetcher hand its fetched
bytes to that reader instead; everything else (group membership, fetch sessions, positions,
pause/resume, error handling) stays kafka-python's.

The hook is kafka-python's ``Fetcher.PartitionRecords`` class attribute, replaced on *one*
consumer's fetcher (never globally). It is a private interface, so :func:`install` checks the
shape it relies on and, if kafka-python changed, logs a warning and leaves the consumer on its
own parser: slower, never wrong. ``tests/ingest/test_record_reader.py`` fails if the installed
versions no longer take the fast path.

Records come back as aiokafka record objects: ``offset``, ``timestamp`` (ms), ``key``,
``value``, ``headers`` — what the monitor reads — but not ``ConsumerRecord``'s other fields.
Transactional reads (``isolation_level=read_committed``, which needs aborted-transaction
bookkeeping) use kafka-python's own parser. Where aiokafka has no compiled wheel (or with
``AIOKAFKA_NO_EXTENSIONS``) its pure-Python reader is used: as correct, about as slow as
kafka-python's.
"""

from __future__ import annotations

import inspect
import logging
import struct
import sys
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.legacy_records import LegacyRecordBatch
from kafka import errors as Errors
from kafka.consumer.fetcher import Fetcher
from kafka.record import MemoryRecords as KafkaMemoryRecords

from monitor.ingest.lenient_batch import lenient_records

log = logging.getLogger(__name__)

try:  # private names: their absence means kafka-python changed (see install)
    from kafka.protocol.consumer import IsolationLevel

    _READ_UNCOMMITTED: Any = IsolationLevel.READ_UNCOMMITTED
except (ImportError, AttributeError):
    _READ_UNCOMMITTED = None

_BASE: Any = Fetcher.PartitionRecords
_LENGTH = struct.Struct(">i")
_LOG_OVERHEAD = 12  # base offset int64 + batch length int32
# the smallest batch after its length field: a v0 message (crc, magic, attrs, key, value)
_MIN_RECORD = 14


class CPartitionRecords(_BASE):  # type: ignore[misc]
    """kafka-python's ``PartitionRecords`` contract (``take``, ``drain``, ``next_fetch_offset``,
    truthiness while records remain) over aiokafka's compiled batch reader.

    Offsets follow kafka-python's rules: records below the fetch offset (the head of a
    compressed batch fetched mid-way) are skipped; after a v2 batch the next fetch offset is
    the batch's own next offset, so control batches and compacted tails are stepped over.
    """

    _next_inline_exception: Exception | None

    def __init__(self, fetch_offset: int, tp: Any, records: Any, **kwargs: Any) -> None:
        super().__init__(fetch_offset, tp, records, **kwargs)
        self._native = self.isolation_level == _READ_UNCOMMITTED
        if self._native:
            self.record_iterator = None  # the base parser's generator is never started
            self._buf = memoryview(records._buffer)
            self._pos = 0
            self.bytes_read = len(self._buf)
            self._held: list[Any] = []  # records of the current batch not yet taken
            self._held_end = -1  # next fetch offset once they are taken
            self._open = True

    def __bool__(self) -> bool:
        return self._open if self._native else super().__bool__()

    def drain(self) -> None:
        if not self._native:
            super().drain()
            return
        if self._open:
            self._open = False
            self._held = []
            self._next_inline_exception = None
            if self.metric_aggregator:
                self.metric_aggregator.record(
                    self.topic_partition, self.bytes_read, self.records_read
                )
            self.on_drain(self)

    def take(self, n: int | None = None) -> list[Any]:
        if not self._native:
            return super().take(n)  # type: ignore[no-any-return]
        self._maybe_raise_next_inline_exception()
        want = sys.maxsize if n is None else n
        out: list[Any] = []
        try:
            while self._open and len(out) < want:
                if not self._held and not self._next_batch():
                    self.drain()
                    break
                room = want - len(out)
                if len(self._held) <= room:
                    out += self._held
                    self._held = []
                    self.next_fetch_offset = self._held_end
                else:
                    out += self._held[:room]
                    del self._held[:room]
                    self.next_fetch_offset = out[-1].offset + 1
        except Exception as e:
            # Nothing after a broken batch is read from this fetch, and the fetch offset stays
            # at it: the next fetch starts there and fails again, as kafka-python's does. A
            # broken batch is never skipped silently.
            self._held = []
            self._pos = len(self._buf)
            if not out:
                raise
            self._next_inline_exception = e  # raised by the next take, as kafka-python does
        self.records_read += len(out)
        return out

    def _next_batch(self) -> bool:
        """Load the next batch that has records at or after the fetch offset.

        Batch framing (Kafka's message format, all versions): base offset int64, batch length
        int32, then for v2 the partition leader epoch int32 and the magic byte. A fetch may end
        in a partial batch (the broker cuts at the fetch size): it is left for the next fetch.
        """
        buf = self._buf
        while len(buf) - self._pos >= _LOG_OVERHEAD:
            start = self._pos
            (length,) = _LENGTH.unpack_from(buf, start + 8)
            end_pos = start + _LOG_OVERHEAD + length
            if end_pos > len(buf):
                break  # partial trailing batch
            self._pos = end_pos
            if length < _MIN_RECORD:
                raise Errors.CorruptRecordError(
                    f"{self._where(start)}: batch length {length} is too short"
                )
            magic = buf[start + 16]
            try:
                batch: Any = (
                    DefaultRecordBatch(buf[start:end_pos])
                    if magic >= 2
                    else LegacyRecordBatch(buf[start:end_pos], magic)
                )
                if self.check_crcs and not batch.validate_crc():
                    raise Errors.CorruptRecordError(
                        f"Record batch for {self._where(start)} (offset {batch.base_offset}) "
                        "failed crc check"
                    )
                recs = [] if magic >= 2 and batch.is_control_batch else self._records(batch, start)
            except Errors.KafkaError:
                raise
            except Exception as exc:  # aiokafka's own errors: unreadable records, a codec
                raise Errors.CorruptRecordError(
                    f"{self._where(start)}: cannot read its records: {type(exc).__name__}: {exc}"
                ) from exc
            if magic >= 2:
                (self.leader_epoch,) = _LENGTH.unpack_from(buf, start + 12)
                end = batch.next_offset
            elif recs:
                end = recs[-1].offset + 1
            else:
                continue
            if recs and recs[0].offset < self.fetch_offset:
                recs = [r for r in recs if r.offset >= self.fetch_offset]
            if not recs:  # a control batch, or records before the fetch offset
                self.next_fetch_offset = max(self.next_fetch_offset, end)
                continue
            self._held, self._held_end = recs, end
            return True
        return False

    def _records(self, batch: Any, start: int) -> list[Any]:
        """The batch's records; a v2 batch whose header keys are not UTF-8 (which the compiled
        reader refuses whole) read leniently, as Java clients do (``lenient_batch.py``)."""
        try:
            return list(batch)
        except UnicodeDecodeError:
            if batch.magic < 2:
                raise
            log.warning("%s: a header key is not UTF-8; read as U+FFFD", self._where(start))
            return lenient_records(bytes(self._buf[start : self._pos]), batch)

    def _where(self, start: int) -> str:
        """Where a broken batch is, for its error (built only then: not per batch)."""
        tp = self.topic_partition
        return f"{tp.topic}-{tp.partition}, batch at byte {start} of the fetch"


def install(consumer: Any) -> bool:
    """Make ``consumer`` parse fetched record batches with aiokafka's compiled reader.

    Returns whether it did. Checks the private shape it replaces first: if kafka-python
    changed it, the consumer keeps its own parser and a warning says why.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    base = getattr(type(fetcher), "PartitionRecords", None)
    wanted = {"fetch_offset", "tp", "records", "check_crcs", "isolation_level"}
    try:
        params = set(inspect.signature(base).parameters) if base is not None else set()
    except (TypeError, ValueError):
        params = set()
    shape_ok = (
        fetcher is not None
        and _READ_UNCOMMITTED is not None
        and base is _BASE
        and wanted <= params
        and all(hasattr(base, a) for a in ("take", "drain", "_maybe_raise_next_inline_exception"))
        and "_buffer" in getattr(KafkaMemoryRecords, "__slots__", ())
    )
    if not shape_ok:
        log.warning(
            "kafka-python's fetcher is not the shape this monitor knows (PartitionRecords): "
            "using kafka-python's own record parser (correct, ~2x slower)"
        )
        return False
    fetcher.PartitionRecords = CPartitionRecords  # type: ignore[union-attr]
    log.debug("record batches are parsed by %s", DefaultRecordBatch.__module__)
    return True
