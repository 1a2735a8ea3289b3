"""One attribute set's typed results, computed the one way every surface uses.

:func:`attribute_result` applies the model's configuration (its reference group for the
attribute, its ``min_samples``) and the monitor's ``confidence`` to a ``counts[group, cell]``
array; the alert evaluator, the drift detector, the exporter and the reports all read the
:class:`AttributeResult` it returns — never a report dict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec
from monitor.metrics.disparities import AttributeDisparities, Disparity
from monitor.metrics.fairness import GroupMetrics, disparities, group_metrics
from monitor.metrics.registry import METRICS

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class AttributeResult:
    """Group metrics and disparities of one attribute set, with its group names."""

    labels: tuple[str, ...]
    groups: GroupMetrics
    disparities: AttributeDisparities

    def name(self, group: int | None) -> str | None:
        return None if group is None else self.labels[group]

    def disparity(self, metric: str) -> Disparity:
        return self.disparities.metric(metric)

    def denominator(self, group: int, basis: str) -> int:
        """The sum of the cells the ``basis`` metric's rate divides by, for one group (what a
        rule's ``min_samples`` is checked against)."""
        return int(sum(int(getattr(self.groups, c)[group]) for c in METRICS[basis].counts))

    def value(self, field: str, group: int) -> float:
        """A per-group number (a ``GroupMetrics`` field)."""
        return float(getattr(self.groups, field)[group])

    def selection_rates(self) -> dict[str, float | None]:
        """Per group with predictions: its selection rate (``None``: undefined)."""
        gm = self.groups
        return {
            lab: finite_or_none(float(gm.selection_rate[i]))
            for i, lab in enumerate(self.labels)
            if gm.n[i]
        }


def finite_or_none(x: float) -> float | None:
    """A JSON-safe number: NaN and infinities become ``None`` ("insufficient data")."""
    return x if math.isfinite(x) else None


def attribute_result(
    counts: I64, labels: list[str] | tuple[str, ...], spec: ModelSpec, set_name: str, *,
    confidence: float,
) -> AttributeResult:  # fmt: skip
    """Group metrics and disparities of one attribute set, with the model's configured
    reference group (if present) and minimum sample size: the one place that decides them."""
    gm = group_metrics(
        counts, score_bins=spec.score_bins, confidence=confidence, favourable=spec.favourable
    )
    names = tuple(labels)
    ref_label = spec.reference_groups.get(set_name)
    ref = names.index(ref_label) if ref_label in names else None
    d = disparities(gm, min_samples=spec.min_samples, reference=ref, confidence=confidence)
    return AttributeResult(names, gm, d)
