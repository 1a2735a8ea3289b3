"""One attribute set's typed results, computed the one way every surface uses.

:func:`attribute_result` applies the model's configuration (its reference group for the
attribute, its ``min_samples``) and the monitor's ``confidence`` to a ``counts[group, cell]``
array; the alert evaluator, the drift detector, the exporter and the reports all read the
:class:`AttributeResult` it returns — never a report dict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec
from monitor.metrics.batch import stacked_results
from monitor.metrics.blindness import BlindReport, blind_groups, stacked_blindness
from monitor.metrics.disparities import AttributeDisparities, Disparity
from monitor.metrics.fairness import GroupMetrics
from monitor.metrics.registry import METRICS
from monitor.metrics.score_parity import ABSENT
from monitor.metrics.ties import label_ranks

I64 = npt.NDArray[np.int64]


class AttributeResult(msgspec.Struct, frozen=True):
    """Group metrics and disparities of one attribute set, with its group names."""

    labels: tuple[str, ...]
    groups: GroupMetrics
    disparities: AttributeDisparities
    # per basis metric, each group's denominator (filled on first use: rules ask per group)
    _denominators: dict[str, list[int]] = msgspec.field(default_factory=dict)
    _blind: dict[int, BlindReport] = msgspec.field(default_factory=dict)

    def name(self, group: int | None) -> str | None:
        return None if group is None else self.labels[group]

    def blind(self, favourable: int) -> BlindReport:
        """Which rates and disparities the counts cannot measure (computed once per result:
        every rule on it asks)."""
        report = self._blind.get(favourable)
        if report is None:
            report = self._blind[favourable] = blind_groups(self.groups, favourable=favourable)
        return report

    def disparity(self, metric: str) -> Disparity:
        return self.disparities.metric(metric)

    def denominator(self, group: int, basis: str) -> int:
        """The sum of the cells the ``basis`` metric's rate divides by, for one group (what a
        rule's ``min_samples`` is checked against)."""
        return self.denominators(basis)[group]

    def denominators(self, basis: str) -> list[int]:
        """:meth:`denominator` of every group."""
        d = self._denominators.get(basis)
        if d is None:
            cells = [getattr(self.groups, c) for c in METRICS[basis].counts]
            d = self._denominators[basis] = (
                sum(cells[1:], cells[0]).tolist() if cells else [0] * len(self.labels)
            )
        return d

    def value(self, field: str, group: int) -> float:
        """A per-group number (a ``GroupMetrics`` field)."""
        return float(getattr(self.groups, field)[group])

    def selection_rates(self) -> dict[str, float | None]:
        """Per group with predictions: its selection rate (``None``: undefined)."""
        gm = self.groups
        rates = gm.selection_rate.tolist()  # in [0, 1] or NaN: finite_or_none, cheaper
        return {
            lab: (rate if rate == rate else None)
            for lab, rate, n in zip(self.labels, rates, gm.n.tolist(), strict=True)
            if n
        }


def finite_or_none(x: float) -> float | None:
    """A JSON-safe number: NaN and infinities become ``None`` ("insufficient data")."""
    return x if math.isfinite(x) else None


def attribute_result(
    counts: I64,
    labels: Sequence[str],
    spec: ModelSpec,
    set_name: str,
    *,
    confidence: float,
    scores: bool = True,
) -> AttributeResult:
    """Group metrics and disparities of one attribute set (:func:`attribute_results` of one)."""
    items = [(counts, labels, set_name)]
    return attribute_results(items, spec, confidence=confidence, scores=scores)[0]


def attribute_results(
    items: Sequence[tuple[I64, Sequence[str], str]],
    spec: ModelSpec,
    *,
    confidence: float,
    scores: bool = True,
) -> list[AttributeResult]:
    """Group metrics and disparities of several ``(counts[group, cell], group labels, attribute
    set)`` of one model, with its configured reference groups (if present) and minimum sample
    size: the one place that decides them. Computed stacked (:mod:`monitor.metrics.batch`): the
    numbers of :func:`~monitor.metrics.fairness.group_metrics` and
    :func:`~monitor.metrics.fairness.disparities`, at a fraction of the cost for many.
    ``scores=False`` leaves the score-distribution distances undefined (not computed)."""
    if not items:
        return []
    sizes = [len(c) for c, _, _ in items]
    width = max([1, *sizes])  # at least one (empty) group: argmax needs a non-empty axis
    stacked = np.zeros((len(items), width, items[0][0].shape[-1]), dtype=np.int64)
    refs: list[int | None] = []
    ranks = np.zeros((len(items), width), dtype=np.int64)
    for i, (c, labels, set_name) in enumerate(items):
        stacked[i, : len(c)] = c
        ranks[i] = label_ranks(labels, width)  # ties go by label, not by arrival (ties.py)
        ref, names = spec.reference_groups.get(set_name), list(labels)
        refs.append(None if ref is None else names.index(ref) if ref in names else ABSENT)
    out = stacked_results(
        stacked,
        sizes,
        refs,
        min_samples=spec.min_samples,
        score_bins=spec.score_bins,
        confidence=confidence,
        favourable=spec.favourable,
        scores=scores,
        ranks=ranks,
    )
    # what the counts cannot measure, for the model's favourable class: every rule asks
    fav = spec.favourable
    blind = stacked_blindness(stacked, sizes, favourable=fav)
    return [
        AttributeResult(tuple(lab), g, d, _blind={fav: b})
        for (_, lab, _), (g, d), b in zip(items, out, blind, strict=True)
    ]
