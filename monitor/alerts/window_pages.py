"""What a fixed-window rule's page says: both groups' rates and sizes, the counts a rate rests
on, the disparity with its interval, and what resolving takes (``window_rules.py`` judges)."""

from __future__ import annotations

import math
from typing import Any, Literal

from monitor.config.rules import AlertRule
from monitor.metrics.fairness import error_gap_limits
from monitor.metrics.registry import METRICS, RATE_FAMILY
from monitor.metrics.results import AttributeResult

State = Literal["breached", "recovered", "not yet recovered"]  # what a page's summary says
GAP_NOTE = (
    "With different base rates, equal PPV and equal TPR force unequal FPR "
    "(Chouldechova 2017: FPR = p/(1-p) · (1-PPV)/PPV · TPR), so equalized odds and "
    "predictive parity cannot both hold; check which one this model must meet."
)


def finite(x: float) -> float:
    """NaN for an undefined or infinite number (an infinite upper limit judges nothing)."""
    return x if math.isfinite(x) else math.nan


def fmt(x: Any) -> str:
    return (
        "n/a"
        if x is None or (isinstance(x, float) and not math.isfinite(x))
        else (f"{x:.3f}" if isinstance(x, float) else str(x))
    )


def _gap(r: AttributeResult, metric: str, level: float) -> str:
    """One gap of an equalized-odds page, its interval at the page's ``level`` (the one over
    both gaps' pairs, whose limits the difference's are the larger of): the proof is there."""
    d = r.disparity(metric)
    if not d.defined or d.low_group is None or d.high_group is None:
        return f"{metric} –"
    lower, upper = error_gap_limits(r.groups, d, level)
    pair = f"{r.labels[d.low_group]} vs {r.labels[d.high_group]}"
    return f"{metric} {fmt(d.value)} [{fmt(lower)}, {fmt(upper)}] {pair}"


def _counted(r: AttributeResult, rate: str, g: int) -> str:
    """``"x of d; "``: the counts one group's rate rests on (its numerator and denominator
    cells, ``registry.RATE_FAMILY``). The page quotes them because ``n`` counts every decision
    while a TPR or FPR rests on the labelled positives or negatives alone: "FPR 0.000" of 458
    decisions reads as solid; "0 of 34" says how sure it is (as the evidence pages do)."""
    fam = RATE_FAMILY.get(rate)
    if fam is None:
        return ""
    x = sum(int(getattr(r.groups, c)[g]) for c in fam.numerator)
    d = sum(int(getattr(r.groups, c)[g]) for c in fam.counts)
    return f"{x} of {d}; "


def page_annotations(
    rule: AlertRule,
    r: AttributeResult,
    basis: str,
    numbers: tuple[float, float, float],
    pair: tuple[int, int],
    interval: tuple[str, float],
    state: State,
) -> dict[str, str]:
    """What a page says: both groups' rates and sizes, the disparity with its interval (written
    only when the alert changes state or is read: ``lifecycle.Notes``)."""
    # a score-distribution distance has no rate of its own: its groups' selection rates are
    # quoted (often equal: what the distance sees that the rate does not) and their scored counts
    rate = METRICS[basis].rate or "selection_rate"
    (value, lower, upper), (lo, hi), (ci, level) = numbers, pair, interval
    g_rate, r_rate = fmt(r.value(rate, lo)), fmt(r.value(rate, hi))
    g_n, r_n = int(r.groups.n[lo]), int(r.groups.n[hi])
    g_lab, r_lab = int(r.groups.labelled[lo]), int(r.groups.labelled[hi])
    second = "labelled"
    if not METRICS[basis].rate:
        second, g_lab, r_lab = "scored", int(r.groups.scored[lo]), int(r.groups.scored[hi])
    lo_name, hi_name = r.labels[lo], r.labels[hi]
    pair_text = f"{lo_name} vs {hi_name}"
    g_of, r_of = _counted(r, rate, lo), _counted(r, rate, hi)
    ann = {
        "summary": f"{rule.metric} {fmt(value)} {rule.op} {rule.bound} for {pair_text}",
        "description": (
            f"{rate} {lo_name}: {g_rate} ({g_of}n={g_n}, {second}={g_lab}); "
            f"{hi_name}: {r_rate} ({r_of}n={r_n}, {second}={r_lab}); "
            f"{rule.metric} {fmt(value)}, {ci} [{fmt(lower)}, {fmt(upper)}]"
        ),
        "value": fmt(value),
        "ci_lower": fmt(lower),
        "ci_upper": fmt(upper),
        "group": lo_name,
        "group_rate": g_rate,
        "group_n": str(g_n),
        "reference_group": hi_name,
        "reference_rate": r_rate,
        "reference_n": str(r_n),
        "runbook_url": rule.runbook_url,
        "basis": basis,  # the rate compared (the EOD: its larger gap), for _quiet_pair
    }
    if METRICS[rule.metric].max_of:  # a maximum: its lower limit may be the other gap's,
        # between other groups; the page shows each, with its own pair
        ann["gaps"] = "; ".join(_gap(r, g, level) for g in METRICS[rule.metric].max_of)
    if METRICS[rule.metric].needs_labels:
        ann["base_rates"] = (
            f"{lo_name}: {fmt(r.value('prevalence', lo))}, "
            f"{hi_name}: {fmt(r.value('prevalence', hi))}"
        )
        ann["note"] = GAP_NOTE
    rep = r.disparity(rule.metric)  # the most extreme pair, when the page is about another
    if rep.defined and (rep.low_group, rep.high_group) != (lo, hi) and rep.basis == basis:
        ann["extreme_pair"] = (
            f"{r.name(rep.low_group)} vs {r.name(rep.high_group)} {fmt(rep.value)} "
            f"[{fmt(rep.lower)}, {fmt(rep.upper)}]"
        )
        ann["description"] += (
            f"; the most extreme pair, {ann['extreme_pair']}, is not significant alone: a "
            "significant rule pages on any compared pair wholly past the bound"
        )
    numbers_now = f"{rule.metric} {fmt(value)} [{fmt(lower)}, {fmt(upper)}]"
    if state == "recovered":
        ann["summary"] = f"recovered: {numbers_now} is back past {rule.bound} for {pair_text}"
    elif state == "not yet recovered":  # firing, no longer beyond the bound, not back past it:
        # "0.820 < 0.8" would be false (found by a review); say what resolving takes
        back = round(rule.bound + (rule.hysteresis if rule.op == "<" else -rule.hysteresis), 12)
        near = " with the interval's near limit past the bound" if rule.significant else ""
        ann["summary"] = (
            f"not yet recovered: {numbers_now} for {pair_text}; resolves at {back:g}{near}"
        )
    return ann
