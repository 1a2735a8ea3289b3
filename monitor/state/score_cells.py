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

from monitor.state.windows import CAL, FAV, SCORE_SCALE, N, estimate_cell, hist_cell

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


def prediction_block(
    u: I64, pred: npt.NDArray[np.integer], favourable: I64, score_bins: int
) -> tuple[I64, I64]:
    """``(cells, weights)``, ``[event, 6]``: what each prediction adds — N and FAV, then (when
    scored; else weight 0) its score histogram bin and its class's count, Σs and Σs²."""
    scored = u != NO_SCORE
    us = np.where(scored, u, 0)
    sc = scored.astype(np.int64)
    e = estimate_cell(score_bins) + np.where(pred == 1, ALL_POSITIVE, ALL_NEGATIVE)
    n = len(u)
    cells = np.stack(
        [np.full(n, N), np.full(n, FAV), hist_cell(score_bins) + _bins(us, score_bins), e, e + 1,
         e + 2],
        axis=1,
    )  # fmt: skip
    weights = np.stack([np.ones(n, np.int64), favourable, sc, sc, us, _squares(us)], axis=1)
    return cells.astype(np.int64), weights


def label_block(
    u: I64, pred: npt.NDArray[np.integer], y: I64, confusion: I64, score_bins: int
) -> tuple[I64, I64]:
    """``(cells, weights)``, ``[event, 7]``: what each joined label adds — its confusion cell,
    then (when scored; else weight 0) its calibration bin's count, label and score sums and its
    class's labelled count, Σs and Σs²."""
    scored = u != NO_SCORE
    us = np.where(scored, u, 0)
    sc = scored.astype(np.int64)
    base = CAL + 3 * _bins(us, score_bins)
    e = estimate_cell(score_bins) + np.where(pred == 1, LABELLED_POSITIVE, LABELLED_NEGATIVE)
    cells = np.stack([confusion, base, base + 1, base + 2, e, e + 1, e + 2], axis=1)
    weights = np.stack([np.ones(len(u), np.int64), sc, y * sc, us, sc, us, _squares(us)], axis=1)
    return cells.astype(np.int64), weights
