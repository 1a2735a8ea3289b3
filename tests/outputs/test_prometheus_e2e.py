"""End to end with real binaries: Kafka → monitor → Prometheus (the generated recording and
alerting rules) → Alertmanager → a local webhook receiver; and the monitor's own Alertmanager
sink.

Parity with a configured reference group and a non-default confidence (issue 13): Prometheus,
evaluating the rules that ``fairness-monitor prometheus-rules`` writes for the monitor's own
config, records the monitor's DIR and its bounds to 1e-9, and its alert fires at the first
evaluation at which the monitor's own numbers breach the monitor's rule. ``FM_E2E_RULES=<file>``
runs the same test against another rules file (e.g. the hand-written rules of a729cdb, which
fail it: they always take the highest-rate group as the reference and z = 1.96).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from monitor.config.spec import load_config
from monitor.outputs.promql import rules_yaml
from tests.alerts.test_sinks import Receiver
from tests.conftest import require
from tests.helpers import wait_for
from tests.kafka_helpers import MonitorProcess, create_topics, end_offsets, produce, wait_consumed
from tests.services import (
    alertmanager,
    prometheus,
    wait_monitor_applied,
    wait_rules_evaluated_after,
)

pytestmark = pytest.mark.integration
T0 = 1_767_225_600.0
FAIR = {"F": 0.45, "M": 0.45, "X": 0.45}
BIASED = {"F": 0.25, "M": 0.5, "X": 0.45}  # X is the configured reference: DIR = 0.25 / 0.45
RULES = """
confidence: 0.9
alerts:
  rules:
    - {name: FourFifthsRule, metric: disparate_impact_ratio, op: "<", bound: 0.8,
       significant: true, for: 0s, windows: [1h]}
