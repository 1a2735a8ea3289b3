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
import os
from types import ModuleType

_module: ModuleType | None
try:
    _module = importlib.import_module("monitor_native")
except ImportError:  # not built (no Rust toolchain): the Python paths decode everything
    _module = None


def native() -> ModuleType | None:
    """The compiled module, None when it is not installed or turned off."""
    if os.environ.get("FAIRNESS_MONITOR_NATIVE", "1") == "0":
        return None
    return _module
