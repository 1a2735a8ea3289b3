"""End-to-end `fairness-monitor run` throughput vs raw kafka-python consumption (poll only).

Starts a real Apache Kafka broker (tests/broker.py: Maven jars, Java 17), produces the same
events to a prediction and a label topic, then alternates, in one run:

* **raw**: a kafka-python consumer in a fresh group polls both topics to the end, doing nothing
  with the records;
* **raw with the monitor's reader**: the same, with the compiled record reader the monitor
  installs in its consumer (``monitor/ingest/record_reader.py``) — so that the monitor's own
  cost (decode, engine, checkpoints) is visible apart from the reader's gain;
* **monitor**: the service loop (``monitor.app.service.Monitor``) in a fresh group with a fresh
  checkpoint consumes the same topics end to end — decode, engine, dead letters, checkpoints,
  alert evaluation.

Both sides run with the monitor's garbage-collector settings (``tune_gc``): before they did,
the first raw round ran with Python's defaults (~40% slower) and later ones inherited the
monitor's settings from the same process.

Two figures per side, best of ``--rounds``:

* **throughput** (the headline): events per second from the first poll that returns records to
  the last record, counting the events after that first batch. Both sides are measured the same
  way; the monitor's clock starts *before* it processes its first batch (conservative).
* **whole run**: all events over the time from the consumer's construction, which adds the
  one-off start (bootstrap, the monitor's co-partitioning metadata check, group join).

Run: python -m bench.kafka_throughput [--events N] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer

from monitor.app.service import Monitor, tune_gc
from monitor.config.kafka import KafkaSpec
from monitor.config.spec import Config, load_config
from monitor.ingest import record_reader
from tests.app.test_replay import make_events
from tests.broker import ApacheKafka
from tests.kafka_helpers import MODEL, create_topics, end_offsets, produce


@dataclass
class Timing:
    whole: float  # seconds from construction to the last record
    steady: float  # seconds from the first batch to the last record
    after_first: int  # events after the first batch

    def rate(self, total: int) -> tuple[float, float]:
        return self.after_first / self.steady, total / self.whole


def raw(
    bootstrap: str, topics: list[str], total: int, max_records: int, *, c_reader: bool = False
) -> Timing:
    tune_gc()  # the monitor's garbage-collector settings, so that only the work differs
    t0 = time.perf_counter()
    c = KafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=f"raw-{uuid.uuid4()}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=max_records,
        fetch_max_bytes=64 * 2**20,
        max_partition_fetch_bytes=8 * 2**20,
    )
    if c_reader:
        assert record_reader.install(c)
    n = 0
    first: tuple[float, int] | None = None
    while n < total:
        for recs in c.poll(timeout_ms=200).values():
            n += len(recs)
        if n and first is None:
            first = (time.perf_counter(), n)
    end = time.perf_counter()
    c.close()
    assert first is not None
    return Timing(end - t0, end - first[0], total - first[1])


class _TimedMonitor(Monitor):
    """Notes when the first batch arrives (before processing it) and how big it is, and when
    the last record is processed. The check runs on the monitor's own thread after each batch,
    as the raw side's does: a watcher thread polling the offsets would take the GIL from it."""

    first: tuple[float, int] | None = None
    poll_before_first = 0.0
    end: float | None = None
    target: dict[tuple[str, int], int] | None = None

    def _process(self, batch: dict[Any, list[Any]], stale: Any = ()) -> None:
        if self.first is None:
            self.first = (time.perf_counter(), sum(len(r) for r in batch.values()))
            self.poll_before_first = self.seconds["poll"]
        super()._process(batch, stale)
        got = {(tp.topic, tp.partition): o for tp, o in self.ownership.next_offsets.items()}
        if self.target and all(got.get(k, -1) >= v for k, v in self.target.items()):
            self.end = time.perf_counter()
            self.request_stop()


def monitor_config(
    bootstrap: str,
    pred: str,
    lab: str,
    tmp: Path,
    max_records: int,
    checkpoint: str | None = None,
) -> Config:
    """The monitor's config for the bench's topics, in a fresh group. ``checkpoint``: the
    ``checkpoint:`` mapping as YAML flow text (default: a fresh SQLite file, shipped policy)."""
    if checkpoint is None:  # shipped defaults: 10s or 200k events
        checkpoint = f"{{path: {tmp / str(uuid.uuid4())}.sqlite}}"
    cfg_path = tmp / f"{uuid.uuid4()}.yaml"
    cfg_path.write_text(
        MODEL
        + f"""
kafka: {{bootstrap_servers: {bootstrap}, group_id: mon-{uuid.uuid4()}, predictions_topic: {pred},
        labels_topic: {lab}, max_poll_records: {max_records}}}
checkpoint: {checkpoint}
"""
    )
    return load_config(cfg_path)


