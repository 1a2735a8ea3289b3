"""FairnessDrift alerts: per (model, attribute set, metric) a river detector over
non-overlapping drift-bucket values (see :mod:`monitor.alerts.drift`).

Each value describes a *cohort*: the predictions made in one drift bucket. Selection-rate
metrics (DIR, statistical parity) need no labels, so the cohort is the bucket that just closed.
Label-based metrics (TPR, FPR, …) read the cohort predicted ``label_settle`` earlier, as of the
boundary (:func:`monitor.config.label_settle.label_settle`): with outcomes 1–6 h late, the bucket that
just closed has almost no labels, and a detector fed those values is blind. Each cohort is fed
once (a tracker skips a cohort no newer than the last one it saw), and the alert names it.

A cohort whose labels cover one predicted class only while both occur (selective labels: only
approved applicants are ever labelled) has TPR = FPR = 0 or 1 by construction: its blind values
(:mod:`monitor.metrics.blindness`) are not measurable, so nothing is fed, and nothing counts
towards resolving an alert.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from monitor.alerts.drift import DriftTracker
from monitor.alerts.lifecycle import AlertBook, Transition
from monitor.alerts.window_pages import finite, fmt
from monitor.config.durations import format_duration, iso_utc
from monitor.config.label_settle import label_settle
from monitor.config.rules import AlertRule, DriftSpec
from monitor.config.spec import ModelSpec
from monitor.metrics.blindness import blind_reasons
from monitor.metrics.disparities import Disparity
from monitor.metrics.intervals import compared_z
from monitor.metrics.registry import METRICS
from monitor.metrics.results import AttributeResult
from monitor.state.view import CountsView
from monitor.state.windows import I64

log = logging.getLogger(__name__)
_gone_logged: set[str] = set()  # models whose evicted cohort was logged (once per process)


@dataclass(frozen=True)
class DriftCohort:
    """The predictions one drift value describes: buckets ``start <= b < end`` of ``width``
    seconds, read as of the boundary being evaluated."""

    start: int
    end: int
    width: int
    metrics: tuple[str, ...]

    @property
    def since(self) -> float:
        return float(self.start * self.width)

    @property
    def until(self) -> float:
        return float(self.end * self.width)

    def describe(self) -> str:
        """``2026-01-01 10:00–11:00 UTC``: what a page says the value is about."""
        a = datetime.fromtimestamp(self.since, tz=UTC)
        b = datetime.fromtimestamp(self.until, tz=UTC)
        if a.date() == b.date():
            return f"{a:%Y-%m-%d %H:%M}–{b:%H:%M} UTC"
        return f"{a:%Y-%m-%d %H:%M} – {b:%Y-%m-%d %H:%M} UTC"


def drift_cohorts(d: DriftSpec, spec: ModelSpec, k: int) -> list[DriftCohort]:
    """The cohorts read at boundary ``k``: the drift bucket ending at ``k`` for the
    selection-rate metrics, the one ending ``label_settle`` earlier for the label-based ones
    (one cohort for all when nothing needs settling)."""
    nb = d.bucket // spec.bucket
    settle = label_settle(d, spec) // spec.bucket
    now = tuple(m for m in d.metrics if settle == 0 or not METRICS[m].needs_labels)
    later = tuple(m for m in d.metrics if m not in now)
    out = [DriftCohort(k - nb, k, spec.bucket, now)] if now else []
    if later:
        out.append(DriftCohort(k - nb - settle, k - settle, spec.bucket, later))
    return out


def in_ring(engine: CountsView, m: int, c: DriftCohort, k: int) -> bool:
    """Does every partition's ring still hold the whole cohort when boundary ``k`` is read?
    (The config check keeps it there while the evaluator keeps up; one that fell further
    behind must not read half a cohort, which would also differ between the live monitor and a
    replay.) A cohort from before the first event has nothing to read."""
    first = engine.first_bucket(m)
    if first is None or c.end <= first:
        return False
    if not engine.ring_holds(m, c.start, at=k):
        name = engine.models[m].name
        if name not in _gone_logged:
            _gone_logged.add(name)
            log.warning(
                "drift: the cohort predicted %s of model %s has left the ring before it "
                "was read (alert evaluation fell behind); its values are skipped",
                c.describe(),
                name,
            )
        return False
    return True


def blind_metrics(counts: I64, r: AttributeResult, favourable: int) -> frozenset[str]:
    """The metrics of this cohort that its labels cannot measure (selective labels, judged per
    compared group by :mod:`monitor.metrics.blindness`, as every other surface judges them)."""
    return frozenset(blind_reasons(counts, favourable=favourable).disparities(r.disparities))


def drift_bound(rules: Sequence[AlertRule], metric: str, attribute: str) -> float | None:
    """The bound a configured rule pages at for this metric on this attribute set (for a TPR or
    FPR gap without a rule of its own, the equalized-odds rule's: it is their maximum), which
    the drift page's time-to-bound counts to; None: the registry's default."""
    for metrics in ((metric,), ("equalized_odds_difference",)):
        for r in rules:
            if r.metric in metrics and (not r.attributes or attribute in r.attributes):
                return r.bound
        if metric not in ("tpr_gap", "fpr_gap"):
            break
    return None


def check_drift(
    book: AlertBook,
    trackers: dict[tuple[str, str, str], DriftTracker],
    quiet_values: dict[tuple[str, str, str], int],
    d: DriftSpec,
    r: AttributeResult,
    model: str,
    attribute: str,
    at: float,
    *,
    confidence: float,
    cohort: DriftCohort | None = None,
    blind: Collection[str] = (),
    rules: Sequence[AlertRule] = (),
) -> list[Transition]:
    """Feed one cohort's values (``cohort``: by default the drift bucket ending at ``at``) to
    the detectors of one attribute set; FairnessDrift fires on a worsening change and resolves
    after ``min_values`` quiet values once the metric is back at its baseline — measured ones:
    an undefined value (too few samples, a metric in ``blind``) is no news, good or bad. The
    trend's time to the bound counts to the configured ``rules``' bound (:func:`drift_bound`)."""
    out = []
    # a two-sided interval of the configured confidence spans 2·z standard errors
    if cohort is None:
        cohort = DriftCohort(int(at) // d.bucket - 1, int(at) // d.bucket, d.bucket, d.metrics)
    t_end = cohort.until
    for metric in cohort.metrics:
        key = (model, attribute, metric)
        tracker = trackers.get(key)
        if tracker is None:
            tracker = trackers[key] = DriftTracker(d, metric)
        if tracker.history and t_end <= tracker.history[-1][0]:
            continue  # seen already (a restart with a longer label_settle): once per cohort
        disp = r.disparity(metric)
        value = math.nan if metric in blind else finite(disp.value)
        lo, hi = disp.lower, disp.upper
        z = compared_z(confidence, disp.pairs)  # the interval's own level (its pair's)
        # a gap's interval is a spread's, [max(L, 0), max(U, −L)]: its upper half is z·SE (L
        # is clipped at 0 near a tie); else the interval is 2·z·SE wide
        se = (hi - disp.value) / z if METRICS[metric].spread else (hi - lo) / (2 * z)
        se = se if math.isfinite(lo) and math.isfinite(hi) else math.nan
        signal = tracker.update(t_end, value, se, drift_bound(rules, metric, attribute))
        labels = {
            "alertname": "FairnessDrift",
            "model": model,
            "attribute": attribute,
            "metric": metric,
            "severity": d.severity,
        }
        if signal is not None:
            quiet_values[key] = 0
            eta = (
                "n/a"
                if signal.hours_to_bound is None
                else "no time: it is already past it"
                if signal.hours_to_bound == 0
                else f"~{signal.hours_to_bound:.1f} hours"
            )
            span = cohort.describe()
            ann = {
                "summary": f"{metric} of {model}/{attribute} is drifting worse: "
                f"{fmt(signal.baseline)} → {fmt(signal.value)} "
                f"(the cohort predicted {span})",
                "description": (
                    f"change {signal.change:+.3f} from a baseline of "
                    f"{fmt(signal.baseline)}; trend {signal.slope_per_hour:+.4f}/hour; at "
                    f"this slope the bound ({signal.bound:g}) is crossed in {eta}. The value "
                    f"describes the "
                    f"predictions made {span}, with the labels known by {iso_utc(at)}"
                ),
                "change": f"{signal.change:+.4f}",
                "slope_per_hour": f"{signal.slope_per_hour:+.5f}",
                "hours_to_bound": eta,
                "cohort": span,
                "cohort_start": iso_utc(cohort.since),
                "cohort_end": iso_utc(t_end),
                "runbook_url": "docs/runbook.md#fairnessdrift",
            }
            ann |= _pair(r, disp)
            t = book.observe(
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
            measured = math.isfinite(value)
            quiet = quiet_values.get(key, 0) + int(measured)
            quiet_values[key] = quiet
            recovered = (
                measured
                and quiet >= d.min_values
                and not tracker.still_worsening()
                and tracker.back_at_baseline(d.min_values)
            )
            # a resolved notice says what it is now (a firing one keeps its text: empty notes),
            # quoting the mean the recovery was judged on, not one cohort's value, which may be
            # a noisy one far from the baseline (found by a review: "back at its baseline:
            # 0.760 (baseline 0.959)", over a mean of 0.947)
            n = d.min_values
            mean = tracker.recent_mean(n) if recovered else math.nan
            every = format_duration(d.bucket)
            notes = (
                {
                    "summary": f"recovered: {metric} of {model}/{attribute} is back at its "
                    f"baseline: the last {n} values average {fmt(mean)} (baseline "
                    f"{fmt(tracker.baseline)}; the last, {fmt(value)}, of the cohort "
                    f"predicted {cohort.describe()})",
                    "description": f"no worsening trend for {quiet} values (one per {every}) "
                    f"and the mean of the last {n} is within two standard errors of the "
                    "baseline, or better",
                    "cohort": cohort.describe(),
                    "cohort_start": iso_utc(cohort.since),
                    "cohort_end": iso_utc(t_end),
                    "runbook_url": "docs/runbook.md#fairnessdrift",
                }
                | _pair(r, disp)
                if recovered
                else {}
            )
            t = book.observe(
                name="FairnessDrift",
                labels=labels,
                breached=False,
                recovered=recovered,
                at=at,
                for_=0,
                value=mean if recovered else value,  # what resolved it, as the notes say
                annotations=notes,
            )
        if t is not None:
            out.append(t)
    return out


def _pair(r: AttributeResult, disp: Disparity) -> dict[str, str]:
    """The pair a value compares (low, then high or reference), as the window rules' pages
    name it (a review: with three or more groups a drift page did not say which pair)."""
    lo, hi = disp.low_group, disp.high_group
    if lo is None or hi is None:
        return {}
    return {"group": r.labels[lo], "reference_group": r.labels[hi]}
