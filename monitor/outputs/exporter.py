"""Prometheus exporter for the fairness metrics: text exposition rendered from a snapshot.

The consumer thread publishes a snapshot (a cheap copy of summed window counts) about once a
second; a scrape renders that snapshot in the HTTP thread — no lock, no work on the consumer
thread. The rendered text is cached per snapshot, so many scrapers cost one rendering.

Why render the text ourselves: a realistic deployment (5 models × 3 attributes × 20 groups × 3
windows) is ~20,000 series, and prometheus_client's generic exposition path spends ~10 µs per
sample validating and escaping label names that we know are valid. We write the standard text
format (0.0.4) directly from the vectorized metric arrays; the contract test parses it with
``prometheus_client.parser``. Operational metrics still go through prometheus_client.

Names follow Prometheus conventions: prefix ``fairness_``, ``_ratio`` for fractions, windowed
counts as gauges (they go down), bounds as ``…_lower_ratio`` / ``…_upper_ratio``. Raw counts are
exported so PromQL can aggregate replicas correctly (``sum(num) / sum(den)``). NaN means
"insufficient data"; a group that has left the window is not exported.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from monitor.metrics.fairness import Disparity
from monitor.outputs.report import attribute_metrics
from monitor.state.engine import Snapshot

GROUP_COUNTS = (
    ("predictions", "n", "Predictions in the window."),
    ("favourable_predictions", "favourable", "Favourable predictions in the window."),
    ("labelled_predictions", "labelled", "Predictions in the window whose label has arrived."),
    ("true_positives", "tp", "True positives in the window (class 1 = positive)."),
    ("false_positives", "fp", "False positives in the window."),
    ("false_negatives", "fn", "False negatives in the window."),
    ("true_negatives", "tn", "True negatives in the window."),
)
GROUP_RATES = (  # (name, GroupMetrics field, has Wilson bounds, help)
    ("selection_rate", "selection_rate", True, "Rate of the favourable prediction."),
    ("true_positive_rate", "tpr", True, "TP / (TP + FN)."),
    ("false_positive_rate", "fpr", True, "FP / (FP + TN)."),
    ("positive_predictive_value", "ppv", True, "TP / (TP + FP)."),
    ("calibration_error", "calibration_error", False, "Expected calibration error."),
    ("label_coverage", "label_coverage", False, "Labelled / predictions."),
    (
        "label_coverage_predicted_positive",
        "label_coverage_predicted_positive",
        False,
        "Labelled / predictions, among predictions of class 1.",
    ),
    (
        "label_coverage_predicted_negative",
        "label_coverage_predicted_negative",
        False,
        "Labelled / predictions, among predictions of class 0 (0 under selective labels: "
        "TPR and FPR then describe the labelled class only).",
    ),
)
DISPARITIES = (  # (name, AttributeDisparities attribute, help)
    (
        "disparate_impact",
        "disparate_impact",
        "Lowest selection rate / reference rate (four-fifths rule at 0.8).",
    ),
    (
        "statistical_parity_difference",
        "statistical_parity_difference",
        "Max - min selection rate over eligible groups.",
    ),
    ("tpr_gap", "tpr_gap", "Max - min TPR over eligible groups."),
    ("fpr_gap", "fpr_gap", "Max - min FPR over eligible groups."),
    ("equalized_odds_difference", "equalized_odds_difference", "max(TPR gap, FPR gap)."),
    ("equal_opportunity_difference", "equal_opportunity_difference", "TPR gap."),
    ("predictive_parity_difference", "predictive_parity_difference", "PPV gap."),
)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(x: float) -> str:
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


class _Families:
    """Lines grouped by metric family, written out with one HELP/TYPE header each."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}
        self.help: dict[str, str] = {}

    def add(self, name: str, doc: str, labels: str, value: float) -> None:
        full = f"fairness_{name}"
        if full not in self.lines:
            self.lines[full] = []
            self.help[full] = doc
        self.lines[full].append(f"{full}{{{labels}}} {_num(value)}")

    def text(self) -> str:
        out = []
        for name, lines in self.lines.items():
            out.append(f"# HELP {name} {self.help[name]}")
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)
        return "\n".join(out) + "\n" if out else ""


def render(snap: Snapshot, *, confidence: float) -> str:
    """The fairness families of ``snap`` in the Prometheus text format."""
    fam = _Families()
    for model, ms in snap.models.items():
        spec = ms.spec
        for wname, wc in ms.windows.items():
            for set_name, (gidx, labels) in zip(ms.set_names, ms.groups, strict=True):
                counts = wc.counts[gidx]
                keep = np.flatnonzero(counts[:, 0] > 0)  # groups with predictions in the window
                if not len(keep):
                    continue
                counts = counts[keep]
                names = [labels[i] for i in keep]
                gm, d = attribute_metrics(counts, names, spec, set_name, confidence=confidence)
                base = f'model="{_esc(model)}",window="{_esc(wname)}",attribute="{_esc(set_name)}"'
                group_labels = [f'{base},group="{_esc(n)}"' for n in names]
                for name, field, doc in GROUP_COUNTS:
                    values = getattr(gm, field)
                    for lab, v in zip(group_labels, values.tolist(), strict=True):
                        fam.add(name, doc, lab, v)
                for name, field, bounded, doc in GROUP_RATES:
                    values = getattr(gm, field).tolist()
                    for lab, v in zip(group_labels, values, strict=True):
                        fam.add(f"{name}_ratio", doc, lab, v)
                    if bounded:
                        lo, hi = gm.bounds[field]
                        for lab, v in zip(group_labels, lo.tolist(), strict=True):
                            fam.add(f"{name}_lower_ratio", f"Wilson lower bound: {doc}", lab, v)
                        for lab, v in zip(group_labels, hi.tolist(), strict=True):
                            fam.add(f"{name}_upper_ratio", f"Wilson upper bound: {doc}", lab, v)
                for lab, ok in zip(group_labels, d.eligible.tolist(), strict=True):
                    fam.add(
                        "group_eligible",
                        "1 if the group has min_samples predictions and takes part in disparities.",
                        lab,
                        1.0 if ok else 0.0,
                    )
                for name, attr, doc in DISPARITIES:
                    disp: Disparity = getattr(d, attr)
                    fam.add(f"{name}_ratio", doc, base, disp.value)
                    fam.add(
                        f"{name}_lower_ratio", f"Lower confidence bound: {doc}", base, disp.lower
                    )
                    fam.add(
                        f"{name}_upper_ratio", f"Upper confidence bound: {doc}", base, disp.upper
                    )
                di = d.disparate_impact
                worst = "" if di.low_group is None else names[di.low_group]
                refn = "" if di.high_group is None else names[di.high_group]
                fam.add(
                    "disparate_impact_info",
                    "Which groups the disparate impact ratio compares.",
                    f'{base},worst_group="{_esc(worst)}",reference_group="{_esc(refn)}"',
                    1.0,
                )
    return fam.text()


class FairnessExposition:
    """Renders the published snapshot for ``/metrics``, once per snapshot."""

    def __init__(self, source: Callable[[], Snapshot | None], *, confidence: float) -> None:
        self.source = source
        self.confidence = confidence
        self._cache: tuple[Any, bytes] = (None, b"")

    def __call__(self) -> bytes:
        snap = self.source()
        if snap is None:
            return b""
        cached_snap, text = self._cache
        if cached_snap is snap:
            return text
        text = render(snap, confidence=self.confidence).encode()
        self._cache = (snap, text)
        return text
