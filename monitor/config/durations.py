"""Parsing of human durations such as ``90s``, ``5m``, ``1h30m``, ``7d`` or ``2w``, and the one
way instants are written (:func:`iso_utc`).

Durations are kept as whole seconds: bucket widths and windows are multiples of a second, and
integers keep bucket arithmetic exact.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from msgspec import Meta

from monitor.config.decode import ConfigError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+)([smhdw])")
MAX_DURATION = 10 * 365 * 86400  # seconds: any longer duration is refused


def parse_duration(value: object) -> int:
    """Return ``value`` in seconds; raise ``ValueError`` naming the bad value otherwise.

    Accepts a non-negative integer (seconds) or a string of ``<int><unit>`` parts, units
    ``s m h d w``, up to ten years (a longer one is a typo, and sizes derived from it would
    not fit in memory).
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    out: int | None = None
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value!r} is negative")
        out = value
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.isdigit():
            out = int(text)
        elif text and _PART.sub("", text) == "":
            out = sum(int(n) * _UNITS[u] for n, u in _PART.findall(text))
    if out is None:
        raise ValueError(f"{value!r} is not a duration (use e.g. 90s, 5m, 1h, 7d)")
    if out > MAX_DURATION:
        raise ValueError(f"{value!r} is longer than ten years")
    return out


def format_duration(seconds: int) -> str:
    """Inverse of :func:`parse_duration` for display: the largest exact units, e.g. ``1h30m``."""
    if seconds == 0:
        return "0s"
    out = []
    for unit, size in sorted(_UNITS.items(), key=lambda kv: -kv[1]):
        if unit == "w" and seconds % size:
            continue
        n, seconds = divmod(seconds, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def iso_utc(t: float) -> str:
    """Epoch seconds as ISO 8601 UTC with a ``Z`` (``2026-01-01T10:00:00Z``), as pages,
    reports and timelines write instants. An instant no calendar holds (before year 1 or
    after 9999: ``min_timestamp`` allows them) reads ``<t> s`` instead of raising, so no
    page, report or timeline line is lost to a clock-skewed event."""
    try:
        return datetime.fromtimestamp(t, tz=UTC).isoformat().replace("+00:00", "Z")
    except (ValueError, OverflowError, OSError):
        return f"{t:.0f} s"


# what the JSON Schema says of a duration (the checks themselves are parse_duration's)
DURATION_PATTERN = r"^\s*[0-9]+\s*$|^(\s*[0-9]+\s*[smhdwSMHDW])+\s*$"
Duration = Annotated[
    Annotated[int, Meta(extra_json_schema={"minimum": 0})]
    | Annotated[str, Meta(extra_json_schema={"pattern": DURATION_PATTERN})],
    Meta(description="seconds, or a duration such as 90s, 5m, 1h30m, 7d, 2w"),
]


def seconds(raw: object, path: str, *, positive: bool = False) -> int:
    """:func:`parse_duration` of the value at ``path``; a :class:`ConfigError` naming it."""
    try:
        value = parse_duration(raw)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None
    if positive and value <= 0:
        raise ConfigError(path, f"{raw!r} must be longer than zero")
    return value
