"""What the reports say about scores: each group's score-distribution distance from the score
reference group (``metrics/score_parity.py``) and its label-free TPR/FPR estimates with the
calibration check they rest on (``metrics/estimates.py``), as JSON and as table lines.

Estimates are marked as such everywhere (a separate ``estimated`` block, "est." in the table),
never mixed into the labelled rates; a group whose calibration check fails shows no estimate.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec
from monitor.metrics.estimates import CALIBRATION_ALPHA, Estimates, estimate
from monitor.metrics.registry import z_for
from monitor.metrics.results import AttributeResult
from monitor.state.snapshot import ModelSnapshot

I64 = npt.NDArray[np.int64]
ESTIMATE_NOTE = (
    "expected from the scores of predictions still awaiting a label (plus the labelled ones as "
    "counted), assuming calibrated scores; the interval is the error of the rate the labels "
    f"will show; not shown for a group whose calibration check fails (p < {CALIBRATION_ALPHA})"
)


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def calibration_window(ms: ModelSnapshot) -> str:
    """The window the calibration check reads: the longest (its labels had the most time)."""
    return max(ms.windows, key=lambda w: ms.windows[w].window.length)


def group_scores(r: AttributeResult, i: int) -> dict[str, Any]:
    """A group row's score fields: scored predictions and distances from the reference."""
    d = r.disparities
    return {
        "scored": int(r.groups.scored[i]),
        "score_ks": _num(float(d.score_ks[i])),
        "score_wasserstein": _num(float(d.score_wasserstein[i])),
    }


def model_estimates(
    counts: I64, calibration: I64, spec: ModelSpec, *, confidence: float
) -> Estimates:
    """One window's estimates, checked on the calibration window's labels."""
    return estimate(
        counts,
        score_bins=spec.score_bins,
        z=z_for(confidence),
        min_samples=spec.min_samples,
        calibration=calibration,
        labels_by_prediction=spec.label_time == "prediction",
    )


def estimates_report(est: Estimates, labels: list[str], window: str) -> dict[str, Any]:
    groups = {}
    for i, lab in enumerate(labels):
        groups[lab] = {
            "tpr": _num(float(est.tpr[i])),
            "tpr_lower": _num(float(est.tpr_lower[i])),
            "tpr_upper": _num(float(est.tpr_upper[i])),
            "fpr": _num(float(est.fpr[i])),
            "fpr_lower": _num(float(est.fpr_lower[i])),
            "fpr_upper": _num(float(est.fpr_upper[i])),
            "estimated_predictions": int(est.estimated[i]),
            "unscored_unlabelled": int(est.unscored_unlabelled[i]),
            "calibration": est.check[i],
            "calibration_p": _num(float(est.calibration_p[i])),
            "calibration_statistic": _num(float(est.calibration_statistic[i])),
            "calibration_bins": int(est.calibration_bins[i]),
        }
    return {"calibration_window": window, "note": ESTIMATE_NOTE, "groups": groups}


def _f(x: Any) -> str:
    return "–" if x is None else f"{x:.3f}"


def table_lines(a: dict[str, Any]) -> list[str]:
    """The table's score lines of one attribute set's JSON report."""
    lines = []
    ks, w1 = a.get("score_ks_distance"), a.get("score_wasserstein_distance")
    if ks and ks.get("value") is not None:
        lines.append(
            f"    score distribution vs {ks['high_group']}: KS {_f(ks['value'])} "
            f"[{_f(ks['lower'])}, {_f(ks['upper'])}] ({ks['low_group']}) · W1 "
            f"{_f(w1['value'] if w1 else None)}"
        )
    est = a.get("estimated")
    if est:
        for g, e in est["groups"].items():
            if e["estimated_predictions"] == 0:
                continue
            if e["calibration"] == "miscalibrated":
                lines.append(
                    f"    est. {g}: not shown — calibration check failed on the "
                    f"{est['calibration_window']} window (p {e['calibration_p']:.2g})"
                )
                continue
            mark = " (calibration unchecked)" if e["calibration"] == "unchecked" else ""
            lines.append(
                f"    est. {g}: TPR {_f(e['tpr'])} [{_f(e['tpr_lower'])}, {_f(e['tpr_upper'])}]"
                f" · FPR {_f(e['fpr'])} [{_f(e['fpr_lower'])}, {_f(e['fpr_upper'])}]"
                f" · {e['estimated_predictions']} unlabelled (estimated){mark}"
            )
    return lines


def estimates_html(window: str, attr: str, a: dict[str, Any]) -> str:
    """The audit report's table of one attribute set's estimated TPR/FPR (marked as such)."""
    est = a.get("estimated")
    if not est:
        return ""

    def e(x: Any) -> str:
        return html.escape(str(x), quote=True)

    rows = []
    for g, r in est["groups"].items():
        if r["calibration"] == "miscalibrated":
            shown = '<td colspan="2" class="blind">withheld: calibration check failed</td>'
        else:
            shown = "".join(
                f'<td data-field="{k}" data-value="{e(r[k] if r[k] is not None else "")}">'
                f"{_f(r[k])} [{_f(r[k + '_lower'])}, {_f(r[k + '_upper'])}]</td>"
                for k in ("tpr", "fpr")
            )
        p = "–" if r["calibration_p"] is None else f"{r['calibration_p']:.2g}"
        rows.append(
            f'<tr data-group="{e(g)}"><th scope="row">{e(g)}</th>{shown}'
            f"<td>{r['estimated_predictions']:,}</td><td>{e(r['calibration'])} (p {p})</td></tr>"
        )
    return (
        f'<table data-window="{e(window)}" data-attribute="{e(attr)}" data-kind="estimates">'
        "<caption>Estimated before labels (calibrated scores, CBPE per group): TPR and FPR "
        f"with the error of the rates the labels will show; calibration checked on the "
        f"{e(est['calibration_window'])} window</caption><thead><tr>"
        '<th scope="col">group</th><th scope="col">est. TPR</th><th scope="col">est. FPR</th>'
        '<th scope="col">unlabelled (estimated)</th><th scope="col">calibration</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
