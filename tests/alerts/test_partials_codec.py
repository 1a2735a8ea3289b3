"""Boundary partials survive the partials topic's bytes exactly; anything else is refused."""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.global_view import GlobalView
from monitor.alerts.partials import BoundaryPartial
from monitor.alerts.partials_codec import PartialError, decode, encode
from tests.alerts.test_fast_evaluation import stream
from tests.alerts.test_global_view import assert_same_judgement, config, published, single

CFG = config()
PARTIALS = published(CFG, stream(5, 8, 2), 2)


def same(a: BoundaryPartial, b: BoundaryPartial) -> bool:
    fields = ("model", "partition", "boundary", "first", "set_of", "labels", "cohorts",
              "cohort_held")  # fmt: skip
    if any(getattr(a, f) != getattr(b, f) for f in fields):
        return False
    for f in ("windows", "bucket", "arrivals", "cohort_counts"):
        x, y = getattr(a, f), getattr(b, f)
        if (x is None) != (y is None) or (x is not None and not np.array_equal(x, y)):
            return False
    return True


def test_every_partial_of_a_stream_round_trips_field_by_field() -> None:
    assert any(p.marker for p in PARTIALS) and any(p.cohorts for p in PARTIALS)
    for p in PARTIALS:
        got = decode(encode(p))
        assert same(got, p), p.boundary
        if p.windows is not None:
            assert got.windows is not None and got.windows.dtype == np.int64


def test_judged_through_bytes_equals_one_instance() -> None:
    view = GlobalView(CFG, partitions=2)
    ev = AlertEvaluator(CFG, view)
    for p in PARTIALS:
        view.add(decode(encode(p)))
        ev.advance()
    assert_same_judgement(ev, single(CFG, stream(5, 8, 2)))


def test_sparse_encoding_is_small() -> None:
    """A partition's partial carries its nonzero cells only: far below the dense arrays."""
    p = next(p for p in PARTIALS if p.cohorts)
    assert p.windows is not None and p.cohort_counts is not None
    dense = 8 * (p.windows.size + 2 * p.windows[0].size + p.cohort_counts.size)
    assert len(encode(p)) < dense / 2


def test_every_truncation_is_refused() -> None:
    data = encode(next(p for p in PARTIALS if p.cohorts))
    for n in range(len(data)):
        try:
            decode(data[:n])
        except PartialError:
            continue
        raise AssertionError(f"a record cut at {n} of {len(data)} bytes was read")


def test_tombstones_and_foreign_records_are_refused_with_a_reason() -> None:
    for data, reason in [
        (None, "empty"),
        (b"", "empty"),
        (b'{"model": "m"}', "header"),
        (b"\x00\x00\x00\x02{}", "bad header"),
        (b"\x00\x00\x00\x0a" + b'{"v":9,"mo', "bad header"),
    ]:
        try:
            decode(data)
        except PartialError as exc:
            assert reason in str(exc)
        else:
            raise AssertionError(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 2000), st.binary(min_size=1, max_size=8))
def test_any_bytes_give_a_partial_or_a_partial_error(junk: bytes, at: int, patch: bytes) -> None:
    """Random bytes, and a real record with bytes overwritten anywhere: never another error."""
    data = bytearray(encode(PARTIALS[-1]))
    at %= len(data)
    data[at : at + len(patch)] = patch
    for candidate in (junk, bytes(data)):
        with contextlib.suppress(PartialError):
            decode(candidate)
