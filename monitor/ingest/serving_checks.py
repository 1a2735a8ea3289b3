"""Checks and columns shared by the fast paths of serving-stack records (``serving_fast.py``,
``seldon_fast.py``, ``oip_native.py``): where a mapped value sits in a layout, decisions from
scores, record times, the batch's limits. Each gives up (:class:`GiveUp`) where the careful
path (``serving_decode.py``) must judge the batch record by record.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.serving import Column
from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.oip import FLOATS, INTS
from monitor.ingest.serving_layout import Signature


class GiveUp(Exception):
    """Something in the batch needs the careful path."""


def place(
    sig: Signature | None, where: Column, allowed: frozenset[str]
) -> tuple[int, int, int, bool]:
    """(tensor position, column, width, nested) of a mapped value; gives up where it does not
    fit (the careful path says why)."""
    for k, (name, datatype, trailing, nested) in enumerate(sig or ()):
        if name == where.tensor:
            width = math.prod(trailing)
            col = 0 if where.column is None else where.column
            if datatype not in allowed or (where.column is None and width != 1):
                raise GiveUp
            if not 0 <= col < width:
                raise GiveUp
            return k, col, width, nested
    raise GiveUp


NUMBERS = frozenset({*INTS, *FLOATS})
DECISIONS = frozenset({"BOOL", *INTS})


def decisions(
    n: int, scores: Any, decided: Any, threshold: float | None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.uint8]]:
    """Scores (NaN without any) and 0/1 decisions of ``n`` rows: the decision given, else the
    score against the threshold; gives up on a score outside [0, 1] or a decision not 0/1."""
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=np.uint8)
    s = np.full(n, math.nan) if scores is None else np.asarray(scores, dtype=np.float64)
    if scores is not None and not ((s >= 0.0) & (s <= 1.0)).all():
        raise GiveUp
    if decided is not None:
        d = np.asarray(decided, dtype=np.int64)
        if not ((d == 0) | (d == 1)).all():
            raise GiveUp
        return s, (d == 1).astype(np.uint8)
    assert threshold is not None
    return s, (s >= threshold).astype(np.uint8)


def record_times(plan: DecodePlan, rb: Any) -> npt.NDArray[np.float64]:
    """The records' own times (seconds), all present and in bounds, else give up."""
    lo, hi = plan.time_bounds()
    stamps = np.asarray(rb.timestamps_ms, dtype=np.float64)  # None is NaN: no record time
    if len(stamps) and not (stamps > 0).all():
        raise GiveUp
    t = stamps / 1000.0
    if len(t) and (t.min() < lo or t.max() > hi):
        raise GiveUp
    return t


Decoded = tuple[tuple[Any, ...], tuple[Any, ...]]


def small_enough(plan: DecodePlan, rb: Any) -> None:
    """Gives up on a batch with a record over ``limits.max_record_bytes``, before parsing."""
    if max((len(v) for v in rb.values if v is not None), default=0) > plan.limits.max_record_bytes:
        raise GiveUp


def within_limits(plan: DecodePlan, out: Decoded) -> Decoded | None:
    """A fast path's columns if every call's rows and decision ids are within ``limits``,
    else None: the careful path dead-letters the records that are not, one by one."""
    lim = plan.limits
    asked, answered = out[0][0], out[1][0]
    longest = max(asked.longest(), answered.longest())
    rows = max(int(asked.rows.max(initial=0)), int(answered.rows.max(initial=0)))
    return out if longest <= lim.max_id_length and rows <= lim.max_rows_per_record else None


def header(headers: Any, name: str) -> str | None:
    """A record header's text (the first of that name, case aside), None when absent or not
    UTF-8 (whole: an id too long is refused by the caller, never cut into another id)."""
    for key, value in headers or ():
        if key.lower() == name and value:
            try:
                return str(value.decode())
            except UnicodeDecodeError:
                return None
    return None
