"""Decode a whole batch of raw records into columnar numpy arrays, dead-lettering bad ones.

This is the only place where per-event Python work happens: parse JSON, pick the configured
fields, validate them, and map attribute values to group indices. Everything downstream
(``engine.py``, ``windows.py``, ``join.py``) works on the arrays produced here.

An invalid record never affects the rest of its batch: it comes out as a :class:`DeadLetter`
with a machine-readable :class:`Reason` and the original bytes, so nothing is lost.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from monitor.config.spec import Config, ModelSpec
from monitor.ingest.decode_fast import FastPath, try_fast
from monitor.ingest.groups import GroupRegistry
from monitor.ingest.keys import id_keys

U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
U16 = npt.NDArray[np.uint16]

_json = msgspec.json.Decoder()
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


def parse_timestamp(value: object) -> float:
    """Epoch seconds from ISO-8601 text or epoch seconds / milliseconds (> 10¹¹ means ms)."""
    if isinstance(value, bool):
        raise Invalid(Reason.BAD_TIMESTAMP, f"{value!r} is not a timestamp")
    if isinstance(value, int | float):
        try:
            t = float(value)
        except OverflowError:
            raise Invalid(Reason.BAD_TIMESTAMP, f"{str(value)[:40]}… is not a time") from None
        if not math.isfinite(t):
            raise Invalid(Reason.BAD_TIMESTAMP, f"{value!r} is not a finite timestamp")
        return t / 1000.0 if abs(t) > 1e11 else t
    if isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip())
        except ValueError:
            try:
                return parse_timestamp(float(value))
            except ValueError:
                raise Invalid(Reason.BAD_TIMESTAMP, f"{value[:40]!r} is not ISO-8601") from None
        if dt.tzinfo is None:
            from datetime import UTC

            dt = dt.replace(tzinfo=UTC)
        return dt.timestamp()
    raise Invalid(Reason.BAD_TIMESTAMP, f"{type(value).__name__} is not a timestamp")


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
    def of(records: Sequence[RawRecord] | RawBatch | ConsumerBatch) -> RawBatch | _Records:
        if isinstance(records, RawBatch | ConsumerBatch):
            return records  # type: ignore[return-value]
        return _Records(records)


class ConsumerBatch:
    """Polled records of one topic partition (anything with ``offset``, ``timestamp`` and
    ``value``: the record reader's or kafka-python's), seen as a :class:`RawBatch`.

    Only the values are copied out eagerly; record times and offsets are read lazily, since
    they are needed only for events without a timestamp and for dead letters.
    """

    def __init__(self, records: Sequence[Any], topic: str, partition: int) -> None:
        self.records = records
        self.topic = topic
        self.partition = partition
        self.values = [r.value for r in records]
        self._stamps: list[int | None] | None = None

    def __len__(self) -> int:
        return len(self.records)

    @property
    def timestamps_ms(self) -> list[int | None]:
        if self._stamps is None:
            self._stamps = [r.timestamp for r in self.records]
        return self._stamps

    def record(self, i: int) -> RawRecord:
        r = self.records[i]
        return RawRecord(r.value, r.timestamp, self.topic, self.partition, r.offset)


class _Records:
    """A list of :class:`RawRecord` seen through the :class:`RawBatch` interface."""

    def __init__(self, records: Sequence[RawRecord]) -> None:
        self.records = records
        self.values = [r.value for r in records]
        self.timestamps_ms = [r.timestamp_ms for r in records]

    def __len__(self) -> int:
        return len(self.records)

    def record(self, i: int) -> RawRecord:
        return self.records[i]


def _getter(path: tuple[str, ...]) -> Callable[[dict[str, Any]], Any]:
    """A fast accessor for a dotted path (events are plain dicts from the JSON decoder)."""
    if len(path) == 1:
        key = path[0]
        return lambda e: e.get(key)
    if len(path) == 2:
        k1, k2 = path

        def two(e: dict[str, Any]) -> Any:
            inner = e.get(k1)
            return inner.get(k2) if type(inner) is dict else None

        return two

    def many(e: dict[str, Any]) -> Any:
        cur: Any = e
        for part in path:
            if type(cur) is not dict:
                return None
            cur = cur.get(part)
        return cur

    return many


_NUMBER = (int, float)


def _text_id(raw: Any, limit: int) -> str:
    t = type(raw)
    if t is str:
        if not raw:
            raise Invalid(Reason.MISSING_ID, "empty prediction id")
        if len(raw) > limit:
            raise Invalid(
                Reason.ID_TOO_LONG,
                f"prediction id of {len(raw)} characters > limits.max_id_length {limit}",
            )
        return str(raw)
    if t is int:
        text = str(raw)
        if len(text) > limit:
            raise Invalid(Reason.ID_TOO_LONG, f"prediction id of {len(text)} digits")
        return text
    if raw is None:
        raise Invalid(Reason.MISSING_ID, "no prediction id")
    raise Invalid(Reason.BAD_ID, f"prediction id must be a string or integer, got {t.__name__}")


def _finite(x: int | float) -> bool:
    """``math.isfinite`` that also answers for integers too large for a float."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _binary_map(extra: Mapping[str, int]) -> dict[Any, int]:
    """Accepted spellings of a 0/1 value: numbers, booleans, "0"/"1", configured strings."""
    table: dict[Any, int] = {0: 0, 1: 1, "0": 0, "1": 1}
    table.update(extra)
    return table


