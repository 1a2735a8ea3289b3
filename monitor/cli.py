"""Command line: ``fairness-monitor check-config | run | status | replay | gate | report | demo |
simulate``: dispatch (the arguments are parsed as ``app/arguments.py`` declares them). Each command's work lives in the layer it belongs
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

from monitor.app.arguments import parser as _parser
from monitor.config.reference import markdown
from monitor.config.spec import ConfigError, json_schema, load_config
from monitor.ingest.file import UnreadableInput
from monitor.outputs.report import format_table, printable


def _check_config(args: argparse.Namespace) -> int:
    if args.schema:
        json.dump(json_schema(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    if args.reference:
        sys.stdout.write(markdown(json_schema()))
        return 0
    if not args.config:
        raise ConfigError("", "give a configuration file (or --schema, --reference)")
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
        now=args.now,
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
        now=args.now,
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
        print(f"fairness-monitor: configuration error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except (OSError, UnreadableInput) as exc:  # its own lines kept (each escaped: a review)
        text = "\n".join(printable(line) for line in str(exc).split("\n"))
        print(f"fairness-monitor: {text}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # `python -m monitor.cli` as `python -m monitor`
    raise SystemExit(main())
