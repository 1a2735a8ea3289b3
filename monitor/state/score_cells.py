"""What the ring keeps about scores, and the cell increments a batch of events makes.

Three kinds of score cells follow the confusion cells (``windows.py`` has the offsets):

* **calibration** (per bin, when a label arrives): labelled count, label sum, score sum — the
  expected calibration error and the threshold remedies read them;
* **score histogram** (per bin, when a prediction arrives): every scored prediction, labelled or
  not — score-distribution parity (``metrics/score_parity.py``) reads it;
* **estimate cells** (per group, 12): for each predicted class, the count, score sum and
  squared-score sum of every scored prediction (when predicted) and of the labelled ones (when
  labelled). Their difference is what the predictions still awaiting a label add in expectation
  — under calibration an unlabelled prediction of score s is positive with probability s — and
  its variance Σ s(1 − s): label-free error rates (``metrics/estimates.py``, CBPE-style).

Scores are integers in millionths (``SCORE_SCALE``) and squared scores are rounded to
millionths too, so every cell is an exact integer sum that windows, partitions and replicas add
without rounding. A squared-score sum in µ stays below 2⁶³ up to 9·10¹² predictions.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.state.windows import CAL, SCORE_SCALE, estimate_cell, hist_cell

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

# offsets in the estimate cells: (count, Σs, Σs²) of all scored predictions of class 1, of
# class 0, then of the labelled scored predictions of class 1 and of class 0
ALL_POSITIVE, ALL_NEGATIVE, LABELLED_POSITIVE, LABELLED_NEGATIVE = 0, 3, 6, 9
NO_SCORE = -1  # in the int64 millionths of this module (the join table stores it as uint32 max)


def score_micros(score: F64) -> I64:
    """Scores in millionths; :data:`NO_SCORE` where absent or outside [0, 1]."""
    ok = np.isfinite(score) & (score >= 0) & (score <= 1)
    return np.where(ok, np.rint(np.where(ok, score, 0.0) * SCORE_SCALE), NO_SCORE).astype(np.int64)


def _bins(u: I64, score_bins: int) -> I64:
    return np.minimum(u * score_bins // SCORE_SCALE, score_bins - 1)


def _squares(u: I64) -> I64:
    """s² in millionths, rounded half up: (u² + 5·10⁵) // 10⁶ (u² ≤ 10¹² fits int64)."""
    return (u * u + SCORE_SCALE // 2) // SCORE_SCALE


def _class_sums(
    scored: I64, u: I64, pred: I64, base: int, first: int
) -> tuple[list[I64], list[I64], list[I64]]:
    """Rows, cells and weights adding (1, s, s²) to the class block at ``base + first`` (class
    1) or ``base + first + 3`` (class 0)."""
    cell = base + first + np.where(pred[scored] == 1, 0, 3)
    return (
        [scored, scored, scored],
        [cell, cell + 1, cell + 2],
        [np.ones(len(scored), np.int64), u[scored], _squares(u[scored])],
    )


def prediction_parts(
    u: I64, pred: npt.NDArray[np.integer], score_bins: int
) -> tuple[list[I64], list[I64], list[I64]]:
    """The score cells a batch of predictions adds (score histogram, class sums): lists of
    event rows, cells and weights to concatenate with the other increments."""
    scored = np.flatnonzero(u != NO_SCORE)
    if not len(scored):
        return [], [], []
    rows, cells, weights = _class_sums(
        scored, u, pred.astype(np.int64), estimate_cell(score_bins), ALL_POSITIVE
    )
    rows.append(scored)
    cells.append(hist_cell(score_bins) + _bins(u[scored], score_bins))
    weights.append(np.ones(len(scored), np.int64))
    return rows, cells, weights


def label_parts(
    u: I64, pred: npt.NDArray[np.integer], y: I64, score_bins: int
) -> tuple[list[I64], list[I64], list[I64]]:
    """The score cells a batch of joined labels adds (calibration bins, labelled class sums)."""
    scored = np.flatnonzero(u != NO_SCORE)
    if not len(scored):
        return [], [], []
    s = u[scored]
    base = CAL + 3 * _bins(s, score_bins)
    rows, cells, weights = _class_sums(
        scored, u, pred.astype(np.int64), estimate_cell(score_bins), LABELLED_POSITIVE
    )
    rows += [scored, scored, scored]
    cells += [base, base + 1, base + 2]
    weights += [np.ones(len(scored), np.int64), y[scored], s]
    return rows, cells, weights
