"""The records a replica writes to the partials topic besides partials: ``hello`` (it owns a
partition, and where each model's data there starts) and ``idle`` (a partition holds a model's
boundaries back no more: app/idle.py). Read here, every malformed one a
:class:`~monitor.alerts.partials_codec.PartialError` with its reason (the topic is shared by
every replica; one bad record must not stop the view).
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from monitor.alerts.partials_codec import PartialError


class HelloMark(msgspec.Struct, forbid_unknown_fields=True):
    partition: int
    first: dict[str, int]  # model -> its first bucket there (a partition with data)


class IdleMark(msgspec.Struct, forbid_unknown_fields=True):
    partition: int
    model: str | None  # None: every model (a bare number, written before it was per model)


def read_hello(value: bytes | None, partitions: int | None) -> HelloMark:
    """``{"partition": p, "first": {model: bucket}}``, or a bare partition number (no data)."""
    said = _json(value, HelloMark, "hello") or HelloMark(_number(value, "hello"), {})
    return _in_range(said, "hello", partitions)


def read_idle(value: bytes | None, partitions: int | None) -> IdleMark:
    """``{"partition": p, "model": name}``, or a bare partition number (every model)."""
    said = _json(value, IdleMark, "idle") or IdleMark(_number(value, "idle"), None)
    return _in_range(said, "idle", partitions)


T = TypeVar("T", HelloMark, IdleMark)


def _json(value: bytes | None, kind: type[T], name: str) -> T | None:
    if not value or not value.startswith(b"{"):
        return None
    try:
        return msgspec.json.decode(value, type=kind)
    except msgspec.DecodeError as exc:
        raise PartialError(f"a {name} record that is not one: {exc}") from None


def _number(value: bytes | None, name: str) -> int:
    try:
        return int(value or b"")
    except ValueError:
        raise PartialError(f"a {name} record without a partition number") from None


def _in_range(said: T, name: str, partitions: int | None) -> T:
    if partitions is not None and not 0 <= said.partition < partitions:
        raise PartialError(f"{name} record of partition {said.partition} of {partitions}")
    return said
