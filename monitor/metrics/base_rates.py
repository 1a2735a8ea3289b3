"""The base-rate trade-off (seed 000; Chouldechova 2017): why predictive parity and error-rate
balance cannot both hold when groups' base rates differ.

Per group, with base rate (prevalence) ``b``, precision ``PPV`` and ``TPR``, the law of total
probability gives ``PPV = TPR·b / (TPR·b + FPR·(1 − b))``, so

    FPR = b / (1 − b) · (1 − PPV) / PPV · TPR

If two groups had the same PPV and the same TPR, their FPRs would differ exactly as
``b / (1 − b)`` does. :func:`tradeoff` shows, per group, the identity's FPR (equal to the
observed one: a check on the counts) and the FPR the group *would* have with the reference
group's PPV and TPR — the error-rate gap that predictive parity plus equal opportunity force.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def identity_fpr(prevalence: F64, ppv: F64, tpr: F64) -> F64:
    """``b / (1 − b) · (1 − PPV) / PPV · TPR`` (NaN where undefined)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: F64 = prevalence / (1 - prevalence) * (1 - ppv) / ppv * tpr
    return np.where(np.isfinite(out), out, np.nan)


@dataclass(frozen=True)
class Tradeoff:
    """Per group: the identity's FPR and the FPR forced by the reference's PPV and TPR."""

    reference: int
    fpr_identity: F64
    fpr_at_reference_ppv_tpr: F64
    forced_fpr_gap: float  # max − min of the forced FPRs over the given groups
    applies: bool  # base rates differ: parity of PPV, TPR and FPR cannot all hold


def tradeoff(
    prevalence: F64, ppv: F64, tpr: F64, reference: int, use: npt.NDArray[np.bool_]
) -> Tradeoff:
    """The trade-off over the groups ``use`` (eligible, with labels), against ``reference``."""
    forced = identity_fpr(
        prevalence, np.full_like(ppv, ppv[reference]), np.full_like(tpr, tpr[reference])
    )
    f = forced[use & np.isfinite(forced)]
    b = prevalence[use & np.isfinite(prevalence)]
    return Tradeoff(
        reference=reference,
        fpr_identity=identity_fpr(prevalence, ppv, tpr),
        fpr_at_reference_ppv_tpr=forced,
        forced_fpr_gap=float(f.max() - f.min()) if len(f) >= 2 else float("nan"),
        applies=bool(len(b) >= 2 and b.max() > b.min()),
    )
