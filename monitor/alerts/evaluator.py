"""Evaluates alert rules and drift detectors at every closed bucket boundary (event time).

Why closed buckets: a window ending at a boundary that every partition has passed no longer
changes (for an in-order stream), so the live monitor and a replay of the same events see the
same numbers at the same event times, whatever their poll batches were — backtests then match
production exactly.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from monitor.alerts.drift import DriftTracker
from monitor.alerts.drift_alerts import blind_metrics, check_drift, drift_cohorts, in_ring
from monitor.alerts.evidence_alerts import EvidenceTracker
from monitor.alerts.lifecycle import Alert, AlertBook, Transition
from monitor.alerts.retire import retire
from monitor.alerts.window_rules import RuleCheck, alert_key
from monitor.config.rules import AlertRule
from monitor.config.spec import Config, ModelSpec
from monitor.metrics.registry import METRICS
from monitor.metrics.results import (
    AttributeResult,
    attribute_results,
    finite_or_none,
)
from monitor.state.view import CountsView, Idle

log = logging.getLogger(__name__)
SERIES_POINTS = 288  # closed buckets kept per series for the status page
BoundaryHook = Callable[[str, float, list[tuple[str, str, AttributeResult]]], None]


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


class SeriesPoint(NamedTuple):
    """One window's headline numbers at one closed bucket boundary (``None``: undefined)."""

    at: float  # event time of the boundary (the window's end)
    dir: float | None
    dir_lower: float | None
    dir_upper: float | None
    eod: float | None
    selection_rates: dict[str, float | None]  # per group with predictions in the window


