"""Typed results of the across-group comparison: :class:`Disparity` and
:class:`AttributeDisparities`, read by alerts, the exporter and every report.

A :class:`Disparity` knows its ``basis``: the registry metric its number, interval and
compared groups come from. For the equalized-odds difference that is whichever of the TPR gap
and the FPR gap is the larger, decided where the maximum is taken — a reader never has to find
it again by comparing floats.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from monitor.metrics.registry import METRICS

F64 = npt.NDArray[np.float64]


class Disparity(msgspec.Struct, frozen=True):
    """One across-group number with its interval and the groups it compares (indices)."""

    value: float
    lower: float
    upper: float
    low_group: int | None = None  # the disadvantaged / lowest-rate group
    high_group: int | None = None  # the reference / highest-rate group
    basis: str = ""  # the registry metric these numbers are (tpr_gap or fpr_gap for the EOD)
    # how many pairs of groups this one was chosen from: the interval holds over all of them
    # (``intervals.adjusted``; 1: two groups, or a single comparison)
    pairs: int = 1

    @property
    def defined(self) -> bool:
        return self.value == self.value


NAN_DISPARITY = Disparity(np.nan, np.nan, np.nan)


class AttributeDisparities(msgspec.Struct, frozen=True):
    eligible: npt.NDArray[np.bool_]
    reference: int | None  # reference group for ratios (configured, else highest rate)
    impact_ratios: F64  # selection rate of each group / reference rate
    disparate_impact: Disparity
    four_fifths_violation: bool  # DIR < the four-fifths bound
    four_fifths_significant: bool  # upper confidence limit of the DIR < the bound
    statistical_parity_difference: Disparity
    tpr_gap: Disparity
    fpr_gap: Disparity
    ppv_gap: Disparity
    equalized_odds_difference: Disparity
    average_odds_difference: Disparity  # vs reference, the largest in absolute value
    differential_fairness: float
    # score-distribution parity (score_parity.py): per group vs score_reference, and the worst
    score_reference: int | None
    score_ks: F64
    score_wasserstein: F64
    score_margin: F64  # the KS interval's half-width (DKW); W1's is (1 − 1/bins) of it
    score_ks_distance: Disparity
    score_wasserstein_distance: Disparity
    floor: int = 1  # a gap compares groups with this many in the rate's own denominator

    @property
    def equal_opportunity_difference(self) -> Disparity:
        return self.tpr_gap

    @property
    def predictive_parity_difference(self) -> Disparity:
        return self.ppv_gap

    def metric(self, name: str) -> Disparity:
        """The disparity of registry metric ``name`` (``disparate_impact_ratio``, …)."""
        d: Disparity = getattr(self, METRICS[name].attribute)
        return d
