"""Protected attributes from a topic of their own (issue 16), on real Apache Kafka: the serving
stack's requests carry no attribute, a third topic gives them keyed by decision id, and 10 % of
the decisions never get theirs. ``run`` counts exactly what ``replay`` counts from the same
decisions written as the monitor's own events (those 10 % with null attributes, the
``__missing__`` groups), and ``fairness_attribute_coverage_ratio`` is exactly the share
that had them."""

from __future__ import annotations

import json
import random
import signal
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.partitioner.default import murmur2
from prometheus_client.parser import text_string_to_metric_families

from tests.app.test_serving_kafka import (
    _plain,
    as_events,
    bodies,
    calls,
    keep_topics,
    row_ids,
    run_to_end,
    send_all,
)
from tests.conftest import ROOT
from tests.helpers import wait_for
from tests.kafka_helpers import (
    MonitorProcess,
    checkpoint_offsets,
    end_offsets,
    produce,
    replay_report,
    status,
    wait_progress,
)
from tests.services import prometheus

pytestmark = pytest.mark.integration

STREAM = """    input:
      format: oip-json
      score: {tensor: probabilities, column: 1}
      attributes: stream
      attributes_ttl: 10m
"""
COVERAGE = 'fairness_attribute_coverage_ratio{"model": "credit"}'  # per model


def coverage_panel(tmp: Path, port: int, ratio: float) -> float:
    """What the operations dashboard's "Attribute coverage" panel shows for the monitor on
    ``port``, once Prometheus has scraped ``ratio`` from it."""
    dash = json.loads((ROOT / "grafana/dashboards/monitor-operations.json").read_text())
    (panel,) = [p for p in dash["panels"] if p["title"] == "Attribute coverage"]
    (t,) = panel["targets"]
    expr = t["expr"].replace("$job", "fairness-monitor").replace("$instance", ".*")
    prom = prometheus(tmp, [f"127.0.0.1:{port}"], None)
    try:

        def shown() -> list[float]:
            q = urllib.parse.urlencode({"query": expr})
            result = prom.get(f"/api/v1/query?{q}")["data"]["result"]
            return [float(r["value"][1]) for r in result]

        values = wait_for(lambda: shown() == [ratio] and shown(), 60, f"{expr} to show {ratio}")
        return float(values[0])
    finally:
        prom.stop()


def partition_of(key: str, n: int = 3) -> int:
    """Where the producer's default partitioner puts ``key`` (murmur2, as Java's)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % n


def ticks(after: float) -> list[dict[str, Any]]:
    """One last call per partition, an hour after the rest, with its attributes: every
    partition's attributes clock then passes the TTL of every decision still waiting."""
    out: dict[int, dict[str, Any]] = {}
    i = 0
    while len(out) < 3:
        cid = f"tick-{i}"
        out.setdefault(
            partition_of(cid), {"id": cid, "t": after + i, "sex": ["F"], "age": [40], "p": [0.6]}
        )
        i += 1
    return list(out.values())


