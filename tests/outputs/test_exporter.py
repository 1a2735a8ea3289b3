"""Exporter contract: scrape /metrics over HTTP, parse it, compare with the engine's numbers."""

from __future__ import annotations

import math
import urllib.request

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from monitor.metrics.fairness import group_metrics
from monitor.outputs.exporter import FairnessExposition
from monitor.outputs.http import HttpServer
from monitor.outputs.report import build_report
from monitor.state.engine import Engine
from tests.helpers import T0, config, label, pred, run

GROUP_FAMILIES = [
    "fairness_predictions",
    "fairness_favourable_predictions",
    "fairness_labelled_predictions",
    "fairness_true_positives",
    "fairness_false_positives",
    "fairness_false_negatives",
    "fairness_true_negatives",
    "fairness_selection_rate_ratio",
    "fairness_selection_rate_lower_ratio",
    "fairness_selection_rate_upper_ratio",
    "fairness_true_positive_rate_ratio",
    "fairness_false_positive_rate_ratio",
    "fairness_positive_predictive_value_ratio",
    "fairness_calibration_error_ratio",
]
ATTR_FAMILIES = [
    "fairness_disparate_impact_ratio",
    "fairness_disparate_impact_lower_ratio",
    "fairness_disparate_impact_upper_ratio",
    "fairness_statistical_parity_difference_ratio",
    "fairness_tpr_gap_ratio",
    "fairness_fpr_gap_ratio",
    "fairness_equalized_odds_difference_ratio",
    "fairness_equal_opportunity_difference_ratio",
    "fairness_predictive_parity_difference_ratio",
]


def scrape(engine: Engine) -> dict[str, dict[tuple, float]]:
    snap = engine.snapshot()
    server = HttpServer(
        "127.0.0.1",
        0,
        live=lambda: (True, ""),
        ready=lambda: (True, ""),
        registry=CollectorRegistry(),
        extra=FairnessExposition(lambda: snap, confidence=0.95),
    )
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        server.stop()
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def key(**labels: str) -> tuple:
    return tuple(sorted(labels.items()))


def test_metrics_equal_engine_values_nan_and_disappearing_groups() -> None:
    engine = Engine(config(windows=["1h"], min_samples=1))
    preds = [pred(f"a{i}", T0 + i, "a", int(i % 2 == 0), score=0.7) for i in range(40)]
    preds += [pred(f"b{i}", T0 + i, "b", int(i % 4 == 0)) for i in range(20)]
    labels = [label(f"a{i}", T0 + 100, int(i % 3 == 0)) for i in range(40)]  # b: no labels
    run(engine, preds, labels)
    m = scrape(engine)
    for fam in GROUP_FAMILIES + ATTR_FAMILIES:
        assert fam in m, fam
    rep = build_report(engine.snapshot())["models"]["m"]["windows"]["1h"]["attributes"]["g"]
    ga = key(model="m", window="1h", attribute="g", group="a")
    gb = key(model="m", window="1h", attribute="g", group="b")
    assert m["fairness_predictions"][ga] == 40 and m["fairness_predictions"][gb] == 20
    assert m["fairness_selection_rate_ratio"][gb] == rep["groups"]["b"]["selection_rate"]
    assert m["fairness_true_positive_rate_ratio"][ga] == rep["groups"]["a"]["tpr"]
    assert math.isnan(m["fairness_true_positive_rate_ratio"][gb])  # no labels: NaN, not 0
    assert math.isnan(m["fairness_calibration_error_ratio"][gb])
    av = key(model="m", window="1h", attribute="g")
    assert m["fairness_disparate_impact_ratio"][av] == rep["disparate_impact_ratio"]["value"]
    assert m["fairness_disparate_impact_upper_ratio"][av] == rep["disparate_impact_ratio"]["upper"]
    info = m["fairness_disparate_impact_info"]
    assert (
        info[key(model="m", window="1h", attribute="g", worst_group="b", reference_group="a")]
        == 1.0
    )
    # an hour and a half later only "a" has predictions in the window: "b" disappears
    run(engine, [pred("late-a", T0 + 5400, "a", 1)])
    m2 = scrape(engine)
    assert ga in m2["fairness_predictions"] and gb not in m2["fairness_predictions"]
    assert math.isnan(m2["fairness_disparate_impact_ratio"][av])  # one group: undefined


