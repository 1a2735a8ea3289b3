"""The rules of ``fairness-monitor gate``: which rule a ``--fail-on`` name means, and how one rule
is judged on one attribute set's whole data (the alert rules' test, significance required,
groups short of ``min_samples`` named and left out)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, cast

from monitor.alerts.window_rules import compared_enough
from monitor.config.rules import DEFAULT_RULES, AlertRule, Metric
from monitor.config.rules import METRICS as RULE_METRICS
from monitor.config.spec import ConfigError, ModelSpec
from monitor.metrics.blindness import blind_groups
from monitor.metrics.pairs import significant_pair
from monitor.metrics.registry import METRICS
from monitor.metrics.results import I64, AttributeResult, attribute_result

Status = Literal["fail", "pass", "insufficient", "blind"]


@dataclass(frozen=True)
class GroupRow:
    """One group's numbers behind a check: ``rates`` per compared rate, (value, lower, upper,
    denominator); ``judged`` false for a group below ``min_samples`` (insufficient data)."""

    name: str
    n: int
    rates: dict[str, tuple[float, float, float, int]]
    judged: bool
    scored: int | None = None  # a score-distance rule's denominator: decisions with a score
    blind: dict[str, str] = field(default_factory=dict)  # rate -> why it cannot be measured


@dataclass(frozen=True)
class Check:
    """One rule on one attribute set of one model, judged on the whole data."""

    model: str
    attribute: str
    rule: AlertRule
    status: Status
    value: float
    lower: float
    upper: float
    low_group: str | None
    high_group: str | None
    groups: tuple[GroupRow, ...]
    note: str
    basis: str = ""  # the registry metric the numbers are (the EOD: its larger gap)
    pairs: int = 1  # the pairs its pair was chosen from (its interval holds over all of them)

    @property
    def insufficient_groups(self) -> list[GroupRow]:
        return [g for g in self.groups if not g.judged]


def parse_fail_on(names: Sequence[str], configured: Sequence[AlertRule]) -> list[AlertRule]:
    """``--fail-on`` names: a configured rule, a shipped default rule (``FourFifthsRule``,
    ``EqualizedOddsGap``, …) or a registry metric (its registry bound and direction), each
    optionally ``=BOUND``. An unknown name is a :class:`ConfigError` naming what is known."""
    by_name = {r.name: r for r in DEFAULT_RULES} | {r.name: r for r in configured}
    out: dict[str, AlertRule] = {}
    for raw in names:
        name, eq, text = raw.partition("=")
        name = name.strip()
        if name in by_name:
            rule = by_name[name]
        elif name in METRICS:
            m = METRICS[name]
            if name not in RULE_METRICS:
                raise ConfigError("--fail-on", f"{name} has no interval to judge significance by")
            rule = AlertRule(name, cast(Metric, name), m.op, m.default_bound, significant=True)
        else:
            known = ", ".join(sorted(by_name))
            raise ConfigError(
                "--fail-on",
                f"unknown rule {name!r}: give a rule ({known}) or a metric "
                f"({', '.join(RULE_METRICS)}), optionally with =BOUND",
            )
        if eq:
            try:
                bound = float(text)
            except ValueError:
                bound = math.nan
            if not math.isfinite(bound):
                raise ConfigError("--fail-on", f"{raw!r}: the bound {text!r} is not a number")
            rule = replace(rule, name=raw.strip(), bound=bound)
        out[rule.name] = rule
    return list(out.values())


def judge(
    rule: AlertRule,
    r: AttributeResult,
    counts: I64,
    spec: ModelSpec,
    where: tuple[str, str],
    *,
    confidence: float,
) -> Check:
    """One rule on one attribute set's whole data (``r``: its result over every group,
    ``counts`` its ``[group, cell]`` counts; ``where``: model and attribute set).

    Groups short of ``min_samples`` (the model's, in predictions; the rule's, in each compared
    rate's denominator) are left out and named, not judged; the rest are compared with the alert
    rules' test (``compared_enough``, blindness, ``AlertRule.breached``), significance required.
    Left-out groups never decide: where a live alert would say "insufficient data" because a
    small group has the extreme rate, the gate judges the groups that have the data."""
    rule = replace(rule, significant=True)
    if rule.metric == "equalized_odds_difference":  # each gap judged on its own groups
        gaps: tuple[Metric, Metric] = ("tpr_gap", "fpr_gap")
        tpr, fpr = (judge(replace(rule, metric=g), r, counts, spec, where, confidence=confidence)
                    for g in gaps)  # fmt: skip
        return _larger_gap(rule, r, spec, where, tpr, fpr)
    rows = _rows(r, _bases(rule.metric), spec, rule.min_samples)
    keep = [i for i, row in rows if row.judged]
    jr = attribute_result(
        counts[keep], [r.labels[i] for i in keep], spec, where[1], confidence=confidence
    )
    d = jr.disparity(rule.metric)
    value, lower, upper = (x if math.isfinite(x) else math.nan for x in (d.value, d.lower, d.upper))
    status: Status
    if not compared_enough(rule, jr, d):
        status, note = "insufficient", _short(rule, spec, len(keep), _short_ref(spec, where, rows))
    else:
        blind = None
        if METRICS[rule.metric].needs_labels:
            report = blind_groups(jr.groups, favourable=spec.favourable)
            blind = report.disparities(jr.disparities).get(rule.metric)
        if blind is not None:  # its numbers and pair are made up ("A vs A": a review)
            status, note = "blind", f"blind: {blind.text}"
            value = lower = upper = math.nan
        elif rule.breached(value, lower, upper):
            status, note = "fail", ""
        elif (alt := significant_pair(jr, rule.metric, op=rule.op, bound=rule.bound,
                                      min_samples=rule.min_samples,
                                      confidence=confidence)) is not None:  # fmt: skip
            # the most extreme pair's interval reaches back; another pair's is wholly beyond
            # (``metrics/pairs.py``: the alert rules page on it too)
            extreme = f"{jr.name(d.low_group)} vs {jr.name(d.high_group)}"
            d, value, lower, upper = alt, alt.value, alt.lower, alt.upper
            status, note = "fail", f"the most extreme pair, {extreme}, is not significant alone"
        else:
            status, note = "pass", ""
            if rule.point_past(value):
                note = "past the bound, but not significantly (the interval reaches it)"
    low, high = (None, None) if status == "blind" else (d.low_group, d.high_group)
    return Check(
        where[0], where[1], rule, status, value, lower, upper, jr.name(low), jr.name(high),
        tuple(row for _, row in rows), note, d.basis, d.pairs,
    )  # fmt: skip


def _larger_gap(
    rule: AlertRule,
    r: AttributeResult,
    spec: ModelSpec,
    where: tuple[str, str],
    tpr: Check,
    fpr: Check,
) -> Check:
    """The equalized-odds difference from its two gaps' checks, max(TPR gap, FPR gap), each
    judged on the groups with enough data for its own rate (found by a review: a group with many positives and few
    negatives was left out of both, and a significant TPR gap passed as insufficient data).
    Its interval is a maximum's (the larger of each limit), so it is significantly past the
    bound when either gap is; blind when either is; judged only when both are. Its numbers are
    the judged gaps' only: a blind gap's are made up (a later review)."""
    parts = (tpr, fpr)
    order: tuple[Status, ...] = ("fail", "blind", "insufficient", "pass")
    status = next(st for st in order if any(c.status == st for c in parts))

    judged = [c for c in parts if c.status in ("fail", "pass")]  # a blind gap's is made up
    shown = judged or [c for c in parts if c.status != "blind"] or list(parts)

    def larger(k: str) -> float:
        got = max(getattr(c, k) if math.isfinite(getattr(c, k)) else -math.inf for c in shown)
        return float(got) if math.isfinite(got) and judged else math.nan

    top = max(shown, key=lambda c: c.value if math.isfinite(c.value) else -math.inf)
    both = _rows(r, _bases(rule.metric), spec, rule.min_samples)
    rows = tuple(replace(row, judged=a.judged or b.judged) for (_, row), a, b in zip(
        both, tpr.groups, fpr.groups, strict=True))  # fmt: skip
    note = "; ".join(f"{c.rule.metric}: {c.note}" for c in parts if c.note)  # a blind gap says so
    return Check(
        where[0], where[1], rule, status, larger("value"), larger("lower"), larger("upper"),
        top.low_group, top.high_group, rows, note, top.rule.metric, top.pairs,
    )  # fmt: skip


def _bases(metric: str) -> list[str]:
    """The registry metrics whose rates a check compares (the EOD: its TPR and FPR gaps; a
    score distance: itself, its groups' selection rates shown)."""
    m = METRICS[metric]
    return [metric] if m.rate or m.interval == "dkw" else ["tpr_gap", "fpr_gap"]


def _rows(
    r: AttributeResult, bases: list[str], spec: ModelSpec, min_den: int
) -> list[tuple[int, GroupRow]]:
    """(index, row) of each group with predictions; ``judged``: enough data for every rate.
    A blind rate (selective labels) carries no number: its made-up 1.000 was listed among
    the groups' rates (a review)."""
    g, min_n, report = r.groups, max(spec.min_samples, 1), r.blind(spec.favourable)
    rows = []
    for i, name in enumerate(r.labels):
        n = int(g.n[i])
        if n == 0:
            continue
        rates: dict[str, tuple[float, float, float, int]] = {}
        scored, blind = None, {}
        for b in bases:
            rate = METRICS[b].rate or "selection_rate"
            lo, hi = g.bounds[rate]
            den = r.denominator(i, b)
            if not METRICS[b].rate:  # a score distance: the selection rate shown on its n
                scored, den = den, n  # (the scored count was printed as its n: a review)
            rates[rate] = (r.value(rate, i), float(lo[i]), float(hi[i]), den)
            if (why := report.metric(rate, i)) is not None:
                rates[rate], blind[rate] = (math.nan, math.nan, math.nan, den), why.cell
        enough = scored if scored is not None else min(v[3] for v in rates.values())
        judged = n >= min_n and enough >= min_den
        rows.append((i, GroupRow(name, n, rates, judged, scored, blind)))
    return rows


def _short_ref(
    spec: ModelSpec, where: tuple[str, str], rows: list[tuple[int, GroupRow]]
) -> GroupRow | None:
    """The configured reference group's row when it is short of data (left out)."""
    ref = spec.reference_groups.get(where[1])
    return next((row for _, row in rows if row.name == ref and not row.judged), None)


def _short(rule: AlertRule, spec: ModelSpec, judged: int, ref: GroupRow | None) -> str:
    """Why a check is not judged. A configured reference short of data is named: with it left
    out, a ratio to it is undefined however many other groups have data (found by a review:
    the note said "1 group(s) … two are needed" for a set of five)."""
    if ref is not None and judged >= 2:
        return (
            f"insufficient data: the reference group {ref.name!r} (reference_groups) has "
            f"{ref.n} decision(s), short of min_samples ({max(spec.min_samples, 1)} decisions, "
            f"{rule.min_samples} in each compared rate's denominator): ratios to it are not "
            "judged"
        )
    return (
        f"insufficient data: {judged} group(s) with at least {rule.min_samples} in each "
        "compared rate's denominator (and the model's min_samples predictions); two are needed"
    )
