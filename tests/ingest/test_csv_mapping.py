"""The CSV mapping file of ``replay --csv``: the shipped one reads, mistakes name their key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from monitor.config.decode import ConfigError
from monitor.ingest.file import load_csv_mapping
from tests.conftest import ROOT


def test_the_compas_mapping_reads() -> None:
    m = load_csv_mapping(ROOT / "examples/compas/mapping.yaml")
    assert (m.model, m.id, m.prediction, m.label) == (
        "compas",
        "id",
        "score_text",
        "two_year_recid",
    )
    assert m.attributes == {"race": "race", "sex": "sex", "age": "age"}
    assert m.label_delay == 730 * 86400
    assert [(f.column, f.op) for f in m.where][:2] == [("days_b_screening_arrest", "between"), ("is_recid", "ne")]  # fmt: skip
    assert m.where[0].value == [-30, 30]
    # deciles 1..10 onto the centres of ten score bins
    assert (m.score, m.score_range) == ("decile_score", (0.5, 10.5))


def test_score_range_maps_the_column_linearly_onto_0_1(tmp_path: Path) -> None:
    from monitor.config.spec import FieldMap
    from monitor.ingest.file import read_csv

    (tmp_path / "m.yaml").write_text(
        "id: id\ntimestamp: t\nprediction: p\nscore: s\nscore_range: [0.5, 10.5]\n"
        "attributes: {race: race}\n"
    )
    (tmp_path / "d.csv").write_text("id,t,p,s,race\na,1,1,1,x\nb,2,0,10,y\nc,3,0,oops,z\n")
    preds, _, _ = read_csv(tmp_path / "d.csv", load_csv_mapping(tmp_path / "m.yaml"), FieldMap())
    scores = [r.value.get("score") for r in preds]
    assert scores[:2] == [pytest.approx(0.05), pytest.approx(0.95)]
    assert scores[2] == "oops"  # not a number: the decoder dead-letters it with its reason


BASE = "id: id\ntimestamp: t\nprediction: p\nattributes: {race: race}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("timestamp: t\nprediction: p\nattributes: {race: race}\n", "id: required"),
        (BASE + "labels: y\n", "labels: unknown key"),
        (BASE + "label_delay: soon\n", "label_delay: 'soon' is not a duration"),
        (
            BASE + "where: [{column: a, op: like, value: x}]\n",
            "where[0].op: 'like' is not one of eq",
        ),
        (BASE + "where: [{column: a, op: between, value: 3}]\n", "where[0].value: between needs"),
        (BASE + "where: [{op: eq, value: 3}]\n", "where[0].column: required"),
        (BASE + "where: [{column: a, op: lt}]\n", "where[0].value: lt needs numbers, not None"),
        (BASE + "where: [{column: a, op: between, value: [low, 5]}]\n", "where[0].value: between"),
        (BASE + "where: [{column: a, op: ge, value: [1]}]\n", "where[0].value: ge needs numbers"),
        (BASE + "where: [{column: a, op: gt, value: " + "9" * 400 + "}]\n", "where[0].value: gt"),
        ("id: id\ntimestamp: t\nattributes: {race: race}\n", "prediction: map a prediction"),
        ("id: id\ntimestamp: t\nprediction: p\nattributes: {}\n", "attributes: map each"),
        (BASE + "score: s\nscore_range: [10, 1]\n", "score_range: needs [low, high]"),
        (BASE + "score: s\nscore_range: [1, 2, 3]\n", "score_range: needs [low, high]"),
        (BASE + "score: s\nscore_range: [1, .inf]\n", "score_range: needs [low, high]"),
    ],
)
def test_mapping_mistakes_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "mapping.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_csv_mapping(path)
    assert str(err.value).startswith(message), str(err.value)


def _write(tmp_path: Path, mapping: str, csv_text: str, *, bom: bool = False) -> None:
    (tmp_path / "m.yaml").write_text(mapping)
    (tmp_path / "d.csv").write_bytes((b"\xef\xbb\xbf" if bom else b"") + csv_text.encode())


def _read(tmp_path: Path, **kw: object) -> list[dict[str, object]]:
    from monitor.config.spec import FieldMap
    from monitor.ingest.file import read_csv

    m = load_csv_mapping(tmp_path / "m.yaml")
    preds, _, _ = read_csv(tmp_path / "d.csv", m, FieldMap(), **kw)  # type: ignore[arg-type]
    return [r.value for r in preds]  # type: ignore[misc]


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    """Found in review: a CSV saved with a UTF-8 BOM named its first column '\\ufeffrace', so
    every row's race was missing and a gate on race passed without judging it."""
    _write(tmp_path, "id: id\ntimestamp: t\nprediction: p\nattributes: {race: race}\n",
           "race,id,t,p\nA,1,1,1\nB,2,2,0\n", bom=True)  # fmt: skip
    assert [e["attributes"]["race"] for e in _read(tmp_path)] == ["A", "B"]


