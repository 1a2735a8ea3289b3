"""The score fields reach every surface, estimates marked as such: the JSON report's per-group
score distances and ``estimated`` block, the table's ``est.`` lines, ``/metrics`` (histogram,
distances, estimates, calibration check) and the audit report — and a group whose calibration
check fails has its estimate withheld on all of them."""

from __future__ import annotations

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from monitor.config.spec import parse_config
from monitor.outputs.audit import render_html
from monitor.outputs.exporter import render
from monitor.outputs.report import build_report, format_table
from monitor.state.engine import Engine
from tests.helpers import T0, label, pred, run


def _engine() -> Engine:
    """Group a: calibrated (labels drawn from the scores); group b: labels always 0 (its scores
    say ~0.5): b's check fails. Half of each group's predictions are still unlabelled."""
    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h", "1d"],
                                         "min_samples": 30}}})  # fmt: skip
    engine = Engine(cfg)
    rng = np.random.default_rng(2)
    preds, labels = [], []
    for i in range(2000):
        g = "a" if i % 2 else "b"
        s = float(rng.uniform(0.2, 0.8))
        preds.append(pred(i, T0 + i, g, int(s >= 0.5), round(s, 6)))
        y = int(rng.random() < s) if g == "a" else 0
        if i < 1000:
            labels.append(label(i, T0 + i + 5, y))
    run(engine, preds, labels)
    return engine


def test_estimates_and_score_distances_on_every_surface() -> None:
    engine = _engine()
    report = build_report(engine.snapshot(), confidence=0.95)
    a = report["models"]["m"]["windows"]["1h"]["attributes"]["g"]
    est = a["estimated"]
    assert est["calibration_window"] == "1d"
    ga, gb = est["groups"]["a"], est["groups"]["b"]
    assert ga["calibration"] == "calibrated" and gb["calibration"] == "miscalibrated"
    assert gb["tpr"] is None and gb["fpr_upper"] is None and gb["calibration_p"] < 0.01
    assert ga["tpr_lower"] <= ga["tpr"] <= ga["tpr_upper"] and ga["estimated_predictions"] > 0
    # the labelled rates are untouched by the estimate
    assert a["groups"]["a"]["tpr"] != ga["tpr"]
    assert a["groups"]["a"]["scored"] == a["groups"]["a"]["n"]
    assert a["score_reference_group"] in ("a", "b")
    table = format_table(report)
    assert "est. a: TPR" in table and "est. b: not shown — calibration check failed" in table
    assert "score distribution vs" in table

    text = render(engine.snapshot(), confidence=0.95)
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]

    def series(name: str) -> dict[tuple[str, ...], float]:
        return {
            tuple(sorted(s.labels.items())): s.value
            for s in samples
            if s.name == name and s.labels.get("window") == "1h"
        }

    est_tpr = series("fairness_estimated_true_positive_rate_ratio")
    assert {dict(k)["group"] for k in est_tpr} == {"a"}  # b's is withheld
    checks = {dict(k)["group"]: dict(k)["state"] for k in series("fairness_calibration_check")}
    assert checks == {"a": "calibrated", "b": "miscalibrated"}
    buckets = series("fairness_score_bucket_predictions")
    top = {dict(k)["group"]: v for k, v in buckets.items() if dict(k)["le"] == "1"}
    assert top == {"a": 1000.0, "b": 1000.0}
    assert len(series("fairness_group_score_ks_distance_ratio")) == 1  # the non-reference group

    html = render_html(
        build_report(engine.snapshot(), confidence=0.95),
        {},
        config=engine.config,
        title="t",
        source="s",
        generated=T0,
    )
    assert 'data-kind="estimates"' in html and "withheld: calibration check failed" in html
    assert "Kolmogorov–Smirnov distance" in html
