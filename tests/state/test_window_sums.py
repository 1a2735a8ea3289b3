"""Window sums kept up to date between reads (``state/window_sums.py``) equal the windows
summed afresh (``Engine.counts_between``, as of the same boundary) at every read.

Random streams on several partitions: out-of-order and late predictions, jumps of the head
(slots reused, old buckets leaving the ring), labels minutes to hours late and labels before
their predictions (the as-of ledger adds and settles), groups appearing mid-stream, reads that
skip boundaries or repeat one, partitions revoked and restored from a checkpoint, and a journal
dropped because it was not read. Reads one boundary after the previous one take the sliding
path (every window one bucket on), the others the general one: both are driven and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import monitor.state.window_sums as window_sums
import monitor.state.windows as windows
from monitor.config.spec import parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.checkpoint import decode, encode
from monitor.state.engine import Engine

T0 = 1_767_225_600.0
BUCKET = 60


def engine_for(seed: int) -> Engine:
    cfg = parse_config(
        {
            "models": {
                "m": {
                    "attributes": {"g": {}, "h": {}},
                    "windows": ["5m", "20m", {"length": "30m", "lag": "10m"}],
                    "bucket": "1m",
                    "lateness": "10m",
                    "score_bins": 2,
                }
            }
        }
    )
    engine = Engine(cfg)
    engine.track_label_times = True
    return engine


def batch(
    engine: Engine, rng: np.random.Generator, now: float, key0: int, groups: int
) -> PredictionBatch:
    """Predictions around ``now``: some out of order, some far too late for the ring."""
    reg = engine.registries[0]
    n = int(rng.integers(0, 40))
    ts = now + rng.uniform(-120, 60, n)
    ts[rng.random(n) < 0.05] -= 3 * 3600
    gi = [[reg.index(s, f"v{int(rng.integers(0, groups))}") for s in (0, 1)] for _ in range(n)]
    return PredictionBatch(
        key=np.arange(key0, key0 + n, dtype=np.uint64),
        model=np.zeros(n, np.uint16),
        ts=ts,
        pred=(rng.random(n) < 0.5).astype(np.uint8),
        score=np.where(rng.random(n) < 0.8, rng.random(n), np.nan),
        groups=np.array(gi, dtype=np.int32).reshape(n, 2),
    )


class Labels:
    """Labels of 30 % of a partition's predictions, 0–40 minutes after them (a few a minute
    *before* them: early labels), handed out in label-time order as the stream reaches them."""

    def __init__(self) -> None:
        self.key = np.zeros(0, np.uint64)
        self.ts = np.zeros(0)

    def due(self, b: PredictionBatch, now: float, rng: np.random.Generator) -> LabelBatch:
        pick = rng.random(len(b)) < 0.3
        delay = rng.uniform(-60, 2400, int(pick.sum()))
        self.key = np.concatenate([self.key, b.key[pick]])
        self.ts = np.concatenate([self.ts, b.ts[pick] + delay])
        out = self.ts <= now
        order = np.argsort(self.ts[out], kind="stable")
        labels = LabelBatch(
            key=self.key[out][order],
            ts=self.ts[out][order],
            label=(rng.random(int(out.sum())) < 0.5).astype(np.uint8),
        )
        self.key, self.ts = self.key[~out], self.ts[~out]
        return labels


@pytest.mark.parametrize("seed", range(8))
def test_window_sums_equal_fresh_sums_at_every_read(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if seed % 4 == 3:  # a journal that outgrows its bound is dropped and the windows resummed
        monkeypatch.setattr(windows, "JOURNAL_LIMIT", 0.0005)
    taken = {"_slide": 0, "_update": 0}  # both ways of building on the previous read
    for name in taken:
        monkeypatch.setattr(window_sums, name, counted(getattr(window_sums, name), taken, name))
    rng = np.random.default_rng(seed)
    engine = engine_for(seed)
    spec = engine.models[0]
    parts = int(rng.integers(1, 4))
    now = {p: T0 + float(rng.uniform(0, 600)) for p in range(parts)}
    labels = {p: Labels() for p in range(parts)}
    key, k, reads, incremental = 1, None, 0, 0
    for step in range(300):
        p = int(rng.integers(0, parts))
        now[p] += float(rng.exponential(30))
        if rng.random() < 0.02:
            now[p] += float(rng.uniform(600, 4000))  # a gap: slots reused, windows jump
        b = batch(engine, rng, now[p], key, groups=3 + step // 40)
        key += len(b)
        engine.apply(p, b, labels[p].due(b, now[p], rng))
        if rng.random() < 0.01:  # revoked and restored from its checkpoint: new rings
            meta, arrays = decode(encode(*engine.export_partition(p)))
            engine.drop_partition(p)
            engine.import_partition(p, meta, arrays)
        head = engine.low_watermark(0)
        if head is None or rng.random() < 0.2:
            continue
        nxt = (
            head if k is None else min(max(k + int(rng.choice([0, 1, 1, 1, 2, 5])), head - 5), head)
        )
        if k is not None and nxt < k:  # boundaries are read in order (a partition joined)
            continue
        k = nxt
        ends = [k - w.lag // BUCKET for w in spec.windows]
        ranges = [(e - w.length // BUCKET, e) for w, e in zip(spec.windows, ends, strict=True)]
        before = {key_: s.sums for key_, s in engine._window_sums[0]._sums.items()}
        got = engine.windows_as_of(0, ranges, k)
        for (start, end), g in zip(ranges, got, strict=True):
            want = engine.counts_between(0, start, end, as_of=k)
            np.testing.assert_array_equal(g, want, err_msg=f"step {step}, window {start}-{end}")
        reads += 1
        incremental += sum(1 for key_ in before if key_ in engine._window_sums[0]._sums)
    assert reads > 100
    assert incremental > reads // 2  # most reads built on the previous one
    assert min(taken.values()) > 20, taken  # per ring read: both paths are checked


def counted(f: Callable[..., Any], taken: dict[str, int], name: str) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        taken[name] += 1
        return f(*args)

    return call
