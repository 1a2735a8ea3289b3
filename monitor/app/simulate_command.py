"""The ``simulate`` command: the lending simulation's events written to JSONL files, or produced
to Kafka in (scaled) real time until stopped."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time

from monitor.app.simulate import LendingSimulation, run_simulation
from monitor.app.simulate_serving import serving_records
from monitor.config.decode import ConfigError


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
    fmt: str = "monitor-json",
    responses_topic: str | None = None,
    attributes_topic: str | None = None,
) -> int:
    """Produce events to Kafka at ``speed`` simulated seconds per second until ``hours`` have
    passed or SIGTERM/SIGINT; the number of events. ``fmt``: the predictions as the monitor's
    own events, or as a serving stack logs them (``simulate_serving.py``)."""
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

    def send(topic: str, key: bytes, value: bytes) -> None:
        if topic != predictions_topic or fmt == "monitor-json":
            producer.send(topic, key=key, value=value)
            return
        apart = attributes_topic is not None
        if apart:  # the attributes on their own topic, the requests without them
            ev = json.loads(value)
            doc = {"id": str(ev["prediction_id"]), "attributes": ev["attributes"]}
            producer.send(
                attributes_topic,
                key=key,
                value=json.dumps({**doc, "timestamp": ev["timestamp"]}).encode(),
            )
        for half, k, v, headers, ms in serving_records(fmt, value, attributes=not apart):
            # bare OIP and Seldon have no time but the record's: the simulated time
            at = None if fmt == "kserve-cloudevents" else ms
            to = responses_topic if half == "response" and responses_topic else topic
            producer.send(to, key=k, value=v, headers=headers, timestamp_ms=at)

    try:
        n = run_simulation(
            sim,
            send,
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


def simulate_command(args: argparse.Namespace) -> int:
    """``fairness-monitor simulate``: to files (``--out``) or to Kafka (``--bootstrap``)."""
    from monitor.app.simulate import scenario

    start = args.start if args.start is not None else time.time() // 60 * 60
    sim = LendingSimulation(
        scenario(args.scenario), seed=args.seed, start=start, rate_per_hour=args.rate
    )
    topics = {"predictions_topic": args.predictions_topic, "labels_topic": args.labels_topic}
    if args.out:
        if args.hours is None:
            raise ConfigError("", "--out needs --hours")
        if args.format != "monitor-json" or getattr(args, "attributes_topic", None):
            raise ConfigError("", "--format other than monitor-json needs --bootstrap (headers)")
        simulate_to_files(sim, args.out, hours=args.hours, **topics)
    elif args.bootstrap:
        responses = args.responses_topic
        if args.format == "seldon" and not responses:
            if not args.predictions_topic.endswith(".inputs"):
                raise ConfigError("", "--format seldon needs --responses-topic (or *.inputs)")
            responses = args.predictions_topic.removesuffix(".inputs") + ".outputs"
        simulate_to_kafka(
            sim, args.bootstrap, speed=args.speed, hours=args.hours, fmt=args.format,
            responses_topic=responses, attributes_topic=getattr(args, "attributes_topic", None), **topics,
        )  # fmt: skip
    else:
        raise ConfigError("", "give --bootstrap HOST:PORT or --out DIR")
    return 0
