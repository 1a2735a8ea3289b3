"""The Kafka state store (``checkpoint.store: kafka``) beside the SQLite checkpoint, in one run
against a real Apache Kafka broker (tests/broker.py: Maven jars, Java 17).

1. **Restore time of one partition vs its state size** (1 MB and 10 MB by default): real engine
   state (``bench.common``'s model; predictions applied until the partition's encoded state,
   ``encode(*engine.export_partition(p))`` as the service saves it, reaches the size: the
   pending table is what grows). Per round and store, in rotating order: a fresh file or topic,
   one save (the previous generation a restore could fall back on), a timed ``save``, then a
   timed restore as a restarting replica does it: open the store (SQLite: ``quick_check``;
   Kafka: the topic's check and one indexing pass) and ``load`` the partition (read, check,
   decode). Stores: SQLite, Kafka, Kafka with ``state_transactions``. Medians over the rounds,
   and the median of each round's own Kafka/SQLite ratio (``bench/state_restore.py``).
   Then the same restore from one topic after ``--grown-saves`` saves: compaction only cleans
   rolled segments, so until the active segment rolls (``segment.bytes``/``segment.ms``, 1 GiB
   or 7 days by default) a restore reads every generation written since.
2. **End-to-end throughput** of the service loop (``monitor.app.service.Monitor``, timed as in
   ``bench/kafka_throughput.py``) with ``checkpoint.store: kafka`` and with SQLite on the same
   topics, alternating (the order flips every round), each run in a fresh consumer group with a
   fresh state file or topic and the shipped checkpoint policy (every 10 s or 200k events).
   Events/s per side (steady state, from the first batch to the last record, as there), the
   checkpoints written meanwhile, and per round the paired ratio kafka/sqlite; beside it the
   ratio the save times alone imply (SQLite's run with its saves' time replaced by Kafka's),
   which the rest of the machine's noise does not move.

The machine is shared and noisy: read the ratios of sides measured alternately, not the times.

Run: nice -n 10 python -m bench.state_store [--sizes-mb 1,10] [--restore-rounds R]
     [--grown-saves G] [--events N] [--rounds R] [--sides sqlite,kafka[,kafka-tx]]
     [--part restore|throughput|both]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.kafka_throughput import Topics, _TimedMonitor, make_topics, monitor_config, timed_run
from bench.state_restore import MB, STORES, restore_bench
from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.state.stores import StateStore
from tests.broker import ApacheKafka


def checkpoint_spec(side: str, tmp: Path) -> str | None:
    """The ``checkpoint:`` YAML of a throughput side (None: the bench's SQLite default)."""
    if side == "sqlite":
        return None
    tx = ", state_transactions: true" if side == "kafka-tx" else ""
    return f"{{store: kafka, state_topic: bench-state-{uuid.uuid4().hex[:10]}{tx}}}"


class _CountingStore:
    """The monitor's store, noting each save's end time, seconds and bytes."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.saves: list[tuple[float, float, int]] = []

    def save(self, items: list[tuple[int, dict[str, int], bytes]], **kw: Any) -> None:
        t = time.perf_counter()
        self.inner.save(items, **kw)
        end = time.perf_counter()
        self.saves.append((end, end - t, sum(len(b) for _, _, b in items)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def throughput_round(
    side: str, bootstrap: str, t: Topics, tmp: Path, max_records: int
) -> dict[str, float]:
    cfg = monitor_config(bootstrap, t.pred, t.lab, tmp, max_records, checkpoint_spec(side, tmp))
    m = _TimedMonitor(cfg)
    counted = _CountingStore(m.checkpoints.store)
    m.checkpoints.store = counted
    timing = timed_run(m, t.target, t.total)
    steady, whole = timing.rate(t.total)
    start, end = m.first[0] if m.first else 0.0, m.end or 0.0
    timed = [s for s in counted.saves if start <= s[0] <= end]  # in the steady state
    return {
        "steady": steady,
        "whole": whole,
        "seconds": timing.steady,
        "saves": len(timed),
        "save_s": sum(s[1] for s in timed),
        "mb": sum(s[2] for s in timed) / MB / max(1, len(timed)),
    }


def _paired(runs: dict[str, list[dict[str, float]]], side: str, key: str) -> list[float]:
    return [a[key] / b[key] for a, b in zip(runs[side], runs["sqlite"], strict=True)]


def _by_saves(runs: dict[str, list[dict[str, float]]], side: str) -> list[float]:
    """Per round, the ratio the save times alone would give: SQLite's steady-state seconds
    with its saves replaced by this side's (less noisy than the measured ratio)."""
    out = []
    for a, b in zip(runs[side], runs["sqlite"], strict=True):
        out.append(b["seconds"] / (b["seconds"] - b["save_s"] + a["save_s"]))
    return out


def throughput_bench(
    bootstrap: str, t: Topics, sides: list[str], *, rounds: int, tmp: Path, max_records: int
) -> dict[str, Any]:
    """Per side its runs; per Kafka side the rounds' paired ratios to SQLite (steady state,
    whole run, and as implied by the save times alone)."""
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    for r in range(rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            print(f"  {side}:")
            runs[side].append(throughput_round(side, bootstrap, t, tmp, max_records))
        said = [
            f"{s} {x['steady']:,.0f} events/s ({x['saves']} saves, {x['save_s'] * 1e3:.0f} ms)"
            for s in sides
            for x in runs[s][-1:]
        ]
        said += [f"{s}/sqlite {_paired(runs, s, 'steady')[-1]:.3f}" for s in sides[1:]]
        print(f"  round {r + 1}: " + ", ".join(said))
    out: dict[str, Any] = {"runs": runs}
    print(f"events: {t.total:,} ({t.predictions:,} predictions, {t.labels:,} labels)")
    for s in sides:
        x = runs[s]
        rates = [v["steady"] for v in x]
        per_save = [v["save_s"] / v["saves"] for v in x if v["saves"]]
        print(
            f"{s:8} steady state: median {statistics.median(rates):,.0f} events/s (rounds "
            f"{min(rates):,.0f}-{max(rates):,.0f}); saves while timed: "
            f"{statistics.median(v['saves'] for v in x):.0f} per run, median "
            f"{statistics.median(per_save or [0.0]) * 1e3:.0f} ms each, "
            f"{statistics.median(v['mb'] for v in x):.1f} MB of state each"
        )
    for s in sides[1:]:
        steady, whole, saves = (
            _paired(runs, s, "steady"),
            _paired(runs, s, "whole"),
            _by_saves(runs, s),
        )
        med = statistics.median(steady)
        out[s] = {"steady": steady, "whole": whole, "by_saves": saves, "median": med}
        print(
            f"{s}/sqlite paired ratio, steady state: median {med:.3f} (rounds "
            f"{', '.join(f'{v:.2f}' for v in steady)}); whole run from construction: median "
            f"{statistics.median(whole):.3f}; implied by the save times alone: median "
            f"{statistics.median(saves):.3f}. Target >= 0.90: {'met' if med >= 0.9 else 'NOT met'}"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("restore", "throughput", "both"), default="both")
    ap.add_argument("--sizes-mb", default="1,10", help="encoded partition state sizes, MB")
    ap.add_argument("--restore-rounds", type=int, default=5)
    ap.add_argument("--grown-saves", type=int, default=10, help="0: skip the grown topic")
    ap.add_argument("--chunk-bytes", type=int, default=CheckpointSpec.state_chunk_bytes)
    ap.add_argument("--events", type=int, default=300_000, help="predictions (labels: ~80%%)")
    ap.add_argument("--rounds", type=int, default=9, help="throughput rounds")
    ap.add_argument(
        "--sides", default="sqlite,kafka", help="throughput sides, of " + ",".join(STORES)
    )
    ap.add_argument("--max-poll-records", type=int, default=KafkaSpec.max_poll_records)
    args = ap.parse_args()
    sides = args.sides.split(",")
    if sides[0] != "sqlite" or not set(sides) <= set(STORES):
        ap.error(f"--sides: sqlite first, then any of {STORES[1:]}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-state-"))
    broker = ApacheKafka()
    try:
        if args.part in ("restore", "both"):
            print("== restore of one partition vs its state size ==")
            sizes = [int(float(s) * MB) for s in args.sizes_mb.split(",")]
            restore_bench(
                broker.bootstrap,
                sizes,
                rounds=args.restore_rounds,
                grown=args.grown_saves,
                chunk=args.chunk_bytes,
                tmp=tmp,
            )
        if args.part in ("throughput", "both"):
            print("== end-to-end throughput, checkpoint.store kafka vs sqlite ==")
            topics = make_topics(broker.bootstrap, args.events)
            throughput_bench(
                broker.bootstrap,
                topics,
                sides,
                rounds=args.rounds,
                tmp=tmp,
                max_records=args.max_poll_records,
            )
    finally:
        broker.close()


if __name__ == "__main__":
    main()