@pytest.mark.parametrize("kill", [False, True], ids=["straight", "kill-9-midway"])
def test_attributes_from_their_own_topic_count_as_replay_and_coverage_is_exact(  # type: ignore[no-untyped-def]
    kafka, tmp_path: Path, kill: bool
) -> None:
    """``kill-9-midway``: the monitor is killed once a third of the records are checkpointed
    (decisions and attribute records waiting in the join), then started again."""
    tag = uuid.uuid4().hex[:8]
    pred, lab, attrs = f"req-{tag}", f"lab-{tag}", f"attrs-{tag}"
    keep_topics(kafka.bootstrap, pred, lab, attrs)
    cs = calls(12)
    cs += ticks(max(c["t"] for c in cs) + 3600)
    preds, labels = as_events(cs, 12)
    rng = random.Random(13)
    ticking = {c["id"] for c in cs if c["id"].startswith("tick-")}
    never = {e["prediction_id"] for e in preds if e["prediction_id"] not in ticking}
    never = set(rng.sample(sorted(never), round(0.1 * len(preds))))
    for e in preds:  # what replay counts: the decisions without attributes in __missing__
        if e["prediction_id"] in never:
            e["attributes"] = {"sex": None, "age": None}
    oracle = MonitorProcess(tmp_path, kafka.bootstrap, name="oracle", pred=pred, lab=lab)
    report = replay_report(tmp_path, oracle.config, preds, [_plain(e) for e in labels])

    sent = []
    for c in cs:  # the attributes topic first: some decisions find theirs waiting, some not
        for rid, s, a in zip(row_ids(c), c["sex"], c["age"], strict=True):
            if rid not in never:
                t = c["t"] + rng.uniform(0, 120)
                doc = {"id": rid, "attributes": {"sex": s, "age": a}, "timestamp": t}
                sent.append((attrs, c["id"], json.dumps(doc).encode(), [], t))
    for c in cs:  # requests without the attributes (they are not model inputs), responses
        request, response = bodies(c)
        request["inputs"] = [i for i in request["inputs"] if i["name"] != "sex"]
        halves = [(request, c["t"]), (response, c["t"] + 0.05)]
        if rng.random() < 0.5:
            halves.reverse()
        for body, t in halves:
            sent.append((pred, c["id"], json.dumps(body).encode(), [], t))
    send_all(kafka.bootstrap, sent)
    produce(kafka.bootstrap, lab, labels, key="call")

    m = MonitorProcess(
        tmp_path, kafka.bootstrap, name="attrs", pred=pred, lab=lab,
        checkpoint=tmp_path / "attrs.sqlite", kafka_settings={"attributes_topic": attrs},
        checkpoint_every=300 if kill else 50_000,
    )  # fmt: skip
    text = m.config.read_text().replace("    min_samples: 5\n", "    min_samples: 5\n" + STREAM)
    if kill:  # small polls and frequent checkpoints: the kill lands mid-stream
        text = text.replace("max_poll_records: 2000", "max_poll_records: 100")
        assert "max_poll_records: 100" in text
    m.config.write_text(text)
    if kill:
        m.start()
        total = sum(end_offsets(kafka.bootstrap, [pred, lab, attrs]).values())
        wait_progress(m.checkpoint, total / 3, [m])
        m.signal(signal.SIGKILL)
        m.wait(30)
        assert sum(checkpoint_offsets(m.checkpoint).values()) < total  # killed midway
        before = status(m.config, m.checkpoint)["counters"]  # what the restart restores
    else:
        before = {}
    scraped: dict[str, float] = {}

    def scrape(proc: MonitorProcess) -> None:
        code, body = proc.get("/metrics")
        assert code == 200
        for fam in text_string_to_metric_families(body):
            for s in fam.samples:
                if s.name.startswith("fairness_attribute_") or (
                    s.name == "fairness_events_total" and s.labels.get("topic") == attrs
                ):
                    key = s.name + json.dumps(s.labels, sort_keys=True)
                    scraped[key] = s.value
        if not kill:  # the operations dashboard's coverage panel, through a real Prometheus
            ratio = scraped[COVERAGE]
            panel_shows[:] = [coverage_panel(tmp_path, proc.port, ratio)]

    panel_shows: list[float] = []

    got = run_to_end(m, kafka.bootstrap, [pred, lab, attrs], before_stop=scrape)
    assert got["models"] == report["models"]  # per model, window, attribute and group
    counters = got["counters"]
    n, missing = len(preds), len(never)
    assert counters["predictions"] == n and missing == round(0.1 * n) > 100
    assert counters["attributed_decisions"] == n - missing
    assert counters["unattributed_decisions"] == missing
    assert counters["orphan_attributes"] == counters["repeated_attributes"] == 0
    # /metrics counts what this process counted: after the kill, not what the checkpoint it
    # restored had counted (those stay the killed process's; process_totals.py)
    with_ = n - missing - before.get("attributed_decisions", 0)
    without_ = missing - before.get("unattributed_decisions", 0)
    assert with_ > 0 and without_ > 0
    assert scraped[COVERAGE] == pytest.approx(with_ / (with_ + without_))
    assert scraped['fairness_attribute_decisions_waiting{"model": "credit"}'] == 0  # all released
    without = {"model": "credit", "outcome": "without_attributes"}
    assert scraped["fairness_attribute_decisions_total" + json.dumps(without)] == without_
    with_labels = {"model": "credit", "outcome": "with_attributes"}
    assert scraped["fairness_attribute_decisions_total" + json.dumps(with_labels)] == with_
    if not kill:  # the panel, and the events read: all of them by this one process
        assert panel_shows == [pytest.approx((n - missing) / n)]
        ok = "fairness_events_total" + json.dumps({"outcome": "ok", "topic": attrs})
        assert scraped[ok] == n - missing
