"""What decoding takes and gives: raw records in; columnar event batches and dead letters out.

Sources deliver :class:`RawRecord` objects or whole columnar :class:`RawBatch` es; the decoder
(``decoder.py``) turns them into a :class:`PredictionBatch` / :class:`LabelBatch` (numpy columns,
one row per valid record) that everything downstream (``state/``) works on.

An invalid record never affects the rest of its batch: it comes out as a :class:`DeadLetter`
with a machine-readable :class:`Reason` and the original bytes, so nothing is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
U16 = npt.NDArray[np.uint16]

log = logging.getLogger(__name__)


class Reason(StrEnum):
    """Why a record was dead-lettered (stable strings: they appear in DLQ headers/metrics)."""

    TOMBSTONE = "tombstone"
    RECORD_TOO_LARGE = "record_too_large"
    NOT_JSON = "not_json"
    TOO_DEEP = "too_deep"
    NOT_OBJECT = "not_object"
    MISSING_ID = "missing_id"
    BAD_ID = "bad_id"
    ID_TOO_LONG = "id_too_long"
    MISSING_TIMESTAMP = "missing_timestamp"
    BAD_TIMESTAMP = "bad_timestamp"
    TIMESTAMP_OUT_OF_RANGE = "timestamp_out_of_range"
    TIMESTAMP_IN_FUTURE = "timestamp_in_future"
    MISSING_MODEL = "missing_model"
    UNKNOWN_MODEL = "unknown_model"
    MISSING_PREDICTION = "missing_prediction"
    BAD_PREDICTION = "bad_prediction"
    BAD_SCORE = "bad_score"
    MISSING_LABEL = "missing_label"
    BAD_LABEL = "bad_label"
    BAD_ATTRIBUTE = "bad_attribute"
    MISSING_TENSOR = "missing_tensor"  # a serving-stack payload without the mapped tensor
    BAD_TENSOR = "bad_tensor"  # its shape, datatype or values do not hold together
    TOO_MANY_ROWS = "too_many_rows"  # a serving-stack call over limits.max_rows_per_record
    NOT_PROTOBUF = "not_protobuf"  # a protobuf payload (Seldon Core 2's) that does not parse
    # a serving stack's response whose request never came (within the lateness): its dead
    # letter points at the record (fm.source.*), which stays in its topic; the value is empty
    ORPHAN_RESPONSE = "orphan_response"
    BAD_ROW = "bad_row"  # a CSV row (replay) not as its header says: field count, not UTF-8
    # a CloudEvent's envelope (not its id or time): a required attribute missing, not UTF-8 or
    # too long, an event type that is no request or response, data_base64 that is no base64
    BAD_CLOUDEVENT = "bad_cloudevent"
    UNDECODABLE = "undecodable"  # anything unforeseen: the record is kept, never the consumer


class Invalid(Exception):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_unforeseen_seen: set[str] = set()


def unforeseen(exc: Exception) -> Invalid:
    """A record that broke a check in an unforeseen way (a bug of ours, or bytes nobody
    thought of): dead-letter it as ``undecodable``, never stop the consumer. The first of each
    kind is logged with its traceback, the rest at DEBUG (an attacker must not flood the log)."""
    kind = type(exc).__name__
    level = logging.DEBUG if kind in _unforeseen_seen else logging.WARNING
    _unforeseen_seen.add(kind)
    log.log(level, "record dead-lettered after an unexpected %s: %s", kind, exc, exc_info=True)
    return Invalid(Reason.UNDECODABLE, f"{kind}: {str(exc)[:160]}")


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record as a source delivers it. ``value`` is bytes (Kafka, JSONL) or a mapping (CSV)."""

    value: bytes | Mapping[str, Any]
    timestamp_ms: int | None = None
    topic: str = ""
    partition: int = 0
    offset: int = -1
    key: bytes | None = None  # a Kafka record's (kept with it in a dead letter)
    headers: Sequence[tuple[str, bytes | None]] = ()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: Reason
    detail: str
    record: RawRecord


def _empty(dtype: type) -> npt.NDArray[Any]:
    return np.zeros(0, dtype=dtype)


