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


def id_keys(ids: Sequence[str]) -> npt.NDArray[np.uint64]:
    """Keys of ``ids`` (non-empty strings), vectorized over the batch.

    The code points come from one UTF-32 encoding of the joined ids (a few C calls), read
    column by column: character ``c`` of every id long enough to have one.
    """
    n = len(ids)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    joined = "".join(ids)
    flat = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    size = np.fromiter(map(len, ids), dtype=np.int64, count=n)  # characters in `flat`
    starts = np.cumsum(size) - size
    # hashed characters: trailing NULs are not part of an id (checkpoints hold keys made from
    # numpy's NUL-padded strings, which drop them)
    lengths = size
    if "\0" in joined:
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
        h = (h ^ lengths.astype(np.uint64)) * FNV_PRIME
        return _splitmix(h)


def id_key(value: str) -> int:
    """Key of one id (same function as :func:`id_keys`)."""
    return int(id_keys([value])[0])