def test_a_mapped_column_missing_from_the_header_is_named_by_its_key(tmp_path: Path) -> None:
    """Found in review: a misspelt column (``race: Race``) read as empty: every row in
    ``__missing__``, no error, a gate that passed."""
    _write(tmp_path, "id: id\ntimestamp: t\nprediction: p\nattributes: {race: Race}\n",
           "race,id,t,p\nA,1,1,1\n")  # fmt: skip
    with pytest.raises(ConfigError) as info:
        _read(tmp_path)
    assert str(info.value).startswith("attributes.race: no column 'Race' in ")
    assert "its columns: race, id, t, p" in str(info.value)


def test_attribute_cells_stay_text_unless_the_attribute_is_binned(tmp_path: Path) -> None:
    """Found in review: cells were parsed as numbers, so codes 01 and 1, or 07, 0_7 and 7,
    became one group (and a reference group '01' matched nothing). Text stays text, as the
    same values in JSONL do; a binned attribute still gets its number."""
    _write(tmp_path, "id: id\ntimestamp: t\nprediction: p\nattributes: {code: c, age: a}\n",
           "id,t,p,c,a\n1,1,1,01,30\n2,2,0,1,41.5\n3,3,0,0_7,\n4,4,1,NaN,7\n")  # fmt: skip
    events = _read(tmp_path, numeric=frozenset({"age"}))
    assert [e["attributes"]["code"] for e in events] == ["01", "1", "0_7", "NaN"]
    assert [e["attributes"]["age"] for e in events] == [30, 41.5, None, 7]


def test_a_score_past_a_floats_range_is_left_to_the_decoder(tmp_path: Path) -> None:
    """Found in review: a 400-digit score cell with ``score_range`` raised OverflowError and
    stopped the whole replay; it is passed on unscaled, for the decoder to dead-letter."""
    _write(tmp_path, BASE.replace("prediction: p", "score: s\nscore_range: [0, 10]"),
           "id,t,s,race\n1,1,5,a\n2,2," + "9" * 400 + ",b\n")  # fmt: skip
    scores = [e["score"] for e in _read(tmp_path)]
    assert scores[0] == 0.5 and scores[1] == int("9" * 400)


def test_a_mapping_or_config_file_that_is_not_utf8_is_a_clean_error(tmp_path: Path) -> None:
    from monitor.config.spec import load_config

    (tmp_path / "m.yaml").write_bytes(b"id: \xff\n")
    with pytest.raises(ConfigError, match="cannot read CSV mapping"):
        load_csv_mapping(tmp_path / "m.yaml")
    (tmp_path / "c.yaml").write_bytes(b"models: {m: {attributes: {g\xe9: {}}}}\n")
    with pytest.raises(ConfigError, match="is not UTF-8"):
        load_config(tmp_path / "c.yaml")


def test_a_damaged_row_is_dead_lettered_and_the_rest_is_read(tmp_path: Path) -> None:
    """Found in review: one row with a field too few, or one byte that is not UTF-8 (a
    Latin-1 name in a UTF-8 extract), stopped the whole replay; the UTF-8 error even named
    the wrong line. Each such row is a ``bad_row`` dead letter with its first line and its
    bytes; bytes that are not UTF-8 in a column the mapping does not read harm nothing (the
    row is kept: dropping it would drop one group's cases more than another's); a quoted
    cell over two lines and blank lines keep every line number right."""
    from monitor.config.spec import FieldMap
    from monitor.ingest.file import UnreadableInput, read_csv

    (tmp_path / "m.yaml").write_text(BASE)
    rows = [b"id,t,p,race,name", b"1,1,1,a,x", b"2,2,0,b", b'3,3,1,b,"y\nz"', b"",
            b"4,4,0,Jos\xe9,z", b"5,5,1,d,Jos\xe9", b"6,6,1,e,w"]  # fmt: skip
    (tmp_path / "d.csv").write_bytes(b"\r\n".join(rows) + b"\r\n")
    dead: list[Any] = []
    mapping = load_csv_mapping(tmp_path / "m.yaml")
    preds, _, _ = read_csv(tmp_path / "d.csv", mapping, FieldMap(), dead=dead)
    kept = [(r.value["prediction_id"], r.offset) for r in preds]  # type: ignore[index]
    assert kept == [("1", 2), ("3", 4), ("5", 8), ("6", 9)]
    assert [(d.reason.value, d.record.offset, d.detail) for d in dead] == [
        ("bad_row", 3, "4 fields where the header has 5"),
        ("bad_row", 7, "not UTF-8 (column 'race')"),
    ]
    assert [d.record.value for d in dead] == [b"2,2,0,b\r\n", b"4,4,0,Jos\xe9,z\r\n"]
    with pytest.raises(UnreadableInput, match=r"d.csv line 3: 4 fields where the header has 5"):
        read_csv(tmp_path / "d.csv", mapping, FieldMap())  # no dead list: the first one stops


