"""Evaluates alert rules and drift detectors at every closed bucket boundary (event time).

Why closed buckets: a window ending at a boundary that every partition has passed no longer
changes (for an in-order stream), so the live monitor and a replay of the same events see the
same numbers at the same event times, whatever their poll batches were — backtests then match
production exactly.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from monitor.alerts.drift import DriftTracker
from monitor.alerts.lifecycle import AlertBook, Transition
from monitor.config.rules import AlertRule
from monitor.config.spec import Config, ModelSpec
from monitor.metrics.intervals import z_value
from monitor.metrics.registry import METRICS
from monitor.metrics.results import AttributeResult, attribute_result, finite_or_none
from monitor.state.engine import Engine

SERIES_POINTS = 288  # closed buckets kept per series for the status page


class SeriesPoint(NamedTuple):
    """One window's headline numbers at one closed bucket boundary (``None``: undefined)."""

    at: float  # event time of the boundary (the window's end)
    dir: float | None
    dir_lower: float | None
    dir_upper: float | None
    eod: float | None
    selection_rates: dict[str, float | None]  # per group with predictions in the window


GAP_NOTE = (
    "With different base rates, equal PPV and equal TPR force unequal FPR "
    "(Chouldechova 2017: FPR = p/(1-p) · (1-PPV)/PPV · TPR), so equalized odds and "
    "predictive parity cannot both hold; check which one this model must meet."
)


def _finite(x: float) -> float:
    """NaN for an undefined or infinite number (an infinite upper limit judges nothing)."""
    return x if math.isfinite(x) else math.nan


def _fmt(x: Any) -> str:
    return (
        "n/a"
        if x is None or (isinstance(x, float) and not math.isfinite(x))
        else (f"{x:.3f}" if isinstance(x, float) else str(x))
    )


