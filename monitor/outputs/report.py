"""Turn a :class:`~monitor.state.engine.Snapshot` into a report: nested dicts (JSON) or a text table.

The same structure feeds ``replay --format json``, the table printed for people, and later the
exporter and the HTML audit report, so every surface shows the same numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.spec import ModelSpec
from monitor.metrics.fairness import (
    AttributeDisparities,
    Disparity,
    GroupMetrics,
    disparities,
    group_metrics,
)
from monitor.state.engine import HELD, ModelSnapshot, Snapshot

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


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat().replace("+00:00", "Z")


def _disp(d: Disparity, labels: list[str], index: dict[int, int]) -> dict[str, Any]:
    def name(g: int | None) -> str | None:
        return None if g is None else labels[index[g]]

    return {
        "value": _num(d.value),
        "lower": _num(d.lower),
        "upper": _num(d.upper),
        "low_group": name(d.low_group),
        "high_group": name(d.high_group),
    }


class _Rows(Mapping[str, dict[str, Any]]):
    """Per-group rows built on first access (alert evaluation reads two groups, not all)."""

    def __init__(self, labels: list[str], gm: GroupMetrics, d: AttributeDisparities) -> None:
        self.labels, self.gm, self.d = labels, gm, d
        self.index = {lab: i for i, lab in enumerate(labels)}
        self.cache: dict[str, dict[str, Any]] = {}

    def __getitem__(self, lab: str) -> dict[str, Any]:
        row = self.cache.get(lab)
        if row is None:
            i, gm = self.index[lab], self.gm
            row = {f: _num(getattr(gm, f)[i]) for f in GROUP_FIELDS}
            for f, (lo, hi) in gm.bounds.items():
                row[f"{f}_lower"], row[f"{f}_upper"] = _num(lo[i]), _num(hi[i])
            row["impact_ratio"] = _num(self.d.impact_ratios[i])
            row["eligible"] = bool(self.d.eligible[i])
            self.cache[lab] = row
        return row

    def __iter__(self) -> Iterator[str]:
        return iter(self.labels)

    def __len__(self) -> int:
        return len(self.labels)


def attribute_metrics(
    counts: I64, labels: list[str], spec: ModelSpec, set_name: str, *, confidence: float
) -> tuple[GroupMetrics, AttributeDisparities]:
    """Group metrics and disparities of one attribute set, with the model's configured
    reference group (if present) and minimum sample size: the one place that decides them."""
    gm = group_metrics(
        counts, score_bins=spec.score_bins, confidence=confidence, favourable=spec.favourable
    )
    ref_label = spec.reference_groups.get(set_name)
    ref = labels.index(ref_label) if ref_label in labels else None
    d = disparities(gm, min_samples=spec.min_samples, reference=ref, confidence=confidence)
    return gm, d


def attribute_report(
    counts: I64,
    labels: list[str],
    spec: ModelSpec,
    set_name: str,
    *,
    confidence: float,
    lazy: bool = False,
) -> dict[str, Any]:
    """Per-group rows and disparities of one attribute set (``counts[group, cell]``).

    With ``lazy``, ``groups`` is a mapping that builds a group's row when it is read.
    """
    gm, d = attribute_metrics(counts, labels, spec, set_name, confidence=confidence)
    local = {i: i for i in range(len(labels))}
    rows = _Rows(labels, gm, d)
    return {
        "groups": rows if lazy else {lab: rows[lab] for lab in labels},
        "reference_group": None if d.reference is None else labels[d.reference],
        "disparate_impact_ratio": _disp(d.disparate_impact, labels, local),
        "four_fifths_violation": d.four_fifths_violation,
        "four_fifths_significant": d.four_fifths_significant,
        "statistical_parity_difference": _disp(d.statistical_parity_difference, labels, local),
        "tpr_gap": _disp(d.tpr_gap, labels, local),
        "fpr_gap": _disp(d.fpr_gap, labels, local),
        "ppv_gap": _disp(d.ppv_gap, labels, local),
        "equalized_odds_difference": _disp(d.equalized_odds_difference, labels, local),
        "equal_opportunity_difference": _disp(d.equal_opportunity_difference, labels, local),
        "predictive_parity_difference": _disp(d.predictive_parity_difference, labels, local),
        "average_odds_difference": _disp(d.average_odds_difference, labels, local),
        "differential_fairness_epsilon": _num(d.differential_fairness),
    }


def model_report(ms: ModelSnapshot, *, confidence: float) -> dict[str, Any]:
    out: dict[str, Any] = {"windows": {}}
    for wname, wc in ms.windows.items():
        attrs = {
            set_name: attribute_report(
                wc.counts[gidx], labels, ms.spec, set_name, confidence=confidence
            )
            for set_name, (gidx, labels) in zip(ms.set_names, ms.groups, strict=True)
        }
        out["windows"][wname] = {
            "start": _iso(wc.start) if wc.end else None,
            "end": _iso(wc.end) if wc.end else None,
            "attributes": attrs,
        }
    return out


def build_report(
    snap: Snapshot, *, confidence: float = 0.95, invalid: dict[str, int] | None = None
) -> dict[str, Any]:
    return {
        "models": {
            name: model_report(ms, confidence=confidence) for name, ms in snap.models.items()
        },
        "counters": dict(snap.counters),
        "invalid": dict(invalid or {}),
    }


# C0/C1 controls, DEL, and the bidirectional overrides and isolates ("Trojan Source",
# CVE-2021-42574): group names come from the data and must not drive the operator's terminal
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control or bidi-override character shown as an escape (``\\x1b``)."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{digits}f}"


def format_table(report: dict[str, Any]) -> str:
    """A plain-text report for a terminal: one table per model, window and attribute."""
    lines: list[str] = []
    cols = ("group", "n", "sel.rate", "95% CI", "TPR", "FPR", "PPV", "labelled", "DI ratio")
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
                            _fmt(r["tpr"]),
                            _fmt(r["fpr"]),
                            _fmt(r["ppv"]),
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
                    flag = "  ← below 0.8" + (
                        " (significant)" if a["four_fifths_significant"] else " (not significant)"
                    )
                lines.append(
                    f"    DIR {_fmt(dir_['value'])} [{_fmt(dir_['lower'])}, "
                    f"{_fmt(dir_['upper'])}] {dir_['low_group']} vs {dir_['high_group']}{flag}"
                )
                eod = a["equalized_odds_difference"]
                spd = a["statistical_parity_difference"]
                lines.append(
                    f"    stat. parity diff {_fmt(spd['value'])} · equalized-odds diff "
                    f"{_fmt(eod['value'])} · TPR gap {_fmt(a['tpr_gap']['value'])} · FPR gap "
                    f"{_fmt(a['fpr_gap']['value'])} · DF ε "
                    f"{_fmt(a['differential_fairness_epsilon'])}"
                )
            lines.append("")
    for a in report.get("alerts", []):
        where = ", ".join(f"{k}={v}" for k, v in a["labels"].items() if k != "alertname")
        lines.append(
            f"alert {a['name']} {a['state']} at {a['at']} ({where}) "
            f"{a['annotations'].get('summary', '')}"
        )
    c = report["counters"]
    lines.append("events: " + ", ".join(f"{k} {v}" for k, v in c.items() if k not in HELD))
    held = [f"{c[k]} {what}" for k, what in HELD.items() if k in c]
    if held:
        lines.append("join holds: " + "; ".join(held))
    if report["invalid"]:
        lines.append(
            "dead-lettered: " + ", ".join(f"{k} {v}" for k, v in sorted(report["invalid"].items()))
        )
    return "\n".join(printable(line) for line in lines)
