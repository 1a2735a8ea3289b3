"""Alert evaluation per closed bucket beside the engine's per-event apply cost, measured in the
same run (3 windows, one lagged, × 3 attribute sets × 20 groups, 5-minute buckets, the default
rules and drift). ``bench/alert_quality.py`` uses ``bench/alert_cost.py`` when it exists; this
is its stand-in, so the benchmark measures the cost either way."""

from __future__ import annotations

import statistics
import time

import numpy as np

from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine

T0 = 1_767_225_600.0
BUCKET = 300
SETS, GROUPS = 3, 20


def cost_config() -> Config:
    return parse_config(
        {
            "models": {
                "m": {
                    "attributes": {f"a{s}": {} for s in range(SETS)},
                    "bucket": "5m",
                    "windows": ["1h", "6h", {"name": "24h-lagged", "length": "24h", "lag": "1d"}],
                    "lateness": "1h",
                    "join": {"ttl": "1h"},  # labels come 5-10 minutes late
                }
            },
            "max_future": "365d",
        }
    )


def _bucket(rng: np.random.Generator, b: int, n: int, key0: int) -> PredictionBatch:
    groups = np.stack([s * GROUPS + rng.integers(0, GROUPS, n) for s in range(SETS)], axis=1)
    return PredictionBatch(
        key=np.arange(key0, key0 + n, dtype=np.uint64),
        model=np.zeros(n, np.uint16),
        ts=np.sort(T0 + (b + rng.random(n)) * BUCKET),
        pred=(rng.random(n) < 0.5).astype(np.uint8),
        score=np.full(n, np.nan),
        groups=groups.astype(np.int32),
    )


def measure_fallback(
    per_bucket: int = 1_000, fill_buckets: int = 2 * 288 + 12, rounds: int = 60
) -> dict[str, float | str]:
    """Fill two days (every window holds data), then per round: apply one bucket of events
    (timed per event) and evaluate the boundary it closes (timed). Medians of the rounds."""
    cfg = cost_config()
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine, series_points=0)
    reg = engine.registries[0]
    for s in range(SETS):
        for g in range(GROUPS):
            assert reg.index(s, f"g{g:02d}") == s * GROUPS + g  # one index space per model
    rng = np.random.default_rng(0)
    key, pending_labels = 1, LabelBatch()
    apply_s, eval_s = [], []
    for b in range(fill_buckets + rounds):
        preds = _bucket(rng, b, per_bucket, key)
        key += per_bucket
        t = time.perf_counter()
        engine.apply(0, preds, pending_labels)
        t2 = time.perf_counter()
        if b < fill_buckets:
            ev.last[0] = engine.low_watermark(0) or 0  # filling: skip the evaluations
        ev.advance()
        t3 = time.perf_counter()
        if b >= fill_buckets:
            apply_s.append((t2 - t) / (per_bucket + len(pending_labels)))
            eval_s.append(t3 - t2)
        # these predictions are labelled in the next bucket (labels 5-10 minutes late)
        pending_labels = LabelBatch(
            key=preds.key,
            ts=preds.ts + BUCKET,
            label=(rng.random(per_bucket) < 0.5).astype(np.uint8),
        )
    per_event = statistics.median(apply_s)
    per_boundary = statistics.median(eval_s)
    return {
        "source": "bench/alert_cost_case.py (bench/alert_cost.py not found)",
        "evaluation per closed bucket, median (ms)": per_boundary * 1e3,
        "target (ms)": 1.0,
        "engine apply per event, median (µs)": per_event * 1e6,
        "one evaluation costs this many events' apply": per_boundary / per_event,
        "rounds": str(rounds),
    }
