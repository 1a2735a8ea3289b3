"""Hostile input, generated: whatever the bytes, the decoder neither raises nor loses a record.

Every generated batch goes through both decoding paths (the typed fast path and the careful
per-record path) and into the engine. For each batch: records counted + dead-lettered = records
read, for predictions and for labels, and both paths agree on which records are counted.
The test asserts that at least 100,000 records went through and prints how many.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.config.spec import parse_config
from monitor.ingest.events import RawRecord, Reason
from monitor.state.engine import Engine
from tests.helpers import T0

NOW = T0 + 3600
RECORD_MS = int((T0 + 600) * 1000)

CONFIG = {
    "models": {
        "credit": {
            "attributes": {"sex": {}, "age": {"bins": [25, 45]}},
            "intersections": [["sex", "age"]],
            "threshold": 0.5,
            "label_values": {"repaid": 0, "default": 1},
            "min_samples": 1,
        },
        "other": {"attributes": {"sex": {}}},
    },
    "limits": {"max_record_bytes": 4096, "max_id_length": 64, "max_value_length": 32},
}

# values an attacker (or a broken producer) would try in any field
NASTY_VALUES: list[Any] = [
    None,
    True,
    "",
    " ",
    "\x00",
    "\x1b[31mred\n",
    "é" * 40,
    "x" * 5000,
    "1" * 300,
    0,
    -1,
    2**63,
    -(2**63) - 1,
    1.5e308,
    [],
    {},
    [[[]]],
    {"a": {"b": {"c": 1}}},
    "2026-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "not a time",
]
# raw JSON fragments json.dumps cannot produce (huge numbers, bad escapes, deep nesting)
NASTY_FRAGMENTS = [
    b"1" + b"0" * 400,
    b"-" + b"9" * 5000,
    b"1e400",
    b"-1e400",
    b"NaN",
    b"Infinity",
    b'"\\ud800"',
    b'"\\u0000"',
    b"[" * 3000 + b"]" * 3000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'"\xff\xfe"',
    b"0.0000000000000000000000000000001e-400",
]


def valid_prediction(i: int) -> dict[str, Any]:
    return {
        "prediction_id": f"p{i}",
        "model_id": "credit" if i % 5 else "other",
        "timestamp": T0 + i % 500,
        "attributes": {"sex": "FMX"[i % 3], "age": 20 + i % 50},
        "prediction": i % 2,
        "score": (i % 10) / 10,
    }


def valid_label(i: int) -> dict[str, Any]:
    return {"prediction_id": f"p{i}", "timestamp": T0 + i % 500 + 5, "label": i % 2}


FIELDS = ["prediction_id", "model_id", "timestamp", "prediction", "score", "label", "attributes"]


@st.composite
def hostile_value(draw: st.DrawFn) -> bytes | None:
    """One record's value: valid, valid with a field replaced, mutated bytes, or noise."""
    i = draw(st.integers(0, 10_000))
    base = draw(st.sampled_from([valid_prediction, valid_label]))(i)
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return json.dumps(base).encode()
    if kind == 1:  # a field replaced by a nasty value (or an attribute by one)
        field = draw(st.sampled_from([*FIELDS, "attributes.sex", "attributes.age"]))
        value = draw(st.sampled_from(NASTY_VALUES))
        if field.startswith("attributes."):
            base.setdefault("attributes", {})[field.split(".")[1]] = value
        else:
            base[field] = value
        return json.dumps(base).encode()
    if kind == 2:  # a field replaced by a raw fragment
        field = draw(st.sampled_from([*FIELDS, "attributes.age"]))
        frag = draw(st.sampled_from(NASTY_FRAGMENTS))
        marker = "__FRAGMENT__"
        if field == "attributes.age":
            base.setdefault("attributes", {})["age"] = marker
        else:
            base[field] = marker
        return json.dumps(base).encode().replace(b'"' + marker.encode() + b'"', frag)
    if kind == 3:  # byte-level mutations of a valid event
        raw = bytearray(json.dumps(base).encode())
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, len(raw)))
            op = draw(st.integers(0, 2))
            if op == 0 and pos < len(raw):
                raw[pos] = draw(st.integers(0, 255))
            elif op == 1:
                raw[pos:pos] = draw(st.binary(min_size=1, max_size=8))
            else:
                del raw[pos : pos + draw(st.integers(1, 8))]
        return bytes(raw)
    if kind == 4:
        return draw(st.binary(max_size=64))
    if kind == 5:
        return draw(st.sampled_from([None, b"", b"null", b"[]", b"{}", b'"x"', b"1"]))
    return json.dumps(base).encode() + b" " * draw(st.sampled_from([0, 5000]))  # over the limit


records_seen = 0


def check_batch(values: list[bytes | None], stamps: list[int | None]) -> None:
    global records_seen
    records = [
        RawRecord(v, timestamp_ms=s, topic="t", offset=i)  # type: ignore[arg-type]
        for i, (v, s) in enumerate(zip(values, stamps, strict=True))
    ]
    n = len(records)
    fast = Engine(parse_config(CONFIG), clock=lambda: NOW)
    slow = Engine(parse_config(CONFIG), clock=lambda: NOW)
    slow.decoder.fast.enabled = False
    for engine in (fast, slow):
        pb, pdead = engine.decoder.decode_predictions(records)
        lb, ldead = engine.decoder.decode_labels(records)
        assert len(pb) + len(pdead) == n
        assert len(lb) + len(ldead) == n
        # the safety net (Reason.UNDECODABLE) is for bugs: no generated record needs it
        assert not [d for d in pdead + ldead if d.reason is Reason.UNDECODABLE]
        engine.apply(0, pb, lb)
        engine.snapshot()
    fb, _ = fast.decoder.decode_predictions(records)
    sb, _ = slow.decoder.decode_predictions(records)
    assert np.array_equal(fb.key, sb.key) and np.array_equal(fb.pred, sb.pred)
    records_seen += n


