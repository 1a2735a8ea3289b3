"""The rows of a CSV file as the file holds them: each with its first line and its bytes, and
why it cannot be read as its header says (then it is a dead letter, not the end of the file).

Why not ``csv.DictReader`` over a text file: one byte that is not UTF-8 stopped the whole file
(naming the wrong line), a row whose field count is off was only found after its columns were
shifted, and the raw bytes of a bad row were gone. Here the file is read as bytes, split into
lines as ``newline=""`` does (``\\r\\n``, ``\\n`` or a lone ``\\r``: latin-1 maps every byte to
one character, so the split is exact), and each line is decoded on its own; the csv module
(``strict``) then joins the lines of quoted cells.

What is damage and what is not:

- A row with more or fewer fields than the header: a dead letter, when it is one line. Over
  several lines it means the quoting is broken (a stray ``"`` opened a cell that swallowed the
  lines after it): nothing after it can be trusted, and the reading stops, naming the line.
  So does a line break inside a cell the mapping reads (an id, a time, a group never holds
  one: a stray quote closed by another in the same column made one row of several, the id of
  one and the outcome of another), and a row longer than ``csv.field_size_limit()``.
- Bytes that are not UTF-8 in a column the mapping reads: a dead letter. In a column it does
  not read (a free-text name, a comment), they harm nothing, and the row is kept: dropping it
  would drop the cases of one group more than another's (a Latin-1 name).
- An unclosed quote at the end of the file, or a quote followed by text (``"ab"c``): the
  reading stops (the csv module's ``strict``), naming the line the row began on.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import BinaryIO

BOM = b"\xef\xbb\xbf"
_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a bad byte
_BREAK = re.compile("[\r\n]")


class BrokenQuoting(ValueError):
    """The file cannot be read past here: its rows no longer line up with the header."""


@dataclass(frozen=True, slots=True)
class Row:
    cells: dict[str, str]
    line: int  # the row's first line in the file (1: the header)
    raw: bytes  # its bytes, as the file holds them
    damage: str | None  # why it cannot be read (None: it can)


def printable(text: str) -> str:
    """``text`` with the bytes that were not UTF-8 written as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class CsvRows:
    """The header, then :meth:`rows`; ``line`` is where the row being read began."""

    def __init__(self, fh: BinaryIO) -> None:
        self._text = io.TextIOWrapper(fh, encoding="latin-1", newline="")
        self._first = 0  # the first line of the row being read (0: none yet)
        self._raw = bytearray()  # its bytes
        self._lines_in_row = 0
        self._bad = False
        self._last = 0
        self._reader = csv.reader(self._lines(), strict=True)
        self.header: list[str] = next(self._reader, [])
        self._take()

    @property
    def line(self) -> int:
        """The first line of the row being read (the last line read, between rows)."""
        return self._first or self._last

    def rows(self, used: Collection[str]) -> Iterator[Row]:
        """Every row, with its damage; ``used``: the columns the caller reads."""
        width = len(self.header)
        for cells in self._reader:
            first, lines = self._first, self._lines_in_row
            raw, bad = self._take()
            row = dict(zip(self.header, cells, strict=False))
            damage = None
            if len(cells) != width:
                damage = f"{len(cells)} fields where the header has {width}"
                if lines > 1:
                    raise BrokenQuoting(
                        f"line {first}: a row of {len(cells)} fields over {lines} lines "
                        f"where the header has {width}: a quote opened a cell that swallowed "
                        "the lines after it"
                    )
            elif lines > 1 and (
                hit := next((c for c in used if _BREAK.search(row.get(c) or "")), None)
            ):
                raise BrokenQuoting(
                    f"line {first}: a line break inside column {printable(hit)!r}: a quote "
                    "opened a cell that swallowed the lines after it"
                )
            elif bad:
                hit = next((c for c in used if _NOT_UTF8.search(row.get(c) or "")), None)
                if hit is not None:
                    damage = f"not UTF-8 (column {printable(hit)!r})"
            yield Row(row, first, raw, damage)

    def _lines(self) -> Iterator[str]:
        for n, text in enumerate(self._text, start=1):
            raw = text.encode("latin-1")
            if n == 1:
                raw = raw.removeprefix(BOM)  # a BOM is no column name
            self._last = n
            if not self._first:
                if not raw.strip(b"\r\n"):
                    continue  # a blank line between rows
                self._first = n
            self._raw += raw
            self._lines_in_row += 1
            if len(self._raw) > csv.field_size_limit():
                raise BrokenQuoting(
                    f"line {self._first}: a row longer than {csv.field_size_limit()} bytes"
                )
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError:
                self._bad = True
                yield raw.decode("utf-8", "surrogateescape")

    def _take(self) -> tuple[bytes, bool]:
        raw, bad = bytes(self._raw), self._bad
        self._first, self._raw, self._lines_in_row, self._bad = 0, bytearray(), 0, False
        return raw, bad
