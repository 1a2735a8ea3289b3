"""Boundary partials as bytes on the partials topic: a JSON header, then the int64 arrays
deflated.

Why deflate: the arrays are exact integers, mostly small or zero (score bins of groups with few
events, estimate cells without scores), so most of their bytes are zero and zlib at level 1
shrinks them several-fold for little CPU. Why checked so closely: the reader
is the replica that pages; a damaged or foreign record must be refused with its reason (and
counted), never crash it or be summed into a page (:class:`PartialError`).
"""

from __future__ import annotations

import struct
import zlib

import msgspec
import numpy as np

from monitor.alerts.partials import BoundaryPartial

VERSION = 1
MAX_CELLS = 50_000_000  # a sanity bound on one array's size (groups × cells × windows)
_LEN = struct.Struct(">I")


class PartialError(ValueError):
    """A record of the partials topic that is not a partial this monitor can read."""


class _Header(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    v: int
    model: str
    partition: int
    boundary: int
    first: int
    set_of: list[int]
    labels: list[str]
    windows: int | None = None  # how many windows (None: a marker)
    cells: int = 0
    cohorts: list[tuple[int, int]] = []
    held: list[bool] = []


def encode(p: BoundaryPartial) -> bytes:
    if p.marker:
        head = _Header(VERSION, p.model, p.partition, p.boundary, p.first, [], [])
        return _with_header(head, b"")
    assert p.windows is not None and p.bucket is not None and p.arrivals is not None
    head = _Header(
        VERSION,
        p.model,
        p.partition,
        p.boundary,
        p.first,
        list(p.set_of),
        list(p.labels),
        windows=int(p.windows.shape[0]),
        cells=int(p.windows.shape[2]),
        cohorts=list(p.cohorts),
        held=list(p.cohort_held),
    )
    arrays = [p.windows, p.bucket, p.arrivals]
    if p.cohort_counts is not None:
        arrays.append(p.cohort_counts)
    raw = b"".join(a.astype("<i8").tobytes() for a in arrays)
    return _with_header(head, zlib.compress(raw, 1))


def _with_header(head: _Header, body: bytes) -> bytes:
    raw = msgspec.json.encode(head)
    return _LEN.pack(len(raw)) + raw + body


def decode(data: bytes | None) -> BoundaryPartial:
    """The partial in ``data``; :class:`PartialError` says why it is not one."""
    if not data or len(data) < _LEN.size:
        raise PartialError("empty record")
    (n,) = _LEN.unpack_from(data)
    if n > len(data) - _LEN.size:
        raise PartialError("header longer than the record")
    try:
        h = msgspec.json.decode(data[_LEN.size : _LEN.size + n], type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PartialError(f"bad header: {exc}") from None
    if h.v != VERSION:
        raise PartialError(f"version {h.v}, this monitor reads {VERSION}")
    if h.partition < 0 or h.boundary < h.first:
        raise PartialError("partition or boundary out of range")
    body = memoryview(data)[_LEN.size + n :]
    if h.windows is None:
        if len(body):
            raise PartialError("a marker with arrays")
        return BoundaryPartial(h.model, h.partition, h.boundary, h.first, (), ())
    g, c = len(h.labels), h.cells
    if len(h.set_of) != g or len(h.held) != len(h.cohorts) or h.windows < 0 or c < 0:
        raise PartialError("header fields disagree")
    shapes = [(h.windows, g, c), (g, c), (g, c)]
    if h.cohorts:
        shapes.append((len(h.cohorts), g, c))
    sizes = [int(np.prod(shape)) for shape in shapes]
    if sum(sizes) > MAX_CELLS:
        raise PartialError(f"arrays of {sum(sizes)} cells")
    expect = 8 * sum(sizes)
    try:  # never inflate past what the header announces (a deflate bomb)
        z = zlib.decompressobj()
        raw = z.decompress(body, expect + 1)
        if len(raw) != expect or not z.eof or z.unused_data:
            raise PartialError(f"arrays of {len(raw)} bytes where the header says {expect}")
    except zlib.error as exc:
        raise PartialError(f"arrays not deflated: {exc}") from None
    flat = np.frombuffer(raw, "<i8").astype(np.int64)
    arrays, at = [], 0
    for shape, size in zip(shapes, sizes, strict=True):
        arrays.append(flat[at : at + size].reshape(shape))
        at += size
    return BoundaryPartial(
        h.model,
        h.partition,
        h.boundary,
        h.first,
        tuple(h.set_of),
        tuple(h.labels),
        windows=arrays[0],
        bucket=arrays[1],
        arrivals=arrays[2],
        cohorts=tuple((int(a), int(b)) for a, b in h.cohorts),
        cohort_counts=arrays[3] if h.cohorts else None,
        cohort_held=tuple(h.held),
    )