def test_broken_quoting_stops_the_reading_naming_the_line(tmp_path: Path) -> None:
    """Found in review: a stray quote opened a cell that swallowed the other 998 rows, read
    as one bad row, and replay exited 0 having seen 2 of 1,000 rows. Rows that no longer
    line up, or a quote left open at the end, stop the reading where the row began."""
    from monitor.config.spec import FieldMap
    from monitor.ingest.file import UnreadableInput, read_csv

    (tmp_path / "m.yaml").write_text(BASE)
    mapping = load_csv_mapping(tmp_path / "m.yaml")
    body = "".join(f"{i},{i},1,a\n" for i in range(5, 1000))
    for text, message in [
        ('id,t,p,race\n1,1,1,a\n2,2,"0,b\n4,4,1,a"\n' + body, "line 3: a row of 3 fields over"),
        ('id,t,p,race\n1,1,1,a\n2,2,0,"b\n' + body, "from line 3: unexpected end of data"),
    ]:
        (tmp_path / "d.csv").write_text(text)
        with pytest.raises(UnreadableInput, match=message):
            read_csv(tmp_path / "d.csv", mapping, FieldMap(), dead=[])


def test_lines_ending_in_a_lone_carriage_return_are_rows(tmp_path: Path) -> None:
    """Found in review: a file with old Mac line ends (CR only) was refused by the byte
    reader; rows end at CR, LF or CRLF, as the csv module's newline="" reads them."""
    _write(tmp_path, BASE, "id,t,p,race\r1,1,1,a\r2,2,0,b\r")
    assert [e["attributes"]["race"] for e in _read(tmp_path)] == ["a", "b"]


def test_rows_merged_by_a_stray_quote_stop_the_reading(tmp_path: Path) -> None:
    """Found in review: a quote opened in one row's race cell and closed in a later row's
    made one row of the lines between (the id of one case, the group and outcome of
    another), read as a decision without a word. A line break in a cell the mapping reads
    stops the reading; in a column it does not read (a free-text note) it is text."""
    from monitor.config.spec import FieldMap
    from monitor.ingest.file import UnreadableInput, read_csv

    (tmp_path / "m.yaml").write_text(BASE)
    mapping = load_csv_mapping(tmp_path / "m.yaml")
    (tmp_path / "d.csv").write_text('id,t,p,race\n1,1,1,"a\n2,2,0,b\n3,3,1,c"\n4,4,0,d\n')
    with pytest.raises(UnreadableInput, match="line 2: a line break inside column 'race'"):
        read_csv(tmp_path / "d.csv", mapping, FieldMap(), dead=[])
    (tmp_path / "d.csv").write_text('id,t,p,race,note\n1,1,1,a,"two\nlines"\n2,2,0,b,x\n')
    preds, _, _ = read_csv(tmp_path / "d.csv", mapping, FieldMap(), dead=[])
    assert [r.offset for r in preds] == [2, 4]


def test_a_cell_of_many_line_breaks_costs_memory_by_its_bytes(tmp_path: Path) -> None:
    """Found in review: every line of a row was kept as its own tuple: a 3.8 MiB cell of 4 M
    line breaks took 749 MiB. The row's bytes are kept once."""
    import tracemalloc

    from monitor.config.spec import FieldMap
    from monitor.ingest.file import read_csv

    (tmp_path / "m.yaml").write_text(BASE)
    mapping = load_csv_mapping(tmp_path / "m.yaml")
    (tmp_path / "d.csv").write_bytes(b'id,t,p,race,note\n1,1,1,a,"' + b"\n" * 1_000_000 + b'"\n')
    tracemalloc.start()
    preds, _, _ = read_csv(tmp_path / "d.csv", mapping, FieldMap(), dead=[])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(preds) == 1
    print(f"peak {peak / 2**20:.1f} MiB for a 1 MB cell")
    assert peak < 40 * 2**20  # it was ~190 MiB for this cell


