"""Prometheus exporter: a custom collector over the latest published engine snapshot.

The consumer thread publishes a snapshot (a cheap copy of summed window counts) now and then;
a scrape reads that reference and does all the math in the HTTP thread, so scrapes never block
consumption and need no lock.

Names follow Prometheus conventions: prefix ``fairness_``, ``_ratio`` for fractions, counts as
gauges (they are windowed, so they go down), bounds as ``…_lower_ratio`` / ``…_upper_ratio``.
Raw windowed counts are exported so PromQL can aggregate replicas correctly
(``sum(num) / sum(den)``, never an average of ratios). NaN ("insufficient data") is exported
as NaN, and a group that has left every window is not exported at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from monitor.engine import Snapshot
from monitor.report import attribute_report

GROUP_LABELS = ["model", "window", "attribute", "group"]
ATTR_LABELS = ["model", "window", "attribute"]

COUNTS = {
    "predictions": ("n", "Predictions in the window."),
    "favourable_predictions": ("favourable", "Favourable predictions in the window."),
    "labelled_predictions": ("labelled", "Predictions in the window whose label has arrived."),
    "true_positives": ("tp", "True positives in the window (class 1 = positive)."),
    "false_positives": ("fp", "False positives in the window."),
    "false_negatives": ("fn", "False negatives in the window."),
    "true_negatives": ("tn", "True negatives in the window."),
}
RATES = {
    "selection_rate": ("selection_rate", "Rate of the favourable prediction (Wilson bounds)."),
    "true_positive_rate": ("tpr", "TP / (TP + FN) (Wilson bounds)."),
    "false_positive_rate": ("fpr", "FP / (FP + TN) (Wilson bounds)."),
    "positive_predictive_value": ("ppv", "TP / (TP + FP) (Wilson bounds)."),
}
PLAIN_RATES = {
    "calibration_error": ("calibration_error", "Expected calibration error over score bins."),
    "label_coverage": ("label_coverage", "Labelled / predictions."),
}
DISPARITIES = {
    "disparate_impact": (
        "disparate_impact_ratio",
        "Lowest selection rate / reference rate (four-fifths rule at 0.8).",
    ),
    "statistical_parity_difference": (
        "statistical_parity_difference",
        "Max - min selection rate over eligible groups.",
    ),
    "tpr_gap": ("tpr_gap", "Max - min TPR over eligible groups."),
    "fpr_gap": ("fpr_gap", "Max - min FPR over eligible groups."),
    "equalized_odds_difference": ("equalized_odds_difference", "max(TPR gap, FPR gap)."),
    "equal_opportunity_difference": ("equal_opportunity_difference", "TPR gap."),
    "predictive_parity_difference": ("predictive_parity_difference", "PPV gap."),
}


def _f(x: Any) -> float:
    return math.nan if x is None else float(x)


class FairnessCollector:
    """Per-group and per-attribute fairness gauges from ``source()`` (a published snapshot)."""

    def __init__(self, source: Callable[[], Snapshot | None], *, confidence: float) -> None:
        self.source = source
        self.confidence = confidence

    def describe(self) -> list[Metric]:
        return []  # families depend on the data; do not collect at registration time

    def collect(self) -> Iterator[Metric]:
        snap = self.source()
        if snap is None:
            return
        fam: dict[str, GaugeMetricFamily] = {}

        def g(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            if name not in fam:
                fam[name] = GaugeMetricFamily(f"fairness_{name}", doc, labels=labels)
            return fam[name]

        for model, ms in snap.models.items():
            for wname, wc in ms.windows.items():
                for set_name, (gidx, labels) in zip(ms.set_names, ms.groups, strict=True):
                    counts = wc.counts[gidx]
                    present = counts[:, 0] > 0  # groups with predictions in this window
                    if not present.any():
                        continue
                    keep = [i for i in range(len(labels)) if present[i]]
                    labels = [labels[i] for i in keep]
                    rep = attribute_report(
                        counts[keep], labels, ms.spec, set_name, confidence=self.confidence
                    )
                    for group, row in rep["groups"].items():
                        lv = [model, wname, set_name, group]
                        for name, (key, doc) in COUNTS.items():
                            g(name, doc, GROUP_LABELS).add_metric(lv, _f(row[key]))
                        for name, (key, doc) in RATES.items():
                            g(f"{name}_ratio", doc, GROUP_LABELS).add_metric(lv, _f(row[key]))
                            g(
                                f"{name}_lower_ratio", f"Lower bound: {doc}", GROUP_LABELS
                            ).add_metric(lv, _f(row[f"{key}_lower"]))
                            g(
                                f"{name}_upper_ratio", f"Upper bound: {doc}", GROUP_LABELS
                            ).add_metric(lv, _f(row[f"{key}_upper"]))
                        for name, (key, doc) in PLAIN_RATES.items():
                            g(f"{name}_ratio", doc, GROUP_LABELS).add_metric(lv, _f(row[key]))
                        g(
                            "group_eligible",
                            "1 if the group has at least min_samples "
                            "predictions and takes part in disparities.",
                            GROUP_LABELS,
                        ).add_metric(lv, 1.0 if row["eligible"] else 0.0)
                    av = [model, wname, set_name]
                    for name, (key, doc) in DISPARITIES.items():
                        d = rep[key]
                        g(f"{name}_ratio", doc, ATTR_LABELS).add_metric(av, _f(d["value"]))
                        g(
                            f"{name}_lower_ratio", f"Lower confidence bound: {doc}", ATTR_LABELS
                        ).add_metric(av, _f(d["lower"]))
                        g(
                            f"{name}_upper_ratio", f"Upper confidence bound: {doc}", ATTR_LABELS
                        ).add_metric(av, _f(d["upper"]))
                    d = rep["disparate_impact_ratio"]
                    g(
                        "disparate_impact_info",
                        "Which groups the disparate impact ratio compares.",
                        [*ATTR_LABELS, "worst_group", "reference_group"],
                    ).add_metric([*av, d["low_group"] or "", d["high_group"] or ""], 1.0)
        yield from fam.values()
