"""Bad input: every invalid kind is dead-lettered with its reason; valid events are exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monitor.config.spec import ConfigError, parse_config
from monitor.ingest.events import RawRecord, Reason
from monitor.ingest.fields import parse_timestamp
from monitor.state.engine import Engine
from tests.helpers import T0

NOW = T0 + 3600


def cfg(**top: object):  # type: ignore[no-untyped-def]
    return parse_config(
        {
            "models": {
                "credit": {
                    "attributes": {"sex": {}, "age": {"bins": [25, 45]}},
                    "threshold": 0.5,
                    "label_values": {"repaid": 0, "default": 1},
                    "min_samples": 1,
                },
                "other": {"attributes": {"sex": {}}},
            },
            **top,
        }
    )


def rec(obj: object, ts_ms: int | None = None) -> RawRecord:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return RawRecord(raw, timestamp_ms=ts_ms)


def good(pid: str, **over: object) -> dict:
    ev = {
        "prediction_id": pid,
        "model_id": "credit",
        "timestamp": T0,
        "attributes": {"sex": "F", "age": 30},
        "prediction": 1,
        "score": 0.7,
    }
    ev.update(over)
    return ev


def test_mixed_prediction_batch() -> None:
    engine = Engine(cfg(), clock=lambda: NOW)
    bad = {
        Reason.NOT_JSON: rec(b"{not json"),
        Reason.NOT_OBJECT: rec([1, 2, 3]),
        Reason.MISSING_ID: rec({k: v for k, v in good("x").items() if k != "prediction_id"}),
        Reason.BAD_ID: rec(good({"nested": 1})),  # type: ignore[arg-type]
        Reason.MISSING_TIMESTAMP: rec({k: v for k, v in good("t").items() if k != "timestamp"}),
        Reason.BAD_TIMESTAMP: rec(good("bt", timestamp="yesterday-ish")),
        Reason.TIMESTAMP_OUT_OF_RANGE: rec(good("old", timestamp=915148800)),  # 1999
        Reason.TIMESTAMP_IN_FUTURE: rec(good("fut", timestamp=NOW + 10 * 86400)),
        Reason.UNKNOWN_MODEL: rec(good("um", model_id="nope")),
        Reason.MISSING_MODEL: rec({k: v for k, v in good("mm").items() if k != "model_id"}),
        Reason.MISSING_PREDICTION: rec(
            {k: v for k, v in good("mp", model_id="other").items() if k not in ("prediction",)}
        ),
        Reason.BAD_PREDICTION: rec(good("bp", prediction=7)),
        Reason.BAD_SCORE: rec(
            b'{"prediction_id":"ns","model_id":"credit","timestamp":1767225600,'
            b'"attributes":{"sex":"F"},"score":NaN}'
        ),
        Reason.BAD_ATTRIBUTE: rec(good("ba", attributes={"sex": "F", "age": "thirty"})),
    }
    # NaN is not JSON: that record is also "not_json"; an infinite score written as a huge
    # literal is the same case for a strict parser, so check a non-numeric score too
    bad[Reason.BAD_SCORE] = rec(good("ns", score="high"))
    valid = [
        rec(good("v1")),
        rec(good("v2", timestamp="2026-01-01T00:00:30Z", prediction=False)),
        rec(
            good("v3", timestamp=int(T0 * 1000) + 45_000, attributes={"sex": "M"})
        ),  # ms, age missing
        rec({k: v for k, v in good("v4", score=0.2).items() if k != "prediction"}),  # threshold
        rec({k: v for k, v in good("v5").items() if k != "timestamp"}, ts_ms=int(T0 * 1000)),
    ]
    records = [
        valid[0],
        *list(bad.values())[:6],
        valid[1],
        valid[2],
        *list(bad.values())[6:],
        valid[3],
        valid[4],
    ]
    batch, dead = engine.decoder.decode_predictions(records)
    assert len(batch) == 5
    assert [d.reason for d in dead] == list(bad)
    for d in dead:
        assert d.detail and d.record is bad[d.reason]
    assert list(batch.pred) == [1, 0, 1, 0, 1]
    assert list(batch.ts) == [T0, T0 + 30, T0 + 45, T0, T0]
    engine.apply(0, batch, engine.decoder.decode_labels([])[0])
    snap = engine.snapshot().models["credit"]
    idx, names = snap.groups[1]  # age
    counts = dict(zip(names, snap.windows["1h"].counts[idx, 0], strict=True))
    assert counts == {"25-45": 4, "__missing__": 1}


def test_mixed_label_batch() -> None:
    engine = Engine(cfg(), clock=lambda: NOW)
    records = [
        rec({"prediction_id": "a", "timestamp": T0, "label": 1}),
        rec({"prediction_id": "b", "timestamp": T0, "label": 2}),
        rec({"prediction_id": "c", "timestamp": T0}),
        rec({"prediction_id": "d", "timestamp": T0, "label": "default"}),
        rec({"prediction_id": "e", "timestamp": T0, "label": "maybe"}),
        rec({"timestamp": T0, "label": 0}),
        rec({"prediction_id": "f", "timestamp": 12, "label": 0}),
        rec({"prediction_id": "g", "timestamp": T0, "label": True, "model_id": "zzz"}),
        rec(b"\xff\xfe"),
    ]
    batch, dead = engine.decoder.decode_labels(records)
    assert list(batch.label) == [1, 1]
    assert [d.reason for d in dead] == [
        Reason.BAD_LABEL,
        Reason.MISSING_LABEL,
        Reason.BAD_LABEL,
        Reason.MISSING_ID,
        Reason.TIMESTAMP_OUT_OF_RANGE,
        Reason.UNKNOWN_MODEL,
        Reason.NOT_JSON,
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-01T00:00:00Z", T0),
        ("2026-01-01T01:00:00+01:00", T0),
        ("2026-01-01 00:00:00.500", T0 + 0.5),
        (T0, T0),
        (T0 * 1000, T0),
        (str(T0), T0),
    ],
)
def test_timestamps(text: object, expected: float) -> None:
    assert parse_timestamp(text) == pytest.approx(expected)


def test_dotted_field_paths() -> None:
    c = parse_config(
        {
            "fields": {
                "prediction_id": "meta.id",
                "timestamp": "meta.ts",
                "prediction": "out.decision",
                "attributes": "who",
            },
            "models": {"m": {"attributes": {"sex": {}, "zip": {"field": "addr.zip"}}}},
        }
    )
    engine = Engine(c, clock=lambda: NOW)
    b, dead = engine.decoder.decode_predictions(
        [
            rec(
                {
                    "meta": {"id": "q", "ts": T0},
                    "out": {"decision": 1},
                    "who": {"sex": "F"},
                    "addr": {"zip": 12345},
                }
            )
        ]
    )
    assert not dead and len(b) == 1
    assert engine.registries[0].labels == ["F", "12345"]


def test_cardinality_cap_other_and_overflow_count() -> None:
    c = parse_config({"models": {"m": {"attributes": {"g": {"max_groups": 3}}}}})
    engine = Engine(c, clock=lambda: NOW)
    recs = [rec(good(str(i), model_id="m", attributes={"g": f"v{i}"})) for i in range(6)]
    _b, _ = engine.decoder.decode_predictions(recs)
    reg = engine.registries[0]
    assert reg.labels == ["v0", "v1", "v2", "__other__"]
    assert reg.overflow == [3]


def test_odd_values_first_cannot_fold_the_reference_or_the_declared_groups_into_other() -> None:
    """Found in review: 50 records of junk values, written before the real traffic, took every
    place of the attribute (first come, first served, and kept in the checkpoint); the
    configured reference group then fell into ``__other__`` and a DIR of 0.2 paged nothing.
    The reference group has its place from the start, and with declared ``values`` every other
    value is ``__other__`` (counted), however many come first."""
    junk = [rec(good(f"j{i}", model_id="m", attributes={"g": f"junk{i}"})) for i in range(60)]
    real = [rec(good(f"r{i}", model_id="m", attributes={"g": "AC"[i % 2]})) for i in range(10)]
    for attr, kept in (({"max_groups": 50}, ["A"]), ({"values": ["A", "C"]}, ["A", "C"])):
        c = parse_config(
            {"models": {"m": {"attributes": {"g": attr}, "reference_groups": {"g": "A"}}}}
        )
        engine = Engine(c, clock=lambda: NOW)
        engine.decoder.decode_predictions(junk)
        b, _ = engine.decoder.decode_predictions(real)
        reg = engine.registries[0]
        got = [reg.labels[g] for g in b.groups[:, 0].tolist()]
        assert got[0::2] == ["A"] * 5  # the reference keeps its place either way
        assert set(kept) <= set(reg.labels) and reg.labels[: len(kept)] == kept
        if "values" in attr:  # declared: the junk is __other__, and C is C
            assert got[1::2] == ["C"] * 5 and reg.undeclared == [60] and reg.overflow == [0]
            assert sorted(reg.labels) == ["A", "C", "__other__"]
        else:
            assert len(reg.labels) == 51 and got[1::2] == ["__other__"] * 5


@pytest.mark.parametrize(
    ("attr", "refs", "says"),
    [
        ({"values": ["A", "A"]}, {}, "attributes.g.values: expected distinct"),
        ({"values": ["A", " "]}, {}, "attributes.g.values: expected distinct"),
        ({"values": ["A", "__other__"]}, {}, "attributes.g.values: expected distinct"),
        ({"values": ["A"], "bins": [1, 2]}, {}, "attributes.g.values: a numeric attribute"),
        ({"values": ["A", "B"]}, {"g": "C"}, "reference_groups.g: 'C' is not one of"),
    ],
)
def test_declared_values_are_checked_at_start(
    attr: dict[str, object], refs: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"models": {"m": {"attributes": {"g": attr}, "reference_groups": refs}}})
    assert says in str(info.value)


@pytest.mark.parametrize("score", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_inf_scores_are_dead_lettered(score: float) -> None:
    """JSON cannot carry NaN, but mapped sources (CSV) and lenient producers can."""
    engine = Engine(cfg(), clock=lambda: NOW)
    ok = RawRecord(good("ok"))
    b, dead = engine.decoder.decode_predictions([RawRecord(good("s", score=score)), ok])
    assert len(b) == 1 and [d.reason for d in dead] == [Reason.BAD_SCORE]


@pytest.mark.parametrize("score", [-0.01, 1.0000001, 73, -2.3])
def test_a_score_outside_the_unit_interval_is_dead_lettered_naming_it(score: float) -> None:
    """A logit or a percentage is no probability: counted as a decision (through the threshold)
    it was binned as "unscored", so calibration and score parity went quiet without a word."""
    engine = Engine(cfg(), clock=lambda: NOW)
    edge = [RawRecord(good(f"e{s}", score=s)) for s in (0, 0.0, 1, 1.0)]  # the ends are scores
    b, dead = engine.decoder.decode_predictions([RawRecord(good("s", score=score)), *edge])
    assert len(b) == 4 and [d.reason for d in dead] == [Reason.BAD_SCORE]
    assert "outside [0, 1]" in dead[0].detail and repr(float(score)) in dead[0].detail


def test_an_id_ending_in_nul_is_a_bad_id_not_a_duplicate_of_another() -> None:
    """Keys ignore trailing NULs (old checkpoints hold keys made so): "a\\0" was taken for
    "a" and counted as its duplicate, its decision lost without a word. A NUL inside an id
    is part of it."""
    engine = Engine(cfg(), clock=lambda: NOW)
    recs = [RawRecord(good(i)) for i in ("a", "a\0", "a\0b", "c")]
    b, dead = engine.decoder.decode_predictions(recs)
    assert len(b) == 3 and [d.reason for d in dead] == [Reason.BAD_ID]
    assert "NUL" in dead[0].detail


def test_fast_and_careful_paths_agree_on_valid_batches() -> None:
    """The typed fast path and the per-record path decode valid input identically."""
    import random

    import numpy as np

    rng = random.Random(4)
    records = []
    for i in range(500):
        ev = good(
            f"p{i}" if i % 3 else i,
            attributes={
                "sex": rng.choice(["F", "M", None]),
                "age": rng.choice([17, 30.5, 60, None]),
            },
        )
        ev["timestamp"] = rng.choice([T0 + i, int((T0 + i) * 1000), "2026-01-01T00:10:00Z"])
        ev["prediction"] = rng.choice([0, 1, True, False, "1", None])
        ev["score"] = rng.choice([0.1, 0.9, 1, 0])
        if i % 7 == 0:
            del ev["model_id"]
            ev["model_id"] = "credit"
        records.append(rec(ev, ts_ms=int((T0 + 3600) * 1000)))  # produced after the event
    labels = [
        rec(
            {
                "prediction_id": f"p{i}",
                "timestamp": T0 + 5,
                "label": rng.choice([0, 1, "default", "repaid", True]),
            }
        )
        for i in range(300)
    ]
    fast = Engine(cfg(), clock=lambda: NOW)
    slow = Engine(cfg(), clock=lambda: NOW)
    slow.decoder.fast.enabled = False
    from monitor.ingest.decode_fast import try_fast
    from monitor.ingest.events import RawBatch

    # the fast path really handles this batch (it does not fall back)
    assert try_fast(fast.decoder.fast.predictions, RawBatch.of(records)) is not None
    fast = Engine(cfg(), clock=lambda: NOW)
    fb, fd = fast.decoder.decode_predictions(records)
    sb, sd = slow.decoder.decode_predictions(records)
    assert not fd and not sd and len(fb) == 500
    for field in ("key", "model", "ts", "pred", "score", "groups"):
        np.testing.assert_array_equal(getattr(fb, field), getattr(sb, field), err_msg=field)
    assert fast.registries[0].labels == slow.registries[0].labels
    assert try_fast(fast.decoder.fast.labels, RawBatch.of(labels)) is not None
    fl, _ = fast.decoder.decode_labels(labels)
    sl, _ = slow.decoder.decode_labels(labels)
    for field in ("key", "ts", "label"):
        np.testing.assert_array_equal(getattr(fl, field), getattr(sl, field), err_msg=field)


@pytest.mark.parametrize(
    "odd",
    [
        {"attributes": {"sex": 1, "age": 30}},  # a number as a category
        {"attributes": {"sex": "  ", "age": 30}},  # blank: missing
        {"attributes": {"sex": "", "age": None}},
        {"attributes": {"sex": True, "age": 30.0}},
        {"attributes": {"sex": "F", "age": "30"}},  # a string where bins are configured
        {"attributes": {"sex": "F", "age": True}},
        {"attributes": {"sex": {"nested": 1}, "age": 30}},
        {"attributes": {"sex": "F", "age": 30, "extra": {"ignored": [1, 2]}}},
        {"attributes": None},
        {"attributes": {}},
        {"prediction": None, "score": None},  # nothing to decide with
        {"prediction": "maybe"},
        {"model_id": "other", "attributes": {"sex": "F", "age": "x"}},  # age unused by "other"
        b"null",  # a tombstone-like value
    ],
)
def test_fast_and_careful_paths_agree_on_odd_values(odd: object) -> None:
    """A batch with one odd record: same batch and same dead letters with or without the
    fast path (which either handles the value exactly or hands the batch over)."""
    import numpy as np

    records = [
        rec(good(f"p{i}", attributes={"sex": "MF"[i % 2], "age": 20 + i})) for i in range(20)
    ]
    records.insert(7, rec(odd if isinstance(odd, bytes) else good("odd", **odd)))  # type: ignore[arg-type]
    fast = Engine(cfg(), clock=lambda: NOW)
    slow = Engine(cfg(), clock=lambda: NOW)
    slow.decoder.fast.enabled = False
    fb, fd = fast.decoder.decode_predictions(records)
    sb, sd = slow.decoder.decode_predictions(records)
    assert [(d.reason, d.detail) for d in fd] == [(d.reason, d.detail) for d in sd]
    for field in ("key", "model", "ts", "pred", "score", "groups"):
        np.testing.assert_array_equal(getattr(fb, field), getattr(sb, field), err_msg=field)
    assert fast.registries[0].labels == slow.registries[0].labels
    assert fast.registries[0].overflow == slow.registries[0].overflow


@pytest.mark.parametrize("high", [5, 300, 1 << 21])
def test_distinct_codes_equal_numpy_unique(high: int) -> None:
    """The sort-free distinct of intersection codes (and its fallback for large codes)."""
    from monitor.ingest.groups import _distinct

    rng = np.random.default_rng(high)
    for n in (0, 1, 17, 5000):
        codes = rng.integers(0, high, n).astype(np.int64)
        uniq, inverse = _distinct(codes)
        want_u, want_i = np.unique(codes, return_inverse=True)
        np.testing.assert_array_equal(uniq, want_u)
        np.testing.assert_array_equal(inverse.reshape(-1), want_i.reshape(-1))


@pytest.mark.parametrize("unit", [1, 1_000])
def test_a_missing_timestamp_takes_the_record_time_as_seconds_on_every_path(unit: int) -> None:
    """Found by helper-55: standing in for a missing timestamp, a record time in µs (a
    producer's mistake) went through the ms rule on the fast path (accepted, divided twice)
    and not on the careful one (dead-lettered): one record, two answers by its batch."""
    ev = {k: v for k, v in good("r1").items() if k != "timestamp"}
    stamp = int(T0 * 1000) * unit  # ms (right), or µs (wrong)
    clean = [rec(ev, ts_ms=stamp)]
    spoiled = [*clean, rec(b"{not json")]  # a bad record sends the batch down the careful path
    answers = []
    for records in (clean, spoiled):
        batch, dead = Engine(cfg(), clock=lambda: NOW).decoder.decode_predictions(records)
        mine = [d for d in dead if d.record is clean[0]]
        answers.append((batch.ts.tolist(), [(d.reason, d.detail) for d in mine]))
    assert answers[0] == answers[1]
    if unit == 1:
        assert answers[0] == ([T0], [])
    else:
        ((reason, detail),) = answers[0][1]
        assert answers[0][0] == [] and reason == Reason.TIMESTAMP_IN_FUTURE
        assert "ahead of the clock" in detail  # not "of its record time": it is that time


@pytest.mark.parametrize("attributes", ["F", ["F", 30], 7, True])
def test_attributes_that_are_not_an_object_are_dead_lettered_not_counted_missing(
    attributes: object,
) -> None:
    """Found by helper-55: ``"attributes": "F"`` was read as every attribute absent, and the
    decision counted in ``__missing__`` (missingness is itself a fairness signal: bad data
    must not inflate it). The attributes topic already refused the same shape."""
    engine = Engine(cfg(), clock=lambda: NOW)
    records = [
        rec(good("x", attributes=attributes)),
        rec(good("ok")),
        rec(good("y", attributes=None)),
    ]
    batch, dead = engine.decoder.decode_predictions(records)
    assert [(d.reason, d.record is records[0]) for d in dead] == [(Reason.BAD_ATTRIBUTE, True)]
    assert "attributes is not an object" in dead[0].detail
    assert len(batch) == 2  # an explicit null is absent, as before
