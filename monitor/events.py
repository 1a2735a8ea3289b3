"""Decode a whole batch of raw records into columnar numpy arrays, dead-lettering bad ones.

This is the only place where per-event Python work happens: parse JSON, pick the configured
fields, validate them, and map attribute values to group indices. Everything downstream
(``engine.py``, ``windows.py``, ``join.py``) works on the arrays produced here.

An invalid record never affects the rest of its batch: it comes out as a :class:`DeadLetter`
with a machine-readable :class:`Reason` and the original bytes, so nothing is lost.
"""

from __future__ import annotations

import hashlib
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

from monitor.config import Config, ModelSpec
from monitor.groups import GroupRegistry

U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
U16 = npt.NDArray[np.uint16]

_json = msgspec.json.Decoder()


class Reason(StrEnum):
    """Why a record was dead-lettered (stable strings: they appear in DLQ headers/metrics)."""

    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    MISSING_ID = "missing_id"
    BAD_ID = "bad_id"
    MISSING_TIMESTAMP = "missing_timestamp"
    BAD_TIMESTAMP = "bad_timestamp"
    TIMESTAMP_OUT_OF_RANGE = "timestamp_out_of_range"
    MISSING_MODEL = "missing_model"
    UNKNOWN_MODEL = "unknown_model"
    MISSING_PREDICTION = "missing_prediction"
    BAD_PREDICTION = "bad_prediction"
    BAD_SCORE = "bad_score"
    MISSING_LABEL = "missing_label"
    BAD_LABEL = "bad_label"
    BAD_ATTRIBUTE = "bad_attribute"


class Invalid(Exception):
    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


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


