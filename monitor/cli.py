"""Command line: ``fairness-monitor check-config | replay``.

Errors a user can fix (bad config, unreadable file) print one clear line and exit 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from monitor import __version__
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.sinks import alert_json
from monitor.app.replay import replay, stderr_progress
from monitor.app.simulate import SCENARIOS
from monitor.config.spec import Config, ConfigError, load_config
from monitor.ingest.events import DeadLetter, RawRecord
from monitor.ingest.file import UnreadableInput, load_csv_mapping, read_csv, read_jsonl
from monitor.outputs.report import build_report, format_table
from monitor.state.engine import Engine


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fairness-monitor",
        description="Streaming fairness monitor for ML models in production.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check-config", help="validate a configuration file and exit")
    c.add_argument("config", help="YAML configuration file")

    run = sub.add_parser("run", help="consume the Kafka topics and monitor continuously")
    run.add_argument("--config", "-c", required=True, help="YAML configuration file")

    st = sub.add_parser("status", help="print the report held in a run's checkpoint")
    st.add_argument("--config", "-c", required=True, help="YAML configuration file")
    st.add_argument("--checkpoint", help="checkpoint file (default: checkpoint.path)")
    st.add_argument("--format", choices=("table", "json"), default="table")

    r = sub.add_parser("replay", help="run the engine over recorded events and print a report")
    _inputs(r)
    r.add_argument("--format", choices=("table", "json"), default="table")
    r.add_argument("--dead-letters", help="write dead-lettered records here (JSONL)")

    a = sub.add_parser(
        "report", help="write a self-contained HTML audit report (from a replay or a checkpoint)"
    )
    _inputs(a, required=False)
    a.add_argument("--checkpoint", help="report on a run's checkpoint instead of a replay")
    a.add_argument("--out", "-o", required=True, help="HTML file to write")
    a.add_argument("--title", default="Fairness audit report")

    d = sub.add_parser(
        "demo", help="embedded broker + simulated lending model + the monitor, in one command"
    )
    d.add_argument("--scenario", default="feedback-loop", choices=sorted(SCENARIOS))
    d.add_argument("--bootstrap", help="use this Kafka (HOST:PORT) instead of the embedded broker")
    d.add_argument("--host", default="127.0.0.1", help="status page / metrics address")
    d.add_argument("--port", type=int, default=8000, help="status page / metrics port (0: any)")
    d.add_argument("--speed", type=float, default=1000.0, help="simulated seconds per second")
    d.add_argument("--seed", type=int, default=7)
    d.add_argument("--hours", type=float, help="stop the simulator after this many hours")
    d.add_argument("--duration", type=float, help="stop the demo after this many seconds")
    d.add_argument("--report", help="write an HTML audit report here when the demo stops")
    d.add_argument("--print-config", action="store_true", help="print the monitor's config")

    s = sub.add_parser("simulate", help="produce a simulated lending model's events")
    s.add_argument("--scenario", default="feedback-loop", choices=sorted(SCENARIOS))
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (HOST:PORT)")
    s.add_argument("--out", help="write predictions.jsonl and labels.jsonl here instead")
    s.add_argument("--predictions-topic", default="lending-predictions")
    s.add_argument("--labels-topic", default="lending-labels")
    s.add_argument("--speed", type=float, default=1000.0, help="simulated seconds per second")
    s.add_argument("--rate", type=float, default=600.0, help="applicants per simulated hour")
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--hours", type=float, help="simulated hours to run (default: forever)")
    s.add_argument("--start", type=float, help="simulated start, epoch seconds (default: now)")
    return p


def _inputs(r: argparse.ArgumentParser, *, required: bool = True) -> None:
    r.add_argument("--config", "-c", required=True, help="YAML configuration file")
    r.add_argument(
        "--predictions",
        "-p",
        action="append",
        default=[],
        help="JSONL file of prediction events (repeatable)",
    )
    r.add_argument(
        "--labels",
        "-l",
        action="append",
        default=[],
        help="JSONL file of label events (repeatable)",
    )
    r.add_argument(
        "--csv",
        action="append",
        default=[],
        help="CSV file of cases (needs --csv-mapping; repeatable)",
    )
    r.add_argument("--csv-mapping", help="YAML mapping of CSV columns to event fields")
    r.add_argument("--batch-size", type=int, default=10_000)


def _check_config(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    for name, m in cfg.models.items():
        sets = ", ".join("&".join(s) for s in m.attribute_sets)
        wins = ", ".join(w.name for w in m.windows)
        print(f"model {name}: attributes [{sets}] windows [{wins}] favourable={m.favourable}")
    print(f"{args.config}: OK")
    return 0


def _replay(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    report, dead, _ = _replayed(args, cfg)
    if args.dead_letters:
        _write_dead_letters(args.dead_letters, dead)
    _print_report(report, args.format)
    return 0


def _replayed(
    args: argparse.Namespace, cfg: Config, *, series_points: int | None = 0
) -> tuple[dict[str, Any], list[DeadLetter], AlertEvaluator]:
    """Replay the events named on the command line: the report, dead letters, evaluator."""
    if not (args.predictions or args.csv):
        raise ConfigError("", "give --predictions FILE or --csv FILE")
    preds: list[RawRecord] = []
    labels: list[RawRecord] = []
    for path in args.predictions:
        preds.extend(read_jsonl(path))
    for path in args.labels:
        labels.extend(read_jsonl(path))
    if args.csv:
        if not args.csv_mapping:
            raise ConfigError("", "--csv needs --csv-mapping")
        mapping = load_csv_mapping(args.csv_mapping)
        for path in args.csv:
            p, lab, _ = read_csv(path, mapping, cfg.fields)
            preds += p
            labels += lab
    engine = Engine(cfg)
    evaluator = AlertEvaluator(cfg, engine, series_points=series_points)
    dead = replay(
        engine,
        preds,
        labels,
        batch_size=args.batch_size,
        progress=stderr_progress,
        evaluator=evaluator,
    )
    report = build_report(
        engine.snapshot(),
        confidence=cfg.confidence,
        invalid=dict(Counter(d.reason.value for d in dead)),
    )
    # the backtest: when each alert would have fired and resolved, with its evidence
    report["alerts"] = [
        alert_json(t.alert) for t in evaluator.history if t.alert.state != "pending"
    ]
    return report, dead, evaluator


def _write_dead_letters(path: str, dead: list[DeadLetter]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for d in dead:
            raw = d.record.value
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else json.dumps(raw)
            fh.write(
                json.dumps(
                    {
                        "reason": d.reason.value,
                        "detail": d.detail,
                        "source": d.record.topic,
                        "offset": d.record.offset,
                        "value": text,
                    }
                )
                + "\n"
            )


def _print_report(report: dict[str, object], fmt: str) -> None:
    if fmt == "json":
        json.dump(report, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_table(report))


def _restored(cfg: Config, path: str) -> tuple[Engine, dict[str, Any], Any]:
    """The engine state (and offsets, and the store) held in a run's checkpoint."""
    from monitor.state.checkpoint import CheckpointStore

    engine = Engine(cfg)
    store = CheckpointStore(path)
    offsets = {}
    for p in store.partitions():
        cp = store.load(p)
        assert cp is not None
        engine.import_partition(p, cp.meta, cp.arrays)
        offsets[str(p)] = cp.offsets
    return engine, offsets, store


