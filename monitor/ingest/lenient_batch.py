"""The records of a v2 batch whose header keys are not UTF-8, read as Kafka's Java clients do.

Why: the broker stores a header key's bytes unchecked (its Java side decodes them replacing what
is not UTF-8), but aiokafka's compiled reader — and kafka-python's — decode them strictly and
raise for the whole batch. The fetch offset then stays on that batch, so one such record stopped
its partition for good: nothing after it was read, valid records of its batch included, and the
monitor reported a Kafka outage. Only a batch the compiled reader refused comes here; its
records are read one by one with header keys decoded ``errors="replace"`` (U+FFFD, as Java's
``Utils.utf8`` does), so a key like that matches no header the monitor reads and its record is
judged by the rest (a dead letter if it needed the header).

Record format v2 (Kafka protocol guide, "Record"): length varint, attributes int8, timestamp
delta varlong, offset delta varint, key (varint length, −1: null), value (likewise), header
count varint, then per header a key (varint length, UTF-8) and a value (varint length, −1:
null); every varint zig-zag encoded. The batch header (offsets, times, codec) is aiokafka's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from aiokafka import codec
from kafka.record.util import decode_varint

_RECORDS_AT = 61  # v2 batch header size: the records (or their compressed block) start here
_DECODE = {1: codec.gzip_decode, 2: codec.snappy_decode, 3: codec.lz4_decode}
_DECODE[4] = codec.zstd_decode
_LOG_APPEND_TIME = 1


class LenientRecord(NamedTuple):
    """What the monitor reads of a record (the fields of aiokafka's record objects it uses)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _blob(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    size, pos = decode_varint(buf, pos)
    if size < 0:
        return None, pos
    if pos + size > len(buf):
        raise ValueError("a field runs past the end of its record")
    return bytes(buf[pos : pos + size]), pos + size


def lenient_records(raw: bytes, batch: Any) -> list[LenientRecord]:
    """The records of the v2 batch ``raw`` (``batch``: aiokafka's view of its header)."""
    body = bytes(raw[_RECORDS_AT:])
    if batch.compression_type:
        body = _DECODE[batch.compression_type](body)
    append_time = batch.timestamp_type == _LOG_APPEND_TIME
    out: list[LenientRecord] = []
    pos = 0
    while pos < len(body):
        length, pos = decode_varint(body, pos)
        end = pos + length
        if length < 1 or end > len(body):
            raise ValueError(f"record length {length} does not fit its batch")
        pos += 1  # attributes: unused in v2
        ts_delta, pos = decode_varint(body, pos)
        offset_delta, pos = decode_varint(body, pos)
        key, pos = _blob(body, pos)
        value, pos = _blob(body, pos)
        count, pos = decode_varint(body, pos)
        if not 0 <= count <= length:
            raise ValueError(f"header count {count} does not fit its record")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            name, pos = _blob(body, pos)
            data, pos = _blob(body, pos)
            headers.append(((name or b"").decode("utf-8", "replace"), data))
        if pos != end:
            raise ValueError("a record's fields do not add up to its length")
        ts = batch.max_timestamp if append_time else batch.first_timestamp + ts_delta
        out.append(LenientRecord(batch.base_offset + offset_delta, ts, key, value, headers))
    return out