"""
SEL = 'window="1h",attribute="sex"'


def events(n: int, start: float, hours: float, rates: dict[str, float], seed: int) -> tuple:
    """``n`` decisions over ``hours`` of event time from ``start``, three groups by turns."""
    rng = random.Random(seed)
    preds, labels = [], []
    groups = sorted(rates)
    for i in range(n):
        sex = groups[i % len(groups)]
        t = start + 3600 * hours * i / n
        preds.append(
            {
                "prediction_id": f"e{seed}-{i}",
                "model_id": "credit",
                "timestamp": t,
                "attributes": {"sex": sex, "age": 40},
                "prediction": int(rng.random() < rates[sex]),
            }
        )
        labels.append(
            {"prediction_id": f"e{seed}-{i}", "timestamp": t + 60, "label": int(rng.random() < 0.5)}
        )
    return preds, labels


def samples(prom: Any, expr: str) -> list[tuple[float, float]]:
    """Every raw sample of ``expr`` over the last 10 minutes: (timestamp, value)."""
    q = urllib.parse.quote(f"{expr}[10m]")
    result = prom.get(f"/api/v1/query?query={q}")["data"]["result"]
    assert len(result) <= 1, result
    return [(float(t), float(v)) for t, v in result[0]["values"]] if result else []


def _alive(m: Any) -> None:
    assert m.proc is not None and m.proc.poll() is None, m.log.read_text()[-3000:]


def instant(prom: Any, expr: str) -> float | None:
    result = prom.get(f"/api/v1/query?query={urllib.parse.quote(expr)}")["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_prometheus_parity_alert_and_alertmanager_delivery(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    require(shutil.which("prometheus") is not None, "prometheus (Debian package)")
    require(shutil.which("prometheus-alertmanager") is not None, "prometheus-alertmanager")
    pred, lab = "e2e-pred", "e2e-lab"
    create_topics(kafka.bootstrap, {pred: 2, lab: 2})
    hook = Receiver()
    am = alertmanager(tmp_path, hook.url)
    m = MonitorProcess(
        tmp_path,
        kafka.bootstrap,
        pred=pred,
        lab=lab,
        group="g-e2e",
        extra=RULES + f"  sinks:\n    alertmanager_url: {am.url}\n    resend_interval: 2s\n",
        env={"FAIRNESS_MONITOR__MODELS__CREDIT__REFERENCE_GROUPS": "{sex: X}"},
    )
    cfg = load_config(m.config, env=m.env)
    assert cfg.confidence == 0.9 and cfg.models["credit"].reference_groups == {"sex": "X"}
    (rule,) = cfg.alerts.rules
    rules = tmp_path / "rules.yml"
    other = os.environ.get("FM_E2E_RULES")
    rules.write_text(
        Path(other).read_text().replace("for: 10m", "for: 0s")
        if other
        else rules_yaml(cfg, source=str(m.config))
    )
    m.start()
    prom = prometheus(tmp_path, [f"127.0.0.1:{m.port}"], rules, am.url)
    try:
        m.wait_ready()
        # an hour of fair decisions: Prometheus evaluates it (no breach) before the bias starts
        preds, labels = events(3000, T0, 1, FAIR, 1)
        produce(kafka.bootstrap, pred, preds)
        produce(kafka.bootstrap, lab, labels)
        wait_for(
            lambda: instant(prom, f"fairness:disparate_impact:ratio{{{SEL}}}"),
            60,
            "the fair hour recorded in Prometheus",
        )
        wait_for(
            lambda: instant(prom, f"fairness_disparate_impact_ratio{{{SEL}}}") is not None,
            60,
            "the fair hour scraped",
        )
        preds, labels = events(6000, T0 + 3600, 2, BIASED, 2)
        produce(kafka.bootstrap, pred, preds)
        produce(kafka.bootstrap, lab, labels)
        wait_consumed(m.checkpoint, end_offsets(kafka.bootstrap, [pred, lab]), procs=[m])
        # the monitor's published state holds every record (checkpointed offsets can run ahead
        # of the snapshot /metrics serves); then a scrape and a rule evaluation after that
        settled_at = wait_monitor_applied(m.port, 2 * (3000 + 6000), lambda: _alive(m))
        wait_rules_evaluated_after(prom, settled_at)

        # parity: once the monitor's numbers settle (everything consumed), Prometheus's
        # recording rules evaluate to them
        def settled() -> dict[str, tuple[float, float]] | None:
            out = {}
            for what in ("", "_lower", "_upper"):
                ours = instant(prom, f"fairness_disparate_impact{what}_ratio{{{SEL}}}")
                rec = instant(prom, f"fairness:disparate_impact{what}:ratio{{{SEL}}}")
                if ours is None or rec is None or ours > 0.7:  # still the fair hour
                    return None
                out[what] = (ours, rec)
            return out

        last: list[dict[str, tuple[float, float]]] = []

        def equal() -> bool:
            pairs = settled()
            if pairs is None:
                return False
            last[:] = [pairs]
            return all(r == pytest.approx(o, rel=1e-9) for o, r in pairs.values())

        try:
            wait_for(equal, 30, "Prometheus's recorded DIR and bounds to equal the monitor's")
        except AssertionError:
            detail = {w or "value": p for w, p in (last[0] if last else {}).items()}
            raise AssertionError(f"(monitor, recorded) never equal: {detail}") from None
        ((dir_, _), (lower, _), (upper, _)) = last[0].values()
        # against the configured reference X (the highest-rate group M would give a lower DIR)
        rate = {
            g: instant(prom, f'fairness_selection_rate_ratio{{{SEL},group="{g}"}}') for g in "FMX"
        }
        assert dir_ == pytest.approx(rate["F"] / rate["X"], rel=1e-12), rate
        assert rate["M"] > rate["X"] and upper < 0.8, (rate, lower, upper)

        # the alert fires at the first evaluation at which the monitor's own numbers (the
        # samples Prometheus scraped from it) breach the monitor's rule
        alert = f'ALERTS{{alertname="Fairness{rule.name}",alertstate="firing",{SEL}}}'
        fired = wait_for(lambda: samples(prom, alert), 60, "Prometheus alert firing")
        t_fire = fired[0][0]
        evals = [t for t, _ in samples(prom, f"fairness:disparate_impact:ratio{{{SEL}}}")]
        before = max(t for t in evals if t < t_fire)
        scraped = {
            what: samples(prom, f"fairness_disparate_impact{what}_ratio{{{SEL}}}")
            for what in ("", "_lower", "_upper")
        }
        recorded = dict(samples(prom, f"fairness:disparate_impact:ratio{{{SEL}}}"))

        def monitor_breach(at: float) -> bool:
            """The monitor's rule on the monitor's sample that Prometheus evaluated at ``at``
            (the latest scraped at or before it; the one before if that arrived too late)."""
            idx = [i for i, (t, _) in enumerate(scraped[""]) if t <= at]
            for i in (idx[-1], idx[-2]) if len(idx) > 1 else idx[-1:]:
                value = scraped[""][i][1]
                if value == pytest.approx(recorded[at], rel=1e-9):
                    lower, upper = scraped["_lower"][i][1], scraped["_upper"][i][1]
                    print(f"evaluation {at}: monitor's DIR {value} [{lower}, {upper}]")
                    return rule.breached(value, lower, upper)
            raise AssertionError(f"no scraped DIR equals the recorded {recorded[at]} at {at}")

        print(
            f"parity (monitor, recorded): {last[0]}; fired at {t_fire}, previous evaluation {before}"
        )
        assert monitor_breach(t_fire), "Prometheus fired where the monitor's rule does not"
        assert not monitor_breach(before), "the monitor's rule was breached an evaluation earlier"

        def delivered_for_sex(name: str) -> list:
            return [
                a
                for body in hook.bodies
                for a in body.get("alerts", [])
                if a["labels"].get("alertname") == name
                and a["status"] == "firing"
                and a["labels"].get("attribute") == "sex"
            ]

        # each alert (one per attribute) arrives on its own: wait for the one about sex
        got = wait_for(
            lambda: delivered_for_sex(f"Fairness{rule.name}"),
            60,
            "Alertmanager webhook delivery of the Prometheus alert for sex",
        )
        assert {a["labels"]["window"] for a in got} == {"1h"}
        # the monitor's own alert (event-time rule, significant DIR < 0.8) via its own sink:
        # the same groups, against the configured reference
        own = wait_for(
            lambda: delivered_for_sex(rule.name),
            60,
            "Alertmanager webhook delivery of the monitor's alert for sex",
        )
        ann = own[0]["annotations"]
        assert ann["group"] == "F" and ann["reference_group"] == "X"
        assert float(ann["ci_upper"]) < 0.8
        assert "90% CI" in ann["description"]
    finally:
        m.signal(signal.SIGTERM)
        m.wait(20)
        prom.stop()
        am.stop()
        hook.close()