class AlertEvaluator:
    def __init__(
        self, config: Config, engine: Engine, *, series_points: int | None = SERIES_POINTS
    ) -> None:
        self.config = config
        self.engine = engine
        engine.track_label_times = True  # rules read label-based counts as of each boundary
        self.spec = config.alerts
        self.book = AlertBook()
        self.last: dict[int, int] = {}  # model -> last evaluated boundary (bucket index)
        self.trackers: dict[tuple[str, str, str], DriftTracker] = {}
        self.drift_quiet: dict[tuple[str, str, str], int] = {}
        self.history: list[Transition] = []
        # (model, window, attribute) -> the headline disparities at each closed boundary
        self.series: dict[tuple[str, str, str], deque[SeriesPoint]] = {}
        self.series_points = series_points

    # -- driving -------------------------------------------------------------------------------
    def advance(
        self, labels_caught_up: Callable[[int], bool] | None = None, *, limit: int | None = None
    ) -> list[Transition]:
        """Evaluate every boundary closed since the last call; return the transitions.

        A boundary is closed once every partition's predictions have reached it and, unless
        ``labels_caught_up(partition)`` says that partition's label input is drained, its labels
        too — but labels hold a boundary back by at most the model's lateness, so a label topic
        that lags (or carries old times) delays alerts a little and never stops them. Without
        ``labels_caught_up`` (a replay, whose events are in time order) labels never wait.
        ``limit``: at most that many boundaries per model; the rest wait for the next call (the
        service keeps each loop turn short, so a stop or a poll is never held up by a backlog).
        """
        out: list[Transition] = []
        for m, spec in enumerate(self.engine.models):
            head = self.engine.low_watermark(m)
            if head is None:
                continue
            wm = self._frontier(m, spec, head, labels_caught_up)
            last = self.last.get(m)
            if last is None:
                first = self.engine.first_bucket(m)
                last = first if first is not None else wm
            start = max(last + 1, head - spec.ring_buckets + 1)
            if limit is not None:
                wm = min(wm, start + limit - 1)
            for k in range(start, wm + 1):
                out += self._evaluate(m, spec, k)
            self.last[m] = max(last, wm)
        self.history += out
        return out

    def _frontier(
        self, m: int, spec: ModelSpec, head: int, caught_up: Callable[[int], bool] | None
    ) -> int:
        if caught_up is None:
            return head
        wm = head
        for p in self.engine.partitions:
            if caught_up(p):
                continue
            reached = self.engine.label_frontier(m, p)
            wm = min(wm, reached if reached is not None else -(2**62))
        return max(wm, head - spec.lateness // spec.bucket)

    def _evaluate(self, m: int, spec: ModelSpec, k: int) -> list[Transition]:
        out: list[Transition] = []
        at = float(k * spec.bucket)
        reg = self.engine.registries[m]
        sets = [(name, *reg.groups_of_set(s)) for s, name in enumerate(reg.set_names)]
        for w in spec.windows:
            end = k - w.lag // spec.bucket
            counts = self.engine.counts_between(m, end - w.length // spec.bucket, end, as_of=k)
            for set_name, gidx, labels in sets:
                if not labels:
                    continue
                rules = [
                    r
                    for r in self.spec.rules
                    if (not r.windows or w.name in r.windows)
                    and (not r.attributes or set_name in r.attributes)
                ]
                result = self._result(counts[gidx], labels, spec, set_name)
                self._record(spec.name, w.name, set_name, at, result)
                for rule in rules:
                    t = self._rule(rule, result, spec.name, w.name, set_name, at)
                    if t is not None:
                        out.append(t)
        d = self.spec.drift
        if d.enabled and (k * spec.bucket) % d.bucket == 0:
            nb = d.bucket // spec.bucket
            counts = self.engine.counts_between(m, k - nb, k, as_of=k)
            for set_name, gidx, labels in sets:
                if labels:
                    result = self._result(counts[gidx], labels, spec, set_name)
                    out += self._drift(result, spec.name, set_name, at)
        return out

    def _record(
        self, model: str, window: str, attribute: str, at: float, r: AttributeResult
    ) -> None:
        """Keep the recent history of the headline disparities (status page sparklines)."""
        if self.series_points == 0:
            return
        series = self.series.get((model, window, attribute))
        if series is None:
            series = self.series[(model, window, attribute)] = deque(maxlen=self.series_points)
        d = r.disparities.disparate_impact
        e = r.disparities.equalized_odds_difference
        series.append(
            SeriesPoint(
                at,
                finite_or_none(d.value),
                finite_or_none(d.lower),
                finite_or_none(d.upper),
                finite_or_none(e.value),
                r.selection_rates(),
            )
        )

    def _result(
        self, counts: Any, labels: list[str], spec: ModelSpec, set_name: str
    ) -> AttributeResult:
        """Typed disparities of one attribute set, with the configured confidence."""
        return attribute_result(counts, labels, spec, set_name, confidence=self.config.confidence)

    # -- static rules --------------------------------------------------------------------------
    def _rule(
        self,
        rule: AlertRule,
        r: AttributeResult,
        model: str,
        window: str,
        attribute: str,
        at: float,
    ) -> Transition | None:
        d = r.disparity(rule.metric)
        value, lower, upper = _finite(d.value), _finite(d.lower), _finite(d.upper)
        lo, hi = d.low_group, d.high_group
        # the basis decides the rate and the denominator (for the EOD: the gap that is the max)
        basis = d.basis or rule.metric
        enough = (
            lo is not None
            and hi is not None
            and all(r.denominator(g, basis) >= rule.min_samples for g in (lo, hi))
        )
        breached = enough and rule.breached(value, lower, upper)
        labels = {
            "alertname": rule.name,
            "model": model,
            "window": window,
            "attribute": attribute,
            "severity": rule.severity,
        }
        ann = (
            self._evidence(rule, r, basis, (value, lower, upper), lo, hi)
            if lo is not None and hi is not None and r.labels[lo]
            else {}
        )
        return self.book.observe(
            name=rule.name,
            labels=labels,
            breached=breached,
            # too few samples to judge: no decision (an alert does not resolve just because the
            # extreme group fell below min_samples); no data at all (NaN) resolves
            recovered=rule.recovered(value) if enough else value != value,
            at=at,
            for_=rule.for_,
            value=value,
            annotations=ann,
        )

    def _evidence(
        self,
        rule: AlertRule,
        r: AttributeResult,
        basis: str,
        numbers: tuple[float, float, float],
        lo: int,
        hi: int,
    ) -> dict[str, str]:
        rate = METRICS[basis].rate
        value, lower, upper = numbers
        g_rate, r_rate = _fmt(r.value(rate, lo)), _fmt(r.value(rate, hi))
        g_n, r_n = int(r.groups.n[lo]), int(r.groups.n[hi])
        g_lab, r_lab = int(r.groups.labelled[lo]), int(r.groups.labelled[hi])
        lo_name, hi_name = r.labels[lo], r.labels[hi]
        ann = {
            "summary": f"{rule.metric} {_fmt(value)} {rule.op} {rule.bound} "
            f"for {lo_name} vs {hi_name}",
            "description": (
                f"{rate} {lo_name}: {g_rate} (n={g_n}, labelled={g_lab}); "
                f"{hi_name}: {r_rate} (n={r_n}, labelled={r_lab}); "
                f"{rule.metric} {_fmt(value)}, {self.config.confidence:.0%} CI "
                f"[{_fmt(lower)}, {_fmt(upper)}]"
            ),
            "value": _fmt(value),
            "ci_lower": _fmt(lower),
            "ci_upper": _fmt(upper),
            "group": lo_name,
            "group_rate": g_rate,
            "group_n": str(g_n),
            "reference_group": hi_name,
            "reference_rate": r_rate,
            "reference_n": str(r_n),
            "runbook_url": rule.runbook_url,
        }
        if METRICS[rule.metric].needs_labels:
            ann["base_rates"] = (
                f"{lo_name}: {_fmt(r.value('prevalence', lo))}, "
                f"{hi_name}: {_fmt(r.value('prevalence', hi))}"
            )
            ann["note"] = GAP_NOTE
        return ann

    # -- drift ---------------------------------------------------------------------------------
    def _drift(self, r: AttributeResult, model: str, attribute: str, at: float) -> list[Transition]:
        out = []
        d = self.spec.drift
        # a two-sided interval of the configured confidence spans 2·z standard errors
        z = z_value(self.config.confidence)
        for metric in d.metrics:
            key = (model, attribute, metric)
            tracker = self.trackers.get(key)
            if tracker is None:
                tracker = self.trackers[key] = DriftTracker(d, metric)
            disp = r.disparity(metric)
            value = _finite(disp.value)
            lo, hi = disp.lower, disp.upper
            se = (hi - lo) / (2 * z) if math.isfinite(lo) and math.isfinite(hi) else math.nan
            signal = tracker.update(at, value, se)
            labels = {
                "alertname": "FairnessDrift",
                "model": model,
                "attribute": attribute,
                "metric": metric,
                "severity": d.severity,
            }
            if signal is not None:
                self.drift_quiet[key] = 0
                eta = (
                    "n/a"
                    if signal.hours_to_bound is None
                    else "no time: it is already past it"
                    if signal.hours_to_bound == 0
                    else f"~{signal.hours_to_bound:.1f} hours"
                )
                ann = {
                    "summary": f"{metric} of {model}/{attribute} is drifting worse: "
                    f"{_fmt(signal.baseline)} → {_fmt(signal.value)}",
                    "description": (
                        f"change {signal.change:+.3f} from a baseline of "
                        f"{_fmt(signal.baseline)}; trend {signal.slope_per_hour:+.4f}/hour; at "
                        f"this slope the bound is crossed in {eta}"
                    ),
                    "change": f"{signal.change:+.4f}",
                    "slope_per_hour": f"{signal.slope_per_hour:+.5f}",
                    "hours_to_bound": eta,
                    "runbook_url": "docs/runbook.md#fairnessdrift",
                }
                t = self.book.observe(
                    name="FairnessDrift",
                    labels=labels,
                    breached=True,
                    recovered=False,
                    at=at,
                    for_=0,
                    value=signal.value,
                    annotations=ann,
                )
            else:
                quiet = self.drift_quiet.get(key, 0) + 1
                self.drift_quiet[key] = quiet
                t = self.book.observe(
                    name="FairnessDrift",
                    labels=labels,
                    breached=False,
                    recovered=quiet >= d.min_values and not tracker.still_worsening(),
                    at=at,
                    for_=0,
                    value=value,
                    annotations={},
                )
            if t is not None:
                out.append(t)
        return out
