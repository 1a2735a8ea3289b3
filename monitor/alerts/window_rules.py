"""Fixed-window rules: a disparity of one window beyond its bound, with the evidence a page
carries (rates, sample sizes, the interval) so the on-call engineer can judge it at a glance."""

from __future__ import annotations

from functools import partial
from math import isfinite, nan

from monitor.alerts.lifecycle import AlertBook, Key, Notes, Transition
from monitor.alerts.window_pages import State, page_annotations
from monitor.config.durations import iso_utc
from monitor.config.rules import AlertRule
from monitor.metrics.blindness import BlindReason, BlindReport
from monitor.metrics.disparities import Disparity
from monitor.metrics.intervals import adjusted, ci_text
from monitor.metrics.pairs import significant_pair
from monitor.metrics.registry import METRICS
from monitor.metrics.results import AttributeResult


def compared_enough(rule: AlertRule, r: AttributeResult, d: Disparity) -> bool:
    """Do both compared groups reach the rule's ``min_samples`` in the denominator of the rate
    compared? The basis decides the rate (for the EOD: the gap that is the larger). The alert
    rules and ``fairness-monitor gate`` judge with this one test."""
    lo, hi = d.low_group, d.high_group
    if lo is None or hi is None:
        return False
    den = r.denominators(d.basis or rule.metric)
    return den[lo] >= rule.min_samples and den[hi] >= rule.min_samples


def _labels(rule: AlertRule, model: str, window: str, attribute: str) -> dict[str, str]:
    """The labels of one rule's alert on one window and attribute set."""
    return {
        "alertname": rule.name,
        "model": model,
        "window": window,
        "attribute": attribute,
        "severity": rule.severity,
    }


_KEYS: dict[tuple[str, str, str, str, str], tuple[Key, dict[str, str]]] = {}


def alert_key(
    rule: AlertRule, model: str, window: str, attribute: str
) -> tuple[Key, dict[str, str]]:
    """The alert book's key of that alert (as ``AlertBook.observe`` makes it) and its labels,
    made once: every rule is judged at every boundary, and most find nothing (looked up by the
    strings it is made of: hashing the rule itself costs more than the rest of the check)."""
    at = (rule.name, rule.severity, model, window, attribute)
    made = _KEYS.get(at)
    if made is None:
        if len(_KEYS) > 4096:
            _KEYS.clear()
        labels = _labels(rule, model, window, attribute)
        made = _KEYS[at] = (tuple(sorted(labels.items())), labels)
    return made


def check_rule(
    book: AlertBook,
    rule: AlertRule,
    r: AttributeResult,
    model: str,
    window: str,
    attribute: str,
    at: float,
    *,
    confidence: float,
    favourable: int = 1,
    made: tuple[Key, dict[str, str]] | None = None,
) -> Transition | None:
    """One fixed-window rule on one window's result: the lifecycle's next step, if any.
    ``made``: the alert's key and labels (``alert_key``), when the caller keeps them."""
    made = made if made is not None else alert_key(rule, model, window, attribute)
    return RuleCheck(rule, window, made, confidence=confidence, favourable=favourable)(book, r, at)