def _status(args: argparse.Namespace) -> int:
    from monitor.state.checkpoint import CheckpointError

    cfg = load_config(args.config)
    try:
        engine, offsets, _ = _restored(cfg, args.checkpoint or cfg.checkpoint.path)
    except (CheckpointError, ValueError) as exc:
        print(f"fairness-monitor: {exc}", file=sys.stderr)
        return 2
    report = build_report(engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid)
    report["offsets"] = offsets
    _print_report(report, args.format)
    return 0


def _audit(args: argparse.Namespace) -> int:
    """``report``: the HTML audit report, from a replay or from a checkpoint."""
    from monitor.alerts import persist
    from monitor.outputs.audit import write_html
    from monitor.state.checkpoint import CheckpointError

    cfg = load_config(args.config)
    if args.checkpoint:
        try:
            engine, _, store = _restored(cfg, args.checkpoint)
            saved = AlertEvaluator(cfg, engine)
            persist.restore(saved, store.load_alerts())
        except (CheckpointError, ValueError) as exc:
            print(f"fairness-monitor: {exc}", file=sys.stderr)
            return 2
        fired = [alert_json(a) for a in saved.book.firing()]
        # the history of the retained span: its closed boundaries, evaluated afresh
        evaluator = AlertEvaluator(cfg, engine, series_points=None)
        evaluator.advance()
        report = build_report(engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid)
        report["alerts"] = fired
        source = f"checkpoint {args.checkpoint}"
    else:
        report, _, evaluator = _replayed(args, cfg, series_points=None)
        source = "replay of " + ", ".join(args.predictions + args.labels + args.csv)
    write_html(args.out, report, evaluator.series, config=cfg, title=args.title, source=source)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from monitor.app.demo import demo_config_text, run_demo

    if args.print_config:
        print(demo_config_text(args.bootstrap or "localhost:9092", host=args.host, port=args.port))
        return 0
    return run_demo(
        scenario=args.scenario,
        bootstrap=args.bootstrap,
        host=args.host,
        port=args.port,
        speed=args.speed,
        seed=args.seed,
        hours=args.hours,
        duration=args.duration,
        report=args.report,
    )


