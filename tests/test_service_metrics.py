"""Operational metrics of the service (no broker needed: the collector reads published state)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import parse_config
from monitor.service import Monitor

from .helpers import T0, label, pred, run


def test_label_delay_histogram_and_operational_families(tmp_path: Path) -> None:
    cfg = parse_config(
        {
            "models": {
                "m": {
                    "attributes": {"g": {}},
                    "windows": ["1d"],
                    "bucket": "1m",
                    "join": {"ttl": "30d"},
                    "lateness": "1d",
                }
            },
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)
    run(
        m.engine,
        [pred("a", T0, "g1", 1), pred("b", T0, "g1", 0), pred("c", T0, "g1", 1)],
        [label("a", T0 + 30, 1), label("b", T0 + 2 * 3600, 0), label("c", T0 + 3 * 86400, 1)],
    )
    m.published = m.engine.counters()
    m.published_delays = m.engine.label_delays()
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())
    }
    h = {
        s.labels.get("le"): s.value
        for s in families["fairness_label_delay_seconds"].samples
        if s.name.endswith("_bucket")
    }
    assert h["60.0"] == 1  # 30 s
    assert h["3600.0"] == 1 and h["21600.0"] == 2  # 2 h
    assert h["86400.0"] == 2 and h["604800.0"] == 3 and h["+Inf"] == 3  # 3 days
    sums = [
        s.value for s in families["fairness_label_delay_seconds"].samples if s.name.endswith("_sum")
    ]
    assert sums == [30 + 7200 + 3 * 86400]
    for name in (
        "fairness_events",
        "fairness_pending_labels",
        "fairness_consumer_lag",
        "fairness_processing_seconds",
        "fairness_alerts_active",
        "fairness_alert_delivery_failures",
        "fairness_checkpoint_age_seconds",
    ):
        assert name in families, name
    assert families["fairness_pending_labels"].samples[0].value == 3
    m.store.close()