def test_a_mapped_column_twice_in_the_header_is_named(tmp_path: Path) -> None:
    """Found in review: with two ``race`` columns the last was read, silently."""
    _write(tmp_path, BASE, "id,t,p,race,race\n1,1,1,a,b\n")
    with pytest.raises(ConfigError, match=r"attributes\.race: column 'race' is in the header"):
        _read(tmp_path)


def test_an_empty_outcome_cell_is_an_unlabelled_decision_not_a_dead_letter(
    tmp_path: Path,
) -> None:
    """Found by a review: a row whose outcome is not known yet (empty label cell, normal in a
    delayed-label extract) made a label event without a label, dead-lettered as
    missing_label, and ``gate`` exited 2. It is a prediction without a label, as in JSONL; a
    cell that holds something unreadable is still a dead letter."""
    from monitor.config.spec import FieldMap
    from monitor.ingest.file import read_csv

    _write(tmp_path, "id: id\ntimestamp: t\nprediction: p\nlabel: y\nattributes: {g: g}\n",
           "id,t,p,g,y\n1,1,1,a,1\n2,2,0,a,\n3,3,1,b,  \n4,4,0,b,maybe\n")  # fmt: skip
    m = load_csv_mapping(tmp_path / "m.yaml")
    preds, labels, _ = read_csv(tmp_path / "d.csv", m, FieldMap())
    assert len(preds) == 4
    assert [r.value["prediction_id"] for r in labels] == ["1", "4"]  # type: ignore[index]


def test_a_label_time_made_from_label_delay_is_never_in_the_future(tmp_path: Path) -> None:
    """Found by a review: recent validation data with ``label_delay: 30d`` made every label's
    time a month ahead of the clock; all were dead-lettered as timestamp_in_future and the
    gate exited 2. The made-up time is at most the latest the monitor accepts (the clock plus
    max_future) and never before its prediction; clamped to the bare clock (a later review),
    data dated ahead, as the demo's with max_future 365d, lost its label_delay."""
    from monitor.config.spec import FieldMap
    from monitor.ingest.file import read_csv

    _write(tmp_path, "id: id\ntimestamp: t\nprediction: p\nlabel: y\nlabel_delay: 30d\n"
           "attributes: {g: g}\n", "id,t,p,g,y\n1,1000,1,a,1\n2,5000000,0,a,0\n")  # fmt: skip
    m = load_csv_mapping(tmp_path / "m.yaml")
    _, labels, _ = read_csv(tmp_path / "d.csv", m, FieldMap(), latest=3_000_000.0)
    assert [r.value["timestamp"] for r in labels] == [1000 + 30 * 86400, 5_000_000]  # type: ignore[index]
    _, labels, _ = read_csv(tmp_path / "d.csv", m, FieldMap(), latest=1e10)  # all accepted
    got = [r.value["timestamp"] for r in labels]  # type: ignore[index]
    assert got == [1000 + 30 * 86400, 5_000_000 + 30 * 86400]


def test_a_number_with_underscores_is_no_number_in_a_csv(tmp_path: Path) -> None:
    """Found by a review: cells were parsed with Python's int/float, which read ``0_1`` as 1
    and ``1_0`` as 10: an outcome cell ``0_1`` became a positive label, a ``where`` on 10 kept
    ``1_0``. They are text, which the decoder refuses as a label."""
    from monitor.config.spec import FieldMap
    from monitor.ingest.file import read_csv

    _write(tmp_path, "id: id\ntimestamp: t\nprediction: p\nlabel: y\nattributes: {g: g}\n"
           "where: [{column: k, op: eq, value: 10}]\n",
           "id,t,p,g,y,k\n1,1,1,a,0_1,10\n2,2,0,a,1,1_0\n")  # fmt: skip
    m = load_csv_mapping(tmp_path / "m.yaml")
    preds, labels, skipped = read_csv(tmp_path / "d.csv", m, FieldMap())
    assert [r.value["prediction_id"] for r in preds] == ["1"] and skipped == 1  # type: ignore[index]
    assert [r.value["label"] for r in labels] == ["0_1"]  # type: ignore[index]


def test_a_timestamp_with_underscores_is_no_time() -> None:
    """Found by a review: ``1_600_000_000`` was read as a time by Python's float."""
    from monitor.ingest.events import Invalid
    from monitor.ingest.fields import parse_timestamp

    assert parse_timestamp("1600000000") == 1.6e9
    with pytest.raises(Invalid):
        parse_timestamp("1_600_000_000")
