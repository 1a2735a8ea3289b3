"""The careful decoding path: record by record, every field checked, bad records dead-lettered.

The fast path (``decode_fast.py``) decodes clean batches; any batch it gives up on comes here.
Each record is parsed and checked on its own, so one hostile record never affects the rest of
its batch: it becomes a :class:`~.events.DeadLetter` naming the :class:`~.events.Reason`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.events import (
    DeadLetter,
    Invalid,
    LabelBatch,
    PredictionBatch,
    Reason,
    Records,
    unforeseen,
)
from monitor.ingest.fields import NUMBER, finite, not_an_object, text_id
from monitor.ingest.keys import id_keys

_json = msgspec.json.Decoder()
_SCALARS = (int, float, str, bool)


def salvage(typed: msgspec.json.Decoder[Any], value: bytes) -> dict[str, Any] | None:
    """The record as the typed decoder reads it, or ``None`` if it cannot.

    The typed decoder skips fields it does not need without judging them (a 5,000-digit
    integer, ``1e400``), where the generic decoder rejects the whole record. The careful
    path asks here before calling a record "not JSON", so a record is counted or not
    whatever batch it arrives in (live and replay batch differently).
    """
    try:
        one = typed.decode(value)
    except (msgspec.DecodeError, RecursionError, ValueError):
        return None
    out: dict[str, Any] = msgspec.to_builtins(one)
    return out


def dead_letters(rb: Records, errors: list[Invalid | None]) -> list[DeadLetter]:
    return [
        DeadLetter(err.reason, err.detail, rb.record(i))
        for i, err in enumerate(errors)
        if err is not None
    ]


class CarefulPath:
    """Per-record decoding of one configuration (see :class:`~.decode_plan.DecodePlan`)."""

    def __init__(self, plan: DecodePlan) -> None:
        self.plan = plan

    def parse_all(
        self, values: Sequence[Any], typed: msgspec.json.Decoder[Any] | None
    ) -> tuple[list[Any], list[Invalid | None]]:
        """JSON-decode every value, record by record (never joined: records that are not JSON
        on their own can join into valid JSON). Hostile values fail per record: a tombstone
        (``None``), a record over ``limits.max_record_bytes`` (not parsed at all), nesting
        deeper than the parser's recursion limit (``RecursionError``, not a ``DecodeError``),
        anything that is not an object.
        """
        n = len(values)
        errors: list[Invalid | None] = [None] * n
        limit = self.plan.limits.max_record_bytes
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
                        v = salvage(typed, bytes(v)) if typed is not None else None
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

    # -- predictions ---------------------------------------------------------------------------
    def predictions(
        self, rb: Records, typed: msgspec.json.Decoder[Any] | None
    ) -> tuple[PredictionBatch, list[DeadLetter]]:
        plan = self.plan
        events, errors = self.parse_all(rb.values, typed)
        lo, hi = plan.time_bounds()
        models, threshold = plan.models, [m.threshold for m in plan.models]
        ids: list[str] = []
        times: list[float] = []
        model_of: list[int] = []
        preds: list[int] = []
        scores: list[float] = []
        attr_values: list[list[list[Any]]] = [[[] for _ in m.attributes] for m in models]
        rows_of_model: list[list[int]] = [[] for _ in models]
        get_id, get_ts, get_model = plan.get_id, plan.get_ts, plan.get_model
        get_pred, get_score = plan.get_pred, plan.get_score
        event_time, which_model = plan.event_time, plan.model_of
        stamps = rb.timestamps_ms
        id_limit = plan.limits.max_id_length
        for i, e in enumerate(events):
            if errors[i] is not None:
                continue
            try:
                pid = text_id(get_id(e), id_limit)
                t = event_time(get_ts(e), stamps[i], lo, hi)
                m = which_model(get_model(e))
                score = get_score(e)
                if score is not None:
                    if type(score) not in NUMBER or not finite(score):
                        raise Invalid(
                            Reason.BAD_SCORE, f"score {str(score)[:40]!r} is not a finite number"
                        )
                    score = float(score)
                    if not 0.0 <= score <= 1.0:  # a logit or a percentage is no probability
                        raise Invalid(
                            Reason.BAD_SCORE,
                            f"score {score!r} is outside [0, 1] (a probability: map logits or "
                            "percentages onto it before publishing)",
                        )
                raw_pred = get_pred(e)
                if raw_pred is None:
                    if score is None or threshold[m] is None:
                        raise Invalid(
                            Reason.MISSING_PREDICTION,
                            "no prediction (and no score with a configured threshold)",
                        )
                    pred = int(score >= threshold[m])
                else:
                    pred = plan.pred_maps[m].get(raw_pred, -1) if type(raw_pred) in _SCALARS else -1
                    if pred < 0:
                        raise Invalid(
                            Reason.BAD_PREDICTION,
                            f"prediction {str(raw_pred)[:40]!r} is not 0/1 or a configured value",
                        )
                values = []
                for attr, get in zip(models[m].attributes, plan.attr_getters[m], strict=True):
                    v = get(e)
                    if v is None and (where := not_an_object(e, attr.path)) is not None:
                        raise Invalid(
                            Reason.BAD_ATTRIBUTE,
                            f"attribute {attr.name}: {where} is not an object",
                        )
                    if v is not None and type(v) not in _SCALARS:
                        raise Invalid(
                            Reason.BAD_ATTRIBUTE,
                            f"attribute {attr.name} is a {type(v).__name__}, not a value",
                        )
                    if (
                        attr.bins is not None
                        and v is not None
                        and (type(v) not in NUMBER or not finite(v))
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
            times.append(t)
            model_of.append(m)
            preds.append(pred)
            scores.append(math.nan if score is None else score)
        groups = np.full((len(ids), plan.max_sets), -1, dtype=np.int32)
        for m, mrows in enumerate(rows_of_model):
            if mrows:
                enc = plan.registries[m].encode(attr_values[m])
                groups[np.asarray(mrows), : enc.shape[1]] = enc
        batch = PredictionBatch(
            key=id_keys(ids),
            model=np.array(model_of, dtype=np.uint16),
            ts=np.array(times, dtype=np.float64),
            pred=np.array(preds, dtype=np.uint8),
            score=np.array(scores, dtype=np.float64),
            groups=groups,
        )
        return batch, dead_letters(rb, errors)

    # -- labels --------------------------------------------------------------------------------
    def labels(
        self, rb: Records, typed: msgspec.json.Decoder[Any] | None
    ) -> tuple[LabelBatch, list[DeadLetter]]:
        plan = self.plan
        events, errors = self.parse_all(rb.values, typed)
        lo, hi = plan.time_bounds()
        ids: list[str] = []
        times: list[float] = []
        labels: list[int] = []
        get_id, get_ts, get_label, get_model = (
            plan.get_id,
            plan.get_ts,
            plan.get_label,
            plan.get_model,
        )
        event_time, which_model = plan.event_time, plan.model_of
        label_map = plan.label_map
        stamps = rb.timestamps_ms
        id_limit = plan.limits.max_id_length
        for i, e in enumerate(events):
            if errors[i] is not None:
                continue
            try:
                pid = text_id(get_id(e), id_limit)
                t = event_time(get_ts(e), stamps[i], lo, hi)
                raw = get_label(e)
                if raw is None:
                    raise Invalid(Reason.MISSING_LABEL, "no label")
                y = label_map.get(raw, -1) if type(raw) in _SCALARS else -1
                if y < 0:
                    raise Invalid(
                        Reason.BAD_LABEL,
                        f"label {str(raw)[:40]!r} is not 0/1 or a configured value",
                    )
                raw_model = get_model(e)
                if raw_model is not None:
                    which_model(raw_model)
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
        return batch, dead_letters(rb, errors)
