"""The invalid-ratio guard judges each partition on its own, over a sliding window of at least
``min_events`` records, and says which partition and which reasons when it trips."""

from __future__ import annotations

import pytest

from monitor.ingest.invalid_guard import InvalidRatioExceeded, InvalidRatioGuard


def guard() -> InvalidRatioGuard:
    return InvalidRatioGuard(max_ratio=0.5, min_events=1000, where="preds/labels")


def test_one_broken_partition_trips_although_the_stream_as_a_whole_is_mostly_valid() -> None:
    g = guard()
    for _ in range(90):
        g.observe(0, 100, [])  # 9000 good records on partition 0
    g.observe(1, 500, ["not_json"] * 500)
    assert g.ratio(1) == 1.0  # below min_events: not judged yet
    with pytest.raises(InvalidRatioExceeded) as err:
        g.observe(1, 600, ["not_json"] * 450 + ["missing_id"] * 50)
    # globally 1000 of 10100 (10%) were invalid: a global guard would never have stopped
    text = str(err.value)
    print(text)
    assert "1000 of the last 1100 records on preds/labels partition 1 were invalid" in text
    assert "service.max_invalid_ratio 50%" in text
    assert "not_json (950), missing_id (50)" in text


def test_the_window_slides_old_garbage_out() -> None:
    g = guard()
    for _ in range(4):
        g.observe(0, 100, ["bad_timestamp"] * 100)  # 400 invalid, not enough to judge
    for _ in range(12):
        g.observe(0, 100, [])  # 1200 good ones push the bad batches out of the window
    assert g.ratio(0) == 0.0
    for _ in range(5):
        g.observe(0, 100, ["bad_timestamp"] * 100)  # 500 of the last 1000+: not above 50%
    assert g.windows[0].total == 1000 and g.ratio(0) == 0.5  # the newest 1000: 5 of 10 bad
    with pytest.raises(InvalidRatioExceeded, match="bad_timestamp"):
        g.observe(0, 100, ["bad_timestamp"] * 100)


def test_a_revoked_partition_is_forgotten() -> None:
    g = guard()
    g.observe(2, 900, ["not_json"] * 900)
    g.forget({2})
    g.observe(2, 200, ["not_json"] * 200)  # the new owner judges it afresh: 200 < 1000
    assert g.ratio(2) == 1.0 and g.windows[2].total == 200


def test_exactly_the_ratio_does_not_trip() -> None:
    g = guard()
    g.observe(0, 1000, ["not_json"] * 500)
    assert g.ratio(0) == 0.5
