"""Command line: ``fairness-monitor check-config | run | status | replay | gate | report | demo |
simulate``: argument parsing and dispatch. Each command's work lives in the layer it belongs
to (the backtest in ``app/backtest.py``, checkpoint reports in ``outputs/checkpoint_report.py``,
``run`` in ``app/run_command.py``, ``simulate`` in ``app/simulate_command.py``).

Errors a user can fix (bad config, unreadable file) print one clear line and exit 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from monitor import __version__
from monitor.app.simulate import SCENARIOS
from monitor.config.spec import ConfigError, json_schema, load_config
from monitor.ingest.file import UnreadableInput
from monitor.outputs.report import format_table

FORMATS = ["monitor-json", "oip-json", "kserve-cloudevents", "seldon"]  # simulate, demo


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fairness-monitor",
        description="Streaming fairness monitor for ML models in production.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check-config", help="validate a configuration file and exit")
    c.add_argument("config", nargs="?", help="YAML configuration file")
    c.add_argument(
        "--schema", action="store_true", help="print the configuration's JSON Schema and exit"
    )

    run = sub.add_parser("run", help="consume the Kafka topics and monitor continuously")
    run.add_argument("--config", "-c", required=True, help="YAML configuration file")

    st = sub.add_parser("status", help="print the report held in a run's checkpoint")
    st.add_argument("--config", "-c", required=True, help="YAML configuration file")
    st.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a SQLite checkpoint file (default: the configured store: checkpoint.path, or with "
        "checkpoint.store: kafka the state topic, read without writing to it)",
    )
    st.add_argument("--format", choices=("table", "json"), default="table")

    r = sub.add_parser("replay", help="run the engine over recorded events and print a report")
    _inputs(r)
    r.add_argument("--format", choices=("table", "json"), default="table")
    r.add_argument("--dead-letters", help="write dead-lettered records here (JSONL)")
    r.add_argument(
        "--timeline",
        metavar="FILE",
        help="write every closed bucket boundary's disparities (with bounds, blind marked), "
        "group rates and detector evidence here (JSON lines)",
    )

    g = sub.add_parser(
        "gate",
        help="CI fairness gate: exit 1 when a rule is breached significantly on the given data",
        description="Replay recorded events (a validation set) and judge fairness rules on the "
        "whole data: exit 1 when a rule's whole confidence interval is past its bound, 0 "
        "otherwise, 2 on bad input.",
    )
    _inputs(g)
    g.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="RULE",
        help="a configured rule (FourFifthsRule, EqualizedOddsGap, ...) or a metric "
        "(disparate_impact_ratio, tpr_gap, ...), optionally RULE=BOUND; repeatable "
        "(default: the configured alert rules that apply to a window holding the whole data)",
    )
    g.add_argument("--junit", metavar="PATH", help="write a JUnit XML report here")
    g.add_argument(
        "--model", action="append", default=[], help="judge only this model (repeatable)"
    )
    g.add_argument(
        "--allow-invalid",
        action="store_true",
        help="judge without unreadable records instead of exiting 2",
    )

    a = sub.add_parser(
        "report", help="write a self-contained HTML audit report (from a replay or a checkpoint)"
    )
    _inputs(a, required=False)
    a.add_argument(
        "--checkpoint",
        nargs="?",
        const="",
        metavar="FILE",
        help="report on a run's checkpoint instead of a replay: the SQLite FILE, or without "
        "FILE the configured store (checkpoint.path, or the state topic with "
        "checkpoint.store: kafka, read without writing to it)",
    )
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
    d.add_argument("--format", default="monitor-json", choices=FORMATS, help="see simulate")
    d.add_argument("--attributes-apart", action="store_true", help="on a topic of their own")

    pr = sub.add_parser("prometheus-rules", help="write the Prometheus rules for a configuration")
    pr.add_argument("--config", "-c", required=True, help="YAML configuration file")
    pr.add_argument("--out", "-o", action="append", default=[], help="file to write (repeatable)")

    s = sub.add_parser("simulate", help="produce a simulated lending model's events")
    s.add_argument("--scenario", default="feedback-loop", choices=sorted(SCENARIOS))
    s.add_argument("--bootstrap", help="Kafka bootstrap servers (HOST:PORT)")
    s.add_argument("--out", help="write predictions.jsonl and labels.jsonl here instead")
    s.add_argument("--predictions-topic", default="lending-predictions")
    s.add_argument("--labels-topic", default="lending-labels")
    s.add_argument("--responses-topic", help="seldon: the responses (default: *.outputs)")
    s.add_argument("--attributes-topic", help="serving: the attributes here, not in requests")
    s.add_argument("--speed", type=float, default=1000.0, help="simulated seconds per second")
    s.add_argument("--rate", type=float, default=600.0, help="applicants per simulated hour")
    s.add_argument("--seed", type=int, default=7)
    s.add_argument("--hours", type=float, help="simulated hours to run (default: forever)")
    s.add_argument("--start", type=float, help="simulated start, epoch seconds (default: now)")
    s.add_argument(
        "--format",
        default="monitor-json",
        choices=FORMATS,
        help="predictions as the monitor's events or as a serving stack logs them (Kafka only)",
    )
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
    if args.schema:
        json.dump(json_schema(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    if not args.config:
        raise ConfigError("", "give a configuration file (or --schema)")
    cfg = load_config(args.config)
    for name, m in cfg.models.items():
        sets = ", ".join(m.set_names)
        wins = ", ".join(w.name for w in m.windows)
        print(f"model {name}: attributes [{sets}] windows [{wins}] favourable={m.favourable}")
    print(f"{args.config}: OK")
    return 0


def _replayed(args: argparse.Namespace, series_points: int | None = 0) -> Any:
    from monitor.app.backtest import replay_files

    return replay_files(
        load_config(args.config),
        predictions=args.predictions,
        labels=args.labels,
        csv=args.csv,
        csv_mapping=args.csv_mapping,
        batch_size=args.batch_size,
        series_points=series_points,
        timeline=getattr(args, "timeline", None),
    )


def _replay(args: argparse.Namespace) -> int:
    from monitor.app.backtest import write_dead_letters

    report, dead, _ = _replayed(args)
    if args.dead_letters:
        write_dead_letters(args.dead_letters, dead)
    _print_report(report, args.format)
    return 0


def _gate(args: argparse.Namespace) -> int:
    """``gate``: the whole-data verdict of the rules, a summary, optionally JUnit XML."""
    from monitor.app.gate import run_gate
    from monitor.app.gate_report import summary, write_junit

    t0 = time.monotonic()
    result = run_gate(
        load_config(args.config),
        predictions=args.predictions,
        labels=args.labels,
        csv=args.csv,
        csv_mapping=args.csv_mapping,
        fail_on=args.fail_on,
        models=args.model,
        allow_invalid=args.allow_invalid,
        batch_size=args.batch_size,
    )
    print(summary(result))
    if args.junit:
        write_junit(args.junit, result, elapsed=time.monotonic() - t0)
        print(f"wrote {args.junit}", file=sys.stderr)
    return result.exit_code


def _print_report(report: dict[str, object], fmt: str) -> None:
    if fmt == "json":
        json.dump(report, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_table(report))


def _status(args: argparse.Namespace) -> int:
    from monitor.outputs.checkpoint_report import status_report
    from monitor.state.checkpoint import CheckpointError

    cfg = load_config(args.config)
    try:
        report = status_report(cfg, args.checkpoint or None)
    except (CheckpointError, ValueError) as exc:
        print(f"fairness-monitor: {exc}", file=sys.stderr)
        return 2
    _print_report(report, args.format)
    return 0


def _report(args: argparse.Namespace) -> int:
    """``report``: the HTML audit report, from a replay or from a checkpoint."""
    from monitor.outputs.audit import write_html
    from monitor.outputs.checkpoint_report import checkpoint_audit
    from monitor.state.checkpoint import CheckpointError
    from monitor.state.stores import describe

    cfg = load_config(args.config)
    if args.checkpoint is not None:
        try:
            report, evaluator = checkpoint_audit(cfg, args.checkpoint or None)
        except (CheckpointError, ValueError) as exc:
            print(f"fairness-monitor: {exc}", file=sys.stderr)
            return 2
        where = describe(cfg.checkpoint)  # checkpoint PATH, or state topic TOPIC
        source = f"checkpoint {args.checkpoint}" if args.checkpoint else where
    else:
        report, _, evaluator = _replayed(args, series_points=None)
        source = "replay of " + ", ".join(args.predictions + args.labels + args.csv)
    write_html(args.out, report, evaluator.series, config=cfg, title=args.title, source=source)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from monitor.app.demo import demo_config_text, run_demo

    serving = {"fmt": args.format, "apart": args.attributes_apart}
    if args.print_config:
        boot = args.bootstrap or "localhost:9092"
        print(demo_config_text(boot, host=args.host, port=args.port, **serving))
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
        **serving,
    )


def _simulate(args: argparse.Namespace) -> int:
    from monitor.app.simulate_command import simulate_command

    return simulate_command(args)


def _run(args: argparse.Namespace) -> int:
    from monitor.app.run_command import run

    return run(load_config(args.config))


def _prometheus_rules(args: argparse.Namespace) -> int:
    from monitor.outputs.promql import prometheus_rules_command

    return prometheus_rules_command(args.config, args.out)


COMMANDS = {
    "check-config": _check_config,
    "run": _run,
    "status": _status,
    "replay": _replay,
    "gate": _gate,
    "report": _report,
    "demo": _demo,
    "simulate": _simulate,
    "prometheus-rules": _prometheus_rules,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"fairness-monitor: configuration error: {exc}", file=sys.stderr)
        return 2
    except (OSError, UnreadableInput) as exc:
        print(f"fairness-monitor: {exc}", file=sys.stderr)
        return 2
