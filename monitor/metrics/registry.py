"""The metric registry: what each fairness metric *is*, written once.

Every surface reads it: the alert evaluator (which rate and which counts a rule's comparison
rests on), the drift detector (which way is worse, which bound), the Prometheus exporter (family
names, help text), the text/JSON report, the status page, the audit report, and the generated
PromQL (``fairness-monitor prometheus-rules``). A metric that is added here shows up everywhere;
a bound or a confidence level is never written again elsewhere.

Across-group metrics (:data:`METRICS`) are computed by :mod:`monitor.metrics.fairness` over the
groups with ``n >= min_samples`` (docs/metrics.md). Per-group families (:data:`GROUP_COUNTS`,
:data:`GROUP_RATES`) are what the exporter writes per group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from monitor.metrics.intervals import z_value

# The EEOC four-fifths rule, 29 CFR 1607.4(D): a selection rate below four fifths of the
# reference group's rate is evidence of adverse impact.
FOUR_FIFTHS = 0.8
# A gap of ten percentage points between groups' error rates: the shipped alert rules' bound.
GAP_BOUND = 0.1
# Score parity: a KS distance of 0.1 is a 10-point selection-rate gap at some threshold; a
# Wasserstein-1 distance of 0.05, a mean score shift of 0.05.
KS_BOUND, WASSERSTEIN_BOUND = 0.1, 0.05
DEFAULT_CONFIDENCE = 0.95

Direction = Literal["lower", "higher"]  # which way is worse
Interval = Literal["mover-wilson", "newcombe", "dkw", "none"]
INTERVAL_NAMES = {
    "mover-wilson": "MOVER-R with Wilson limits (Donner & Zou 2012)",
    "newcombe": "Newcombe's hybrid score (1998)",
    "dkw": "Dvoretzky–Kiefer–Wolfowitz bands of both groups (Massart 1990)",
    "none": "none",
}


@dataclass(frozen=True)
class MetricSpec:
    """One across-group disparity metric.

    ``rate``: the per-group rate (a :class:`~monitor.metrics.fairness.GroupMetrics` field) the
    metric compares, and ``counts`` the per-group cells whose sum is that rate's denominator
    (what a rule's ``min_samples`` is checked against); both empty for the equalized-odds
    difference, whose basis is whichever of its two gaps is the larger (``Disparity.basis``).
    ``attribute``: the :class:`~monitor.metrics.disparities.AttributeDisparities` field.
    ``family``: the exported Prometheus family (``fairness_<family>_ratio`` and its bounds) and
    the recording rules' name; empty when the metric is not exported. ``max_of``: the metrics
    this one is the larger of (the equalized-odds difference: the TPR and FPR gaps). Such a
    maximum is back under its bound only when each of them is measured (one unmeasured leaves
    the other alone, which says nothing of it), and a page shows each with its own pair.
    """

    name: str
    attribute: str
    direction: Direction
    rate: str
    counts: tuple[str, ...]
    interval: Interval
    default_bound: float
    unit: str
    help: str
    needs_labels: bool  # compares error rates: needs the delayed labels
    family: str = ""
    alertable: bool = True
    max_of: tuple[str, ...] = ()

    @property
    def ratio(self) -> bool:
        """A ratio to the reference group's rate (the DIR): undefined when that rate is 0,
        however many samples the groups have."""
        return self.interval == "mover-wilson"

    @property
    def spread(self) -> bool:
        """A gap max − min between two groups' rates, ordered by the data: its interval is a
        spread's, [max(L, 0), max(U, −L)] of Newcombe's [L, U] (``intervals.spread_limits``)."""
        return self.interval == "newcombe"

    def worse(self, value: float, reference: float) -> bool:
        """Is ``value`` worse than ``reference`` in this metric's direction?"""
        return value < reference if self.direction == "lower" else value > reference

    @property
    def op(self) -> Literal["<", ">"]:
        """The comparator of a rule that fires when the metric is worse than its bound."""
        return "<" if self.direction == "lower" else ">"


_SPECS = (
    MetricSpec(
        "disparate_impact_ratio", "disparate_impact", "lower", "selection_rate", ("n",),
        "mover-wilson", FOUR_FIFTHS, "ratio",
        f"Lowest selection rate / reference rate (four-fifths rule at {FOUR_FIFTHS}).", False,
        "disparate_impact",
    ),
    MetricSpec(
        "statistical_parity_difference", "statistical_parity_difference", "higher",
        "selection_rate", ("n",), "newcombe", GAP_BOUND, "ratio",
        "Max - min selection rate over eligible groups.", False,
        "statistical_parity_difference",
    ),
    MetricSpec(
        "tpr_gap", "tpr_gap", "higher", "tpr", ("tp", "fn"), "newcombe", GAP_BOUND, "ratio",
        "Max - min TPR over eligible groups.", True, "tpr_gap",
    ),
    MetricSpec(
        "fpr_gap", "fpr_gap", "higher", "fpr", ("fp", "tn"), "newcombe", GAP_BOUND, "ratio",
        "Max - min FPR over eligible groups.", True, "fpr_gap",
    ),
    MetricSpec(
        "ppv_gap", "ppv_gap", "higher", "ppv", ("tp", "fp"), "newcombe", GAP_BOUND, "ratio",
        "Max - min PPV over eligible groups.", True, "ppv_gap",
    ),
    MetricSpec(
        "equalized_odds_difference", "equalized_odds_difference", "higher", "", (),
        "newcombe", GAP_BOUND, "ratio", "max(TPR gap, FPR gap).", True,
        "equalized_odds_difference", max_of=("tpr_gap", "fpr_gap"),
    ),
    MetricSpec(
        "equal_opportunity_difference", "tpr_gap", "higher", "tpr", ("tp", "fn"), "newcombe",
        GAP_BOUND, "ratio", "TPR gap.", True, "equal_opportunity_difference",
    ),
    MetricSpec(
        "predictive_parity_difference", "ppv_gap", "higher", "ppv", ("tp", "fp"), "newcombe",
        GAP_BOUND, "ratio", "PPV gap.", True, "predictive_parity_difference",
    ),
    MetricSpec(
        "score_ks_distance", "score_ks_distance", "higher", "", ("scored",), "dkw", KS_BOUND,
        "ratio",
        "Largest Kolmogorov–Smirnov distance of a group's binned score distribution from the "
        "reference group's (the largest selection-rate gap over all thresholds).", False,
        "score_ks_distance",
    ),
    MetricSpec(
        "score_wasserstein_distance", "score_wasserstein_distance", "higher", "", ("scored",),
        "dkw", WASSERSTEIN_BOUND, "ratio",
        "Largest Wasserstein-1 distance of a group's binned score distribution from the "
        "reference group's.", False, "score_wasserstein_distance",
    ),
    MetricSpec(
        "average_odds_difference", "average_odds_difference", "higher", "", (), "none",
        GAP_BOUND, "ratio",
        "1/2 [(FPR_g - FPR_ref) + (TPR_g - TPR_ref)], the group with the largest |.| (AIF360).",
        True, alertable=False,
    ),
)  # fmt: skip
METRICS: dict[str, MetricSpec] = {m.name: m for m in _SPECS}
ALERTABLE = tuple(m.name for m in _SPECS if m.alertable)
EXPORTED = tuple(m for m in _SPECS if m.family)
DIFFERENTIAL_FAIRNESS_HELP = (
    "Smoothed empirical differential fairness epsilon (Foulds et al. 2020): 0 is parity."
)


@dataclass(frozen=True)
class GroupFamily:
    """A per-group family of ``/metrics``: ``fairness_<name>`` from a ``GroupMetrics`` field;
    ``bounded`` rates also get their Wilson limits (``_lower_ratio``, ``_upper_ratio``)."""

    name: str
    field: str
    help: str
    bounded: bool = False
    counts: tuple[str, ...] = ()  # cells summed into the rate's denominator (rates only)
    numerator: tuple[str, ...] = ()


GROUP_COUNTS = (
    GroupFamily("predictions", "n", "Predictions in the window."),
    GroupFamily("scored_predictions", "scored", "Predictions in the window with a score."),
    GroupFamily("favourable_predictions", "favourable", "Favourable predictions in the window."),
    GroupFamily(
        "labelled_predictions", "labelled", "Predictions in the window whose label has arrived."
    ),
    GroupFamily("true_positives", "tp", "True positives in the window (class 1 = positive)."),
    GroupFamily("false_positives", "fp", "False positives in the window."),
    GroupFamily("false_negatives", "fn", "False negatives in the window."),
    GroupFamily("true_negatives", "tn", "True negatives in the window."),
)
GROUP_RATES = (
    GroupFamily(
        "selection_rate", "selection_rate", "Rate of the favourable prediction.", True,
        ("n",), ("favourable",),
    ),
    GroupFamily("true_positive_rate", "tpr", "TP / (TP + FN).", True, ("tp", "fn"), ("tp",)),
    GroupFamily("false_positive_rate", "fpr", "FP / (FP + TN).", True, ("fp", "tn"), ("fp",)),
    GroupFamily(
        "positive_predictive_value", "ppv", "TP / (TP + FP).", True, ("tp", "fp"), ("tp",)
    ),
    GroupFamily("calibration_error", "calibration_error", "Expected calibration error."),

    GroupFamily("label_coverage", "label_coverage", "Labelled / predictions."),
    GroupFamily(
        "label_coverage_predicted_positive",
        "label_coverage_predicted_positive",
        "Labelled / predictions, among predictions of class 1.",
    ),
    GroupFamily(
        "label_coverage_predicted_negative",
        "label_coverage_predicted_negative",
        "Labelled / predictions, among predictions of class 0 (0 under selective labels: "
        "TPR and FPR then describe the labelled class only).",
    ),
)  # fmt: skip
RATE_FAMILY = {f.field: f for f in GROUP_RATES if f.bounded}


def spec(metric: str) -> MetricSpec:
    """The registry entry of ``metric`` (a ``KeyError`` names an unknown metric)."""
    return METRICS[metric]


def z_for(confidence: float = DEFAULT_CONFIDENCE) -> float:
    """The two-sided standard-normal quantile of ``confidence`` (never a written-out 1.96)."""
    return z_value(confidence)


def bounds(metric_bounds: dict[str, float] | None = None) -> dict[str, float]:
    """The bound each metric is judged against: the registry defaults, overridden by
    ``metric_bounds`` (e.g. the first configured rule per metric)."""
    out = {m.name: m.default_bound for m in _SPECS}
    out.update(metric_bounds or {})
    return out
