"""The state topic's record layout (``state/kafka_store.py`` reads and writes it).

Keys (the topic keeps the newest value of each):

* ``p/<p>/s<slot>/c<i>``: chunk *i* of partition *p*'s state, ``slot = generation % 2``. A value
  is a 20-byte header (magic, generation, chunk index, chunk count) and at most
  ``checkpoint.state_chunk_bytes`` of the payload: the offsets and save time as JSON, then the
  ``.npz`` blob of ``checkpoint.encode``.
* ``p/<p>/head``: the commit record, JSON: the current generation (chunk count, sha256 and size
  of the payload, offsets, saved_at) and the previous one.
* ``alerts/...``: the alert state (JSON text) the same way; ``meta/opened_at``: a start-up write.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

VERSION = 1
MAGIC = b"FMS1"
CHUNK = struct.Struct(">4sQII")  # magic, generation, index, count
ALERTS = "alerts"

Commit = dict[str, Any]  # generation, chunks, sha256, size, offsets, saved_at


def entity(partition: int) -> str:
    return f"p/{partition}"


def chunk_key(entity: str, generation: int, i: int) -> str:
    return f"{entity}/s{generation % 2}/c{i}"


def head_key(entity: str) -> str:
    return f"{entity}/head"


def assemble(entity: str, c: Commit, table: dict[str, bytes]) -> bytes | str:
    """The commit's payload from the entity's records (key -> newest value), or why it is not
    intact."""
    gen, count = int(c["generation"]), int(c["chunks"])
    parts = []
    for i in range(count):
        raw = table.get(chunk_key(entity, gen, i))
        if raw is None or len(raw) < CHUNK.size:
            return f"chunk {i} of {count} is missing"
        magic, g, idx, n = CHUNK.unpack_from(raw)
        if magic != MAGIC or idx != i or n != count:
            return f"chunk {i} of {count} is not a chunk of this store"
        if g != gen:
            return f"chunk {i} of {count} holds generation {g} (a torn write)"
        parts.append(raw[CHUNK.size :])
    payload = b"".join(parts)
    if hashlib.sha256(payload).hexdigest() != c["sha256"]:
        return "its sha256 does not match"
    return payload
