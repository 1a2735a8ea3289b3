"""Size limits and escaping: one record cannot bloat the monitor or drive a terminal."""

from __future__ import annotations

import json

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from monitor.config.spec import ConfigError, parse_config
from monitor.ingest.events import DeadLetter, RawRecord, Reason
from monitor.ingest.groups import shorten
from monitor.ingest.kafka import (
    DEAD_LETTER_OVERHEAD,
    DEFAULT_MAX_MESSAGE_BYTES,
    dead_letter_headers,
    dead_letter_record,
)
from monitor.outputs.report import build_report, format_table, printable
from monitor.state.engine import Engine
from tests.helpers import T0

NOW = T0 + 3600


def cfg(**limits: object):  # type: ignore[no-untyped-def]
    return parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "min_samples": 1}},
            **({"limits": limits} if limits else {}),
        }
    )


def ev(pid: str, g: object) -> RawRecord:
    e = {"prediction_id": pid, "model_id": "m", "timestamp": T0, "attributes": {"g": g}}
    return RawRecord(json.dumps({**e, "prediction": 1}).encode())


def test_long_values_count_under_a_stable_shortened_name() -> None:
    engine = Engine(cfg(max_value_length=32), clock=lambda: NOW)
    long_a, long_b = "a" * 10_000, "a" * 9_999 + "b"  # same first characters
    batch, dead = engine.decoder.decode_predictions(
        [ev("1", long_a), ev("2", long_b), ev("3", long_a), ev("4", "short")]
    )
    assert not dead and len(batch) == 4
    reg = engine.registries[0]
    labels = sorted(reg.labels)
    assert len(labels) == 3 and all(len(label) <= 32 for label in labels)
    assert shorten(long_a, 32) in labels and shorten(long_b, 32) in labels
    assert shorten(long_a, 32) != shorten(long_b, 32)  # the hash tells them apart
    assert batch.groups[0, 0] == batch.groups[2, 0] != batch.groups[1, 0]
    assert reg.shortened == [3]
    # stable across processes (a checkpoint holds it): BLAKE2b, not Python's hash
    assert shorten(long_a, 32) == "aaaaaaaaaaaaaaa~" + shorten(long_a, 32)[-16:]
    assert shorten("x" * 32, 32) == "x" * 32


def test_ids_and_records_over_the_limits_are_dead_lettered() -> None:
    engine = Engine(cfg(max_id_length=10, max_record_bytes=200), clock=lambda: NOW)
    padded = RawRecord(json.dumps({"pad": "x" * 300}).encode())
    batch, dead = engine.decoder.decode_predictions([ev("x" * 11, "a"), ev("ok", "a"), padded])
    assert len(batch) == 1
    assert [d.reason for d in dead] == [Reason.ID_TOO_LONG, Reason.RECORD_TOO_LARGE]
    assert "limits.max_record_bytes 200" in dead[1].detail


@pytest.mark.parametrize(
    ("key", "value"),
    [("max_record_bytes", 10), ("max_id_length", 0), ("max_value_length", "x"), ("nope", 1)],
)
def test_bad_limits_name_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"limits.{key}"):
        cfg(**{key: value})


def test_group_names_are_escaped_in_terminal_output() -> None:
    engine = Engine(cfg(), clock=lambda: NOW)
    hostile = "\x1b[2J\x1b[31mRED\nfake line\x00\u202eevil"
    batch, dead = engine.decoder.decode_predictions([ev("1", hostile), ev("2", "plain")])
    assert not dead
    engine.apply(0, batch, engine.decoder.decode_labels([])[0])
    text = format_table(build_report(engine.snapshot(), confidence=0.95))
    assert "\\x1b[2J\\x1b[31mRED\\nfake line\\x00\\u202eevil" in text
    assert not any(c in text for c in "\x1b\x00\u202e")
    assert "fake line" not in [line.strip() for line in text.splitlines()]
    assert printable("é ü 中文 ok") == "é ü 中文 ok"