class Decoder:
    """Decodes batches for one configuration; reads and extends the group registries."""

    def __init__(
        self,
        config: Config,
        registries: Sequence[GroupRegistry],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.models: list[ModelSpec] = list(config.models.values())
        self.model_index = {m.name: i for i, m in enumerate(self.models)}
        self.registries = registries
        self.clock = clock
        self.limits = config.limits
        self.max_sets = max(len(m.attribute_sets) for m in self.models)
        f = config.fields
        self.get_id = _getter(f.prediction_id)
        self.get_ts = _getter(f.timestamp)
        self.get_model = _getter(f.model_id)
        self.get_pred = _getter(f.prediction)
        self.get_score = _getter(f.score)
        self.get_label = _getter(f.label)
        self.attr_getters = [[_getter(a.path) for a in m.attributes] for m in self.models]
        self.pred_maps = [_binary_map(m.prediction_values) for m in self.models]
        label_values: dict[str, int] = {}
        for m in self.models:
            label_values.update(m.label_values)
        self.label_map = _binary_map(label_values)
        if config.default_model is not None:
            self.default_model: int | None = self.model_index[config.default_model]
        else:
            self.default_model = 0 if len(self.models) == 1 else None
        self.fast = FastPath(self)

    # -- shared steps ----------------------------------------------------------------------------
    def _parse_all(
        self, values: Sequence[Any], typed: msgspec.json.Decoder[Any] | None
    ) -> tuple[list[Any], list[Invalid | None]]:
        """JSON-decode every value, record by record (never joined: records that are not JSON
        on their own can join into valid JSON). Hostile values fail per record: a tombstone (``None``), a record over
        ``limits.max_record_bytes`` (not parsed at all), nesting deeper than the parser's
        recursion limit (``RecursionError``, not a ``DecodeError``), anything that is not an
        object.
        """
        n = len(values)
        errors: list[Invalid | None] = [None] * n
        limit = self.limits.max_record_bytes
        if n and all(type(v) is bytes for v in values) and max(map(len, values)) <= limit:
            try:
                events = list(map(_json.decode, values))
                for i, e in enumerate(events):
                    if type(e) is not dict:
                        errors[i] = Invalid(
                            Reason.NOT_OBJECT,
                            "event is JSON null"
                            if e is None
                            else f"event is a JSON {type(e).__name__}, not an object",
                        )
                return events, errors
            except (msgspec.DecodeError, RecursionError):
                pass
        events = []
        for i, v in enumerate(values):
            if v is None:
                errors[i] = Invalid(Reason.TOMBSTONE, "tombstone: the record has no value")
            elif isinstance(v, bytes | bytearray | memoryview):
                if len(v) > limit:
                    errors[i] = Invalid(
                        Reason.RECORD_TOO_LARGE,
                        f"{len(v)} bytes > limits.max_record_bytes {limit}",
                    )
                    v = None
                else:
                    try:
                        v = _json.decode(v)
                    except msgspec.DecodeError as exc:
                        v = self.fast.salvage(typed, bytes(v)) if typed is not None else None
                        if v is None:
                            errors[i] = Invalid(Reason.NOT_JSON, str(exc)[:200])
                    except RecursionError:
                        errors[i] = Invalid(Reason.TOO_DEEP, "JSON nested too deeply")
                        v = None
                    else:
                        if v is None:
                            errors[i] = Invalid(Reason.NOT_OBJECT, "event is JSON null")
            if v is not None and not isinstance(v, dict):
                if isinstance(v, Mapping):
                    v = dict(v)
                else:
                    errors[i] = Invalid(
                        Reason.NOT_OBJECT, f"event is a JSON {type(v).__name__}, not an object"
                    )
            events.append(v)
        return events, errors

    def _time(self, raw: Any, record_ms: int | None, lo: float, hi: float) -> float:
        """Event time, checked: not before ``min_timestamp``, and at most ``max_future`` ahead
        of the wall clock (``hi``) *and* of the record's own Kafka time. One producer with a
        skewed clock must not move the event-time clock: a window ends at the newest bucket
        seen, so one event stamped a day ahead would empty every window and make the real
        events that follow "late". Kafka stamps each record when it is produced (brokers
        reject CreateTime far ahead of theirs), so an event time far past its record's time
        is a wrong clock, not a fast stream."""
        has_record_time = record_ms is not None and record_ms > 0  # Kafka's "none" is -1
        if raw is None:
            if not has_record_time:
                raise Invalid(Reason.MISSING_TIMESTAMP, "no timestamp field and no record time")
            t = record_ms / 1000.0  # type: ignore[operator]
        elif type(raw) in _NUMBER and raw == raw and abs(raw) < 1e11:
            t = float(raw)  # epoch seconds: the fast path
        else:
            t = parse_timestamp(raw)
        if t < lo:
            raise Invalid(Reason.TIMESTAMP_OUT_OF_RANGE, f"timestamp {t:.0f} is out of range")
        if has_record_time:
            hi = min(hi, record_ms / 1000.0 + self.config.max_future)  # type: ignore[operator]
        if t > hi:
            raise Invalid(
                Reason.TIMESTAMP_IN_FUTURE,
                f"timestamp {t:.0f} is {t - hi + self.config.max_future:.0f} s ahead of "
                f"{'its record time' if has_record_time else 'the clock'} "
                f"(max_future {self.config.max_future} s)",
            )
        return t

    def _model(self, raw: Any) -> int:
        if raw is None:
            if self.default_model is None:
                raise Invalid(Reason.MISSING_MODEL, "no model id and no default model")
            return self.default_model
        idx = self.model_index.get(raw) if type(raw) is str else None
        if idx is None:
            if self.config.unknown_models == "default" and self.default_model is not None:
                return self.default_model
            raise Invalid(Reason.UNKNOWN_MODEL, f"model {str(raw)[:60]!r} is not configured")
        return idx

    # -- predictions ---------------------------------------------------------------------------
    def decode_predictions(
        self, records: Sequence[RawRecord] | RawBatch | ConsumerBatch
    ) -> tuple[PredictionBatch, list[DeadLetter]]:
        rb = RawBatch.of(records)
        if self.fast.enabled and (quick := try_fast(self.fast.predictions, rb)) is not None:
            return quick, []
        typed = self.fast.pred_decoder
        events, errors = self._parse_all(rb.values, typed)
        lo, hi = self.config.min_timestamp, self.clock() + self.config.max_future
        models, threshold = self.models, [m.threshold for m in self.models]
        ids: list[str] = []
        rows: list[int] = []
        times: list[float] = []
        model_of: list[int] = []
        preds: list[int] = []
        scores: list[float] = []
        attr_values: list[list[list[Any]]] = [[[] for _ in m.attributes] for m in models]
        rows_of_model: list[list[int]] = [[] for _ in models]
        get_id, get_ts, get_model = self.get_id, self.get_ts, self.get_model
        get_pred, get_score = self.get_pred, self.get_score
        stamps = rb.timestamps_ms
        id_limit = self.limits.max_id_length
        for i, e in enumerate(events):
            if errors[i] is not None:
                continue
            try:
                pid = _text_id(get_id(e), id_limit)
                t = self._time(get_ts(e), stamps[i], lo, hi)
                m = self._model(get_model(e))
                score = get_score(e)
                if score is not None:
                    if type(score) not in _NUMBER or not _finite(score):
                        raise Invalid(
                            Reason.BAD_SCORE, f"score {str(score)[:40]!r} is not a finite number"
                        )
                    score = float(score)
                raw_pred = get_pred(e)
                if raw_pred is None:
                    if score is None or threshold[m] is None:
                        raise Invalid(
                            Reason.MISSING_PREDICTION,
                            "no prediction (and no score with a configured threshold)",
                        )
                    pred = int(score >= threshold[m])
                else:
                    pred = (
                        self.pred_maps[m].get(raw_pred, -1)
                        if type(raw_pred) in (int, float, str, bool)
                        else -1
                    )
                    if pred < 0:
                        raise Invalid(
                            Reason.BAD_PREDICTION,
                            f"prediction {str(raw_pred)[:40]!r} is not 0/1 or a configured value",
                        )
                values = []
                for attr, get in zip(models[m].attributes, self.attr_getters[m], strict=True):
                    v = get(e)
                    if v is not None and type(v) not in (str, int, float, bool):
                        raise Invalid(
                            Reason.BAD_ATTRIBUTE,
                            f"attribute {attr.name} is a {type(v).__name__}, not a value",
                        )
                    if (
                        attr.bins is not None
                        and v is not None
                        and (type(v) not in _NUMBER or not _finite(v))
                    ):
                        raise Invalid(
                            Reason.BAD_ATTRIBUTE,
                            f"attribute {attr.name} must be a finite number, got {str(v)[:40]!r}",
                        )
                    values.append(v)
            except Invalid as bad:
                errors[i] = bad
                continue
            except Exception as exc:
                errors[i] = unforeseen(exc)
                continue
            rows_of_model[m].append(len(ids))
            for column, v in zip(attr_values[m], values, strict=True):
                column.append(v)
            ids.append(pid)
            rows.append(i)
            times.append(t)
            model_of.append(m)
            preds.append(pred)
            scores.append(math.nan if score is None else score)
        groups = np.full((len(ids), self.max_sets), -1, dtype=np.int32)
        for m, mrows in enumerate(rows_of_model):
            if mrows:
                enc = self.registries[m].encode(attr_values[m])
                groups[np.asarray(mrows), : enc.shape[1]] = enc
        batch = PredictionBatch(
            key=id_keys(ids),
            model=np.array(model_of, dtype=np.uint16),
            ts=np.array(times, dtype=np.float64),
            pred=np.array(preds, dtype=np.uint8),
            score=np.array(scores, dtype=np.float64),
            groups=groups,
        )
        return batch, self._dead(rb, errors)

    @staticmethod
    def _dead(rb: RawBatch | _Records, errors: list[Invalid | None]) -> list[DeadLetter]:
        return [
            DeadLetter(err.reason, err.detail, rb.record(i))
            for i, err in enumerate(errors)
            if err is not None
        ]

    # -- labels --------------------------------------------------------------------------------
    def decode_labels(
        self, records: Sequence[RawRecord] | RawBatch | ConsumerBatch
    ) -> tuple[LabelBatch, list[DeadLetter]]:
        rb = RawBatch.of(records)
        if self.fast.enabled and (quick := try_fast(self.fast.labels, rb)) is not None:
            return quick, []
        typed = self.fast.label_decoder
        events, errors = self._parse_all(rb.values, typed)
        lo, hi = self.config.min_timestamp, self.clock() + self.config.max_future
        ids: list[str] = []
        times: list[float] = []
        labels: list[int] = []
        get_id, get_ts, get_label, get_model = (
            self.get_id,
            self.get_ts,
            self.get_label,
            self.get_model,
        )
        label_map = self.label_map
        stamps = rb.timestamps_ms
        id_limit = self.limits.max_id_length
        for i, e in enumerate(events):
            if errors[i] is not None:
                continue
            try:
                pid = _text_id(get_id(e), id_limit)
                t = self._time(get_ts(e), stamps[i], lo, hi)
                raw = get_label(e)
                if raw is None:
                    raise Invalid(Reason.MISSING_LABEL, "no label")
                y = label_map.get(raw, -1) if type(raw) in (int, float, str, bool) else -1
                if y < 0:
                    raise Invalid(
                        Reason.BAD_LABEL,
                        f"label {str(raw)[:40]!r} is not 0/1 or a configured value",
                    )
                raw_model = get_model(e)
                if raw_model is not None:
                    self._model(raw_model)
            except Invalid as bad:
                errors[i] = bad
                continue
            except Exception as exc:
                errors[i] = unforeseen(exc)
                continue
            ids.append(pid)
            times.append(t)
            labels.append(y)
        batch = LabelBatch(
            key=id_keys(ids),
            ts=np.array(times, dtype=np.float64),
            label=np.array(labels, dtype=np.uint8),
        )
        return batch, self._dead(rb, errors)
