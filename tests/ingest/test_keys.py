"""Prediction-id keys: equal to a plain-Python FNV-1a (code points) + SplitMix64 reference."""

from __future__ import annotations

import random
import string

import numpy as np

from monitor.ingest.keys import RowIds, id_key, id_keys, row_keys

M64 = 2**64 - 1


def reference(text: str) -> int:
    h = 0xCBF29CE484222325
    for ch in text:
        h = ((h ^ ord(ch)) * 0x100000001B3) & M64
    h = ((h ^ len(text)) * 0x100000001B3) & M64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & M64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & M64
    return h ^ (h >> 31)


def test_matches_reference_on_random_ids() -> None:
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + "-_ éß€"
    ids = ["".join(rng.choices(alphabet, k=rng.randint(1, 60))) for _ in range(500)]
    assert [int(k) for k in id_keys(ids)] == [reference(s) for s in ids]


def test_matches_reference_when_ids_share_a_length() -> None:
    """Characters every id has are mixed unmasked, the rest masked by length."""
    rng = random.Random(1)
    same = ["".join(rng.choices(string.hexdigits, k=32)) for _ in range(300)]
    assert [int(k) for k in id_keys(same)] == [reference(s) for s in same]
    mixed = [*same[:50], "x", "é" * 70, "€"]
    assert [int(k) for k in id_keys(mixed)] == [reference(s) for s in mixed]


def test_nul_characters() -> None:
    """Embedded NULs are part of an id; trailing NULs are not (numpy strings drop them, and
    keys stored in checkpoints were made that way)."""
    assert [int(k) for k in id_keys(["a\0b", "\0z", "q"])] == [
        reference("a\0b"),
        reference("\0z"),
        reference("q"),
    ]
    assert id_keys(["a\0", "bb"])[0] == id_keys(["a"])[0]
    rng = random.Random(2)
    ids = ["".join(rng.choices("ab\0é", k=rng.randint(1, 9))) for _ in range(300)]
    assert [int(k) for k in id_keys(ids)] == [reference(s.rstrip("\0")) for s in ids]


def test_lone_surrogate_is_a_code_point_like_any_other() -> None:
    """JSON may carry "\\ud800" alone; the id hashes by its code points, like the reference."""
    ids = ["x\ud800y", "ok"]
    assert [int(k) for k in id_keys(ids)] == [reference(s) for s in ids]


def test_batch_independent_and_distinct() -> None:
    ids = [f"id-{i}" for i in range(200_000)]
    keys = id_keys(ids)
    assert len(np.unique(keys)) == len(ids)
    assert int(keys[12345]) == id_key("id-12345")
    # the length is part of the hash: a prefix does not collide with its extension
    assert id_key("a") != id_key("aa") and id_key("") != id_key("a")
    # documented limit: numpy strings drop trailing NUL characters, so "a\0" is the id "a"
    assert id_key("a\0") == id_key("a")


def test_row_keys_are_the_keys_of_the_row_ids_never_built() -> None:
    """A call of n > 1 rows names row r ``<id>/<r>`` (one row: the id); the keys are computed
    from the id's hash state and the row's digits, and must equal the reference of the text,
    across digit counts (0, 9 → 10, 99 → 100, ...) and ids with NULs inside."""
    rng = random.Random(3)
    calls, rows = [], []
    for _ in range(200):
        calls.append("".join(rng.choices("ab\0é/-9", k=rng.randint(1, 12))).rstrip("\0") or "x")
        rows.append(rng.choice([1, 1, 2, 9, 10, 11, 100, 101, rng.randint(1, 1500)]))
    texts = [
        c if n == 1 else f"{c}/{r}" for c, n in zip(calls, rows, strict=True) for r in range(n)
    ]
    assert [int(k) for k in row_keys(calls, np.array(rows))] == [reference(t) for t in texts]
    ids = RowIds(calls, rows)
    assert len(ids) == len(texts) and ids.longest() == max(map(len, texts))
    both = RowIds.join([RowIds(calls[:5], rows[:5]), RowIds(calls[5:], rows[5:])])
    assert both.keys().tolist() == ids.keys().tolist()
    assert RowIds([], []).keys().tolist() == [] and RowIds([], []).longest() == 0
