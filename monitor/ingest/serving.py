"""A model's tensor mapping (``config/serving.py``) applied to decoded payloads: per row, the
score or decision (from the response) and the raw group values (from the request). A payload
that does not fit is refused per record with the reason (a tensor missing, a column out of
range, a score outside [0, 1], a decision other than 0/1).
"""

from __future__ import annotations

import math
from typing import Any

from monitor.config.serving import Column, TensorMapping
from monitor.ingest.events import Invalid, Reason
from monitor.ingest.fields import finite
from monitor.ingest.oip import Table


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


def groups(table: Table, m: TensorMapping, binned: frozenset[str]) -> dict[str, list[Any]]:
    """Per attribute, the raw value of each row of a request: text and integers name groups,
    numbers are binned by the attribute's ``bins`` (the group registry does both, as for the
    monitor's own events). A ``binned`` attribute's values must be finite numbers, as in the
    monitor's own events: text, a boolean or an infinity would be filed under a bin or as
    missing (missingness is itself a fairness signal)."""
    out = {name: table.column(where) for name, where in m.attributes.items()}
    for name in binned & out.keys():
        for v in out[name]:
            if v is not None and not is_number(v):
                where = m.attributes[name].tensor
                raise Invalid(
                    Reason.BAD_ATTRIBUTE,
                    f"tensor {where!r}: attribute {name} must be a finite number, got "
                    f"{str(v)[:40]!r}",
                )
    return out


def is_number(v: Any) -> bool:
    """A finite int or float, not a bool (what a binned attribute takes)."""
    return type(v) in (int, float) and finite(v)


def _score(v: Any, where: Column) -> float:
    if type(v) is bool or type(v) not in (int, float) or not 0.0 <= v <= 1.0:
        raise Invalid(Reason.BAD_SCORE, f"tensor {where.tensor!r}: score {v!r} not in [0, 1]")
    return float(v)


def _decision(v: Any, where: Column) -> int:
    if v in (0, 1) and type(v) in (bool, int):
        return int(v)
    raise Invalid(Reason.BAD_PREDICTION, f"tensor {where.tensor!r}: decision {v!r} is not 0/1")
