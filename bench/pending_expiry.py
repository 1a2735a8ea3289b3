"""The engine's apply cost per 5-minute bucket with the lazy pending-store expiry
(``monitor/state/pending.py``) beside the store that removed expired rows at once
(``tests/state/reference_join.py``), on the detection-quality bench's fair stream
(``bench/alert_streams.py``: ~1,240 decisions/h, labels 1–6 h late, TTL 1 day).

Two engines take the same batches, one bucket at a time, in alternating order; each apply is
timed in the thread's CPU time (``time.thread_time``: on a shared machine, wall time mostly
measures the other processes). At the end both must hold the same counts, counters and
checkpoint arrays, byte for byte.

Run: python -m bench.pending_expiry [--days D] [--ttl 1d] [--seed S]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from typing import Any

from bench.alert_streams import BUCKET, SCENARIOS, bench_config, bucket_batches, draw
from monitor.config.spec import Config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine
from tests.state.reference_join import ReferencePendingStore


def config(ttl: str) -> Config:
    """The bench's model with another join TTL (``12h``, ``1d``, ``7d``)."""
    cfg = bench_config()
    seconds = int(float(ttl[:-1]) * {"h": 3600, "d": 86400}[ttl[-1]])
    for name, m in cfg.models.items():
        cfg.models[name] = dataclasses.replace(m, join=dataclasses.replace(m.join, ttl=seconds))
    return cfg


def batches(seed: int, days: float, engine: Engine) -> list[tuple[PredictionBatch, LabelBatch]]:
    sc = SCENARIOS["fair"]
    return list(bucket_batches(sc, draw(sc, seed), engine, days))


def measure(*, days: float = 4.0, ttl: str = "1d", seed: int = 1) -> dict[str, Any]:
    cfg = config(ttl)
    engines = {"lazy": Engine(cfg), "reference": Engine(cfg)}
    work = batches(seed, days, engines["lazy"])
    for e in engines.values():
        e.track_label_times = True  # as the alert evaluator sets it
        for g, _ in SCENARIOS["fair"].groups:
            e.registries[0].index(0, g)
    st = engines["reference"].partition(0)
    st.pending = ReferencePendingStore(st.pending.n_sets, max_size=st.pending.max_size)  # type: ignore[assignment]
    spent: dict[str, list[float]] = {k: [] for k in engines}
    clock = time.thread_time
    for i, (preds, labels) in enumerate(work):
        names = list(engines) if i % 2 else list(engines)[::-1]
        for name in names:
            t = clock()
            engines[name].apply(0, preds, labels)
            spent[name].append(clock() - t)
    lazy, ref = engines["lazy"], engines["reference"]
    assert lazy.counters() == ref.counters(), "counters differ"
    a, b = lazy.export_partition(0), ref.export_partition(0)
    assert a[0] == b[0] and a[1].keys() == b[1].keys(), "checkpoints differ"
    for k, v in a[1].items():
        assert v.tobytes() == b[1][k].tobytes(), f"checkpoint array {k} differs"
    n = len(work)
    out: dict[str, Any] = {
        "buckets": n,
        "ttl": ttl,
        "events_per_bucket": sum(len(p) + len(lb) for p, lb in work) / n,
        "pending_rows_at_end": len(lazy.partitions[0].pending),
        "counters": lazy.counters(),
    }
    ttl_buckets = cfg.models[next(iter(cfg.models))].join.ttl // BUCKET
    # the first TTL: nothing expires yet; then rows expire at every bucket
    phases = {"all": slice(None), "filling": slice(0, ttl_buckets)}
    phases["expiring"] = slice(ttl_buckets, None)
    for phase, part in phases.items():
        if not spent["lazy"][part]:
            continue
        for k, v in spent.items():
            out[f"{k}_ms_{phase}"] = statistics.mean(v[part]) * 1e3
        out[f"speed_up_{phase}"] = out[f"reference_ms_{phase}"] / out[f"lazy_ms_{phase}"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=4.0)
    ap.add_argument("--ttl", default="1d", help="join TTL, e.g. 12h, 1d, 7d")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    r = measure(days=args.days, ttl=args.ttl, seed=args.seed)
    print(
        f"{r['buckets']} buckets of {r['events_per_bucket']:.0f} events, TTL {r['ttl']}, "
        f"{r['pending_rows_at_end']:,} pending rows at the end; identical counts and checkpoints"
    )
    for phase, what in (
        ("all", "all buckets"),
        ("filling", "first TTL, none expiring"),
        ("expiring", "after it, rows expiring at each bucket"),
    ):
        if f"lazy_ms_{phase}" in r:
            print(
                f"engine apply, CPU ms per bucket ({what}): reference "
                f"{r[f'reference_ms_{phase}']:.3f}, lazy expiry {r[f'lazy_ms_{phase}']:.3f}: "
                f"{r[f'speed_up_{phase}']:.2f}×"
            )


if __name__ == "__main__":
    main()