def _simulate(args: argparse.Namespace) -> int:
    import signal
    import time

    from monitor.app.simulate import LendingSimulation, run_simulation, scenario

    start = args.start if args.start is not None else time.time() // 60 * 60
    sim = LendingSimulation(
        scenario(args.scenario), seed=args.seed, start=start, rate_per_hour=args.rate
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    topics = {"p": args.predictions_topic, "l": args.labels_topic}
    if args.out:
        import os

        if args.hours is None:
            raise ConfigError("", "--out needs --hours")
        os.makedirs(args.out, exist_ok=True)
        files = {
            topics["p"]: open(os.path.join(args.out, "predictions.jsonl"), "wb"),  # noqa: SIM115
            topics["l"]: open(os.path.join(args.out, "labels.jsonl"), "wb"),  # noqa: SIM115
        }

        def write(topic: str, _key: bytes, value: bytes) -> None:
            files[topic].write(value + b"\n")

        try:
            n = run_simulation(
                sim,
                write,
                predictions_topic=topics["p"],
                labels_topic=topics["l"],
                speed=math.inf,
                hours=args.hours,
            )
        finally:
            for fh in files.values():
                fh.close()
        print(f"wrote {n} events to {args.out}", file=sys.stderr)
        return 0
    if not args.bootstrap:
        raise ConfigError("", "give --bootstrap HOST:PORT or --out DIR")
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap, linger_ms=20, acks=1, client_id="lending-simulator"
    )

    def progress(s: LendingSimulation, _b: object) -> None:
        if s.now % 3600 == 0:
            print(f"hour {s.hours:.0f}: weights {s.weights.round(2).tolist()}", flush=True)

    try:
        n = run_simulation(
            sim,
            lambda topic, k, v: producer.send(topic, key=k, value=v) and None,
            predictions_topic=topics["p"],
            labels_topic=topics["l"],
            speed=args.speed,
            hours=args.hours,
            stop=lambda: bool(stopping),
            on_step=progress,
        )
    finally:
        producer.flush(10)
        producer.close(5)
    print(f"produced {n} events", flush=True)
    return 0


def _run(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    from monitor.app.logs import setup_logging
    from monitor.app.service import EXIT_CONFIG, run_service
    from monitor.ingest.kafka import TopicError
    from monitor.ingest.kafka_auth import KafkaAuthError
    from monitor.state.checkpoint import CheckpointCorrupt, CheckpointError

    cfg = load_config(args.config)
    setup_logging(cfg.service.log_format, cfg.service.log_level)
    try:
        return run_service(cfg)
    except KafkaAuthError as exc:
        print(f"fairness-monitor: refusing to start: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KafkaError as exc:
        print(
            f"fairness-monitor: cannot use Kafka at {','.join(cfg.kafka.bootstrap_servers)}: {exc}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    except TopicError as exc:
        print(f"fairness-monitor: refusing to start: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except CheckpointError as exc:
        # the on_corrupt hint only where it would help: a corrupt file under "refuse"
        hint = (
            " (set checkpoint.on_corrupt: fresh to move it aside and start over)"
            if isinstance(exc, CheckpointCorrupt) and cfg.checkpoint.on_corrupt == "refuse"
            else ""
        )
        print(f"fairness-monitor: refusing to start: {exc}{hint}", file=sys.stderr)
        return EXIT_CONFIG


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "check-config":
            return _check_config(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "run":
            return _run(args)
        if args.command == "status":
            return _status(args)
        if args.command == "report":
            return _audit(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "simulate":
            return _simulate(args)
    except ConfigError as exc:
        print(f"fairness-monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    except (OSError, UnreadableInput) as exc:
        print(f"fairness-monitor: {exc}", file=sys.stderr)
        return 2
    return 1