def test_label_coverage_by_predicted_class_shows_selective_labels() -> None:
    """Only approved cases get an outcome (selective labels): TPR and FPR come out as 1.0 for
    everyone, and the coverage of class-0 predictions (0) is what tells the on-call why.
    Group a: 10 predictions, 4 of class 1, all 4 labelled (3 positive, 1 negative), none of the
    6 of class 0. Group b: 10 predictions, 5 of class 1, 2 labelled; 1 of the 5 class-0 labelled."""
    for favourable in (1, 0):
        engine = Engine(config(windows=["1h"], min_samples=1, favourable=favourable))
        preds = [pred(f"a{i}", T0 + i, "a", int(i < 4)) for i in range(10)]
        preds += [pred(f"b{i}", T0 + i, "b", int(i < 5)) for i in range(10)]
        labels = [label(f"a{i}", T0 + 60, int(i < 3)) for i in range(4)]
        labels += [label("b0", T0 + 60, 1), label("b1", T0 + 60, 0), label("b9", T0 + 60, 1)]
        run(engine, preds, labels)
        m = scrape(engine)
        ga = key(model="m", window="1h", attribute="g", group="a")
        gb = key(model="m", window="1h", attribute="g", group="b")
        pos = m["fairness_label_coverage_predicted_positive_ratio"]
        neg = m["fairness_label_coverage_predicted_negative_ratio"]
        assert (pos[ga], neg[ga]) == (1.0, 0.0), favourable
        assert (pos[gb], neg[gb]) == (2 / 5, 1 / 5), favourable
        # TPR 3 / (3 + 0) and FPR 1 / (1 + 0) are 1.0 by construction (the engine's numbers)...
        ms = engine.snapshot().models["m"]
        gidx, names = ms.groups[0]
        gm = group_metrics(ms.windows["1h"].counts[gidx], score_bins=1, favourable=favourable)
        a = names.index("a")
        assert (gm.tpr[a], gm.fpr[a]) == (1.0, 1.0), favourable
        # ...so /metrics does not show them: blind, with the reason; b's are measured
        for fam in ("true_positive_rate", "false_positive_rate"):
            for suffix in ("", "_lower", "_upper"):
                assert ga not in m[f"fairness_{fam}{suffix}_ratio"], (fam, suffix)
                assert gb in m[f"fairness_{fam}{suffix}_ratio"], (fam, suffix)
            blind = m["fairness_group_metric_blind"]
            assert blind[tuple(sorted((*ga, ("metric", fam), ("reason", "selective_labels"))))] == 1
        assert m["fairness_positive_predictive_value_ratio"][ga] == 3 / 4  # measurable
        assert len(m["fairness_group_metric_blind"]) == 2  # a's TPR and FPR, nothing of b's
        assert m["fairness_label_coverage_ratio"][ga] == 4 / 10


def test_blind_disparities_are_absent_and_flagged_until_they_can_be_measured() -> None:
    """Only approvals are labelled in both groups: the TPR/FPR gaps and the equalized-odds
    difference are not exported (no 0.000 that reads as fairness) and
    ``fairness_metric_blind`` says why; the DIR and the PPV gap are exported as before. Once a
    denied applicant of each group has an outcome, the numbers come back and the flag goes."""
    engine = Engine(config(windows=["1h"], min_samples=1))
    preds = [pred(f"{g}{i}", T0 + i, g, int(i < 6)) for g in "ab" for i in range(10)]
    labels = [label(f"{g}{i}", T0 + 60, int(i % 2 == 0)) for g in "ab" for i in range(6)]
    run(engine, preds, labels)
    m = scrape(engine)
    av = key(model="m", window="1h", attribute="g")
    blind = {
        "tpr_gap", "fpr_gap", "equalized_odds_difference", "equal_opportunity_difference",
    }  # fmt: skip
    flags = m["fairness_metric_blind"]
    assert {dict(k)["metric"] for k in flags} == blind
    assert all(dict(k)["reason"] == "selective_labels" and v == 1 for k, v in flags.items())
    for metric in blind:
        for suffix in ("", "_lower", "_upper"):
            assert av not in m.get(f"fairness_{metric}{suffix}_ratio", {}), metric
    assert m["fairness_disparate_impact_ratio"][av] == 1.0
    assert m["fairness_ppv_gap_ratio"][av] == 0.0
    assert m["fairness_predictive_parity_difference_ratio"][av] == 0.0
    # the denied get outcomes (a later review): everything is measured again
    run(engine, [], [label(f"{g}{i}", T0 + 120, i % 2) for g in "ab" for i in (6, 7, 8)])
    m2 = scrape(engine)
    assert "fairness_metric_blind" not in m2 and "fairness_group_metric_blind" not in m2
    for metric in blind:
        assert av in m2[f"fairness_{metric}_ratio"], metric
