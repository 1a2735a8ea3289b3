"""Engine throughput vs a straightforward per-event implementation with river.

Both consume the same decoded events (predictions, then labels joined by id) and maintain
per-group confusion counts over a 1-hour event-time window for three attribute sets. river:
``utils.TimeRolling(metrics.ConfusionMatrix(), period=1h)`` per group plus a rolling mean of
favourable predictions, updated one event at a time, with a dict for the join.

Run: python -m bench.engine_vs_river [--events N]
"""

from __future__ import annotations

import argparse
import datetime as dt

import numpy as np

from bench.common import bench_config, best_of, register_groups, workload
from monitor.state.engine import Engine

BATCH = 20_000  # events per poll batch (the Kafka service polls up to this many)


def run_engine(preds, labels) -> Engine:  # type: ignore[no-untyped-def]
    engine = Engine(bench_config())
    register_groups(engine)
    n, m = len(preds), len(labels)
    li = 0
    for start in range(0, n, BATCH):
        pb = preds.take(np.arange(start, min(start + BATCH, n)))
        t_end = pb.ts[-1]
        lj = int(np.searchsorted(labels.ts, t_end, side="right"))
        engine.apply(0, pb, labels.take(np.arange(li, lj)))
        li = lj
    if li < m:
        engine.apply(0, preds.take(np.arange(0)), labels.take(np.arange(li, m)))
    return engine


def run_river(preds, labels) -> dict:  # type: ignore[no-untyped-def]
    from river import metrics, stats, utils

    hour = dt.timedelta(hours=1)
    cms: dict = {}
    sel: dict = {}
    pending: dict = {}
    keys = preds.key.tolist()
    ts = preds.ts.tolist()
    pr = preds.pred.tolist()
    gr = preds.groups.tolist()
    lkeys, lts, ly = labels.key.tolist(), labels.ts.tolist(), labels.label.tolist()
    li, m = 0, len(lkeys)
    utc = dt.UTC

    def label_until(t: float) -> int:
        nonlocal li
        while li < m and lts[li] <= t:
            hit = pending.pop(lkeys[li], None)
            if hit is not None:
                p_t, p, groups = hit
                when = dt.datetime.fromtimestamp(p_t, utc).replace(tzinfo=None)
                for k, g in enumerate(groups):
                    cm = cms.get((k, g))
                    if cm is None:
                        cm = cms[(k, g)] = utils.TimeRolling(metrics.ConfusionMatrix, period=hour)
                    cm.update(ly[li], p, t=when)
            li += 1
        return li

    for i in range(len(keys)):
        t = ts[i]
        label_until(t)
        when = dt.datetime.fromtimestamp(t, utc).replace(tzinfo=None)
        for k, g in enumerate(gr[i]):
            s = sel.get((k, g))
            if s is None:
                s = sel[(k, g)] = utils.TimeRolling(stats.Mean, period=hour)
            s.update(pr[i], t=when)
        pending[keys[i]] = (t, pr[i], gr[i])
    label_until(float("inf"))
    return cms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=400_000, help="predictions for the engine")
    ap.add_argument(
        "--river-events",
        type=int,
        default=40_000,
        help="predictions for river (slower; rates are per event)",
    )
    args = ap.parse_args()
    preds, labels = workload(args.events, seconds=args.events / 100.0)
    rp, rl = workload(args.river_events, seconds=args.river_events / 100.0)
    n_ours = len(preds) + len(labels)
    n_river = len(rp) + len(rl)
    t_ours = best_of(lambda: run_engine(preds, labels))
    t_river = best_of(lambda: run_river(rp, rl), repeat=2)
    ours, river = n_ours / t_ours, n_river / t_river
    print(f"engine: {n_ours:,} events in {t_ours:.3f}s = {ours:,.0f} events/s")
    print(f"river per-event baseline: {n_river:,} events in {t_river:.3f}s = {river:,.0f} events/s")
    print(f"ratio engine/river: {ours / river:.1f}x (target >= 20x)")


if __name__ == "__main__":
    main()
