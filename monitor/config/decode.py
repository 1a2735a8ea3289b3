"""Decoding YAML data into the configuration schema, with errors that name their key path.

The schema's Structs derive from :class:`Doc` (frozen, unknown keys refused).

msgspec reports ``Expected `int`, got `str` - at `$.models[...].min_samples``: the path of a
mapping's key is elided (``[...]``) and the value is not quoted. The operator needs
``models.credit.min_samples: 'many' is not an integer``, so :func:`convert` re-locates the
failing entry (converting each entry of the elided mapping on its own) and words the reason
the way the rest of the monitor does. Values of secret keys are never quoted.
"""

from __future__ import annotations

import math
import re
import types
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec

T = TypeVar("T")
SECRET_KEYS = frozenset({"sasl_username", "sasl_password", "key", "cert", "client_ca"})
# DOTALL: a key may hold a newline, and msgspec quotes it in the message as it is
_MSG = re.compile(
    r"^(?P<reason>.*?)(?: - at `(?P<path>[^`]*)`(?: in `(?P<outer>[^`]*)`)?)?$", re.DOTALL
)
_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


class Doc(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Base of the schema's Structs: immutable, and an unknown key is an error (a typo in a
    threshold must not silently fall back to a default)."""


class ConfigError(ValueError):
    """A configuration problem, with the dotted key path that caused it."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


def sub(path: str, key: str | int) -> str:
    """``path`` extended by a mapping key or a list index, as the error messages write it."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def convert(data: object, tp: type[T], path: str = "") -> T:
    """``msgspec.convert`` with errors as :class:`ConfigError` naming the key path."""
    try:
        return msgspec.convert(data, tp)
    except msgspec.ValidationError as exc:
        raise _explain(tp, data, path, str(exc)) from None


def _explain(tp: Any, data: Any, path: str, message: str) -> ConfigError:
    m = _MSG.match(message)
    assert m is not None
    reason, where = m["reason"], m["outer"] or m["path"] or "$"
    for name, index in _TOKEN.findall(where[1:]):
        seg: str | int = name if name else ("..." if index == "..." else int(index))
        tp = _child(tp, seg)
        if seg == "...":  # a mapping's value: find which key, and explain within it
            for key, value in data.items():
                try:
                    msgspec.convert(value, tp)
                except msgspec.ValidationError as exc:
                    return _explain(tp, value, sub(path, str(key)), str(exc))
            break
        try:
            data = data[seg]
        except (KeyError, IndexError, TypeError):
            data = None
        path = sub(path, seg)
    if m["outer"]:  # a mapping key of the wrong type
        return ConfigError(path, "keys must be text")
    return _reason(tp, data, path, reason)


def _reason(tp: Any, value: Any, path: str, reason: str) -> ConfigError:
    key = path.rpartition(".")[2]
    shown = "the value" if key in SECRET_KEYS or ".basic_auth_users" in f".{path}" else repr(value)
    if got := re.match(r"Object contains unknown field `(.*)`", reason, re.DOTALL):
        return ConfigError(sub(path, got[1]), "unknown key")
    if got := re.match(r"Object missing required field `(.*)`", reason, re.DOTALL):
        return ConfigError(sub(path, got[1]), "required")
    if key in ("sasl_username", "sasl_password") and reason.startswith("Expected `str"):
        # YAML (and FAIRNESS_MONITOR__… overrides, read as YAML) turns 0123 into 83 and yes
        # into True: a secret that is not text would silently be another secret
        return ConfigError(
            path,
            f"must be text, got a {type(value).__name__} (quote it, or use {key}_env / {key}_file)",
        )
    if got := re.match(r"Expected `(int|float)` >= (\S+)", reason):
        return ConfigError(path, f"{shown} is below the minimum {got[2]}")
    if got := re.match(r"Expected `(int|float)` <= (\S+)", reason):
        return ConfigError(path, f"{shown} is above the maximum {got[2]}")
    if re.match(r"Expected `str` of length >= 1", reason):
        return ConfigError(path, f"{shown} must be a non-empty string")
    if reason.startswith("Invalid enum value"):
        options = _literal(tp)
        return ConfigError(path, f"{shown} is not one of {', '.join(map(str, options))}")
    if got := re.match(r"Expected `([^`]*)`, got `([^`]*)`", reason):
        expected = got[1]
        if expected == "int":
            return ConfigError(path, f"{shown} is not an integer")
        if expected in ("float", "int | float"):
            return ConfigError(path, f"{shown} is not a finite number")
        if expected == "bool":
            return ConfigError(path, f"{shown} is not a boolean")
        if expected == "str":
            return ConfigError(path, f"expected a string, got {got[2]}")
        if expected == "object":
            return ConfigError(path, f"expected a mapping, got {got[2]}")
        if expected == "array":
            return ConfigError(path, f"expected a list, got {got[2]}")
        return ConfigError(path, f"expected {expected.replace('object', 'mapping')}, got {got[2]}")
    return ConfigError(path, reason)


def _strip(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _members(tp: Any) -> tuple[Any, ...]:
    tp = _strip(tp)
    if get_origin(tp) in (Union, types.UnionType):
        return tuple(_strip(a) for a in get_args(tp))
    return (tp,)


def _child(tp: Any, seg: str | int) -> Any:
    """The type found at ``seg`` (a field name, a list index, ``...`` for a mapping's value)."""
    for member in _members(tp):
        origin = get_origin(member)
        if isinstance(member, type) and issubclass(member, msgspec.Struct):
            for f in msgspec.structs.fields(member):
                if f.encode_name == seg:
                    return f.type
        if isinstance(seg, int) and origin in (list, tuple):
            return get_args(member)[0]
        if seg == "..." and origin is dict:
            return get_args(member)[1]
    return Any


def _literal(tp: Any) -> tuple[Any, ...]:
    for member in _members(tp):
        if get_origin(member) is Literal:
            return get_args(member)
    return ()


def finite(value: float, path: str) -> float:
    """``value`` if finite, else a ``ConfigError`` at ``path``."""
    if not math.isfinite(value):
        raise ConfigError(path, f"{value!r} is not a finite number")
    return value
