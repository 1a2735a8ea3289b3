"""Command line: ``fairness-monitor check-config | replay``.

Errors a user can fix (bad config, unreadable file) print one clear line and exit 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence

from monitor import __version__
from monitor.config import ConfigError, load_config
from monitor.engine import Engine
from monitor.events import RawRecord
from monitor.replay import replay, stderr_progress
from monitor.report import build_report, format_table
from monitor.sources.file import load_csv_mapping, read_csv, read_jsonl


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
    r.add_argument("--format", choices=("table", "json"), default="table")
    r.add_argument("--batch-size", type=int, default=10_000)
    r.add_argument("--dead-letters", help="write dead-lettered records here (JSONL)")
    return p


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
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.alerts.sinks import alert_json

    engine = Engine(cfg)
    evaluator = AlertEvaluator(cfg, engine)
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
    if args.dead_letters:
        with open(args.dead_letters, "w", encoding="utf-8") as fh:
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
    _print_report(report, args.format)
    return 0


def _print_report(report: dict[str, object], fmt: str) -> None:
    if fmt == "json":
        json.dump(report, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_table(report))


def _status(args: argparse.Namespace) -> int:
    from monitor.checkpoint import CheckpointError, CheckpointStore

    cfg = load_config(args.config)
    engine = Engine(cfg)
    try:
        store = CheckpointStore(args.checkpoint or cfg.checkpoint.path)
        offsets = {}
        for p in store.partitions():
            cp = store.load(p)
            assert cp is not None
            engine.import_partition(p, cp.meta, cp.arrays)
            offsets[str(p)] = cp.offsets
    except (CheckpointError, ValueError) as exc:
        print(f"fairness-monitor: {exc}", file=sys.stderr)
        return 2
    report = build_report(engine.snapshot(), confidence=cfg.confidence, invalid=engine.invalid)
    report["offsets"] = offsets
    _print_report(report, args.format)
    return 0


def _run(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    from monitor.checkpoint import CheckpointError
    from monitor.logs import setup_logging
    from monitor.service import EXIT_CONFIG, run_service
    from monitor.sources.kafka import CopartitionError

    cfg = load_config(args.config)
    setup_logging(cfg.service.log_format, cfg.service.log_level)
    try:
        return run_service(cfg)
    except KafkaError as exc:
        print(
            f"fairness-monitor: cannot use Kafka at {','.join(cfg.kafka.bootstrap_servers)}: {exc}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    except CopartitionError as exc:
        print(f"fairness-monitor: refusing to start: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except CheckpointError as exc:
        print(
            f"fairness-monitor: refusing to start: {exc} (set checkpoint.on_corrupt: fresh "
            "to move it aside and start over)",
            file=sys.stderr,
        )
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
    except ConfigError as exc:
        print(f"fairness-monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"fairness-monitor: {exc}", file=sys.stderr)
        return 2
    return 1
