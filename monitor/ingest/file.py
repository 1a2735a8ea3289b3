"""File sources for ``replay``: JSONL (the Kafka message format, one event per line) and CSV.

A CSV row holds a whole case (prediction and, often, its outcome), as in audit extracts such as
ProPublica's COMPAS table. A small mapping file says which column is which and which rows to
keep; each kept row becomes a prediction event and, when a label column is mapped, a label
event ``label_delay`` later (or at a label-time column). Rows are turned into the same raw
records Kafka would deliver, so replay exercises exactly the streaming decode path.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from msgspec import Meta

from monitor.config.decode import ConfigError, Doc, convert
from monitor.config.durations import Duration, seconds
from monitor.config.spec import FieldMap
from monitor.ingest.csv_rows import BOM, BrokenQuoting, CsvRows, printable
from monitor.ingest.events import DeadLetter, Invalid, RawRecord, Reason
from monitor.ingest.fields import parse_timestamp


def read_jsonl(path: str | Path, *, topic: str = "") -> Iterator[RawRecord]:
    """One raw record per non-blank line; ``offset`` is the 1-based line number. A UTF-8 byte
    order mark before the first line (editors on Windows write one) is not part of it."""
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if lineno == 1 and line.startswith(BOM):
                line = line[len(BOM) :]
            if line.strip():
                yield RawRecord(value=line.rstrip(b"\r\n"), topic=topic or str(path), offset=lineno)


@dataclass(frozen=True)
class RowFilter:
    column: str
    op: str
    value: Any

    def keep(self, row: Mapping[str, str]) -> bool:
        cell = row[self.column]  # in the header: read_csv checked it (_check_header)
        v = self.value
        if self.op in ("in", "not_in"):
            hit = any(_eq(cell, x) for x in v)
            return hit if self.op == "in" else not hit
        if self.op == "eq":
            return _eq(cell, v)
        if self.op == "ne":
            return not _eq(cell, v)
        x = _float(cell)
        if x is None:
            return False
        if self.op == "between":
            return float(v[0]) <= x <= float(v[1])
        bound = float(v)
        return {"lt": x < bound, "le": x <= bound, "gt": x > bound, "ge": x >= bound}[self.op]


@dataclass(frozen=True)
class CsvMapping:
    model: str | None
    id: str
    timestamp: str
    prediction: str | None
    score: str | None
    score_range: tuple[float, float] | None  # the score column's [low, high] → [0, 1]
    attributes: Mapping[str, str]
    label: str | None
    label_timestamp: str | None
    label_delay: int
    where: tuple[RowFilter, ...]


Column = Annotated[str, Meta(min_length=1)]
Op = Literal["eq", "ne", "in", "not_in", "lt", "le", "gt", "ge", "between"]
OPS: tuple[str, ...] = get_args(Op)


class FilterDoc(Doc, frozen=True):
    """A row filter of the CSV mapping: ``{column, op, value}``."""

    column: Column
    op: Op = "eq"
    value: Any = None


class CsvMappingDoc(Doc, frozen=True):
    """The CSV mapping file of ``replay --csv``: which column is which, which rows to keep."""

    id: Column
    timestamp: Column
    attributes: dict[str, str]
    model: str | None = None
    prediction: Column | None = None
    score: Column | None = None
    # the score column's [low, high], mapped linearly onto [0, 1] (COMPAS deciles 1..10 with
    # [0.5, 10.5] land on the centres of ten score bins)
    score_range: list[float] | None = None
    label: Column | None = None
    label_timestamp: Column | None = None
    label_delay: Duration = 0
    where: list[FilterDoc] | None = None


def load_csv_mapping(path: str | Path) -> CsvMapping:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read CSV mapping {path}: {exc}") from None
    doc = convert(data, CsvMappingDoc)
    if not doc.attributes:
        raise ConfigError("attributes", "map each protected attribute to a CSV column")
    filters = []
    for i, f in enumerate(doc.where or ()):
        if f.op == "between" and (not isinstance(f.value, list) or len(f.value) != 2):
            raise ConfigError(f"where[{i}].value", "between needs [low, high]")
        if f.op in ("in", "not_in") and not isinstance(f.value, list):
            raise ConfigError(f"where[{i}].value", f"{f.op} needs a list")
        numbers = f.value if f.op == "between" else [f.value] if f.op in BOUNDS else []
        if not all(_number(v) for v in numbers):
            raise ConfigError(f"where[{i}].value", f"{f.op} needs numbers, not {f.value!r}")
        filters.append(RowFilter(f.column, f.op, f.value))
    if doc.prediction is None and doc.score is None:
        raise ConfigError("prediction", "map a prediction column or a score column")
    score_range = None
    if doc.score_range is not None:
        lo_hi = [float(v) for v in doc.score_range]
        if len(lo_hi) != 2 or not all(map(math.isfinite, lo_hi)) or lo_hi[1] <= lo_hi[0]:
            raise ConfigError("score_range", "needs [low, high] with finite low < high")
        score_range = (lo_hi[0], lo_hi[1])
    return CsvMapping(
        model=doc.model,
        id=doc.id,
        timestamp=doc.timestamp,
        prediction=doc.prediction,
        score=doc.score,
        score_range=score_range,
        attributes=dict(doc.attributes),
        label=doc.label,
        label_timestamp=doc.label_timestamp,
        label_delay=seconds(doc.label_delay, "label_delay"),
        where=tuple(filters),
    )


class UnreadableInput(ValueError):
    """A file that cannot be read as what it claims to be (broken CSV quoting)."""


def read_csv(
    path: str | Path,
    mapping: CsvMapping,
    fields: FieldMap,
    *,
    numeric: frozenset[str] = frozenset(),
    dead: list[DeadLetter] | None = None,
    latest: float | None = None,
) -> tuple[list[RawRecord], list[RawRecord], int]:
    """Prediction records, label records, and the number of rows filtered out.

    A row that cannot be read as its header says (more or fewer fields, bytes that are not
    UTF-8) is dead-lettered into ``dead`` (``bad_row``, its line and bytes) and the reading
    goes on: one damaged row of an audit extract must not hide the rest. Without ``dead`` it
    stops the reading (:class:`UnreadableInput`), naming the line.

    An attribute's cell stays text (``01`` is not ``1``, ``07`` and ``7`` are two groups, as
    in the JSONL the same values would be), unless the attribute is ``numeric`` (binned):
    then a number is parsed, as the bins need one.

    A label time made from ``label_delay`` is at most ``latest`` (the latest event time the
    monitor accepts: the clock plus ``max_future``), and never before its prediction: recent
    validation data had every label dead-lettered as ``timestamp_in_future`` and the gate
    exited 2 (found by a review). Only a time past ``latest`` is moved."""
    latest = math.inf if latest is None else latest
    preds: list[RawRecord] = []
    labels: list[RawRecord] = []
    skipped = 0
    topic = str(path)
    # a long cell is the decoder's to judge (limits.*), not a reason to stop reading
    csv.field_size_limit(max(csv.field_size_limit(), 64 << 20))
    lineno = 1
    rows: CsvRows | None = None
    try:
        with open(path, "rb") as fh:
            rows = CsvRows(fh)
            _check_header(path, rows.header, mapping)
            for got in rows.rows(_columns(mapping)):
                row, lineno = got.cells, got.line
                if got.damage is not None:
                    if dead is None:
                        raise UnreadableInput(f"{path} line {lineno}: {got.damage}")
                    record = RawRecord(value=got.raw, topic=topic, offset=lineno)
                    dead.append(DeadLetter(Reason.BAD_ROW, got.damage, record))
                    continue
                if not all(f.keep(row) for f in mapping.where):
                    skipped += 1
                    continue
                ev: dict[str, Any] = {}
                _put(ev, fields.prediction_id, row.get(mapping.id))
                _put(ev, fields.timestamp, _cell(row.get(mapping.timestamp)))
                if mapping.model is not None:
                    _put(ev, fields.model_id, mapping.model)
                if mapping.prediction is not None:
                    _put(ev, fields.prediction, _cell(row.get(mapping.prediction)))
                if mapping.score is not None:
                    _put(ev, fields.score, _scaled(_cell(row.get(mapping.score)), mapping))
                for attr, col in mapping.attributes.items():
                    cell = row.get(col)
                    value = _cell(cell) if attr in numeric else cell or None
                    _put(ev, (*fields.attributes, attr), value)
                preds.append(RawRecord(value=ev, topic=topic, offset=lineno))
                if mapping.label is None or not (row.get(mapping.label) or "").strip():
                    continue  # no outcome yet (an empty cell): unlabelled, as without an event
                lab: dict[str, Any] = {}
                _put(lab, fields.prediction_id, row.get(mapping.id))
                _put(lab, fields.label, _cell(row.get(mapping.label)))
                if mapping.label_timestamp is not None:
                    _put(lab, fields.timestamp, _cell(row.get(mapping.label_timestamp)))
                else:
                    try:
                        t = parse_timestamp(_cell(row.get(mapping.timestamp)))
                        _put(lab, fields.timestamp, max(t, min(t + mapping.label_delay, latest)))
                    except Invalid:
                        _put(lab, fields.timestamp, _cell(row.get(mapping.timestamp)))
                labels.append(RawRecord(value=lab, topic=topic, offset=lineno))
    except csv.Error as exc:
        line = rows.line if rows is not None else lineno
        raise UnreadableInput(f"{path}: cannot read the CSV from line {line}: {exc}") from None
    except BrokenQuoting as exc:
        raise UnreadableInput(f"{path} {exc}") from None
    return preds, labels, skipped


def _columns(mapping: CsvMapping) -> list[str]:
    """The columns a mapping reads."""
    named = [mapping.id, mapping.timestamp, mapping.prediction, mapping.score, mapping.label,
             mapping.label_timestamp, *mapping.attributes.values(),
             *(f.column for f in mapping.where)]  # fmt: skip
    return [c for c in named if c is not None]


def _check_header(path: str | Path, header: Sequence[str], mapping: CsvMapping) -> None:
    """Every column the mapping names is in the file's header, else a ConfigError naming the
    mapping's key: a misspelt column read as empty put every row in ``__missing__`` (and a
    gate judged nothing, and passed)."""
    named = {"id": mapping.id, "timestamp": mapping.timestamp, "prediction": mapping.prediction,
             "score": mapping.score, "label": mapping.label,
             "label_timestamp": mapping.label_timestamp}  # fmt: skip
    named |= {f"attributes.{a}": col for a, col in mapping.attributes.items()}
    named |= {f"where[{i}].column": f.column for i, f in enumerate(mapping.where)}
    have = set(header)
    for key, col in named.items():
        if col is not None and header.count(col) > 1:  # DictReader kept the last one, silently
            raise ConfigError(key, f"column {col!r} is in the header of {path} more than once")
        if col is not None and col not in have:
            shown = ", ".join(map(printable, header[:20])) + (", …" if len(header) > 20 else "")
            raise ConfigError(key, f"no column {col!r} in {path} (its columns: {shown})")


def _put(event: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    cur = event
    for part in path[:-1]:
        cur = cur.setdefault(part, {})
    cur[path[-1]] = value


def _float(text: str) -> float | None:
    if "_" in text:  # Python reads 1_0 as 10, a CSV means no number (found by a review)
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _cell(text: str | None) -> Any:
    """CSV text to a JSON-like value: empty → None, integers and floats parsed (as a CSV writes
    them: ``0_1`` is text, not Python's 1), else text."""
    if text is None or text == "":
        return None
    if "_" in text:
        return text
    try:
        return int(text)
    except ValueError:
        pass
    f = _float(text)
    return text if f is None else f


def _scaled(x: Any, mapping: CsvMapping) -> Any:
    """A score cell onto [0, 1] by ``score_range`` (anything but a number is left for the
    decoder to reject with its reason)."""
    if mapping.score_range is None or isinstance(x, bool) or not isinstance(x, int | float):
        return x
    lo, hi = mapping.score_range
    try:
        return (x - lo) / (hi - lo)
    except OverflowError:  # an int past a float's range: the decoder refuses it (bad_score)
        return x


BOUNDS = ("lt", "le", "gt", "ge")


def _number(v: Any) -> bool:
    """A finite number a bound can be (a 400-digit int is past a float's range)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return abs(v) < 2**1023
    return isinstance(v, float) and math.isfinite(v)


def _eq(cell: str, value: Any) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        x = _float(cell)
        return x is not None and x == float(value)
    return cell == str(value)
