"""Durations and instants as people write them (``config/durations.py``)."""

from __future__ import annotations

import pytest

from monitor.config.durations import format_duration, iso_utc, parse_duration


@pytest.mark.parametrize(
    ("t", "text"),
    [
        (0.0, "1970-01-01T00:00:00Z"),
        (1_767_225_600.0, "2026-01-01T00:00:00Z"),
        (1.5, "1970-01-01T00:00:01.500000Z"),
        (-62_135_596_800.0, "0001-01-01T00:00:00Z"),  # the calendar's first second
    ],
)
def test_instants_read_as_iso_utc(t: float, text: str) -> None:
    assert iso_utc(t) == text


@pytest.mark.parametrize("t", [-62_135_596_801.0, 253_402_300_800.0, 1e20, -1e20])
def test_an_instant_no_calendar_holds_reads_as_seconds_not_a_traceback(t: float) -> None:
    """Year 0 and year 10000 are out of ``datetime``'s range; ``min_timestamp`` allows the
    one and a clock-skewed event the other: a page or timeline line must still be written."""
    assert iso_utc(t) == f"{t:.0f} s"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(90, "1m30s"), (5400, "1h30m"), (8 * 86400, "8d"), (14 * 86400, "2w"), (0, "0s")],
)
def test_format_duration_writes_the_largest_exact_units(seconds: int, text: str) -> None:
    """Weeks only when whole (8 days is not "1w1d"), and it parses back to the same seconds."""
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds
