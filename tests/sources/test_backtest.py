"""Backtest: `replay` over the recorded events reports the same alert transitions (rule,
labels, event times) as the live monitor delivered through its webhook sink.

Scope: rules on prediction-only metrics (the DIR and its drift). Label-based rules are
evaluated at the same boundaries, but a live poll batch can carry labels from after the
boundary for old cohorts (see docs/architecture.md), so they are not compared here.
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

from ..alerts.test_sinks import Receiver
from ..kafka_helpers import (
    MonitorProcess,
    create_topics,
    end_offsets,
    produce,
    replay_report,
    wait_consumed,
)

pytestmark = pytest.mark.integration
T0 = 1_767_225_600.0

ALERTS = """
alerts:
  rules:
    - {name: FourFifthsRule, metric: disparate_impact_ratio, op: "<", bound: 0.8,
       significant: true, for: 10m, hysteresis: 0.02, min_samples: 30}
  drift: {metrics: [disparate_impact_ratio], bucket: 10m, min_values: 6}
  sinks:
    webhook_url: URL
"""


def stream(seed: int) -> list[dict]:
    """Three hours in event time, in order: fair, then F approved at 0.25 vs 0.5, then fair."""
    rng = random.Random(seed)
    out = []
    n = 18_000
    for i in range(n):
        t = T0 + 3 * 3600 * i / n
        sex = "F" if i % 2 else "M"
        hour = (t - T0) / 3600
        rate = 0.25 if sex == "F" and 1 <= hour < 2 else 0.5
        out.append(
            {
                "prediction_id": f"b{i}",
                "model_id": "credit",
                "timestamp": t,
                "attributes": {"sex": sex, "age": 40},
                "prediction": int(rng.random() < rate),
            }
        )
    return out


def key(a: dict) -> tuple:
    return (a["name"], a["state"], a["at"], tuple(sorted(a["labels"].items())))


def test_replay_reports_the_transitions_the_live_monitor_delivered(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pred, lab = "bt-pred", "bt-lab"
    create_topics(kafka.bootstrap, {pred: 2, lab: 2})
    events = stream(7)
    produce(kafka.bootstrap, pred, events)
    hook = Receiver()
    m = MonitorProcess(
        tmp_path,
        kafka.bootstrap,
        pred=pred,
        lab=lab,
        group="g-bt",
        extra=ALERTS.replace("URL", hook.url),
    )
    m.start()
    try:
        m.wait_ready()
        wait_consumed(m.checkpoint, end_offsets(kafka.bootstrap, [pred, lab]), procs=[m])
        time.sleep(2)  # let the sink thread deliver
    finally:
        m.signal(signal.SIGTERM)
        assert m.wait(20) == 0
        hook.close()
    live = sorted(key(a) for a in hook.bodies)
    backtest = sorted(key(a) for a in replay_report(tmp_path, m.config, events, [])["alerts"])
    assert live, "the live monitor raised no alert"
    names = {k[0] for k in live}
    assert "FourFifthsRule" in names and "FairnessDrift" in names
    assert {k[1] for k in live if k[0] == "FourFifthsRule"} == {"firing", "resolved"}
    assert live == backtest, json.dumps([live, backtest], default=str)[:3000]
