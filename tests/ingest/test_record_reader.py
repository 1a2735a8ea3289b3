"""The compiled record reader against kafka-python's own parser, on the same fetched bytes.

kafka-python's ``PartitionRecords`` is the oracle: for every shape of fetch (several batches,
compression, a fetch offset inside a batch, control batches, log-append time, the legacy v1
format, a partial trailing batch, a corrupt batch) both must deliver the same records in the
same order and leave the same next fetch offset. Batches are built with kafka-python's
builder (an independent writer of the format) and patched by hand where no builder exists.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as CBuilder
from kafka import KafkaConsumer, TopicPartition
from kafka import errors as Errors
from kafka.consumer.fetcher import Fetcher
from kafka.protocol.consumer import IsolationLevel
from kafka.record import MemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder

from monitor.ingest import record_reader
from monitor.ingest.record_reader import CPartitionRecords

TP = TopicPartition("predictions", 0)
BASE_TS = 1_750_000_000_000


def batch(
    first_offset: int,
    n: int,
    *,
    magic: int = 2,
    codec: int = 0,
    with_keys: bool = True,
    headers: bool = False,
    skip: int = 0,
) -> bytes:
    """One batch of ``n`` records from ``first_offset`` (``skip`` leaves a compaction gap)."""
    b = MemoryRecordsBuilder(magic, codec, batch_size=1 << 24, offset=first_offset)
    for i in range(n):
        if i == n // 2 and skip:
            b.skip(skip)
        value = b'{"prediction_id": "p%d", "x": "%s"}' % (i, b"y" * (i * 37 % 300))
        key = b"k%d" % i if with_keys else None
        hdrs = [("h", b"v%d" % i), ("empty", None)] if headers and magic == 2 else None
        assert b.append(BASE_TS + i * 1000, key, value, hdrs) is not None
    b.close()
    return bytes(b.buffer())


def patch_v2(buf: bytes, *, attributes_or: int = 0, max_timestamp: int | None = None) -> bytes:
    """Set attribute bits / the max timestamp of a single v2 batch and recompute its CRC
    (CRC-32C over everything from the attributes on; Kafka's record batch layout)."""
    b = bytearray(buf)
    (attrs,) = struct.unpack_from(">h", b, 21)
    struct.pack_into(">h", b, 21, attrs | attributes_or)
    if max_timestamp is not None:
        struct.pack_into(">q", b, 35, max_timestamp)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


def parts(cls: Any, data: bytes, fetch_offset: int, **kw: Any) -> Any:
    return cls(fetch_offset, TP, MemoryRecords(data), **kw)


def fields(r: Any) -> tuple[Any, ...]:
    return (r.offset, r.timestamp, r.key, r.value, list(r.headers or []))


def consume(p: Any, step: int | None) -> tuple[list[tuple[Any, ...]], int, int]:
    """Take until drained, as the fetcher does; returns the records, the final fetch offset
    and the leader epoch (which the fetcher stores with the position, for KIP-320)."""
    out: list[tuple[Any, ...]] = []
    for _ in range(10_000):
        if not p:
            break
        out += [fields(r) for r in p.take(step)]
    return out, p.next_fetch_offset, p.leader_epoch


def with_epoch(buf: bytes, epoch: int) -> bytes:
    """The partition leader epoch of a v2 batch (bytes 12-15, outside the CRC)."""
    b = bytearray(buf)
    struct.pack_into(">i", b, 12, epoch)
    return bytes(b)


CASES = {
    "three batches": batch(0, 50) + batch(50, 7) + batch(57, 120),
    "gzip": batch(0, 40, codec=1) + batch(40, 40, codec=1),
    "no keys, headers": batch(0, 30, with_keys=False, headers=True),
    "compaction gap": batch(0, 20, skip=5) + batch(30, 3),
    "legacy v1": batch(0, 25, magic=1) + batch(25, 25, magic=1),
    "legacy v1 gzip": batch(0, 25, magic=1, codec=1),
    "log append time": patch_v2(batch(0, 10), attributes_or=0x08, max_timestamp=BASE_TS + 99),
    "control batch": batch(0, 5) + patch_v2(batch(5, 1), attributes_or=0x20) + batch(6, 5),
    "partial trailing batch": batch(0, 10) + batch(10, 10)[:-7],
    "leader epochs": with_epoch(batch(0, 10), 3) + with_epoch(batch(10, 10), 7),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("step", [1, 7, 10_000])
@pytest.mark.parametrize("start", [0, 3])
def test_same_records_and_offsets_as_kafka_python(case: str, step: int, start: int) -> None:
    data = CASES[case]
    want = consume(parts(Fetcher.PartitionRecords, data, start), step)
    got = consume(parts(CPartitionRecords, data, start), step)
    assert want[0], "the oracle read nothing: the case is broken"
    assert got == want
    assert got[0][0][0] >= start


def test_other_codecs_round_trip() -> None:
    """snappy, lz4 and zstd (through cramjam); kafka-python here has none of those codecs,
    so the written values are the reference."""
    for codec in (2, 3, 4):
        b = CBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
        values = [b'{"i": %d, "pad": "%s"}' % (i, b"z" * i) for i in range(200)]
        for i, v in enumerate(values):
            b.append(i, BASE_TS + i, None, v, [])
        p = parts(CPartitionRecords, bytes(b.build()), 0)
        got, end, _ = consume(p, 64)
        assert [g[3] for g in got] == values, codec
        assert end == 200


def test_a_corrupt_batch_is_an_error_not_data() -> None:
    data = bytearray(batch(0, 10))
    data[-3] ^= 0xFF  # inside the last record's value
    with pytest.raises(Errors.CorruptRecordError, match="crc"):
        consume(parts(CPartitionRecords, bytes(data), 0), 100)
    with pytest.raises(Errors.CorruptRecordError):
        consume(parts(Fetcher.PartitionRecords, bytes(data), 0), 100)


def test_unreadable_batches_are_kafka_errors_with_their_place() -> None:
    """A batch length too short to hold a message, and records that cannot be decompressed
    (a valid CRC over garbage), both raise kafka-python's CorruptRecordError naming the
    partition, not an IndexError or an aiokafka exception."""
    short = struct.pack(">qi", 0, 5) + b"\x00" * 5
    with pytest.raises(Errors.CorruptRecordError, match=r"predictions-0.*too short"):
        consume(parts(CPartitionRecords, short, 0), 100)
    b = bytearray(batch(0, 10, codec=1))  # gzip: the records section is the compressed stream
    b[61:71] = b"\xff" * 10
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    with pytest.raises(Errors.CorruptRecordError, match=r"predictions-0.*cannot read its records"):
        consume(parts(CPartitionRecords, bytes(b), 0), 100)


def test_an_error_after_some_records_comes_with_the_next_take() -> None:
    """kafka-python's contract: records read before an error are returned; the error is
    raised by the next take."""
    bad = bytearray(batch(10, 10))
    bad[-3] ^= 0xFF
    data = batch(0, 10) + bytes(bad) + batch(20, 10)
    for cls in (Fetcher.PartitionRecords, CPartitionRecords):
        p = parts(cls, data, 0)
        assert [r.offset for r in p.take(100)] == list(range(10))
        with pytest.raises(Errors.CorruptRecordError):
            p.take(100)
        # nothing after the broken batch, and the next fetch starts at it: never skipped
        assert p.take(100) == []
        assert p.next_fetch_offset == 10, cls


def test_read_committed_uses_kafka_pythons_parser() -> None:
    """Aborted-transaction filtering is kafka-python's: the reader steps aside."""
    p = parts(CPartitionRecords, batch(0, 5), 0, isolation_level=IsolationLevel.READ_COMMITTED)
    recs = p.take(10)
    assert [r.offset for r in recs] == list(range(5))
    assert type(recs[0]).__name__ == "ConsumerRecord"


def test_installed_versions_take_the_fast_path() -> None:
    """Fails when an upgrade of kafka-python changes the private shape the reader replaces
    (the monitor would still be correct, but ~2x slower: this makes it visible)."""
    c = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(3, 0))
    try:
        assert record_reader.install(c) is True
        assert c._fetcher.PartitionRecords is CPartitionRecords
        assert Fetcher.PartitionRecords is not CPartitionRecords  # one consumer, not global
    finally:
        c.close()


def test_an_unknown_fetcher_shape_keeps_kafka_pythons_parser(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class OtherFetcher:
        class PartitionRecords:
            def __init__(self, records: Any) -> None: ...

    class FakeConsumer:
        _fetcher = OtherFetcher()

    caplog.set_level(logging.WARNING, logger=record_reader.__name__)  # whatever ran before
    c = FakeConsumer()
    assert record_reader.install(c) is False
    assert c._fetcher.PartitionRecords is OtherFetcher.PartitionRecords
    assert "kafka-python's own record parser" in caplog.text


def _unreadable_key(buf: bytes, *, gzip: bool = False, append_time: bool = False) -> bytes:
    """A v2 batch (from :func:`batch` with headers) whose header key "h" of every record
    reads b"\\xff" (not UTF-8; the broker stores it as it is), optionally gzip-compressed
    afterwards and with log-append time; its length and CRC made right again."""
    body = bytearray(buf[61:])
    for i in range(len(body) - 1):  # a header key of length 1 (zig-zag 2) spelled "h"
        if body[i] == 2 and body[i + 1] == ord("h"):
            body[i + 1] = 0xFF
    b = bytearray(buf[:61])
    if gzip:
        from aiokafka.codec import gzip_encode

        body = bytearray(gzip_encode(bytes(body)))
        b[22] |= 0x01
    if append_time:
        b[22] |= 0x08
    b += body
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


@pytest.mark.parametrize("gzip", [False, True])
@pytest.mark.parametrize("append_time", [False, True])
def test_a_header_key_that_is_not_utf8_is_read_replaced_never_stopping_the_partition(
    gzip: bool, append_time: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The compiled reader (and kafka-python's) refused such a batch whole and the fetch
    offset stayed on it: the partition stopped for good and the monitor reported a Kafka
    outage. Its records are read as Java clients read them (U+FFFD for the bad bytes), and the
    batches after it too."""
    good = batch(0, 30, with_keys=False, headers=True)
    bad = _unreadable_key(good, gzip=gzip, append_time=append_time)
    want, end, _ = consume(parts(Fetcher.PartitionRecords, good + batch(30, 5), 0), 7)
    with caplog.at_level(logging.WARNING):
        got, got_end, _ = consume(parts(CPartitionRecords, bad + batch(30, 5), 0), 7)
    assert "header key is not UTF-8" in caplog.text
    assert got_end == end == 35 and len(got) == 35
    ts = BASE_TS + 29_000  # log-append time: the batch's max timestamp for every record
    for (o, t, k, v, h), (wo, wt, wk, wv, wh) in zip(got[:30], want[:30], strict=True):
        assert (o, k, v) == (wo, wk, wv)
        assert t == (ts if append_time else wt)
        assert h == [("\ufffd", wh[0][1]), wh[1]]
    assert got[30:] == want[30:]


def test_a_batch_that_lies_about_its_records_is_still_an_error() -> None:
    """The lenient reading is no back door for garbage: a record length past its batch is a
    corrupt batch, as before."""
    bad = bytearray(_unreadable_key(batch(0, 3, headers=True)))
    bad[61] = 0x7E  # the first record's length: 63, far past this small record
    struct.pack_into(">I", bad, 17, crc32c.crc32c(bytes(bad[21:])))
    with pytest.raises(Errors.CorruptRecordError):
        consume(parts(CPartitionRecords, bytes(bad), 0), None)
