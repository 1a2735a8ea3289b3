"""What an audit adds to a window's report: per-group threshold remedies
(``metrics/remedies.py``) and the base-rate trade-off (``metrics/base_rates.py``), as JSON.

Only where they can be computed: remedies need labelled, scored decisions; the trade-off needs
at least two eligible groups with labels (their precision and TPR defined) and a reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec
from monitor.metrics.base_rates import tradeoff
from monitor.metrics.remedies import remedy
from monitor.metrics.results import attribute_result
from monitor.state.windows import CAL

I64 = npt.NDArray[np.int64]


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def audit_findings(
    counts: I64, labels: list[str], spec: ModelSpec, set_name: str
) -> dict[str, Any]:
    """``remedies`` and ``base_rate_tradeoff`` of one attribute set (the keys that apply)."""
    out: dict[str, Any] = {}
    rem = remedies_report(counts, labels, spec, set_name)
    if rem is not None:
        out["remedies"] = rem
    trade = tradeoff_report(counts, labels, spec, set_name)
    if trade is not None:
        out["base_rate_tradeoff"] = trade
    return out


def tradeoff_report(counts: I64, labels: list[str], spec: ModelSpec, set_name: str) -> Any:
    """Per group: base rate, PPV, TPR, FPR, the identity's FPR and the FPR forced by the
    reference's PPV and TPR; ``None`` when fewer than two eligible groups have them."""
    r = attribute_result(counts, labels, spec, set_name, confidence=0.95)
    gm, ref = r.groups, r.disparities.reference
    use = r.disparities.eligible & np.isfinite(gm.ppv) & np.isfinite(gm.tpr) & (gm.ppv > 0)
    if ref is None or not use[ref] or use.sum() < 2:
        return None
    t = tradeoff(gm.prevalence, gm.ppv, gm.tpr, ref, use)
    return {
        "reference_group": labels[ref],
        "applies": t.applies,
        "forced_fpr_gap": _num(t.forced_fpr_gap),
        "groups": {
            labels[g]: {
                "base_rate": _num(gm.prevalence[g]),
                "ppv": _num(gm.ppv[g]),
                "tpr": _num(gm.tpr[g]),
                "fpr": _num(gm.fpr[g]),
                "fpr_identity": _num(t.fpr_identity[g]),
                "fpr_at_reference_ppv_tpr": _num(t.fpr_at_reference_ppv_tpr[g]),
            }
            for g in np.flatnonzero(use).tolist()
        },
    }


def remedies_report(counts: I64, labels: list[str], spec: ModelSpec, set_name: str) -> Any:
    """Per-group threshold remedies (``metrics/remedies.py``) for the four-fifths rule and
    equal opportunity, deterministic and randomized; ``None`` without scored, labelled data."""
    if counts[:, CAL : CAL + 3 * spec.score_bins].sum() == 0:
        return None
    ref_name = spec.reference_groups.get(set_name)
    ref = labels.index(ref_name) if ref_name in labels else None
    out: dict[str, Any] = {}
    for constraint in ("four_fifths", "equal_opportunity"):
        for kind in ("deterministic", "randomized"):
            r = remedy(
                counts,
                constraint=constraint,
                score_bins=spec.score_bins,
                favourable=spec.favourable,
                min_samples=spec.min_samples,
                reference=ref,
                randomized=kind == "randomized",
            )
            out.setdefault(constraint, {"bound": r.bound})[kind] = {
                "feasible": r.feasible,
                "accuracy_before": _num(r.accuracy_before),
                "accuracy_after": _num(r.accuracy_after),
                "value_after": _num(r.value_after),
                "thresholds": {
                    lab: {"at": t.at, "lower": t.lower, "p": t.p, "judged": j}
                    for lab, t, j in zip(labels, r.thresholds, r.judged, strict=True)
                },
            }
    return out