class RuleCheck:
    """:func:`check_rule` of one rule on one window and attribute set, with what it reads of
    the rule and the registry looked up once: the evaluator keeps one per rule and judges it
    at every boundary (issue 14: most checks find nothing or keep a firing alert as it is)."""

    __slots__ = ("conf", "fav", "field", "key", "labels", "needs_labels", "rule", "window")

    def __init__(
        self,
        rule: AlertRule,
        window: str,
        made: tuple[Key, dict[str, str]],
        *,
        confidence: float,
        favourable: int,
    ) -> None:
        self.rule, self.window, (self.key, self.labels) = rule, window, made
        self.field = METRICS[rule.metric].attribute  # the AttributeDisparities field it reads
        self.needs_labels = METRICS[rule.metric].needs_labels
        self.conf, self.fav = confidence, favourable

    def __call__(self, book: AlertBook, r: AttributeResult, at: float) -> Transition | None:
        rule, key = self.rule, self.key
        d: Disparity = getattr(r.disparities, self.field)
        value, lower, upper = d.value, d.lower, d.upper  # NaN when not finite
        value = value if isfinite(value) else nan
        lower = lower if isfinite(lower) else nan
        upper = upper if isfinite(upper) else nan
        active = key in book
        beyond = rule.breached(value, lower, upper)
        if not beyond and rule.significant and rule.point_past(value):
            # the extreme pair's interval reaches back: is another pair wholly beyond?
            alt = significant_pair(r, rule.metric, op=rule.op, bound=rule.bound,
                                   min_samples=rule.min_samples, confidence=self.conf)  # fmt: skip
            if alt is not None:
                d, value, lower, upper, beyond = alt, alt.value, alt.lower, alt.upper, True
        if not active and not beyond:
            return None  # the common case, judged first and cheaply: nothing to tell or describe
        lo, hi = d.low_group, d.high_group
        basis = d.basis or rule.metric
        enough = compared_enough(rule, r, d)
        breached = enough and beyond
        if not active and not breached:
            return None
        blind = None
        if enough and self.needs_labels and (report := r.blind(self.fav)).any:
            # selective labels: nothing to judge (nothing blind, the common case: no lookup)
            blind = report.disparities(r.disparities).get(rule.metric)
            enough, breached = enough and blind is None, breached and blind is None
            if not active and not breached:
                return None
        # resolving needs evidence of recovery (the symmetric test on the interval); too few
        # samples, no data (NaN) or a blind metric decide nothing: a firing alert stays firing
        recovered = enough and rule.recovered(value, lower, upper)
        quiet = _quiet_pair(book, key, rule, r, basis) if active and not breached else None
        if quiet is not None:  # the paged pair cannot be judged: other groups' ratio says nothing
            enough = recovered = False
        ann: Notes
        subject = None  # the compared pair, when these numbers judge one
        if enough and lo is not None and hi is not None and r.labels[lo]:
            numbers, pair = (value, lower, upper), (lo, hi)
            ci = ci_text(self.conf, d.pairs)  # "95% CI over 15 pairs": the pair is the extreme one
            level = adjusted(self.conf, d.pairs)
            state: State = (
                "recovered" if recovered else "breached" if breached else "not yet recovered"
            )
            ann = partial(page_annotations, rule, r, basis, numbers, pair, (ci, level), state)
            subject = (r.labels[lo], r.labels[hi], basis)
        elif (cur := book.get(key)) is not None:
            # keep the last judged numbers; say that the current window cannot judge
            ann = dict(cur.annotations)
            why = None if blind is None else _blind_text(rule, r, r.blind(self.fav), blind)
            ann["data"] = _no_judgement(rule, r, self.window, at, why, quiet, _zero_base(rule, r))
            value = cur.value
        else:
            ann = {}
        if active and book.stays(key, breached, recovered, at, rule.for_, value, ann, subject):
            return None  # on as it was, with these numbers (most active alerts, every boundary)
        return book.observe(
            name=rule.name,
            labels=self.labels,
            key=key,
            breached=breached,
            recovered=recovered,
            at=at,
            for_=rule.for_,
            value=value,
            annotations=ann,
            subject=subject,
        )


def _floor(rule: AlertRule, r: AttributeResult) -> int:
    """A compared group's samples: the rule's ``min_samples``, at least the model's floor."""
    return max(rule.min_samples, r.disparities.floor)


