"""Turn a :class:`~monitor.state.engine.Snapshot` into a report: nested dicts (JSON) or a text table.

The same structure feeds ``replay --format json``, the table printed for people, and later the
exporter and the HTML audit report, so every surface shows the same numbers.

A blind metric (:mod:`monitor.metrics.blindness`) has no number here: its ``value`` and bounds
are ``null`` and ``blind`` gives the reason (a disparity's ``blind``; a group row's
``blind[rate]``); the table prints "blind: selective labels" in its place.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.durations import iso_utc
from monitor.config.spec import ModelSpec
from monitor.metrics.blindness import RATE_CELLS, BlindReason, BlindReport, blind_groups
from monitor.metrics.disparities import Disparity
from monitor.metrics.intervals import ci_text
from monitor.metrics.pairs import significant_pair
from monitor.metrics.registry import FOUR_FIFTHS, METRICS
from monitor.metrics.results import AttributeResult, attribute_result
from monitor.outputs.audit_findings import audit_findings
from monitor.outputs.score_report import (
    calibration_window,
    estimates_report,
    group_scores,
    model_estimates,
    table_lines,
)
from monitor.state.engine import HELD, ModelSnapshot, Snapshot
from monitor.state.windows import hist_cell

I64 = npt.NDArray[np.int64]

GROUP_FIELDS = (
    "n", "favourable", "tp", "fp", "fn", "tn", "labelled",
    "selection_rate", "tpr", "fpr", "fnr", "tnr", "ppv", "npv", "fdr", "false_omission_rate",
    "accuracy", "prevalence", "label_coverage", "label_coverage_predicted_positive",
    "label_coverage_predicted_negative", "calibration_error",
)  # fmt: skip


def _num(x: Any) -> Any:
    """JSON-safe number: NaN/inf become ``None`` (insufficient data), ints stay ints."""
    if isinstance(x, np.integer | int) and not isinstance(x, bool):
        return int(x)
    f = float(x)
    return None if not math.isfinite(f) else f


def _disp(d: Disparity, r: AttributeResult, blind: BlindReason | None) -> dict[str, Any]:
    shown = blind is None
    return {
        "value": _num(d.value) if shown else None,
        "lower": _num(d.lower) if shown else None,
        "upper": _num(d.upper) if shown else None,
        "low_group": r.name(d.low_group) if shown else None,  # a blind one compares nothing
        "high_group": r.name(d.high_group) if shown else None,  # ("A vs A": a review)
        "blind": None if blind is None else blind.text,
        "pairs": d.pairs,  # the pairs it was chosen from: its interval holds over all of them
    }


def _row(r: AttributeResult, i: int, blind: BlindReport) -> dict[str, Any]:
    gm = r.groups
    row = {f: _num(getattr(gm, f)[i]) for f in GROUP_FIELDS}
    for f, (lo, hi) in gm.bounds.items():
        row[f"{f}_lower"], row[f"{f}_upper"] = _num(lo[i]), _num(hi[i])
    row["impact_ratio"] = _num(r.disparities.impact_ratios[i])
    row["eligible"] = bool(r.disparities.eligible[i])
    row |= group_scores(r, i)
    row["blind"] = {}
    for rate in RATE_CELLS:
        why = blind.metric(rate, i)
        if why is not None:
            row["blind"][rate] = why.text
            for k in (rate, f"{rate}_lower", f"{rate}_upper"):
                if k in row:
                    row[k] = None
    return row


def result_report(
    r: AttributeResult, *, favourable: int = 1, confidence: float = 0.95
) -> dict[str, Any]:
    """The JSON form of one attribute set's typed result: per-group rows, then every
    disparity of the registry (in its order) and the differential-fairness epsilon
    (``favourable``: the model's favourable class, which blindness depends on). The DIR is
    significantly below 0.8 when any compared pair's interval is (``metrics/pairs.py``, as
    the FourFifthsRule and the gate judge it), and the report names that pair."""
    d = r.disparities
    blind = blind_groups(r.groups, favourable=favourable)
    blind_metrics = blind.disparities(d)
    out: dict[str, Any] = {
        "groups": {lab: _row(r, i, blind) for i, lab in enumerate(r.labels)},
        "reference_group": r.name(d.reference),
        "score_reference_group": r.name(d.score_reference),
    }
    for spec in METRICS.values():
        out[spec.name] = _disp(d.metric(spec.name), r, blind_metrics.get(spec.name))
        if spec.name == "disparate_impact_ratio":
            out["four_fifths_violation"] = d.four_fifths_violation
            alt = None
            if d.four_fifths_violation and not d.four_fifths_significant:
                alt = significant_pair(r, spec.name, op="<", bound=FOUR_FIFTHS, min_samples=0,
                                       confidence=confidence)  # fmt: skip
            out["four_fifths_significant"] = d.four_fifths_significant or alt is not None
            if alt is not None:  # not the most extreme pair: another one, wholly below
                out["four_fifths_significant_pair"] = _disp(alt, r, None)
    out["differential_fairness_epsilon"] = _num(d.differential_fairness)
    return out


def attribute_report(
    counts: I64, labels: list[str], spec: ModelSpec, set_name: str, *, confidence: float
) -> dict[str, Any]:
    """Per-group rows and disparities of one attribute set (``counts[group, cell]``)."""
    r = attribute_result(counts, labels, spec, set_name, confidence=confidence)
    return result_report(r, favourable=spec.favourable, confidence=confidence)


def model_report(ms: ModelSnapshot, *, confidence: float, audit: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"windows": {}}
    cal = calibration_window(ms) if ms.windows else ""
    for wname, wc in ms.windows.items():
        attrs = {
            set_name: attribute_report(
                wc.counts[gidx], labels, ms.spec, set_name, confidence=confidence
            )
            for set_name, (gidx, labels) in zip(ms.set_names, ms.groups, strict=True)
        }
        for set_name, (gidx, labels) in zip(ms.set_names, ms.groups, strict=True):
            h = hist_cell(ms.spec.score_bins)
            if wc.counts[gidx][:, h : h + ms.spec.score_bins].any():  # any scored prediction
                est = model_estimates(
                    wc.counts[gidx], ms.windows[cal].counts[gidx], ms.spec, confidence=confidence
                )
                attrs[set_name]["estimated"] = estimates_report(est, list(labels), cal)
        if audit:
            for set_name, (gidx, labels) in zip(ms.set_names, ms.groups, strict=True):
                attrs[set_name] |= audit_findings(wc.counts[gidx], list(labels), ms.spec, set_name)
        out["windows"][wname] = {
            "start": iso_utc(wc.start) if wc.end else None,
            "end": iso_utc(wc.end) if wc.end else None,
            "attributes": attrs,
        }
    return out


def build_report(
    snap: Snapshot,
    *,
    confidence: float = 0.95,
    invalid: dict[str, int] | None = None,
    audit: bool = False,
) -> dict[str, Any]:
    """``audit``: add the threshold remedies and the base-rate trade-off per window and
    attribute set (``outputs/audit_findings.py``: replay, status and the audit report; not the
    demo's frequent refreshes)."""
    return {
        "confidence": confidence,
        "models": {
            name: model_report(ms, confidence=confidence, audit=audit)
            for name, ms in snap.models.items()
        },
        "counters": dict(snap.counters),
        "invalid": dict(invalid or {}),
    }


# C0/C1 controls, DEL, and the bidirectional overrides and isolates ("Trojan Source",
# CVE-2021-42574): group names come from the data and must not drive the operator's terminal
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control or bidi-override character shown as an escape (``\\x1b``)."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, dict):  # a blind disparity: its reason instead of the number
        return "blind: selective labels" if x.get("blind") else _fmt(x.get("value"), digits)
    if isinstance(x, int):
        return str(x)
    return f"{x:.{digits}f}"


_GAPS = (("stat. parity diff", "statistical_parity_difference"),
         ("equalized-odds diff", "equalized_odds_difference"),
         ("TPR gap", "tpr_gap"), ("FPR gap", "fpr_gap"))  # fmt: skip


def _with_bounds(d: dict[str, Any]) -> str:
    """A gap with its interval, as the DIR is shown: how sure, beside how large."""
    if d.get("blind") or d.get("value") is None or d.get("lower") is None:
        return _fmt(d)
    return f"{_fmt(d)} [{_fmt(d['lower'])}, {_fmt(d['upper'])}]"


def _rate(row: dict[str, Any], rate: str) -> str:
    return "blind" if rate in row.get("blind", {}) else _fmt(row[rate])


def format_table(report: dict[str, Any]) -> str:
    """A plain-text report for a terminal: one table per model, window and attribute."""
    lines: list[str] = []
    ci_name = ci_text(report.get("confidence", 0.95), 1)  # the interval the config asked for
    cols = ("group", "n", "sel.rate", ci_name, "TPR", "FPR", "PPV", "labelled", "DI ratio")
    for model, mrep in report["models"].items():
        for wname, w in mrep["windows"].items():
            lines.append(f"model {model} · window {wname} · {w['start']} → {w['end']}")
            for attr, a in w["attributes"].items():
                lines.append(f"  attribute {attr}")
                rows = [cols]
                for g, r in a["groups"].items():
                    ci = f"[{_fmt(r['selection_rate_lower'])}, {_fmt(r['selection_rate_upper'])}]"
                    mark = "" if r["eligible"] else " (n<min)"
                    rows.append(
                        (
                            g + mark,
                            _fmt(r["n"]),
                            _fmt(r["selection_rate"]),
                            ci,
                            _rate(r, "tpr"),
                            _rate(r, "fpr"),
                            _rate(r, "ppv"),
                            _fmt(r["labelled"]),
                            _fmt(r["impact_ratio"]),
                        )
                    )
                widths = [max(len(str(row[i])) for row in rows) for i in range(len(cols))]
                for row in rows:
                    cells = (str(c).ljust(wd) for c, wd in zip(row, widths, strict=True))
                    lines.append(("    " + "  ".join(cells)).rstrip())
                dir_ = a["disparate_impact_ratio"]
                flag = ""
                if a["four_fifths_violation"]:
                    flag = f"  ← below {FOUR_FIFTHS}" + (
                        " (significant)" if a["four_fifths_significant"] else " (not significant)"
                    )
                    if (alt := a.get("four_fifths_significant_pair")) is not None:
                        flag = (f"{flag[:-1]}: {alt['low_group']} vs {alt['high_group']} "
                                f"{_fmt(alt['value'])} [{_fmt(alt['lower'])}, "
                                f"{_fmt(alt['upper'])}])")  # fmt: skip
                pair = f" {dir_['low_group']} vs {dir_['high_group']}"
                if dir_["low_group"] is None:  # why there is none (found by reviews)
                    two = sum(1 for g in a["groups"].values() if g.get("eligible")) >= 2
                    pair = (" (undefined: the reference group selects nobody, or has too few "
                            "decisions)" if two else " (fewer than two groups compared)")  # fmt: skip
                lines.append(
                    f"    DIR {_fmt(dir_['value'])} [{_fmt(dir_['lower'])}, "
                    f"{_fmt(dir_['upper'])}]{pair}{flag}"
                )
                gaps = [f"{name} {_with_bounds(a[key])}" for name, key in _GAPS]
                eps = _fmt(a["differential_fairness_epsilon"])
                lines.append("    " + " · ".join(gaps) + f" · DF ε {eps}")
                lines += table_lines(a)
                reasons = sorted({why for r in a["groups"].values() for why in r["blind"].values()})
                for why in reasons:
                    lines.append(f"    blind: {why} (TPR, FPR and their gaps are not measured)")
            lines.append("")
    for a in report.get("alerts", []):
        where = ", ".join(f"{k}={v}" for k, v in a["labels"].items() if k != "alertname")
        lines.append(
            f"alert {a['name']} {a['state']} at {a['at']}{as_of_text(a)} ({where}) "
            f"{a['annotations'].get('summary', '')}"
        )
    c = report["counters"]
    lines.append("events: " + ", ".join(f"{k} {v}" for k, v in c.items() if k not in HELD))
    held = [f"{c[k]} {what}" for k, what in HELD.items() if k in c]
    if held:
        lines.append("join holds: " + "; ".join(held))
    if "csv_rows_excluded" in report:
        lines.append(f"CSV rows left out by the mapping's where: {report['csv_rows_excluded']}")
    if report["invalid"]:
        lines.append(
            "dead-lettered: " + ", ".join(f"{k} {v}" for k, v in sorted(report["invalid"].items()))
        )
    lines += [f"warning: {w}" for w in report.get("warnings", [])]
    return "\n".join(printable(line) for line in lines)


def as_of_text(alert: dict[str, Any]) -> str:
    """A firing alert read from a checkpoint: its numbers are the last judged boundary's."""
    t = alert.get("numbers_as_of")
    return f"; numbers as of {t}" if t and t != alert["at"] else ""
