"""Bytes of memory per pending prediction: the engine's join store vs a plain Python dict of
tuples ``{prediction_id: (bucket, model, prediction, score, groups)}``.

Both are measured with tracemalloc (numpy reports its buffers to it) after inserting the same
predictions; the dict is keyed by the id text, as a straightforward implementation would be.

Run: python -m bench.pending_memory [--pending N]
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import numpy as np

from bench.common import bench_config, register_groups, workload
from monitor.ingest.events import LabelBatch
from monitor.state.engine import Engine


def measure(fn):  # type: ignore[no-untyped-def]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    obj = fn()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return obj, after - before


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.pending
    preds, _ = workload(n, seconds=3600)
    ids = [f"{k:016x}-{i}" for i, k in enumerate(preds.key.tolist())]  # typical id text

    def ours() -> Engine:
        engine = Engine(bench_config(max_pending=n))
        register_groups(engine)
        for s in range(0, n, 20_000):
            engine.apply(0, preds.take(np.arange(s, min(s + 20_000, n))), LabelBatch())
        return engine

    def plain() -> dict[str, tuple]:
        buckets = (preds.ts // 60).astype(np.int64).tolist()
        groups = [tuple(g) for g in preds.groups.tolist()]
        scores, p = preds.score.tolist(), preds.pred.tolist()
        return {ids[i]: (buckets[i], 0, p[i], scores[i], groups[i]) for i in range(n)}

    engine, engine_bytes = measure(ours)
    store = engine.partitions[0].pending
    assert len(store) == n
    _, dict_bytes = measure(plain)
    per_ours = store.nbytes / n
    print(f"pending predictions: {n:,}")
    print(
        f"engine join store: {per_ours:.1f} bytes/prediction (record size "
        f"{store.main.dtype.itemsize} B; the 64-bit key replaces the id text)"
    )
    print(f"whole engine (store + windows + registry): {engine_bytes / n:.1f} bytes/prediction")
    print(f"plain dict of tuples: {dict_bytes / n:.1f} bytes/prediction")
    print(f"ratio dict/engine: {dict_bytes / n / per_ours:.1f}x (target <= 64 bytes/prediction)")


if __name__ == "__main__":
    main()
