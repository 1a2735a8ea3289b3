"""Reading loosely-typed mappings with key paths in every error message.

Only the CSV mapping file of ``replay --csv`` (monitor/ingest/file.py) still reads its YAML this
way; the configuration itself is a msgspec schema (monitor/config/spec.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from monitor.config.durations import parse_duration
from monitor.config.errors import ConfigError as ConfigError


class _Node:
    """A mapping being read, which remembers its key path and which keys were used."""

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(path, f"expected a mapping, got {type(data).__name__}")
        self.data: Mapping[str, Any] = data
        self.path = path
        self.used: set[str] = set()

    def sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.data.get(key, default)

    def has(self, key: str) -> bool:
        return key in self.data

    def node(self, key: str) -> _Node:
        return _Node(self.get(key, {}) or {}, self.sub(key))

    def duration(self, key: str, default: int, *, positive: bool = False) -> int:
        raw = self.get(key, default)
        try:
            value = parse_duration(raw)
        except ValueError as exc:
            raise ConfigError(self.sub(key), str(exc)) from None
        if positive and value <= 0:
            raise ConfigError(self.sub(key), f"{raw!r} must be longer than zero")
        return value

    def integer(self, key: str, default: int, *, minimum: int = 0) -> int:
        raw = self.get(key, default)
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ConfigError(self.sub(key), f"{raw!r} is not an integer")
        if raw < minimum:
            raise ConfigError(self.sub(key), f"{raw} is below the minimum {minimum}")
        return int(raw)

    def number(self, key: str, default: float | None) -> float | None:
        raw = self.get(key, default)
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise ConfigError(self.sub(key), f"{raw!r} is not a finite number")
        return float(raw)

    def choice(self, key: str, default: str, options: tuple[str, ...]) -> str:
        raw = self.get(key, default)
        if raw not in options:
            raise ConfigError(self.sub(key), f"{raw!r} is not one of {', '.join(options)}")
        return str(raw)

    def path_value(self, key: str, default: str) -> tuple[str, ...]:
        raw = self.get(key, default)
        if not isinstance(raw, str) or not raw or any(not p for p in raw.split(".")):
            raise ConfigError(self.sub(key), f"{raw!r} is not a dotted field path")
        return tuple(raw.split("."))

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(self.sub(str(unknown[0])), "unknown key")