def _no_judgement(
    rule: AlertRule, r: AttributeResult, window: str, at: float,
    blind: str | None, quiet: str | None, zero: str | None,
) -> str:  # fmt: skip
    """Why the current window cannot judge an active alert (its ``data`` annotation)."""
    when = iso_utc(at)  # read at 3 a.m.: a date, not epoch seconds (a review)
    return (
        f"blind: {blind}window {window} at {when}); the alert stays as it was"
        if blind is not None
        else f"insufficient data: {quiet} has fewer than {_floor(rule, r)} samples in "
        f"window {window} at {when}; the alert stays as it was"
        if quiet is not None
        else f"undefined: {rule.metric} divides by the reference group's selection rate, "
        f"and it is 0 ({zero}) in window {window} at {when}; the alert stays as it was"
        if zero is not None
        else f"insufficient data: fewer than {_floor(rule, r)} samples in a compared "
        f"group (or none at all) in window {window} at {when}; the alert stays as it was"
    )


def _blind_text(rule: AlertRule, r: AttributeResult, report: BlindReport, why: BlindReason) -> str:
    """``"selective labels: … (groups b, c; "``: why, and the compared groups whose rate is
    blind for it (all of them when labelling is selective by policy; a few when one group's
    label feed is: the on-call engineer looks there)."""
    eligible = r.disparities.eligible
    names = [
        g for i, g in enumerate(r.labels) if eligible[i] and report.metric(rule.metric, i) == why
    ]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"{why.text} (" + (f"group{'s' if len(names) > 1 else ''} {shown}; " if names else "")


def _zero_base(rule: AlertRule, r: AttributeResult) -> str | None:
    """The compared groups (those with :func:`_floor` samples) and their 0 selections, when
    a ratio rule's metric is undefined though two groups are compared and the reference
    (configured, or the highest rate) is one of them: it selects nobody. "Insufficient data"
    would send the on-call engineer after traffic when the model selects nobody (a review)."""
    ref, gm = r.disparities.reference, r.groups
    if not METRICS[rule.metric].ratio or r.disparity(rule.metric).defined or ref is None:
        return None
    n, floor = gm.n.tolist(), _floor(rule, r)
    judged = [i for i, k in enumerate(n) if k >= floor]
    if int(gm.favourable[ref]) or ref not in judged or len(judged) < 2:
        return None
    return ", ".join(f"{r.labels[i]} 0 of {n[i]}" for i in judged if not gm.favourable[i])


def _quiet_pair(
    book: AlertBook, key: Key, rule: AlertRule, r: AttributeResult, basis: str
) -> str | None:
    """The group of a firing alert's last judged pair below :func:`_floor` in this window, if
    any. With three or more groups the disparity is taken over the groups that reach it, so
    the paged group falling quiet (still at its low rate) left a fair pair of other groups
    whose ratio "recovered" the alert (found by a review; the floor at least the model's: a
    second review). Not the pair it first fired on: see docs/metrics.md (remembering it left
    false alerts on a group hovering at the floor firing for weeks)."""
    for gap in METRICS[rule.metric].max_of:  # a maximum is back under its bound only when
        if not r.disparity(gap).defined:  # each is (``MetricSpec.max_of``; a review)
            return f"a second group for {gap}"
    subject = book.subject(key)  # (group, reference group, basis), kept by the book
    if subject is None:  # restored from a checkpoint: its text says (written once)
        cur = book.get(key)
        if cur is None:
            return None
        ann = cur.annotations
        subject = (ann.get("group", ""), ann.get("reference_group", ""), ann.get("basis", ""))
    # the denominators of the rate the page compared: the EOD's larger gap may have moved to
    # the other rate since, whose denominators say nothing of the paged group (a review)
    den = r.denominators(subject[2] if subject[2] in METRICS else basis)
    for role, name in (("group", subject[0]), ("reference group", subject[1])):
        if not name:
            continue
        try:  # one scan of the labels (checked at every boundary a firing alert is not breached)
            short = den[r.labels.index(name)] < _floor(rule, r)
        except ValueError:  # not among this window's groups
            short = True
        if short:
            return f"{role} {name} of the page"
    return None