def test_group_names_cannot_break_out_of_the_audit_report() -> None:
    """The audit HTML embeds the report as JSON in a script element: a group named like
    markup must neither end that element nor open a comment, and must read back intact."""
    import html
    import re

    from monitor.outputs.audit import render_html

    config = cfg()
    engine = Engine(config, clock=lambda: NOW)
    hostile = '</script><script>alert(1)</script><!--<img src=x onerror="x">'
    batch, _ = engine.decoder.decode_predictions([ev("1", hostile), ev("2", "plain")])
    engine.apply(0, batch, engine.decoder.decode_labels([])[0])
    report = build_report(engine.snapshot(), confidence=0.95)
    page = render_html(report, {}, config=config, title="t", source="s", generated=NOW)
    assert page.count("<script") == 1 and "<!--" not in page and "<img" not in page
    data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert data is not None
    groups = json.loads(data.group(1))["models"]["m"]["windows"]["1h"]["attributes"]["g"]["groups"]
    assert hostile in groups
    assert html.escape(hostile) in page  # the table shows it as text


def test_intersection_parts_with_the_separator_stay_apart() -> None:
    from monitor.ingest.groups import intersection_label

    config = parse_config(
        {
            "models": {
                "m": {"attributes": {"a": {}, "b": {}}, "intersections": [["a", "b"]]},
            }
        }
    )
    engine = Engine(config, clock=lambda: NOW)

    def ev2(pid: str, a: str, b: str) -> RawRecord:
        e = {"prediction_id": pid, "timestamp": T0, "attributes": {"a": a, "b": b}}
        return RawRecord(json.dumps({**e, "prediction": 1}).encode())

    batch, _ = engine.decoder.decode_predictions([ev2("1", "x&y", "z"), ev2("2", "x", "y&z")])
    assert batch.groups[0, 2] != batch.groups[1, 2]
    assert intersection_label(["x&y", "z"]) == "x\\&y&z"
    assert intersection_label(["a\\", "&"]) == "a\\\\&\\&"
    assert intersection_label(["A", "F"]) == "A&F"  # the common case reads as before


