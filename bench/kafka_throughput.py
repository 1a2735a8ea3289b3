"""End-to-end `fairness-monitor run` throughput vs raw kafka-python consumption (poll only).

Starts a real Apache Kafka broker (tests/broker.py: Maven jars, Java 17), produces the same
events to a prediction and a label topic, then alternates, in one run:

* **raw**: a kafka-python consumer in a fresh group polls both topics to the end, doing nothing
  with the records;
* **monitor**: the service loop (``monitor.service.Monitor``) in a fresh group with a fresh
  checkpoint consumes the same topics end to end — decode, engine, dead letters, checkpoints.

Reports events/s for both and the ratio. Run: python -m bench.kafka_throughput [--events N]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

from kafka import KafkaConsumer

from monitor.config import load_config
from monitor.service import Monitor
from tests.broker import ApacheKafka
from tests.kafka_helpers import MODEL, create_topics, end_offsets, produce
from tests.test_replay import make_events


def raw(bootstrap: str, topics: list[str], total: int, max_records: int) -> float:
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
    t = time.perf_counter()
    n = 0
    while n < total:
        for recs in c.poll(timeout_ms=200).values():
            n += len(recs)
    elapsed = time.perf_counter() - t
    c.close()
    return elapsed


def monitored(bootstrap: str, pred: str, lab: str, target: dict, tmp: Path) -> float:
    cfg_path = tmp / f"{uuid.uuid4()}.yaml"
    cfg_path.write_text(
        MODEL
        + f"""
kafka: {{bootstrap_servers: {bootstrap}, group_id: mon-{uuid.uuid4()}, predictions_topic: {pred},
        labels_topic: {lab}}}
checkpoint: {{path: {tmp / str(uuid.uuid4())}.sqlite}}  # shipped defaults: 10s or 200k events
"""
    )
    m = Monitor(load_config(cfg_path))
    t = time.perf_counter()
    errors: list[BaseException] = []

    def target_run() -> None:
        try:
            m.run()
        except BaseException as exc:
            errors.append(exc)
            raise

    th = threading.Thread(target=target_run)
    th.start()
    want = {(k[0], k[1]): v for k, v in target.items()}
    while True:
        got = {(tp.topic, tp.partition): o for tp, o in dict(m.next_offsets).items()}
        if len(got) == len(want) and all(got[k] >= v for k, v in want.items()):
            break
        if not th.is_alive():
            raise RuntimeError(f"the monitor stopped early: {errors}")
        time.sleep(0.01)
    elapsed = time.perf_counter() - t
    m.request_stop()
    th.join()
    print(
        "  monitor time split:",
        {k: round(v, 2) for k, v in m.seconds.items()},
        f"of {elapsed:.2f}s",
    )
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000, help="predictions (labels: ~80%%)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    broker = ApacheKafka()
    try:
        tag = uuid.uuid4().hex[:6]
        pred, lab = f"bp-{tag}", f"bl-{tag}"
        create_topics(broker.bootstrap, {pred: 3, lab: 3})
        # a busy model: 500 decisions per second of event time (alert rules are evaluated per
        # closed one-minute bucket, so their cost depends on event time, not on events)
        preds, labels = make_events(42, n=args.events, span=args.events / 500)
        produce(broker.bootstrap, pred, preds)
        produce(broker.bootstrap, lab, labels)
        total = len(preds) + len(labels)
        target = end_offsets(broker.bootstrap, [pred, lab])
        tmp = Path(tempfile.mkdtemp())
        best_raw = best_mon = float("inf")
        for _ in range(args.rounds):
            best_raw = min(best_raw, raw(broker.bootstrap, [pred, lab], total, 10_000))
            best_mon = min(best_mon, monitored(broker.bootstrap, pred, lab, target, tmp))
        print(f"events: {total:,} ({len(preds):,} predictions, {len(labels):,} labels)")
        print(f"raw kafka-python poll: {total / best_raw:,.0f} events/s ({best_raw:.2f}s)")
        print(f"fairness-monitor run:  {total / best_mon:,.0f} events/s ({best_mon:.2f}s)")
        print(f"ratio monitor/raw: {best_raw / best_mon:.2f} (target >= 0.75)")
    finally:
        broker.close()


if __name__ == "__main__":
    main()
