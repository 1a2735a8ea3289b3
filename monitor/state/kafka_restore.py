"""One pass over the state topic for every entity restored together (``kafka_store.py``): a
replica assigned several partitions at once reads the topic once, not once per partition.

:class:`Gather` is handed every record of a pass in offset order. For every entity it keeps
the newest head and the highest chunk generation seen (a new generation must be above every
writer's); for the entities wanted, the newest value of each of their chunk keys (two slots: at
most two generations each, whatever the topic holds of other partitions). When the pass ends,
:meth:`Gather.finish` keeps of each wanted entity only the chunks its newest head names (the
current generation and the previous one it falls back on) and whether it had chunks at all.
:func:`choose` then takes the head's newest intact generation: every chunk of its slot carries
it and the payload's sha256 matches, so a torn generation is never restored and the previous
one is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from monitor.state.kafka_layout import CHUNK, MAGIC, VERSION, Commit, assemble, chunk_key


def entity_of(key: str) -> tuple[str, bool]:
    """The entity a key belongs to, and whether the key is its head."""
    if key.endswith("/head"):
        return key[: -len("/head")], True
    entity, sep, _ = key.rpartition("/s")
    return (entity if sep else key), False


@dataclass
class Gathered:
    """What a pass found of one wanted entity."""

    head: bytes | None
    table: dict[str, bytes]  # chunk key -> newest value, only those the head names
    orphan_chunks: bool = False  # chunks, but no head


@dataclass
class Gather:
    """The visitor of one pass (see the module's docstring)."""

    wanted: frozenset[str] = frozenset()
    heads: dict[str, bytes] = field(default_factory=dict)
    top: dict[str, int] = field(default_factory=dict)
    tables: dict[str, dict[str, bytes]] = field(default_factory=dict)
    records: int = 0  # records visited

    def __post_init__(self) -> None:
        self.tables = {e: {} for e in self.wanted}

    def visit(self, key: str, value: bytes | None) -> None:
        self.records += 1
        entity, is_head = entity_of(key)
        if is_head:
            if value is None:
                self.heads.pop(entity, None)
            else:
                self.heads[entity] = value
            return
        if value is not None and len(value) >= CHUNK.size:
            magic, gen, _, _ = CHUNK.unpack_from(value)
            if magic == MAGIC:
                self.top[entity] = max(self.top.get(entity, 0), gen)
        table = self.tables.get(entity)
        if table is not None and key != entity:  # a chunk key (``meta/...`` is no entity's)
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value

    def finish(self) -> dict[str, Gathered]:
        """Per wanted entity, its head and the chunks that head names (the rest dropped)."""
        out: dict[str, Gathered] = {}
        for entity in self.wanted:
            table, head = self.tables.pop(entity), self.heads.get(entity)
            if head is None:
                out[entity] = Gathered(None, {}, orphan_chunks=bool(table))
                continue
            named = _named(entity, head)
            if named is not None:
                table = {k: v for k, v in table.items() if k in named}
            out[entity] = Gathered(head, table)
        return out


def _named(entity: str, raw: bytes) -> set[str] | None:
    """The chunk keys of the generations a head names; None if it cannot be read (then every
    chunk is kept and :func:`choose` reports the head)."""
    try:
        head = json.loads(raw)
        return {
            chunk_key(entity, int(c["generation"]), i)
            for c in (head["current"], head.get("previous"))
            if c is not None
            for i in range(int(c["chunks"]))
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def commits(raw: bytes) -> list[Commit]:
    """A head's commits, newest first; raises ValueError, KeyError or TypeError if damaged."""
    head: Any = json.loads(raw)
    if head.get("version") != VERSION:
        raise ValueError(f"version {head.get('version')!r}, this monitor reads {VERSION}")
    return [c for c in (head["current"], head.get("previous")) if c is not None]


def choose(
    entity: str, found: list[Commit], table: dict[str, bytes]
) -> tuple[Commit, bytes, list[str]] | list[str]:
    """The newest intact commit of ``found`` with its payload and why each newer one is not
    intact; or, if none is, the reasons alone."""
    reasons: list[str] = []
    for c in found:
        got = assemble(entity, c, table)
        if isinstance(got, bytes):
            return c, got, reasons
        reasons.append(f"generation {c['generation']} is not intact: {got}")
    return reasons
