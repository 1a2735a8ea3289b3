"""Helpers to build configs and events for tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from monitor.config.spec import Config, parse_config
from monitor.ingest.events import RawRecord
from monitor.state.engine import Engine
from monitor.state.windows import FAV, FN, FP, TN, TP, N, n_cells

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def wait_for(
    cond: Callable[[], Any], timeout: float, what: str | Callable[[], str], every: float = 0.05
) -> Any:
    """Poll ``cond`` until it returns something true (returned), failing after ``timeout``
    seconds with ``what`` (text, or a function giving it then) and the last value: tests wait
    for a condition, not for the clock."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(every)
    said = what if isinstance(what, str) else what()
    raise AssertionError(f"timed out after {timeout}s waiting for {said}: {last!r}")


# Where each consumed record ends up in the engine's counters: exactly one of these. A label that
# came before its prediction is held as early and counted when it joins (``labels``) or expires
# (``orphan_labels``), so a label still held is not accounted yet.
ACCOUNTED = (
    "predictions",
    "duplicate_predictions",
    "shared_id_predictions",
    "late_predictions",
    "labels",
    "duplicate_labels",
    "late_labels",
    "orphan_labels",
    "invalid",
)


def records_accounted(counters: Mapping[str, int]) -> int:
    """How many consumed records a (published) counter set has fully applied: a test waits for
    this to reach the number of records on the topics, not for the traffic to look quiet."""
    return sum(int(counters.get(k, 0)) for k in ACCOUNTED)


def config(**model: Any) -> Config:
    base: dict[str, Any] = {"attributes": {"g": {}}, "windows": ["1h"], "min_samples": 1}
    base.update(model)
    return parse_config({"models": {"m": base}})


def pred(
    pid: object, t: float, group: object, p: int, score: float | None = None, **extra: Any
) -> RawRecord:
    ev: dict[str, Any] = {
        "prediction_id": pid,
        "model_id": "m",
        "timestamp": t,
        "attributes": {"g": group},
        "prediction": p,
    }
    if score is not None:
        ev["score"] = score
    ev.update(extra)
    return RawRecord(json.dumps(ev).encode())


def label(pid: object, t: float, y: int) -> RawRecord:
    return RawRecord(json.dumps({"prediction_id": pid, "timestamp": t, "label": y}).encode())


def run(
    engine: Engine,
    preds: list[RawRecord],
    labels: list[RawRecord] = (),  # type: ignore[assignment]
    partition: int = 0,
) -> None:
    """Decode and apply one batch (predictions then labels), as the streaming path does."""
    pb, d1 = engine.decoder.decode_predictions(preds)
    lb, d2 = engine.decoder.decode_labels(list(labels))
    assert not d1 and not d2, (d1, d2)
    engine.apply(partition, pb, lb)


def confusion_events(
    group: str, tp: int, fp: int, fn: int, tn: int, start: int = 0, t: float = T0
) -> tuple[list[RawRecord], list[RawRecord]]:
    preds, labels = [], []
    i = start
    for p, y, n in ((1, 1, tp), (1, 0, fp), (0, 1, fn), (0, 0, tn)):
        for _ in range(n):
            preds.append(pred(f"{group}{i}", t, group, p))
            labels.append(label(f"{group}{i}", t + 1, y))
            i += 1
    return preds, labels


def cell_counts(*groups: dict[str, int]) -> np.ndarray:
    """``counts[group, cell]`` (10 score bins) from per-group ``{n, fav, tp, fp, fn, tn}``."""
    out = np.zeros((len(groups), n_cells(10)), dtype=np.int64)
    for i, g in enumerate(groups):
        for key, cell in (("n", N), ("fav", FAV), ("tp", TP), ("fp", FP), ("fn", FN), ("tn", TN)):
            out[i, cell] = g.get(key, 0)
    return out
