"""Alert evaluation cost per closed bucket, beside the engine's apply cost per event.

The case of issue 14: one model, 3 windows (1 h, 6 h, 24 h ending 1 h ago) × 3 attribute sets ×
20 groups, 5-minute buckets, the default rules and FairnessDrift; ~3,000 decisions an hour
over skewed groups, 80 % labelled 1–6 h later (so the as-of label ledger is busy). Batches go
straight into the engine one bucket at a time, and the evaluator judges each closed bucket as
the service does after a poll. The first ``warm_hours`` fill every window; then each round
times ``advance()`` over one hour of boundaries (12, one of them with the hourly drift values)
and ``Engine.apply`` over the same hour's events, and the medians of the rounds are reported.

Run: python -m bench.alert_cost [--hours H] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np

from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine

T0 = 1_767_225_600.0
SETS, GROUPS = ("region", "age", "segment"), 20
BUCKET = 300


def bench_config() -> Config:
    return parse_config(
        {
            "models": {
                "credit": {
                    "attributes": {s: {} for s in SETS},
                    "windows": ["1h", "6h", {"length": "24h", "lag": "1h"}],
                    "bucket": "5m",
                    "lateness": "1h",
                }
            }
        }
    )


def traffic(
    engine: Engine, hours: float, per_hour: float, seed: int
) -> tuple[PredictionBatch, LabelBatch]:
    """Predictions over ``hours`` (time order) and their labels (label-time order)."""
    rng = np.random.default_rng(seed)
    reg = engine.registries[0]
    index = np.array([[reg.index(s, f"g{j:02d}") for j in range(GROUPS)] for s in range(len(SETS))])
    n = int(rng.poisson(per_hour * hours))
    ts = np.sort(T0 + rng.uniform(0, hours * 3600, n))
    weights = 1.0 / np.arange(1, GROUPS + 1)  # Zipf: the largest group ~28 %, the smallest ~1 %
    pick = rng.choice(GROUPS, size=(n, len(SETS)), p=weights / weights.sum())
    groups = index[np.arange(len(SETS)), pick].astype(np.int32)
    rate = 0.35 + 0.3 * (pick[:, 0] % 3) / 2  # selection rates 0.35–0.65 by region
    pred = (rng.random(n) < rate).astype(np.uint8)
    score = np.clip(rate + rng.normal(0, 0.1, n), 0, 1)
    keys = np.arange(1, n + 1, dtype=np.uint64)
    preds = PredictionBatch(
        key=keys, model=np.zeros(n, np.uint16), ts=ts, pred=pred, score=score, groups=groups
    )
    lab = np.flatnonzero(rng.random(n) < 0.8)
    lts = ts[lab] + rng.uniform(3600, 6 * 3600, len(lab))
    order = np.argsort(lts, kind="stable")
    y = (rng.random(len(lab)) < np.where(pred[lab] == 1, 0.7, 0.3)).astype(np.uint8)
    labels = LabelBatch(key=keys[lab][order], ts=lts[order], label=y[order])
    return preds, labels


def measure(
    *,
    hours: float = 12.0,
    warm_hours: float = 49.0,
    per_hour: float = 3000.0,
    seed: int = 0,
    evaluator: type[AlertEvaluator] = AlertEvaluator,
) -> dict[str, Any]:
    """Per-boundary alert evaluation cost and per-event engine cost, medians of hourly rounds."""
    cfg = bench_config()
    engine = Engine(cfg)
    ev = evaluator(cfg, engine)
    total = warm_hours + hours
    preds, labels = traffic(engine, total, per_hour, seed)
    n_buckets = int(total * 3600 // BUCKET)
    edges = T0 + BUCKET * np.arange(n_buckets + 1)
    pi = np.searchsorted(preds.ts, edges)
    li = np.searchsorted(labels.ts, edges)
    per_hour_buckets = 3600 // BUCKET
    eval_rounds: list[float] = []
    apply_rounds: list[float] = []
    t_eval = t_apply = 0.0
    events = boundaries = 0
    for b in range(n_buckets):
        pb = preds.take(np.arange(pi[b], pi[b + 1]))
        lb = labels.take(np.arange(li[b], li[b + 1]))
        t = time.perf_counter()
        engine.apply(0, pb, lb)
        t1 = time.perf_counter()
        ev.advance()
        t2 = time.perf_counter()
        if b < warm_hours * per_hour_buckets:
            continue
        t_apply += t1 - t
        t_eval += t2 - t1
        events += len(pb) + len(lb)
        boundaries += 1
        if boundaries == per_hour_buckets:
            eval_rounds.append(t_eval / boundaries)
            apply_rounds.append(t_apply / events)
            t_eval = t_apply = 0.0
            events = boundaries = 0
    return {
        "case": f"3 windows × {len(SETS)} attribute sets × {GROUPS} groups, 5-minute buckets",
        "rounds": len(eval_rounds),
        "alert_ms_per_boundary": statistics.median(eval_rounds) * 1e3,
        "alert_ms_per_boundary_range": [min(eval_rounds) * 1e3, max(eval_rounds) * 1e3],
        "engine_us_per_event": statistics.median(apply_rounds) * 1e6,
        "events_per_boundary": (len(preds) + len(labels)) / n_buckets,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=12.0, help="measured hours (rounds)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(json.dumps(measure(hours=args.hours, seed=args.seed), indent=2))


if __name__ == "__main__":
    main()