@dataclass
class PredictionBatch:
    """Decoded predictions, one row per valid record.

    ``groups[i, k]`` is the group index of event ``i`` in attribute set ``k`` of its model
    (``-1`` past the model's number of attribute sets).
    """

    key: U64 = field(default_factory=lambda: _empty(np.uint64))
    model: U16 = field(default_factory=lambda: _empty(np.uint16))
    ts: F64 = field(default_factory=lambda: _empty(np.float64))
    pred: U8 = field(default_factory=lambda: _empty(np.uint8))
    score: F64 = field(default_factory=lambda: _empty(np.float64))
    groups: I32 = field(default_factory=lambda: np.zeros((0, 1), dtype=np.int32))

    def __len__(self) -> int:
        return len(self.key)

    def take(self, idx: npt.NDArray[Any]) -> PredictionBatch:
        return PredictionBatch(
            self.key[idx],
            self.model[idx],
            self.ts[idx],
            self.pred[idx],
            self.score[idx],
            self.groups[idx],
        )


@dataclass
class LabelBatch:
    key: U64 = field(default_factory=lambda: _empty(np.uint64))
    ts: F64 = field(default_factory=lambda: _empty(np.float64))
    label: U8 = field(default_factory=lambda: _empty(np.uint8))

    def __len__(self) -> int:
        return len(self.key)

    def take(self, idx: npt.NDArray[Any]) -> LabelBatch:
        return LabelBatch(self.key[idx], self.ts[idx], self.label[idx])


class Records(Protocol):
    """Records of one topic partition as columns: what both decoding paths read."""

    @property
    def values(self) -> Sequence[bytes | Mapping[str, Any]]: ...

    @property
    def timestamps_ms(self) -> Sequence[int | None]: ...

    def __len__(self) -> int: ...

    def record(self, i: int) -> RawRecord: ...


@dataclass(frozen=True, slots=True)
class RawBatch:
    """Records of one topic partition as columns (what a Kafka poll gives, without objects)."""

    values: Sequence[bytes | Mapping[str, Any]]
    timestamps_ms: Sequence[int | None]
    topic: str = ""
    partition: int = 0
    offsets: Sequence[int] = ()

    def __len__(self) -> int:
        return len(self.values)

    def record(self, i: int) -> RawRecord:
        off = self.offsets[i] if self.offsets else -1
        return RawRecord(self.values[i], self.timestamps_ms[i], self.topic, self.partition, off)

    @staticmethod
    def of(records: Sequence[RawRecord] | RawBatch | ConsumerBatch) -> Records:
        if isinstance(records, RawBatch | ConsumerBatch):
            return records
        return RecordList(records)


class ConsumerBatch:
    """Polled records of one topic partition (anything with ``offset``, ``timestamp`` and
    ``value``: the record reader's or kafka-python's), seen as a :class:`RawBatch`.

    Values and record times are copied out when first asked for (a compiled decoder reads the
    records themselves); offsets only for dead letters.
    """

    def __init__(self, records: Sequence[Any], topic: str, partition: int) -> None:
        self.records = records
        self.topic = topic
        self.partition = partition
        self._values: list[Any] | None = None
        self._stamps: list[int | None] | None = None

    def __len__(self) -> int:
        return len(self.records)

    @property
    def values(self) -> list[Any]:
        if self._values is None:
            self._values = [r.value for r in self.records]
        return self._values

    @property
    def timestamps_ms(self) -> list[int | None]:
        if self._stamps is None:
            self._stamps = [r.timestamp for r in self.records]
        return self._stamps

    def record(self, i: int) -> RawRecord:
        r = self.records[i]
        key, headers = getattr(r, "key", None), tuple(getattr(r, "headers", None) or ())
        return RawRecord(r.value, r.timestamp, self.topic, self.partition, r.offset, key, headers)


class RecordList:
    """A list of :class:`RawRecord` seen through the :class:`RawBatch` interface."""

    def __init__(self, records: Sequence[RawRecord]) -> None:
        self.records = records
        self.values = [r.value for r in records]
        self.timestamps_ms = [r.timestamp_ms for r in records]

    def __len__(self) -> int:
        return len(self.records)

    def record(self, i: int) -> RawRecord:
        return self.records[i]