def id_key(value: object) -> int:
    """Stable 64-bit key of a prediction id (BLAKE2b; process-independent, unlike ``hash``).

    The join stores only this key, not the id text, to stay compact. Two distinct ids collide
    with probability about n²/2⁶⁵ (3·10⁻⁸ for a million pending ids); a collision is counted
    as a duplicate.
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Invalid(
            Reason.BAD_ID, f"prediction id must be a string or integer, got {type(value).__name__}"
        )
    text = value if isinstance(value, str) else str(value)
    if not text:
        raise Invalid(Reason.MISSING_ID, "empty prediction id")
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def parse_timestamp(value: object) -> float:
    """Epoch seconds from ISO-8601 text or epoch seconds / milliseconds (> 10¹¹ means ms)."""
    if isinstance(value, bool):
        raise Invalid(Reason.BAD_TIMESTAMP, f"{value!r} is not a timestamp")
    if isinstance(value, int | float):
        t = float(value)
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


def _lookup(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = obj
    for part in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def _binary(value: object, mapping: Mapping[str, int], what: str, reason: Reason) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    if isinstance(value, float) and value in (0.0, 1.0):
        return int(value)
    if isinstance(value, str):
        if value in mapping:
            return mapping[value]
        if value in ("0", "1"):
            return int(value)
    if isinstance(value, int | float) and str(value) in mapping:
        return mapping[str(value)]
    raise Invalid(reason, f"{what} {str(value)[:40]!r} is not 0/1 or a configured value")


class Decoder:
    """Decodes batches for one configuration; owns nothing but reads the group registries."""

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
        self.max_sets = max(len(m.attribute_sets) for m in self.models)
        self.label_values: dict[str, int] = {}
        for m in self.models:
            self.label_values.update(m.label_values)

    # -- shared field handling ---------------------------------------------------------------
    def _parse(self, rec: RawRecord) -> Mapping[str, Any]:
        value = rec.value
        if isinstance(value, bytes | bytearray | memoryview):
            try:
                value = _json.decode(value)
            except msgspec.DecodeError as exc:
                raise Invalid(Reason.NOT_JSON, str(exc)[:200]) from None
        if not isinstance(value, Mapping):
            raise Invalid(
                Reason.NOT_OBJECT, f"event is a JSON {type(value).__name__}, not an object"
            )
        return value

    def _time(self, event: Mapping[str, Any], rec: RawRecord, now: float) -> float:
        raw = _lookup(event, self.config.fields.timestamp)
        if raw is None:
            if rec.timestamp_ms is None:
                raise Invalid(Reason.MISSING_TIMESTAMP, "no timestamp field and no record time")
            t = rec.timestamp_ms / 1000.0
        else:
            t = parse_timestamp(raw)
        if t < self.config.min_timestamp or t > now + self.config.max_future:
            raise Invalid(Reason.TIMESTAMP_OUT_OF_RANGE, f"timestamp {t:.0f} is out of range")
        return t

    def _key(self, event: Mapping[str, Any]) -> int:
        raw = _lookup(event, self.config.fields.prediction_id)
        if raw is None:
            raise Invalid(Reason.MISSING_ID, "no prediction id")
        return id_key(raw)

    def _model(self, event: Mapping[str, Any]) -> int:
        raw = _lookup(event, self.config.fields.model_id)
        if raw is None:
            if self.config.default_model is not None:
                return self.model_index[self.config.default_model]
            if len(self.models) == 1:
                return 0
            raise Invalid(Reason.MISSING_MODEL, "no model id and no default model")
        idx = self.model_index.get(raw) if isinstance(raw, str) else None
        if idx is None:
            if self.config.unknown_models == "default" and self.config.default_model:
                return self.model_index[self.config.default_model]
            raise Invalid(Reason.UNKNOWN_MODEL, f"model {str(raw)[:60]!r} is not configured")
        return idx

    # -- predictions ---------------------------------------------------------------------------
    def decode_predictions(
        self, records: Sequence[RawRecord]
    ) -> tuple[PredictionBatch, list[DeadLetter]]:
        now = self.clock()
        fields = self.config.fields
        dead: list[DeadLetter] = []
        keys: list[int] = []
        models: list[int] = []
        times: list[float] = []
        preds: list[int] = []
        scores: list[float] = []
        attr_values: list[list[list[object]]] = [[[] for _ in m.attributes] for m in self.models]
        rows_of_model: list[list[int]] = [[] for _ in self.models]
        for rec in records:
            try:
                event = self._parse(rec)
                key = self._key(event)
                t = self._time(event, rec, now)
                m = self._model(event)
                spec = self.models[m]
                score = _lookup(event, fields.score)
                if score is not None:
                    if (
                        isinstance(score, bool)
                        or not isinstance(score, int | float)
                        or not (math.isfinite(score))
                    ):
                        raise Invalid(
                            Reason.BAD_SCORE, f"score {str(score)[:40]!r} is not a finite number"
                        )
                    score = float(score)
                raw_pred = _lookup(event, fields.prediction)
                if raw_pred is None:
                    if score is None or spec.threshold is None:
                        raise Invalid(
                            Reason.MISSING_PREDICTION,
                            "no prediction (and no score with a configured threshold)",
                        )
                    pred = int(score >= spec.threshold)
                else:
                    pred = _binary(
                        raw_pred, spec.prediction_values, "prediction", Reason.BAD_PREDICTION
                    )
                values = []
                for attr in spec.attributes:
                    v = _lookup(event, attr.path)
                    if isinstance(v, Mapping | list):
                        raise Invalid(
                            Reason.BAD_ATTRIBUTE,
                            f"attribute {attr.name} is a {type(v).__name__}, not a value",
                        )
                    if (
                        attr.bins is not None
                        and v is not None
                        and (isinstance(v, bool) or not isinstance(v, int | float))
                    ):
                        raise Invalid(
                            Reason.BAD_ATTRIBUTE,
                            f"attribute {attr.name} must be a number, got {str(v)[:40]!r}",
                        )
                    values.append(v)
            except Invalid as bad:
                dead.append(DeadLetter(bad.reason, bad.detail, rec))
                continue
            rows_of_model[m].append(len(keys))
            for column, v in zip(attr_values[m], values, strict=True):
                column.append(v)
            keys.append(key)
            models.append(m)
            times.append(t)
            preds.append(pred)
            scores.append(math.nan if score is None else score)
        groups = np.full((len(keys), self.max_sets), -1, dtype=np.int32)
        for m, rows in enumerate(rows_of_model):
            if rows:
                enc = self.registries[m].encode(attr_values[m])
                groups[np.asarray(rows), : enc.shape[1]] = enc
        batch = PredictionBatch(
            key=np.array(keys, dtype=np.uint64),
            model=np.array(models, dtype=np.uint16),
            ts=np.array(times, dtype=np.float64),
            pred=np.array(preds, dtype=np.uint8),
            score=np.array(scores, dtype=np.float64),
            groups=groups,
        )
        return batch, dead

    # -- labels --------------------------------------------------------------------------------
    def decode_labels(self, records: Sequence[RawRecord]) -> tuple[LabelBatch, list[DeadLetter]]:
        now = self.clock()
        dead: list[DeadLetter] = []
        keys: list[int] = []
        times: list[float] = []
        labels: list[int] = []
        for rec in records:
            try:
                event = self._parse(rec)
                key = self._key(event)
                t = self._time(event, rec, now)
                raw = _lookup(event, self.config.fields.label)
                if raw is None:
                    raise Invalid(Reason.MISSING_LABEL, "no label")
                label = _binary(raw, self.label_values, "label", Reason.BAD_LABEL)
                raw_model = _lookup(event, self.config.fields.model_id)
                if raw_model is not None:
                    self._model(event)
            except Invalid as bad:
                dead.append(DeadLetter(bad.reason, bad.detail, rec))
                continue
            keys.append(key)
            times.append(t)
            labels.append(label)
        batch = LabelBatch(
            key=np.array(keys, dtype=np.uint64),
            ts=np.array(times, dtype=np.float64),
            label=np.array(labels, dtype=np.uint8),
        )
        return batch, dead
