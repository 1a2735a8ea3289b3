"""Label-free error rates per group: TPR and FPR before the labels arrive (CBPE-style).

Why: with slow labels (lending: months; recidivism: two years) the error-rate gaps of recent
decisions are unknown for a long time. Confidence-based performance estimation (NannyML's CBPE)
reads a confusion matrix off calibrated scores: a prediction of score ``s`` whose label has not
arrived is positive with probability ``s``. Here it is done per group, exactly, from the ring's
estimate cells (``state/score_cells.py``), and each group's calibration — the assumption — is
checked on the labels that did arrive.

Per group and predicted class ``c``, over the window's unlabelled scored predictions
(all scored minus labelled scored): count ``n_c``, ``S_c = Σ s``, ``Q_c = Σ s²``. Then

* ``TP = TP_labelled + S_1``,  ``FN = FN_labelled + S_0``,
  ``FP = FP_labelled + (n_1 − S_1)``,  ``TN = TN_labelled + (n_0 − S_0)``;
* TPR = TP / (TP + FN) and FPR = FP / (FP + TN): the labelled counts as they are, the
  unlabelled ones in expectation;
* their error: the unlabelled outcomes are independent Bernoulli(s), so the positives among
  class ``c`` have variance ``v_c = Σ s(1 − s) = S_c − Q_c``; TP and FN (FP and TN) are
  independent sums with variances ``v_1`` and ``v_0``, and Fieller's interval for their ratio
  (:func:`fieller`) bounds where TPR = TP/(TP + FN) (FPR = FP/(FP + TN)) will fall. It is the
  error of the rate the labels will show for these predictions, given the scores — if the
  scores are calibrated.

With ``label_time: arrival`` a window's labels are not its predictions' labels, so the estimate
uses the scores alone (every scored prediction as if unlabelled).

**Calibration check** (Hosmer & Lemeshow 1980, with the model's scores as given, not refitted):
over the calibration bins of the group's labelled scored predictions,
``H = Σ_b (O_b − E_b)² / (E_b (1 − E_b / n_b))`` with ``O_b`` the labels' sum, ``E_b`` the scores'
sum and ``n_b`` the count; the denominator bounds ``Σ s(1 − s)`` from above, so ``H`` errs small.
Under calibration ``H`` is about χ² with one degree of freedom per non-empty bin. A group whose
p-value is below ``CALIBRATION_ALPHA`` is *miscalibrated*: its estimate is not shown. With fewer
than ``min_samples`` labelled scored predictions the check is *unchecked* (the estimate is shown,
marked so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.state.score_cells import (
    ALL_NEGATIVE,
    ALL_POSITIVE,
    LABELLED_NEGATIVE,
    LABELLED_POSITIVE,
)
from monitor.state.windows import CAL, FN, FP, SCORE_SCALE, TN, TP, N, estimate_cell

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Check = Literal["calibrated", "miscalibrated", "unchecked"]
CALIBRATION_ALPHA = 0.01  # a group is flagged when the check's p-value falls below this


@dataclass(frozen=True)
class Estimates:
    """Per group (arrays over groups): estimated TPR/FPR with their intervals (NaN where not
    shown), how much of the window is estimated, and the calibration check."""

    tpr: F64
    tpr_lower: F64
    tpr_upper: F64
    fpr: F64
    fpr_lower: F64
    fpr_upper: F64
    estimated: I64  # unlabelled scored predictions whose cells are expected, not counted
    unscored_unlabelled: I64  # neither labelled nor scored: in neither part
    calibration_statistic: F64
    calibration_bins: I64
    calibration_p: F64
    check: tuple[Check, ...]


def chi2_sf(x: float, k: int) -> float:
    """P(χ²_k ≥ x) for an integer ``k ≥ 1``, in closed form (Abramowitz & Stegun 26.4.4-5):
    even k: e^{−x/2} Σ_{i<k/2} (x/2)^i / i!; odd k: erfc(√(x/2)) + e^{−x/2} Σ_{i=1}^{(k−1)/2}
    (x/2)^{i−½} / Γ(i + ½)."""
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    h = x / 2.0
    if k % 2 == 0:
        term, total = 1.0, 1.0
        for i in range(1, k // 2):
            term *= h / i
            total += term
        return min(1.0, math.exp(-h) * total)
    term = math.sqrt(h) / math.gamma(1.5)
    total = term if k > 1 else 0.0
    for i in range(2, (k - 1) // 2 + 1):
        term *= h / (i - 0.5)
        total += term
    return min(1.0, math.erfc(math.sqrt(h)) + math.exp(-h) * total)


def calibration_check(counts: I64, score_bins: int) -> tuple[F64, I64, F64]:
    """Per group of ``counts[group, cell]``: (H, non-empty bins, p-value) over its labelled
    scored predictions (NaN without any)."""
    cal = counts[:, CAL : CAL + 3 * score_bins].reshape(len(counts), score_bins, 3)
    n = cal[..., 0].astype(np.float64)
    observed, expected = cal[..., 1].astype(np.float64), cal[..., 2] / SCORE_SCALE
    with np.errstate(invalid="ignore", divide="ignore"):
        var = expected * (1.0 - expected / n)
        term = (observed - expected) ** 2 / var
    term = np.where(n > 0, term, 0.0)
    # a bin of scores all 0 or all 1 has no variance: consistent labels add nothing, any other
    # label is impossible under calibration
    term = np.where((n > 0) & (var <= 0), np.where(observed == expected, 0.0, np.inf), term)
    stat = term.sum(axis=1)
    bins = (n > 0).sum(axis=1)
    p = np.array(
        [chi2_sf(float(s), int(b)) if b else np.nan for s, b in zip(stat, bins, strict=True)]
    )
    return np.where(bins > 0, stat, np.nan), bins.astype(np.int64), p


def fieller(a: F64, var_a: F64, b: F64, var_b: F64, z: float) -> tuple[F64, F64]:
    """Where the ratio ``R = A / (A + B)`` of two independent sums will fall, A and B with
    means ``a``, ``b`` and variances ``var_a``, ``var_b`` (Fieller 1954): ``R ≤ r`` iff
    ``A − r(A + B) ≤ 0``, a normal quantity of mean ``a − r(a + b)`` and variance
    ``(1 − r)² var_a + r² var_b``, so the limits solve
    ``(a − r s)² = z² ((1 − r)² var_a + r² var_b)`` (s = a + b), a quadratic in r; clipped to
    [0, 1], and all of it when the variance swamps the means (the quadratic opens downwards)."""
    s = a + b
    qa = s**2 - z**2 * (var_a + var_b)
    qb = -2.0 * (s * a - z**2 * var_a)
    qc = a**2 - z**2 * var_a
    with np.errstate(invalid="ignore", divide="ignore"):
        root = np.sqrt(np.maximum(qb**2 - 4.0 * qa * qc, 0.0))
        lo = (-qb - root) / (2.0 * qa)
        hi = (-qb + root) / (2.0 * qa)
    bounded = qa > 0
    nan = s != s
    lo = np.where(bounded, np.clip(lo, 0.0, 1.0), np.where(s > 0, 0.0, np.nan))
    hi = np.where(bounded, np.clip(hi, 0.0, 1.0), np.where(s > 0, 1.0, np.nan))
    return np.where(nan, np.nan, lo), np.where(nan, np.nan, hi)


def _block(counts: I64, first: int, e: int) -> tuple[F64, F64, F64]:
    c = counts[:, e + first : e + first + 3]
    return c[:, 0].astype(np.float64), c[:, 1] / SCORE_SCALE, c[:, 2] / SCORE_SCALE


def estimate(
    counts: I64,
    *,
    score_bins: int,
    z: float,
    min_samples: int,
    calibration: I64 | None = None,
    labels_by_prediction: bool = True,
) -> Estimates:
    """Estimated TPR and FPR of every group of ``counts[group, cell]`` (one window).

    ``calibration``: the counts the calibration check reads (the model's longest window, whose
    labels have had the most time to arrive; default: ``counts`` itself).
    ``labels_by_prediction``: False with ``label_time: arrival`` (scores alone are used).
    """
    e = estimate_cell(score_bins)
    n1, s1, q1 = _block(counts, ALL_POSITIVE, e)
    n0, s0, q0 = _block(counts, ALL_NEGATIVE, e)
    tp, fp, fn, tn = (counts[:, c].astype(np.float64) for c in (TP, FP, FN, TN))
    if labels_by_prediction:
        ln1, ls1, lq1 = _block(counts, LABELLED_POSITIVE, e)
        ln0, ls0, lq0 = _block(counts, LABELLED_NEGATIVE, e)
        n1, s1, q1, n0, s0, q0 = n1 - ln1, s1 - ls1, q1 - lq1, n0 - ln0, s0 - ls0, q0 - lq0
        labelled = tp + fp + fn + tn
    else:
        tp = fp = fn = tn = labelled = np.zeros(len(counts))
    v1, v0 = np.maximum(s1 - q1, 0.0), np.maximum(s0 - q0, 0.0)
    TP_, FN_ = tp + s1, fn + s0
    FP_, TN_ = fp + (n1 - s1), tn + (n0 - s0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = TP_ / (TP_ + FN_)
        fpr = FP_ / (FP_ + TN_)
        tpr_lo, tpr_hi = fieller(TP_, v1, FN_, v0, z)
        fpr_lo, fpr_hi = fieller(FP_, v1, TN_, v0, z)
    stat, bins, p = calibration_check(counts if calibration is None else calibration, score_bins)
    lab_scored = (calibration if calibration is not None else counts)[
        :, CAL : CAL + 3 * score_bins : 3
    ].sum(axis=1)
    check: list[Check] = [
        "unchecked" if k < max(min_samples, 1) or pv != pv else
        "miscalibrated" if pv < CALIBRATION_ALPHA else "calibrated"
        for k, pv in zip(lab_scored.tolist(), p.tolist(), strict=True)
    ]  # fmt: skip
    hide = np.array([c == "miscalibrated" for c in check], dtype=bool)
    nan = np.full(len(counts), np.nan)

    def shown(x: F64) -> F64:
        return np.where(hide, nan, x)

    return Estimates(
        tpr=shown(tpr),
        tpr_lower=shown(tpr_lo),
        tpr_upper=shown(tpr_hi),
        fpr=shown(fpr),
        fpr_lower=shown(fpr_lo),
        fpr_upper=shown(fpr_hi),
        estimated=(n1 + n0).astype(np.int64),
        unscored_unlabelled=(counts[:, N] - labelled - n1 - n0).astype(np.int64),
        calibration_statistic=stat,
        calibration_bins=bins,
        calibration_p=p,
        check=tuple(check),
    )