class AlertEvaluator:
    def __init__(
        self, config: Config, engine: CountsView, *, series_points: int | None = SERIES_POINTS
    ) -> None:
        self.config = config
        self.engine = engine
        engine.track_label_times = True  # rules read label-based counts as of each boundary
        self.spec = config.alerts
        self.book = AlertBook()
        self.restored = False  # alerts restored from a checkpoint, not yet checked (retire.py)
        # notifications the checkpoint still owed, with the sinks owing each (None: all)
        self.owed_at_restore: list[tuple[Alert, frozenset[str] | None]] = []
        self.evidence_afresh: set[str] = set()  # models whose evidence state could not be kept
        self.last: dict[int, int] = {}  # model -> last evaluated boundary (bucket index)
        self.trackers: dict[tuple[str, str, str], DriftTracker] = {}
        self.drift_quiet: dict[tuple[str, str, str], int] = {}
        self.history: list[Transition] = []
        self.skipped: dict[str, int] = {}  # model -> boundaries not judged (see _skip)
        # (partition, model) -> holds no boundary back (none of its decisions for a while)
        self.idle: Idle | None = None
        # (model, window, attribute) -> the headline disparities at each closed boundary
        self.series: dict[tuple[str, str, str], deque[SeriesPoint]] = {}
        self.series_points = series_points
        # called once per evaluated boundary with (model, at, [(window, attribute, result)]):
        # replay --timeline streams them to a file instead of keeping them
        self.on_boundary: BoundaryHook | None = None
        self.evidence = EvidenceTracker(config, engine)  # anytime-valid detectors per group
        self._set_cache: dict[int, tuple[int, list[tuple[str, Any, list[str]]]]] = {}
        self._rule_cache: dict[tuple[str, str], list[AlertRule]] = {}
        self._check_cache: dict[tuple[str, str, str], list[RuleCheck]] = {}
        self._floor_cache: dict[tuple[tuple[str, ...], tuple[str, ...]], list[int]] = {}
        self._score_rules = any(METRICS[r.metric].interval == "dkw" for r in self.spec.rules)
        if self.spec.drift.enabled:  # river's import takes ~1.5 s: at start, not in the loop
            import river.drift  # noqa: F401  (at the first hourly boundary it stalled the poll)

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
        if self.restored:  # what the configuration no longer raises is resolved, once
            judged = {s.name: self.last[m] * s.bucket for m, s in enumerate(self.engine.models)
                      if m in self.last}  # fmt: skip
            out += retire(self.book, self.config, judged.get, self.evidence_afresh)
            self.restored = False
        for m, spec in enumerate(self.engine.models):
            head = self.engine.low_watermark(m, self.idle)
            if head is None:
                continue
            wm = self._frontier(m, spec, head, labels_caught_up)
            last = self.last.get(m)
            if last is None:
                first = self.engine.first_bucket(m)
                last = first if first is not None else wm
            start = max(last + 1, head - spec.ring_buckets + 1)
            silent = getattr(self.engine, "silent_through", None)  # the global view's: what
            if silent is not None:  # every owner skipped (past its ring), one instance too
                start = max(start, silent(m) + 1)
            if limit is not None:
                wm = min(wm, start + limit - 1)
            gone: list[int] = []
            for k in range(start, wm + 1):
                out += self._evaluate(m, spec, k, gone)
            if gone:
                self._skip(spec, gone)
            self.last[m] = max(last, wm)
        self.history += out
        return out

    def _skip(self, spec: ModelSpec, gone: list[int]) -> None:
        """Windows that had partly left the ring when their boundary was judged (the rings moved
        on by more than ``lateness`` first: a catch-up poll spanning hours of a quiet model, or
        a partition far ahead of another) are skipped, counted and logged: judged, their
        truncated counts would page on numbers no window has, and differently from a replay of
        the same events. ``gone``: the boundary of each skipped window (or evidence step)."""
        self.skipped[spec.name] = self.skipped.get(spec.name, 0) + len(gone)
        log.warning(
            "alerts: %d windows of model %s ending %s to %s were not judged: they had left the "
            "ring before evaluation reached them (it fell behind by more than lateness %ss)",
            len(gone),
            spec.name,
            _utc(gone[0] * spec.bucket),
            _utc(gone[-1] * spec.bucket),
            spec.lateness,
        )

    def _frontier(
        self, m: int, spec: ModelSpec, head: int, caught_up: Callable[[int], bool] | None
    ) -> int:
        if caught_up is None:
            return head
        wm = head
        for p in self.engine.partitions:
            if caught_up(p) or (self.idle is not None and self.idle(p, m)):
                continue
            reached = self.engine.label_frontier(m, p)
            wm = min(wm, reached if reached is not None else -(2**62))
        return max(wm, head - spec.lateness // spec.bucket)

    def _evaluate(self, m: int, spec: ModelSpec, k: int, gone: list[int]) -> list[Transition]:
        out: list[Transition] = []
        at = float(k * spec.bucket)
        sets = self._sets(m)
        results: list[tuple[str, str, AttributeResult]] = []
        held = self.engine.ring_holds  # never judge a window that has partly left the ring
        windows = [w for w in spec.windows if held(m, k - (w.length + w.lag) // spec.bucket, at=k)]
        gone += [k] * (len(spec.windows) - len(windows))
        for w, set_name, result, floors in self._window_results(m, spec, k, sets, windows):
            self._record(spec.name, w, set_name, at, result)
            results.append((w, set_name, result))
            for check in self._checks(spec, w, set_name):
                t = check(self.book, floors.get(check.rule.min_samples, result), at)
                if t is not None:
                    out.append(t)
        d = self.spec.drift
        if d.enabled and (k * spec.bucket) % d.bucket == 0:
            # prediction-time cohorts: label-based metrics once their labels have settled;
            # every cohort's attribute sets computed stacked, judged in the same order
            judged = []
            for c in drift_cohorts(d, spec, k):
                if in_ring(self.engine, m, c, k):
                    counts = self.engine.counts_between(m, c.start, c.end, as_of=k)
                    judged += [(c, counts[g], lab, name) for name, g, lab in sets if lab]
            # a value compares the groups with drift's min_samples, at least the model's
            floor = replace(spec, min_samples=max(spec.min_samples, d.min_samples))
            cohort_results = attribute_results(
                [(counts, lab, name) for _, counts, lab, name in judged],
                floor,
                confidence=self.config.confidence,
                scores=False,
            )
            for (c, counts, _, set_name), result in zip(judged, cohort_results, strict=True):
                out += check_drift(
                    self.book,
                    self.trackers,
                    self.drift_quiet,
                    d,
                    result,
                    spec.name,
                    set_name,
                    at,
                    confidence=self.config.confidence,
                    cohort=c,
                    blind=blind_metrics(counts, result, spec.favourable),
                    rules=self.spec.rules,
                )
        if held(m, k - 1, at=k):
            out += self.evidence.update(m, spec, k, self.book)
        else:
            gone.append(k)
        if self.on_boundary is not None:  # after the evidence: the timeline shows this boundary's
            self.on_boundary(spec.name, at, results)
        return out

    def _window_results(
        self,
        m: int,
        spec: ModelSpec,
        k: int,
        sets: list[tuple[str, Any, list[str]]],
        windows: list[Any],
    ) -> list[tuple[str, str, AttributeResult, dict[int, AttributeResult]]]:
        """(window, attribute set, result, results by rule floor) of every window ending at
        boundary ``k``: the windows read at once, kept up to date between boundaries
        (``state/window_sums.py``), and the results computed stacked (``metrics/batch.py``).

        A rule whose ``min_samples`` is above the model's judges the groups that reach it (as
        ``gate`` does): with the model's floor, a smaller group with the extreme rate was the
        compared one, the rule read "insufficient data", and a larger group's significant
        breach never paged (found by a review)."""
        if not windows:
            return []
        ends = [k - w.lag // spec.bucket for w in windows]
        ranges = [(e - w.length // spec.bucket, e) for w, e in zip(windows, ends, strict=True)]
        live = [(name, gidx, labels) for name, gidx, labels in sets if labels]
        items = [
            (c[gidx], labels, name)
            for c in self.engine.windows_as_of(m, ranges, k)
            for name, gidx, labels in live
        ]
        # score distances only when a rule judges them or the timeline shows every metric
        scores = self._score_rules or self.on_boundary is not None
        conf = self.config.confidence
        results = attribute_results(items, spec, confidence=conf, scores=scores)
        floors: list[dict[int, AttributeResult]] = [{} for _ in results]
        for floor in self._floors(tuple(w.name for w in windows), tuple(n for n, _, _ in live)):
            if floor > spec.min_samples:
                at_floor = replace(spec, min_samples=floor)
                for f, r in zip(floors, attribute_results(items, at_floor, confidence=conf,
                                                          scores=scores), strict=True):  # fmt: skip
                    f[floor] = r
        keys = [(w.name, name) for w in windows for name, _, _ in live]
        return [(w, name, r, f) for (w, name), r, f in zip(keys, results, floors, strict=True)]

    def _sets(self, m: int) -> list[tuple[str, Any, list[str]]]:
        """(name, group indices, labels) of each attribute set; groups are only ever appended,
        so this changes only when the registry grows."""
        reg = self.engine.registries[m]
        cached = self._set_cache.get(m)
        if cached is None or cached[0] != len(reg):
            sets = [(name, *reg.groups_of_set(s)) for s, name in enumerate(reg.set_names)]
            cached = self._set_cache[m] = (len(reg), sets)
        return cached[1]

    def _floors(self, windows: tuple[str, ...], sets: tuple[str, ...]) -> list[int]:
        """The ``min_samples`` of every rule judging these windows and attribute sets."""
        floors = self._floor_cache.get((windows, sets))
        if floors is None:
            floors = self._floor_cache[(windows, sets)] = sorted(
                {r.min_samples for w in windows for s in sets for r in self._rules(w, s)}
            )
        return floors

    def _checks(self, spec: ModelSpec, window: str, attribute: str) -> list[RuleCheck]:
        """The rules that apply to one window and attribute set, each with its alert's key and
        labels (made once: judged at every boundary)."""
        made = self._check_cache.get((spec.name, window, attribute))
        if made is None:
            made = self._check_cache[(spec.name, window, attribute)] = [
                RuleCheck(r, window, alert_key(r, spec.name, window, attribute),
                          confidence=self.config.confidence, favourable=spec.favourable)
                for r in self._rules(window, attribute)
            ]  # fmt: skip
        return made

    def _rules(self, window: str, attribute: str) -> list[AlertRule]:
        """The configured rules that apply to one window and attribute set."""
        rules = self._rule_cache.get((window, attribute))
        if rules is None:
            rules = self._rule_cache[(window, attribute)] = [
                r for r in self.spec.rules if r.applies(window, attribute)
            ]
        return rules

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
        spec = self.config.models[model]  # a blind EOD is no point of its history (a review)
        blind = "equalized_odds_difference" in r.blind(spec.favourable).disparities(r.disparities)
        series.append(
            SeriesPoint(
                at,
                finite_or_none(d.value),
                finite_or_none(d.lower),
                finite_or_none(d.upper),
                None if blind else finite_or_none(e.value),
                r.selection_rates(),
            )
        )
