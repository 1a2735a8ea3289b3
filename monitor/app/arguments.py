"""The command line's arguments: every command of ``cli.py`` and what it takes (argparse).
Numbers a command cannot use (a batch of no events) are refused here, by argparse, with the
argument named."""

from __future__ import annotations

import argparse

from monitor import __version__
from monitor.app.simulate import SCENARIOS

FORMATS = ["monitor-json", "oip-json", "kserve-cloudevents", "seldon"]  # simulate, demo


def parser() -> argparse.ArgumentParser:
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
    c.add_argument(
        "--reference",
        action="store_true",
        help="print every configuration key, its type, default and meaning (docs/config.md)",
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
    r.add_argument("--batch-size", type=_positive, default=10_000)
    r.add_argument(
        "--now",
        type=_time,
        metavar="TIME",
        help="judge the data as of TIME (ISO-8601, UTC unless it says, or epoch seconds) "
        "instead of the clock: events dated more than max_future after it are dead-lettered "
        "and CSV label times are capped at it; give it for an audit that reads the same "
        "whenever it is rerun",
    )


def _time(text: str) -> float:
    """A point in time for ``--now``, as an event's timestamp is read."""
    from monitor.ingest.events import Invalid
    from monitor.ingest.fields import parse_timestamp

    try:
        return parse_timestamp(text)
    except Invalid as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.detail}") from None


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:  # a negative size dropped a batch of events unread; zero divided by zero
        raise argparse.ArgumentTypeError(f"{n}: must be at least 1")
    return n
