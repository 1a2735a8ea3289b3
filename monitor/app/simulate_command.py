"""The ``simulate`` command: the lending simulation's events written to JSONL files, or produced
to Kafka in (scaled) real time until stopped."""

from __future__ import annotations

import math
import os
import signal
import sys

from monitor.app.simulate import LendingSimulation, run_simulation


def simulate_to_files(
    sim: LendingSimulation, out: str, *, predictions_topic: str, labels_topic: str, hours: float
) -> int:
    """Write ``hours`` of events to ``out``/predictions.jsonl and labels.jsonl, as fast as
    they are made; the number of events."""
    os.makedirs(out, exist_ok=True)
    files = {
        predictions_topic: open(os.path.join(out, "predictions.jsonl"), "wb"),  # noqa: SIM115
        labels_topic: open(os.path.join(out, "labels.jsonl"), "wb"),  # noqa: SIM115
    }

    def write(topic: str, _key: bytes, value: bytes) -> None:
        files[topic].write(value + b"\n")

    try:
        n = run_simulation(
            sim,
            write,
            predictions_topic=predictions_topic,
            labels_topic=labels_topic,
            speed=math.inf,
            hours=hours,
        )
    finally:
        for fh in files.values():
            fh.close()
    print(f"wrote {n} events to {out}", file=sys.stderr)
    return n


def simulate_to_kafka(
    sim: LendingSimulation,
    bootstrap: str,
    *,
    predictions_topic: str,
    labels_topic: str,
    speed: float,
    hours: float | None,
) -> int:
    """Produce events to Kafka at ``speed`` simulated seconds per second until ``hours`` have
    passed or SIGTERM/SIGINT; the number of events."""
    from kafka import KafkaProducer

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, acks=1, client_id="lending-simulator"
    )

    def progress(s: LendingSimulation, _b: object) -> None:
        if s.now % 3600 == 0:
            print(f"hour {s.hours:.0f}: weights {s.weights.round(2).tolist()}", flush=True)

    try:
        n = run_simulation(
            sim,
            lambda topic, k, v: producer.send(topic, key=k, value=v) and None,
            predictions_topic=predictions_topic,
            labels_topic=labels_topic,
            speed=speed,
            hours=hours,
            stop=lambda: bool(stopping),
            on_step=progress,
        )
    finally:
        producer.flush(10)
        producer.close(5)
    print(f"produced {n} events", flush=True)
    return n
