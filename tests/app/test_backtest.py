"""Backtest: `replay` over the recorded events reports the same alert transitions (rule,
labels, event times, evidence) as the live monitor delivered through its webhook sink — for
rules on predictions (the DIR and its drift), on labels (the TPR gap and its drift) and for
every evidence detector (on decisions, and on labelled outcomes as their labels arrive).

Labels are the hard part: a live poll batch can carry labels from after a boundary, and which
ones depends on how the two topics interleave. Rules read counts *as of* each boundary (labels
by their own time) and a boundary waits for every partition's labels to reach it, so the
answer does not depend on the interleaving.

Deliveries: a working webhook is sent every transition, in order (``alerts/outbox.py``). An
evidence alert on labelled outcomes can fire and resolve within one loop turn (32 boundaries);
when the sink kept only an alert's newest state, its page was lost whenever the delivery thread
took both at once, and the live run missed pages the replay had.
"""

from __future__ import annotations

import json
import math
import random
import signal
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.alerts.test_sinks import Receiver
from tests.helpers import wait_for
from tests.kafka_helpers import (
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
    - {name: TruePositiveRateGap, metric: tpr_gap, op: ">", bound: 0.1,
       significant: true, for: 10m, hysteresis: 0.02, min_samples: 30}
  drift: {metrics: [disparate_impact_ratio, tpr_gap], bucket: 10m, min_values: 6}
  sinks:
    webhook_url: URL
"""


def stream(seed: int) -> tuple[list[dict], list[dict]]:
    """Three hours in event time, in order: fair, then for an hour F is approved less and its
    qualified applicants are missed more (TPR 0.5 vs 0.9), then fair again. Nine in ten
    decisions get a label 1–20 minutes later; the label topic is in label-time order."""
    rng = random.Random(seed)
    preds, labels = [], []
    n = 18_000
    for i in range(n):
        t = T0 + 3 * 3600 * i / n
        sex = "F" if i % 2 else "M"
        hour = (t - T0) / 3600
        y = int(rng.random() < 0.5)
        tpr = 0.5 if sex == "F" and 1 <= hour < 2 else 0.9
        pred = int(rng.random() < (tpr if y else 0.1))
        preds.append(
            {
                "prediction_id": f"b{i}",
                "model_id": "credit",
                "timestamp": t,
                "attributes": {"sex": sex, "age": 40},
                "prediction": pred,
            }
        )
        if rng.random() < 0.9:
            labels.append(
                {"prediction_id": f"b{i}", "label": y, "timestamp": t + rng.uniform(60, 1200)}
            )
    labels.sort(key=lambda e: e["timestamp"])
    return preds, labels


def judged(alerts: list[dict]) -> list[tuple]:
    """The transitions compared, as sorted keys."""
    return sorted(key(a) for a in alerts)


def live_evidence(metrics: str) -> dict[tuple[str, str, str], float | None]:
    """``fairness_alert_evidence`` of a ``/metrics`` text, by (attribute, group, detector)."""
    out: dict[tuple[str, str, str], float | None] = {}
    for fam in text_string_to_metric_families(metrics):
        if fam.name == "fairness_alert_evidence":
            for s in fam.samples:
                k = (s.labels["attribute"], s.labels["group"], s.labels["detector"])
                out[k] = s.value if math.isfinite(s.value) else None
    return out


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def key(a: dict) -> tuple:
    """A transition with its evidence: the value, the rates, the n's and the interval."""
    return (
        a["name"],
        a["state"],
        a["at"],
        tuple(sorted(a["labels"].items())),
        a["value"],
        json.dumps(a["annotations"], sort_keys=True),
    )


def test_replay_reports_the_transitions_the_live_monitor_delivered(kafka, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pred, lab = "bt-pred", "bt-lab"
    create_topics(kafka.bootstrap, {pred: 2, lab: 2})
    events, labels = stream(7)
    produce(kafka.bootstrap, pred, events)
    produce(kafka.bootstrap, lab, labels)
    hook = Receiver()
    m = MonitorProcess(
        tmp_path,
        kafka.bootstrap,
        pred=pred,
        lab=lab,
        group="g-bt",
        extra=ALERTS.replace("URL", hook.url),
    )
    timeline = tmp_path / "timeline.jsonl"
    report = replay_report(tmp_path, m.config, events, labels, timeline=timeline)
    backtest = judged(report["alerts"])
    # the evidence detectors' state at the replay's last boundary
    last = [json.loads(x) for x in timeline.read_text().splitlines() if '"evidence"' in x][-1]
    replayed = {(r["attribute"], r["group"], r["detector"]): r["log_e"] for r in last["detectors"]}
    m.start()
    try:
        m.wait_ready()
        wait_consumed(m.checkpoint, end_offsets(kafka.bootstrap, [pred, lab]), procs=[m])
        # until the sink thread has delivered as many notifications as the backtest has
        wait_for(
            lambda: len(judged(hook.bodies)) >= len(backtest),
            60,
            lambda: (
                "the live deliveries; not delivered: "
                + str(sorted(k[:4] for k in set(backtest) - set(judged(hook.bodies))))[:2000]
                + "; delivered but not replayed: "
                + str(sorted(k[:4] for k in set(judged(hook.bodies)) - set(backtest)))[:2000]
            ),
        )
        # ...and until its evidence gauges show the replay's last boundary, value for value
        seen: dict[tuple[str, str, str], float | None] = {}

        def same_evidence() -> bool:
            seen.clear()
            seen.update(live_evidence(m.get("/metrics")[1]))
            return set(seen) == set(replayed) and all(_same(seen[k], replayed[k]) for k in replayed)

        wait_for(same_evidence, 60, lambda: f"live evidence {seen} != replayed {replayed}")
    finally:
        m.signal(signal.SIGTERM)
        assert m.wait(20) == 0
        hook.close()
    live = judged(hook.bodies)
    assert live, "the live monitor raised no alert"
    names = {k[0] for k in live}
    assert {"FourFifthsRule", "TruePositiveRateGap", "FairnessDrift"} <= names
    for rule in ("FourFifthsRule", "TruePositiveRateGap"):
        assert {k[1] for k in live if k[0] == rule} == {"firing", "resolved"}, rule
    # the evidence detectors page on the same stream, and live equals the backtest for them too:
    # those on decisions and those fed by labels as they arrive (F's TPR drop)
    assert {"FairnessChange", "FourFifthsEvidence", "EqualizedOddsEvidence"} <= names
    changed = {dict(k[3])["metric"] for k in live if k[0] == "FairnessChange"}
    assert {"selection_rate", "tpr"} <= changed
    drifted = {dict(k[3])["metric"] for k in live if k[0] == "FairnessDrift"}
    assert drifted == {"disparate_impact_ratio", "tpr_gap"}
    assert live == backtest, json.dumps([live, backtest], default=str)[:3000]
