"""Careful checks of one event field: where it is, and whether its value means something.

The per-record decoding path (``decode_careful.py``) and the configuration-bound checks
(``decode_plan.py``) call these once per record; each raises :class:`~.events.Invalid` with the
reason a dead letter will carry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from monitor.ingest.events import Invalid, Reason

NUMBER = (int, float)
# a number written as text: epoch seconds or milliseconds, never a date (Python's fromisoformat
# reads "1767120100000" as 1767-12-01: the date 17671201, any one character, then the hour 00)
_NUMERIC = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_COMPACT_DATE = re.compile(r"\d{8}")  # ISO-8601's basic date, YYYYMMDD


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
        text = value.strip()
        # (not Python's 1_600_000_000: no CSV or JSON writes a time so; a review)
        if _NUMERIC.fullmatch(text) and not _COMPACT_DATE.fullmatch(text):
            return parse_timestamp(float(text))
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise Invalid(Reason.BAD_TIMESTAMP, f"{value[:40]!r} is not ISO-8601") from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return dt.timestamp()
    raise Invalid(Reason.BAD_TIMESTAMP, f"{type(value).__name__} is not a timestamp")


def getter(path: tuple[str, ...]) -> Callable[[dict[str, Any]], Any]:
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


def not_an_object(e: dict[str, Any], path: tuple[str, ...]) -> str | None:
    """The part of ``path`` (before its last) present as something other than an object, which
    :func:`getter` reads as absent: ``{"attributes": "F"}`` has no attribute, it is malformed."""
    cur: Any = e
    for i, part in enumerate(path[:-1]):
        cur = cur.get(part)
        if cur is None:
            return None
        if type(cur) is not dict:
            return ".".join(path[: i + 1])
    return None


def text_id(raw: Any, limit: int) -> str:
    """The prediction id as text: a non-empty string or an integer, at most ``limit`` long."""
    t = type(raw)
    if t is str:
        if not raw:
            raise Invalid(Reason.MISSING_ID, "empty prediction id")
        if len(raw) > limit:
            raise Invalid(
                Reason.ID_TOO_LONG,
                f"prediction id of {len(raw)} characters > limits.max_id_length {limit}",
            )
        if raw[-1] == "\0":  # keys ignore trailing NULs (keys.py): "a\0" would be "a"
            raise Invalid(Reason.BAD_ID, "prediction id ends in a NUL character")
        return str(raw)
    if t is int:
        text = str(raw)
        if len(text) > limit:
            raise Invalid(Reason.ID_TOO_LONG, f"prediction id of {len(text)} digits")
        return text
    if raw is None:
        raise Invalid(Reason.MISSING_ID, "no prediction id")
    raise Invalid(Reason.BAD_ID, f"prediction id must be a string or integer, got {t.__name__}")


def finite(x: int | float) -> bool:
    """``math.isfinite`` that also answers for integers too large for a float."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def binary_map(extra: Mapping[str, int]) -> dict[Any, int]:
    """Accepted spellings of a 0/1 value: numbers, booleans, "0"/"1", configured strings."""
    table: dict[Any, int] = {0: 0, 1: 1, "0": 0, "1": 1}
    table.update(extra)
    return table
