"""From a serving stack's tensors to what the monitor counts: per row, the score or decision
(from the response) and the protected attributes (from the request).

A mapping is data, read from the configuration (``models.<m>.input``)::

    score: {tensor: probabilities, column: 1}   # P(positive class); the model's threshold decides
    prediction: {tensor: label}                 # or the decision itself (0/1, true/false)
    attributes:
      sex: {tensor: sex}                        # a BYTES tensor: its strings are the groups
      age_band: {tensor: features, column: 3}   # an integer column: its values are the groups

Its errors name the key path (``models.credit.input.score.column: -1 is not a column``), and a
payload that does not fit it is refused per record with the reason (a tensor missing, a column
out of range, a score outside [0, 1], a decision other than 0/1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from monitor.config.decode import ConfigError, sub
from monitor.ingest.events import Invalid, Reason
from monitor.ingest.oip import Column, Table

FORMATS = ("monitor-json", "oip-json", "kserve-cloudevents")


@dataclass(frozen=True)
class TensorMapping:
    score: Column | None = None
    prediction: Column | None = None
    attributes: dict[str, Column] = field(default_factory=dict)


def resolve_mapping(
    raw: object, path: str, *, attributes: tuple[str, ...], threshold: float | None
) -> TensorMapping:
    """The ``input`` section of a model, checked against the model's attributes."""
    if not isinstance(raw, dict):
        raise ConfigError(path, "must be a mapping with score or prediction, and attributes")
    unknown = sorted(set(raw) - {"score", "prediction", "attributes"})
    if unknown:
        raise ConfigError(sub(path, unknown[0]), "unknown key (score, prediction, attributes)")
    score = _column(raw.get("score"), sub(path, "score"))
    prediction = _column(raw.get("prediction"), sub(path, "prediction"))
    if score is None and prediction is None:
        raise ConfigError(path, "names neither score nor prediction: nothing to count")
    if prediction is None and threshold is None:
        raise ConfigError(sub(path, "score"), "a score without the model's threshold cannot decide")
    attrs_raw = raw.get("attributes")
    where = sub(path, "attributes")
    if not isinstance(attrs_raw, dict) or not attrs_raw:
        raise ConfigError(where, "must map each of the model's attributes to a tensor")
    out: dict[str, Column] = {}
    for name, spec in attrs_raw.items():
        if name not in attributes:
            raise ConfigError(sub(where, str(name)), f"not an attribute of the model {attributes}")
        col = _column(spec, sub(where, name))
        assert col is not None
        out[name] = col
    missing = [a for a in attributes if a not in out]
    if missing:
        raise ConfigError(where, f"no tensor for the model's attribute(s) {missing}")
    return TensorMapping(score, prediction, out)


def _column(raw: object, path: str) -> Column | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or "tensor" not in raw:
        raise ConfigError(path, "must be {tensor: <name>} or {tensor: <name>, column: <index>}")
    extra = sorted(set(raw) - {"tensor", "column"})
    if extra:
        raise ConfigError(sub(path, extra[0]), "unknown key (tensor, column)")
    name, column = raw["tensor"], raw.get("column")
    if not isinstance(name, str) or not name:
        raise ConfigError(sub(path, "tensor"), f"{name!r} is not a tensor name")
    if column is not None and (type(column) is not int or column < 0):
        raise ConfigError(sub(path, "column"), f"{column!r} is not a column (0, 1, ...)")
    return Column(name, column)


def decisions(
    table: Table, m: TensorMapping, threshold: float | None
) -> tuple[list[float], list[int]]:
    """Per row of a response: (score, NaN without one; decision 0/1)."""
    scores = [math.nan] * table.rows
    if m.score is not None:
        scores = [_score(v, m.score) for v in table.column(m.score)]
    if m.prediction is not None:
        preds = [_decision(v, m.prediction) for v in table.column(m.prediction)]
    else:
        assert threshold is not None
        preds = [int(s >= threshold) for s in scores]
    return scores, preds


def groups(table: Table, m: TensorMapping) -> dict[str, list[Any]]:
    """Per attribute, the raw value of each row of a request: text and integers name groups,
    numbers are binned by the attribute's ``bins`` (the group registry does both, as for the
    monitor's own events)."""
    return {name: table.column(where) for name, where in m.attributes.items()}


def _score(v: Any, where: Column) -> float:
    if type(v) is bool or type(v) not in (int, float) or not 0.0 <= v <= 1.0:
        raise Invalid(Reason.BAD_SCORE, f"tensor {where.tensor!r}: score {v!r} not in [0, 1]")
    return float(v)


def _decision(v: Any, where: Column) -> int:
    if v in (0, 1) and type(v) in (bool, int):
        return int(v)
    raise Invalid(Reason.BAD_PREDICTION, f"tensor {where.tensor!r}: decision {v!r} is not 0/1")
