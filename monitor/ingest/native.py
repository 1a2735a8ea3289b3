"""The optional compiled decoders: ``native/`` (the ``fairness-monitor-native`` package, Rust
through pyo3; ``make install`` builds it where ``cargo`` is found).

Single-row calls of a serving stack give two records per decision, and decoding them with
msgspec and Python's per-record work costs more than the monitor-JSON path's whole decode and
count (issue 16's bar is 0.7× of it). The compiled functions take a poll's records and return
the same columns as the Python fast paths (``serving_fast.py``, ``seldon_fast.py``), or None
when anything is unusual: then the Python paths decode the batch, as they do without the
package. ``FAIRNESS_MONITOR_NATIVE=0`` turns it off (the benchmarks compare both).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

_module: ModuleType | None
try:
    _module = importlib.import_module("monitor_native")
except ImportError:  # not built (no Rust toolchain): the Python paths decode everything
    _module = None


log = logging.getLogger(__name__)
T = TypeVar("T")
_failed: set[str] = set()  # the compiled functions that raised, each said once


def guarded(name: str, call: Callable[[], T | None]) -> T | None:
    """``call()`` of a compiled decoder, None when it raises: a compiled function declines by
    returning None and never raises on data, so an exception is a bug (or a module built
    from other sources). The batch then goes to the Python paths, as when it declines, and
    the first failure of each function is logged with its traceback."""
    try:
        return call()
    except Exception:
        if name not in _failed:
            _failed.add(name)
            log.exception("compiled decoder %s failed; the Python paths decode instead", name)
        return None


def native() -> ModuleType | None:
    """The compiled module, None when it is not installed or turned off."""
    if os.environ.get("FAIRNESS_MONITOR_NATIVE", "1") == "0":
        return None
    return _module
