"""End to end with real binaries: Kafka → monitor → Prometheus (recording + alerting rules) →
Alertmanager → a local webhook receiver; and the monitor's own Alertmanager sink."""

from __future__ import annotations

import random
import shutil
import signal
from pathlib import Path

import pytest

from tests.alerts.test_sinks import Receiver
from tests.conftest import ROOT, require
from tests.helpers import wait_for
from tests.kafka_helpers import MonitorProcess, create_topics, end_offsets, produce, wait_consumed
from tests.services import alertmanager, prometheus

pytestmark = pytest.mark.integration
T0 = 1_767_225_600.0


def biased_events(n: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Two hours of decisions in event time; group F approved at 0.3, M at 0.5."""
    rng = random.Random(seed)
    preds, labels = [], []
    for i in range(n):
        sex = "F" if i % 2 else "M"
        t = T0 + 7200 * i / n
        p = int(rng.random() < (0.3 if sex == "F" else 0.5))
        preds.append(
            {
                "prediction_id": f"e{i}",
                "model_id": "credit",
                "timestamp": t,
                "attributes": {"sex": sex, "age": 40},
                "prediction": p,
            }
        )
        labels.append(
            {"prediction_id": f"e{i}", "timestamp": t + 60, "label": int(rng.random() < 0.5)}
        )
    return preds, labels


def test_prometheus_rules_and_alertmanager_delivery(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    require(shutil.which("prometheus") is not None, "prometheus (Debian package)")
    require(shutil.which("prometheus-alertmanager") is not None, "prometheus-alertmanager")
    pred, lab = "e2e-pred", "e2e-lab"
    create_topics(kafka.bootstrap, {pred: 2, lab: 2})
    preds, labels = biased_events(6000, 1)
    produce(kafka.bootstrap, pred, preds)
    produce(kafka.bootstrap, lab, labels)
    hook = Receiver()
    am = alertmanager(tmp_path, hook.url)
    # the shipped rules, with `for` shortened so the test does not wait ten minutes
    rules = tmp_path / "rules.yml"
    rules.write_text(
        (ROOT / "deploy/prometheus/fairness-rules.yml")
        .read_text()
        .replace("for: 10m", "for: 2s")
        .replace("keep_firing_for: 5m", "keep_firing_for: 5s")
    )
    m = MonitorProcess(
        tmp_path,
        kafka.bootstrap,
        pred=pred,
        lab=lab,
        group="g-e2e",
        extra=f"alerts:\n  sinks:\n    alertmanager_url: {am.url}\n    resend_interval: 2s\n",
    )
    m.start()
    prom = prometheus(tmp_path, [f"127.0.0.1:{m.port}"], rules, am.url)
    try:
        m.wait_ready()
        wait_consumed(m.checkpoint, end_offsets(kafka.bootstrap, [pred, lab]), procs=[m])

        def both() -> tuple[float, float] | None:
            ours = prom.get(
                '/api/v1/query?query=fairness_disparate_impact_ratio{window="1h",attribute="sex"}'
            )["data"]["result"]
            rec = prom.get(
                '/api/v1/query?query=fairness:disparate_impact:ratio{window="1h",attribute="sex"}'
            )["data"]["result"]
            if ours and rec:
                return float(ours[0]["value"][1]), float(rec[0]["value"][1])
            return None

        ours, recorded = wait_for(both, 60, "both DIR series in Prometheus")
        assert ours == pytest.approx(recorded, rel=1e-9)
        assert 0.5 < recorded < 0.7  # 0.3 / 0.5 by construction

        def prom_firing() -> list:
            alerts = prom.get("/api/v1/alerts")["data"]["alerts"]
            return [
                a
                for a in alerts
                if a["labels"]["alertname"] == "FairnessFourFifthsRule" and a["state"] == "firing"
            ]

        wait_for(prom_firing, 60, "Prometheus alert firing")

        def delivered(name: str) -> list:
            return [
                a
                for body in hook.bodies
                for a in body.get("alerts", [])
                if a["labels"].get("alertname") == name and a["status"] == "firing"
            ]

        def delivered_for_sex(name: str) -> list:
            return [a for a in delivered(name) if a["labels"]["attribute"] == "sex"]

        # each alert (one per attribute) arrives on its own: wait for the one about sex
        got = wait_for(
            lambda: delivered_for_sex("FairnessFourFifthsRule"),
            60,
            "Alertmanager webhook delivery of the Prometheus alert for sex",
        )
        assert {a["labels"]["attribute"] for a in got} == {"sex"}
        # the monitor's own alert (event-time rule, significant DIR < 0.8) via its own sink
        own = wait_for(
            lambda: delivered_for_sex("FourFifthsRule"),
            60,
            "Alertmanager webhook delivery of the monitor's alert for sex",
        )
        ann = own[0]["annotations"]
        assert ann["group"] == "F" and ann["reference_group"] == "M"
        assert float(ann["ci_upper"]) < 0.8
    finally:
        m.signal(signal.SIGTERM)
        m.wait(20)
        prom.stop()
        am.stop()
        hook.close()
