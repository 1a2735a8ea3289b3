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
from monitor.outputs.report import attribute_report
from monitor.state.engine import Engine

# which per-group denominators a metric's comparison rests on (for min_samples)
DENOMINATOR = {
    "disparate_impact_ratio": ("n",),
    "statistical_parity_difference": ("n",),
    "tpr_gap": ("tp", "fn"),
    "equal_opportunity_difference": ("tp", "fn"),
    "fpr_gap": ("fp", "tn"),
    "ppv_gap": ("tp", "fp"),
    "predictive_parity_difference": ("tp", "fp"),
    "equalized_odds_difference": ("tp", "fn"),  # refined below: the gap that is the max
}
SERIES_POINTS = 288  # closed buckets kept per series for the status page


class SeriesPoint(NamedTuple):
    """One window's headline numbers at one closed bucket boundary (``None``: undefined)."""

    at: float  # event time of the boundary (the window's end)
    dir: float | None
    dir_lower: float | None
    dir_upper: float | None
    eod: float | None
    selection_rates: dict[str, float | None]  # per group with predictions in the window


RATE = {
    "disparate_impact_ratio": "selection_rate",
    "statistical_parity_difference": "selection_rate",
    "tpr_gap": "tpr",
    "equal_opportunity_difference": "tpr",
    "fpr_gap": "fpr",
    "ppv_gap": "ppv",
    "predictive_parity_difference": "ppv",
}


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
                rep = self._report(counts[gidx], labels, spec, set_name)
                self._record(spec.name, w.name, set_name, at, rep)
                for rule in rules:
                    t = self._rule(rule, rep, spec.name, w.name, set_name, at)
                    if t is not None:
                        out.append(t)
        d = self.spec.drift
        if d.enabled and (k * spec.bucket) % d.bucket == 0:
            nb = d.bucket // spec.bucket
            counts = self.engine.counts_between(m, k - nb, k, as_of=k)
            for set_name, gidx, labels in sets:
                if labels:
                    rep = self._report(counts[gidx], labels, spec, set_name)
                    out += self._drift(rep, spec.name, set_name, at)
        return out

    def _record(
        self, model: str, window: str, attribute: str, at: float, rep: dict[str, Any]
    ) -> None:
        """Keep the recent history of the headline disparities (status page sparklines)."""
        if self.series_points == 0:
            return
        series = self.series.get((model, window, attribute))
        if series is None:
            series = self.series[(model, window, attribute)] = deque(maxlen=self.series_points)
        d, e = rep["disparate_impact_ratio"], rep["equalized_odds_difference"]
        groups = rep["groups"]
        rates = {g: groups[g]["selection_rate"] for g in groups if groups[g]["n"]}
        series.append(SeriesPoint(at, d["value"], d["lower"], d["upper"], e["value"], rates))

    def _report(
        self, counts: Any, labels: list[str], spec: ModelSpec, set_name: str
    ) -> dict[str, Any]:
        """Disparities of one attribute set; per-group rows are built only when read."""
        return attribute_report(
            counts, labels, spec, set_name, confidence=self.config.confidence, lazy=True
        )

    # -- static rules --------------------------------------------------------------------------
    def _rule(
        self,
        rule: AlertRule,
        rep: dict[str, Any],
        model: str,
        window: str,
        attribute: str,
        at: float,
    ) -> Transition | None:
        d = rep[rule.metric]
        value = math.nan if d["value"] is None else d["value"]
        lower = math.nan if d["lower"] is None else d["lower"]
        upper = math.nan if d["upper"] is None else d["upper"]
        lo, hi = d["low_group"], d["high_group"]
        metric = rule.metric
        if metric == "equalized_odds_difference":
            # which of the two gaps is the maximum decides the rate and the denominator
            metric = "fpr_gap" if rep["fpr_gap"]["value"] == d["value"] else "tpr_gap"
        enough = (
            lo is not None
            and hi is not None
            and all(
                sum(rep["groups"][g][c] for c in DENOMINATOR[metric]) >= rule.min_samples
                for g in (lo, hi)
            )
        )
        breached = enough and rule.breached(value, lower, upper)
        labels = {
            "alertname": rule.name,
            "model": model,
            "window": window,
            "attribute": attribute,
            "severity": rule.severity,
        }
        ann = self._evidence(rule, rep, metric, value, lower, upper, lo, hi) if lo else {}
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
        rep: dict[str, Any],
        metric: str,
        value: float,
        lower: float,
        upper: float,
        lo: str,
        hi: str,
    ) -> dict[str, str]:
        rate = RATE[metric]
        g, r = rep["groups"][lo], rep["groups"][hi]
        ann = {
            "summary": f"{rule.metric} {_fmt(value)} {rule.op} {rule.bound} for {lo} vs {hi}",
            "description": (
                f"{rate} {lo}: {_fmt(g[rate])} (n={g['n']}, labelled={g['labelled']}); "
                f"{hi}: {_fmt(r[rate])} (n={r['n']}, labelled={r['labelled']}); "
                f"{rule.metric} {_fmt(value)}, {self.config.confidence:.0%} CI "
                f"[{_fmt(lower)}, {_fmt(upper)}]"
            ),
            "value": _fmt(value),
            "ci_lower": _fmt(lower),
            "ci_upper": _fmt(upper),
            "group": lo,
            "group_rate": _fmt(g[rate]),
            "group_n": str(g["n"]),
            "reference_group": hi,
            "reference_rate": _fmt(r[rate]),
            "reference_n": str(r["n"]),
            "runbook_url": rule.runbook_url,
        }
        if rule.metric in (
            "equalized_odds_difference",
            "tpr_gap",
            "fpr_gap",
            "predictive_parity_difference",
            "ppv_gap",
        ):
            ann["base_rates"] = f"{lo}: {_fmt(g['prevalence'])}, {hi}: {_fmt(r['prevalence'])}"
            ann["note"] = (
                "With different base rates, equal PPV and equal TPR force unequal FPR "
                "(Chouldechova 2017: FPR = p/(1-p) · (1-PPV)/PPV · TPR), so equalized odds and "
                "predictive parity cannot both hold; check which one this model must meet."
            )
        return ann

    # -- drift ---------------------------------------------------------------------------------
    def _drift(
        self, rep: dict[str, Any], model: str, attribute: str, at: float
    ) -> list[Transition]:
        out = []
        d = self.spec.drift
        for metric in d.metrics:
            key = (model, attribute, metric)
            tracker = self.trackers.get(key)
            if tracker is None:
                tracker = self.trackers[key] = DriftTracker(d, metric)
            value = rep[metric]["value"]
            lo, hi = rep[metric]["lower"], rep[metric]["upper"]
            se = math.nan if lo is None or hi is None else (hi - lo) / (2 * 1.96)
            signal = tracker.update(at, math.nan if value is None else value, se)
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
                    value=math.nan if value is None else value,
                    annotations={},
                )
            if t is not None:
                out.append(t)
        return out
