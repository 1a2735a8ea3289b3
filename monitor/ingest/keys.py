"""64-bit keys of prediction ids, computed for a whole batch at once with numpy.

Why a key and not the id text: the join stores millions of pending predictions; 8 bytes per id
instead of a Python string keeps it compact (see ``join.py``).

Hash: FNV-1a over the Unicode code points (Fowler–Noll–Vo, 64-bit, one step per code point,
so a whole batch is hashed column by column over its UTF-32 code points), length folded in,
then the SplitMix64 finalizer (Steele, Lea & Flood 2014) for avalanche. It is stable across
processes and machines (checkpoints depend on it), unlike Python's randomized ``hash``. Two distinct ids
collide with probability about n²/2⁶⁵ (3·10⁻⁸ for a million pending ids); a collision is counted
as a duplicate. Trailing NUL characters of an id are ignored (the first version used numpy's
fixed-width strings, which drop them, and checkpoints hold those keys). Not a cryptographic hash: ids come from the monitored model, not an adversary.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


def _splitmix(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def _fnv(
    ids: Sequence[str], *, strip: bool
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """FNV-1a states over the ids' code points, and the hashed lengths (trailing NULs left out
    when ``strip``). The code points come from one UTF-32 encoding of the joined ids (a few C
    calls), read column by column: character ``c`` of every id long enough to have one."""
    n = len(ids)
    joined = "".join(ids)
    flat = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    size = np.fromiter(map(len, ids), dtype=np.int64, count=n)  # characters in `flat`
    starts = np.cumsum(size) - size
    lengths = size
    if strip and "\0" in joined:
        lengths = np.fromiter((len(i.rstrip("\0")) for i in ids), dtype=np.int64, count=n)
    shortest, longest = int(lengths.min()), int(lengths.max())
    h = np.full(n, FNV_OFFSET, dtype=np.uint64)
    last = max(len(flat) - 1, 0)
    # ids of one size (uuids, zero-padded numbers) are a plain matrix: no gathers needed
    same = flat.reshape(n, int(size[0])).T if size.min() == size.max() else None
    with np.errstate(over="ignore"):
        for col in range(longest):
            if col < shortest:  # every id has this character: no masking
                chars = same[col] if same is not None else flat[starts + col]
                np.bitwise_xor(h, chars, out=h)
                np.multiply(h, FNV_PRIME, out=h)
            else:
                chars = flat[np.minimum(starts + col, last)]
                np.copyto(h, (h ^ chars) * FNV_PRIME, where=col < lengths)
    return h, lengths


def _finish(h: npt.NDArray[np.uint64], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    with np.errstate(over="ignore"):
        return _splitmix((h ^ lengths.astype(np.uint64)) * FNV_PRIME)


def id_keys(ids: Sequence[str]) -> npt.NDArray[np.uint64]:
    """Keys of ``ids`` (non-empty strings), vectorized over the batch. Trailing NULs are not
    part of an id (checkpoints hold keys made from numpy's NUL-padded strings, which drop
    them)."""
    if not ids:
        return np.zeros(0, dtype=np.uint64)
    return _finish(*_fnv(ids, strip=True))


def digits(n: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Decimal digits of each non-negative ``n`` (one for 0)."""
    k = np.ones(len(n), dtype=np.int64)
    power = 10
    while len(n) and power <= int(n.max()):
        k += n >= power
        power *= 10
    return k


def row_keys(calls: Sequence[str], rows: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Keys of every row of every call: row ``r`` of a call of several rows is
    ``<call>/<r>``, a call of one row is its id; equal to :func:`id_keys` of those texts, which
    are never built (a megabyte call of a million rows would make a million copies of its id).

    FNV-1a reads the text left to right, so each call's state after ``<call>/`` is computed
    once and continued over each row's digits, column by column over all rows.
    """
    rows = np.asarray(rows, dtype=np.int64)
    total = int(rows.sum())
    out = np.empty(total, dtype=np.uint64)
    starts = np.cumsum(rows) - rows
    single = rows == 1
    if single.any():
        out[starts[single]] = id_keys([c for c, s in zip(calls, single.tolist(), strict=True) if s])
    several = rows > 1
    if not several.any():
        return out
    n = rows[several]
    prefixes = [f"{c}/" for c, s in zip(calls, several.tolist(), strict=True) if s]
    h, lengths = _fnv(prefixes, strip=False)  # ends in "/": no trailing NUL to leave out
    first = np.cumsum(n) - n
    r = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(first, n)  # row within its call
    h, k = np.repeat(h, n), digits(r)
    with np.errstate(over="ignore"):
        for j in range(int(k.max())):  # the j-th digit from the left, of rows that have one
            has = j < k
            power = 10 ** np.maximum(k - 1 - j, 0)
            char = ((r // power) % 10 + 48).astype(np.uint64)
            np.copyto(h, (h ^ char) * FNV_PRIME, where=has)
    out[np.repeat(starts[several], n) + r] = _finish(h, np.repeat(lengths, n) + k)
    return out


class RowIds:
    """The decision ids of served calls, without their text: call ``calls[i]`` has
    ``rows[i]`` rows (see :func:`row_keys`). The compiled decoder (``native/src/keys.rs``)
    gives the rows' keys and the longest row id instead of the calls' ids (``calls`` empty: what
    reads the ids' text is the careful path's), and only for ids without a NUL."""

    __slots__ = ("_keys", "_longest", "calls", "rows")

    def __init__(
        self,
        calls: list[str],
        rows: Sequence[int] | npt.NDArray[np.int64],
        *,
        keys: npt.NDArray[np.uint64] | None = None,
        longest: int | None = None,
    ) -> None:
        self.calls = calls
        self.rows = np.asarray(rows, dtype=np.int64)
        self._keys, self._longest = keys, longest

    def __len__(self) -> int:
        return int(self.rows.sum())

    def has_nul(self) -> bool:
        """Does an id hold a NUL character (the careful path refuses those)?"""
        return "\0" in "".join(self.calls)

    def longest(self) -> int:
        """Characters of the longest row id (0 without any)."""
        if self._longest is not None:
            return self._longest
        if not self.calls:
            return 0
        size = np.fromiter(map(len, self.calls), dtype=np.int64, count=len(self.calls))
        several = self.rows > 1
        size[several] += 1 + digits(self.rows[several] - 1)
        return int(size.max())

    def keys(self) -> npt.NDArray[np.uint64]:
        return row_keys(self.calls, self.rows) if self._keys is None else self._keys

    @staticmethod
    def join(parts: Sequence[RowIds]) -> RowIds:
        calls = [c for p in parts for c in p.calls]
        rows = np.concatenate([p.rows for p in parts]) if parts else np.zeros(0, np.int64)
        return RowIds(calls, rows)


def id_key(value: str) -> int:
    """Key of one id (same function as :func:`id_keys`)."""
    return int(id_keys([value])[0])
