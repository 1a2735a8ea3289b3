"""A model's calls as a *layout*, compiled into typed msgspec structs for the fast path
(``serving_fast.py``).

A model's calls all look alike: the same tensors in the same order, with the same names,
datatypes and dimensions after the first (the batch). That layout is read from a batch's first
request and response, and compiled into structs whose ``name``, ``datatype`` and trailing
dimensions are ``Literal`` values and whose ``data`` is typed by the datatype (an INT8 is an int
in [-128, 127], a BOOL a bool, a row of a nested ``[n, w]`` tensor a list of ``w``), so msgspec
checks in C what ``oip.py`` checks value by value. A record of another layout fails to decode,
and the batch is learned again or goes to the careful path.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import msgspec

from monitor.ingest.oip import DATATYPES, FLOATS, INTS, MAX_DIMS, MAX_ELEMENTS

# per tensor: name, datatype, dims after the first, and whether the data nest by row
Signature = tuple[tuple[str, str, tuple[int, ...], bool], ...]


class _Meta(msgspec.Struct, frozen=True, gc=False):
    name: str
    shape: list[int] | None = None
    datatype: str | None = None
    data: msgspec.Raw = msgspec.Raw()


class _Halves(msgspec.Struct, frozen=True, gc=False):
    inputs: list[_Meta] | None = None
    outputs: list[_Meta] | None = None


_SAMPLE = msgspec.json.Decoder(_Halves)
_LOOKS = 64  # records read to learn a batch's layout


MAX_TENSORS = 64  # per half, for the fast path (the careful path takes any number)


def signature(tensors: list[_Meta]) -> Signature | None:
    """The layout of one half's tensors, or None when it is nothing to compile (or too much:
    a struct is compiled per tensor, and a request of 15,000 tensors cost 1 s to learn)."""
    if len(tensors) > MAX_TENSORS:
        return None
    sig = []
    for t in tensors:
        if t.datatype not in DATATYPES or t.shape is None or not 1 <= len(t.shape) <= MAX_DIMS:
            return None
        trailing = tuple(t.shape[1:])
        nested = bytes(t.data).lstrip()[1:].lstrip()[:1] == b"["
        if any(d <= 0 for d in trailing) or (nested and len(trailing) != 1):
            return None  # rows of rows of rows: the careful path walks them
        sig.append((t.name, t.datatype, trailing, nested))
    names = [s[0] for s in sig]
    return tuple(sig) if sig and len(set(names)) == len(names) else None


_I64 = (-(2**63), 2**63 - 1)


def _element(datatype: str) -> Any:
    if datatype == "BOOL":
        return bool
    if datatype == "BYTES":
        return str
    if datatype in FLOATS:  # an int stays an int, as the careful path keeps it; a larger one
        # than int64 (msgspec's widest bound) gives the batch to the careful path, which
        # takes it as a float or refuses it (2**1024 and more)
        return Annotated[int, msgspec.Meta(ge=_I64[0], le=_I64[1])] | float
    lo, hi = INTS[datatype]
    # msgspec takes ints past 2**64 and bounds only within int64: UINT64 values from 2**63
    # leave the batch to the careful path too, which checks the datatype's whole range
    return Annotated[int, msgspec.Meta(ge=max(lo, _I64[0]), le=min(hi, _I64[1]))]


def _tensors(sig: Signature) -> Any:
    """``tuple[TensorA, TensorB, ...]``: one struct per tensor of the layout."""
    types = []
    for i, (name, datatype, trailing, nested) in enumerate(sig):
        width = math.prod(trailing)
        rows = Annotated[int, msgspec.Meta(ge=1, le=MAX_ELEMENTS // width)]
        shape = tuple.__class_getitem__((rows, *(Literal[d] for d in trailing)))
        element = _element(datatype)
        if nested:  # [[a, b], [c, d]]: each row as long as the shape says
            size = msgspec.Meta(min_length=width, max_length=width)
            element = Annotated[list.__class_getitem__(element), size]
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
            ("name", Literal[name]),
            ("shape", shape),
            ("datatype", Literal[datatype]),
            ("data", list.__class_getitem__(element)),
        ]
        types.append(msgspec.defstruct(f"Tensor{i}", fields, frozen=True, gc=False))
    return tuple.__class_getitem__(tuple(types))


class Layout:
    """A compiled layout: the decoder of payloads of this layout and where the mapping's
    columns are in it (None: the mapping does not fit, the careful path says why)."""

    def __init__(self, request: Signature | None, response: Signature | None) -> None:
        self.request, self.response = request, response
        payload = msgspec.defstruct(
            "Payload",
            [  # a half whose layout is not known yet takes only null: its first record relearns
                ("inputs", (_tensors(request) | None) if request else None, None),
                ("outputs", (_tensors(response) | None) if response else None, None),
                ("id", str | None, None),
                ("model_name", str | None, None),
            ],
            frozen=True,
            gc=False,
        )
        self.decoder = msgspec.json.Decoder(payload)


def learn(bodies: list[Any], previous: Layout | None) -> Layout | None:
    """The layout of the first request and response among the first records (a half not
    seen keeps the layout it had)."""
    request = previous.request if previous else None
    response = previous.response if previous else None
    seen_req = seen_resp = False
    for body in bodies[:_LOOKS]:
        try:
            h = _SAMPLE.decode(body)
        except Exception:
            continue
        if h.inputs is not None and not seen_req:
            request, seen_req = signature(h.inputs), True
        elif h.inputs is None and h.outputs is not None and not seen_resp:
            response, seen_resp = signature(h.outputs), True
        if seen_req and seen_resp:
            break
    if request is None and response is None:
        return None
    return Layout(request, response)