def timed_run(m: _TimedMonitor, target: dict[Any, int], total: int) -> Timing:
    """Run ``m`` until it has processed every record up to ``target`` (end offsets)."""
    m.target = {(k[0], k[1]): v for k, v in target.items()}
    t0 = time.perf_counter()
    m.run()
    end = m.end
    if end is None:
        raise RuntimeError("the monitor stopped before the end of the topics")
    # kafka-python's share of the monitor's steady state (compare with the raw side's time)
    print(
        f"  monitor's polls after its first batch: {m.seconds['poll'] - m.poll_before_first:.2f}s"
    )
    print(
        "  monitor time split:",
        {k: round(v, 2) for k, v in m.seconds.items()},
        f"of {end - t0:.2f}s",
    )
    assert m.first is not None
    return Timing(end - t0, end - m.first[0], total - m.first[1])


def monitored(
    bootstrap: str, pred: str, lab: str, target: dict, total: int, tmp: Path, max_records: int
) -> Timing:
    cfg = monitor_config(bootstrap, pred, lab, tmp, max_records)
    return timed_run(_TimedMonitor(cfg), target, total)


@dataclass
class Topics:
    """The bench's prediction and label topics, filled, and their end offsets."""

    pred: str
    lab: str
    predictions: int
    labels: int
    target: dict[Any, int]

    @property
    def total(self) -> int:
        return self.predictions + self.labels


def make_topics(bootstrap: str, events: int) -> Topics:
    """Two 3-partition topics with ``events`` predictions and their labels (~80 %)."""
    tag = uuid.uuid4().hex[:6]
    pred, lab = f"bp-{tag}", f"bl-{tag}"
    create_topics(bootstrap, {pred: 3, lab: 3})
    # a busy model: 500 decisions per second of event time (alert rules are evaluated per
    # closed one-minute bucket, so their cost depends on event time, not on events)
    preds, labels = make_events(42, n=events, span=events / 500)
    produce(bootstrap, pred, preds)
    produce(bootstrap, lab, labels)
    return Topics(pred, lab, len(preds), len(labels), end_offsets(bootstrap, [pred, lab]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000, help="predictions (labels: ~80%%)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--max-poll-records",
        type=int,
        default=KafkaSpec.max_poll_records,
        help="for both sides (default: the monitor's default)",
    )
    args = ap.parse_args()
    broker = ApacheKafka()
    try:
        t = make_topics(broker.bootstrap, args.events)
        pred, lab, total, target = t.pred, t.lab, t.total, t.target
        tmp = Path(tempfile.mkdtemp())
        best_raw, best_mon, best_fast = (0.0, 0.0), (0.0, 0.0), (0.0, 0.0)
        paired, paired_fast = [], []
        for _ in range(args.rounds):
            mpr = args.max_poll_records
            r = raw(broker.bootstrap, [pred, lab], total, mpr).rate(total)
            f = raw(broker.bootstrap, [pred, lab], total, mpr, c_reader=True).rate(total)
            m = monitored(broker.bootstrap, pred, lab, target, total, tmp, mpr).rate(total)
            print(
                f"  round: raw {r[0]:,.0f}, raw with the monitor's reader {f[0]:,.0f}, "
                f"monitor {m[0]:,.0f} events/s"
            )
            best_raw = (max(best_raw[0], r[0]), max(best_raw[1], r[1]))
            best_fast = (max(best_fast[0], f[0]), max(best_fast[1], f[1]))
            best_mon = (max(best_mon[0], m[0]), max(best_mon[1], m[1]))
            paired.append(m[0] / r[0])
            paired_fast.append(m[0] / f[0])
        print(f"events: {total:,} ({t.predictions:,} predictions, {t.labels:,} labels)")
        print(f"raw kafka-python poll: {best_raw[0]:,.0f} events/s")
        print(f"raw poll, kafka-python + the monitor's record reader: {best_fast[0]:,.0f} events/s")
        print(f"fairness-monitor run:  {best_mon[0]:,.0f} events/s")
        print(f"throughput ratio monitor/raw: {best_mon[0] / best_raw[0]:.2f} (target >= 0.75)")
        # the two sides of one round ran back to back: their ratio cancels slow drifts of a
        # shared machine
        print(f"median of the rounds' own ratios: {statistics.median(paired):.2f}")
        # what the monitor's own work costs, with the same record reader on both sides
        print(
            f"monitor / raw poll with the same reader: {best_mon[0] / best_fast[0]:.2f} "
            f"(rounds' median {statistics.median(paired_fast):.2f})"
        )
        print(
            f"whole run from construction: raw {best_raw[1]:,.0f}, monitor {best_mon[1]:,.0f}"
            f" events/s: ratio {best_mon[1] / best_raw[1]:.2f}"
        )
    finally:
        broker.close()


if __name__ == "__main__":
    main()