def test_a_csv_row_that_is_not_utf8_is_dead_lettered_and_long_cells_are_read(  # type: ignore[no-untyped-def]
    tmp_path, capsys
) -> None:
    from monitor.cli import main

    (tmp_path / "c.yaml").write_text("models: {m: {attributes: {g: {}}, threshold: 0.5}}\n")
    (tmp_path / "map.yaml").write_text(
        "model: m\nid: id\ntimestamp: ts\nscore: s\nattributes: {g: g}\n"
    )
    args = ["replay", "-c", str(tmp_path / "c.yaml"), "--csv-mapping", str(tmp_path / "map.yaml")]
    csv_file = tmp_path / "t.csv"
    csv_file.write_bytes(
        b"id,ts,s,g\n1,1767225600,0.5,a\n2,1767225600,0.5," + b"x" * 200_000 + b"\n"
    )
    assert main([*args, "--csv", str(csv_file), "--format", "json"]) == 0  # 128 KiB+ cell
    csv_file.write_bytes(b"id,ts,s,g\n1,1767225600,0.5,a\n2,1767225600,0.5,\xff\n")
    capsys.readouterr()
    assert main([*args, "--csv", str(csv_file), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["invalid"] == {"bad_row": 1}  # the row, not the file


def test_a_dead_letters_detail_header_is_whole_utf8_however_long_the_detail() -> None:
    """Found in review: the detail was cut at 500 *bytes*, splitting a multi-byte character (a
    tensor name of 1,000 'é' in a ``bad_tensor`` detail): the header was invalid UTF-8. Now at
    most 500 characters, encoded whole; lone surrogates are escaped."""
    for detail in ("é" * 1000, "\U0001f600" * 600, "\ud800" * 700, "x" * 10):
        d = DeadLetter(Reason.BAD_TENSOR, detail, RawRecord(b"v", topic="t", offset=7))
        headers = dict(dead_letter_headers(d))
        text = headers["fm.detail"].decode("utf-8")  # raises if cut inside a character
        assert text.startswith(detail[:5].encode("utf-8", "backslashreplace").decode())
        assert len(text) <= 500 * 6 and headers["fm.source.offset"] == b"7"


def test_a_five_way_intersection_of_large_sets_keeps_every_combination_apart() -> None:
    """An intersection's combinations were coded as one int64 in base (groups + 1): with five
    parts and over ~6,200 groups in the model the code wrapped around, and two different
    combinations became one group (their decisions counted together, under one of the two
    names). Here parts ``a`` = v0 and v4096 differ by 2^12 in group index; with 8,191 groups
    the old base was 2^13 and 2^12 · (2^13)^4 = 2^64 wrapped to 0."""
    from monitor.ingest.groups import GroupRegistry, intersection_label

    parts = ["a", "b", "c", "d", "e"]
    config = parse_config(
        {
            "models": {
                "m": {
                    "attributes": {p: {"max_groups": 4200 if p == "a" else 1100} for p in parts},
                    "intersections": [parts],
                },
            }
        }
    )
    reg = GroupRegistry(config.models["m"])
    for i in range(4097):
        reg.index(0, f"v{i}")
    filler = 0
    while len(reg) < 8191:
        reg.index(1 + filler % 4, f"f{filler}")
        filler += 1
    assert reg.index(0, "v4096") - reg.index(0, "v0") == 4096
    rows = [("v0", "f0", "f1", "f2", "f3"), ("v4096", "f0", "f1", "f2", "f3")]
    groups = reg.encode([list(col) for col in zip(*rows, strict=True)])
    labels = [reg.labels[g] for g in groups[:, 5]]
    assert labels == [intersection_label(r) for r in rows]


def test_a_dead_letter_fits_the_topic_whatever_the_records_key_and_headers() -> None:
    """Found by a review: the value was cut to the room left for it, but the record's own
    headers were not counted: a 2 MB value with 20 headers of 1 KB made a 1,060,926-byte dead
    letter, refused by a topic of 1 MiB (counted invalid, never dead-lettered)."""
    room = DEFAULT_MAX_MESSAGE_BYTES - DEAD_LETTER_OVERHEAD

    def size(key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]) -> int:
        """The record batch the producer sends, as kafka-python measures it."""
        return DefaultRecordBatchBuilder.size_in_bytes(0, 0, key, value, headers) + 61

    small = [(f"h{i}", b"x" * 1024) for i in range(20)]
    huge = [(f"h{i}", b"x" * 100_000) for i in range(20)]  # 2 MB of headers
    many = [("a", b"")] * 150_000  # small headers: their length fields count (a review)
    cases = [(b"v" * 2_000_000, small, b"k"), (b"v" * 10, huge, b"k" * 500_000)]
    cases.append((b"{" * 598_400, many, b"k"))
    assert size(b"k", b"{" * 598_400, many) <= DEFAULT_MAX_MESSAGE_BYTES  # the input fitted
    for value, own, key in cases:
        d = DeadLetter(Reason.RECORD_TOO_LARGE, "big", RawRecord(value, 0, "t", 0, 9, key, own))
        k, v, headers = dead_letter_record(d, room)
        assert size(k, v, headers) <= DEFAULT_MAX_MESSAGE_BYTES
        got = dict(headers)
        assert got["fm.reason"] == b"record_too_large" and got["fm.source.offset"] == b"9"
        if own is small:  # the record's own headers and key kept, the value cut to fit
            assert k == b"k" and all(got[n] == h for n, h in own)
            assert got["fm.truncated"] == b"true" and got["fm.original.size"] == b"2000000"
            assert len(v) > room - 30_000
        elif own is many:  # kept, the value cut by what their length fields take
            assert got["fm.truncated"] == b"true" and len(headers) > len(many)
        else:  # too large to keep: left out, their size said; the value whole
            assert k is None and "h0" not in got and v == value
            raw = len(key) + sum(len(n) + len(h) for n, h in own)
            assert raw < int(got["fm.dropped.headers"]) < raw + 100
    plain = DeadLetter(Reason.NOT_JSON, "x", RawRecord(b"{", 0, "t", 0, 1, b"k", [("a", b"b")]))
    assert dead_letter_record(plain, room) == (b"k", b"{", dead_letter_headers(plain))