@settings(
    max_examples=1100,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    values=st.lists(hostile_value(), min_size=80, max_size=120),
    stamp=st.sampled_from([None, -1, RECORD_MS, RECORD_MS - 3_600_000]),
)
def _fuzz(values: list[bytes | None], stamp: int | None) -> None:
    check_batch(values, [stamp] * len(values))


def test_decoder_never_raises_and_loses_nothing() -> None:
    _fuzz()
    print(f"\nfuzz: {records_seen} generated records decoded, 0 exceptions")
    assert records_seen >= 100_000


def test_a_valid_batch_stays_on_the_fast_path_and_equal() -> None:
    """The hostile-input checks must not push clean batches off the fast path."""
    from monitor.ingest.decode_fast import try_fast
    from monitor.ingest.events import RawBatch

    engine = Engine(parse_config(CONFIG), clock=lambda: NOW)
    recs = [RawRecord(json.dumps(valid_prediction(i)).encode(), RECORD_MS) for i in range(200)]
    quick = try_fast(engine.decoder.fast.predictions, RawBatch.of(recs))
    assert quick is not None and len(quick) == 200


# -- cases an adversarial review found (each failed before its fix) ----------------------------


def both_paths(values: list[bytes | None], stamp: int | None = RECORD_MS) -> tuple[Any, Any]:
    """Decode with both paths (asserting they agree); the careful path's batch and dead letters."""
    check_batch(values, [stamp] * len(values))
    slow = Engine(parse_config(CONFIG), clock=lambda: NOW)
    slow.decoder.fast.enabled = False
    recs = [RawRecord(v, timestamp_ms=stamp) for v in values]  # type: ignore[arg-type]
    return slow.decoder.decode_predictions(recs)


def test_records_that_are_not_json_alone_never_join_into_json() -> None:
    inner = json.dumps(valid_prediction(1))[1:-1]
    r0 = ("{" + inner + ',"pad":"').encode()  # opens a string ...
    r1 = b'"}'  # ... that this one closes
    r2 = (
        "{" + json.dumps(valid_prediction(2))[1:-1] + "}," + json.dumps(valid_prediction(3))
    ).encode()
    batch, dead = both_paths([r0, r1, r2])
    assert len(batch) == 0 and [d.reason for d in dead] == [Reason.NOT_JSON] * 3


def test_text_timestamps_are_not_divided_twice() -> None:
    """Microseconds written as text: parsed once as milliseconds -> far in the future."""
    ev = valid_prediction(1)
    ev["timestamp"] = str(int(T0 * 1_000_000))
    batch, dead = both_paths([json.dumps(ev).encode(), json.dumps(valid_prediction(2)).encode()])
    assert len(batch) == 1 and [d.reason for d in dead] == [Reason.TIMESTAMP_IN_FUTURE]


def test_text_milliseconds_that_look_like_a_compact_date_are_milliseconds() -> None:
    """Every millisecond of the hour before the record time, written as text, whatever its
    digits: Python's fromisoformat reads some of them ("1767120100000") as a date in the 1700s
    (YYYYMMDD, any character, hh), which dead-lettered ~0.5 % of such events (a review)."""

    def looks_like_a_date(ms: int) -> bool:
        try:
            datetime.fromisoformat(str(ms))
        except ValueError:
            return False
        return True

    week = range(int((T0 - 7 * 86400) * 1000), int(T0 * 1000), 60_013)
    odd = [ms for ms in week if looks_like_a_date(ms)]
    assert len(odd) > 20  # the inputs this test is about
    stamps = odd[:200] + [ms for ms in week if not looks_like_a_date(ms)][:200]
    values = []
    for i, ms in enumerate(stamps):
        ev = valid_prediction(i)
        ev["timestamp"] = str(ms)
        values.append(json.dumps(ev).encode())
    batch, dead = both_paths(values)
    assert not dead and len(batch) == len(stamps)
    assert sorted(batch.ts.tolist()) == sorted(ms / 1000 for ms in stamps)


@pytest.mark.parametrize("stamp", [-1, 0, None])
def test_a_record_time_of_zero_or_none_is_no_time(stamp: int | None) -> None:
    ev = valid_prediction(1)
    del ev["timestamp"]
    batch, dead = both_paths(
        [json.dumps(ev).encode(), json.dumps(valid_prediction(2)).encode()], stamp
    )
    assert len(batch) == 1 and [d.reason for d in dead] == [Reason.MISSING_TIMESTAMP]


def test_a_binned_integer_too_large_for_a_float_is_rejected_by_both_paths() -> None:
    raw = json.dumps(valid_prediction(1)).encode().replace(b'"age": 21', b'"age": 1' + b"0" * 309)
    batch, dead = both_paths([raw, json.dumps(valid_prediction(2)).encode()])
    assert len(batch) == 1 and [d.reason for d in dead] == [Reason.BAD_ATTRIBUTE]


def test_a_batch_the_fast_path_gives_up_on_changes_no_group_counter() -> None:
    long = {**valid_prediction(1), "attributes": {"sex": "v" * 100, "age": 30}}  # credit
    bad = {**valid_prediction(5), "prediction": 7}  # "other": sends the batch to the careful path
    engine = Engine(parse_config(CONFIG), clock=lambda: NOW)
    batch, dead = engine.decoder.decode_predictions(
        [RawRecord(json.dumps(e).encode(), RECORD_MS) for e in (long, bad)]
    )
    assert len(batch) == 1 and [d.reason for d in dead] == [Reason.BAD_PREDICTION]
    assert engine.registries[0].shortened[0] == 1  # counted once, not once per path
