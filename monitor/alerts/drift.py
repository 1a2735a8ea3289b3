"""Fairness drift: river change detectors over non-overlapping per-bucket values of a metric.

Why: a feedback loop (biased decisions → biased future data) shows up as a slow, sustained
worsening of a fairness metric long before it crosses a static bound. Each value fed to the
detector is the metric over one drift bucket (e.g. one hour) alone, so values are independent
and a detector's change signal is meaningful.

Noise matters: a group of forty people per hour makes an hourly DIR jump by ±0.2. So the first
``min_values`` values set a baseline mean and standard deviation, and the Page-Hinkley test sees
standardized "badness" z = ±(value − baseline) / sd (``-DIR``, ``+gap``), one-sided
(``mode='up'``), with ``delta`` and ``threshold`` in standard deviations — a CUSUM-style test
whose false-alarm rate does not depend on group size. ADWIN gets the raw values (its Hoeffding
bound accounts for noise) and the direction is checked afterwards.

With the alert comes a trend estimate: the least-squares slope of the recent values and when it
would cross the metric's bound at that slope (the configured rule's, else the registry's: four
fifths for the DIR).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from monitor.config.rules import DriftSpec
from monitor.metrics.registry import METRICS


@dataclass(frozen=True)
class DriftSignal:
    metric: str
    value: float
    baseline: float  # mean before the change
    change: float  # latest value minus baseline (in metric units)
    slope_per_hour: float
    hours_to_bound: float | None
    bound: float  # the bound hours_to_bound counts to


class DriftTracker:
    """One detector for one (model, attribute, metric) series."""

    def __init__(self, spec: DriftSpec, metric: str) -> None:
        self.spec = spec
        self.metric = metric
        self.sign = -1.0 if METRICS[metric].direction == "lower" else 1.0
        self.detector = self._new_detector()
        self.history: deque[tuple[float, float]] = deque(maxlen=48)  # (time, value)
        self.warmup: list[float] = []
        self.warmup_se: list[float] = []
        self.baseline = math.nan
        self.scale = math.nan
        self.seen = 0
        self.fed: list[float] = []  # what the current detector was given (persist.py replays it)

    def _new_detector(self) -> Any:
        from river import drift

        if self.spec.detector == "adwin":
            return drift.ADWIN(delta=self.spec.delta)  # type: ignore[no-untyped-call]
        return drift.PageHinkley(
            min_instances=self.spec.min_values,
            delta=self.spec.delta,
            threshold=self.spec.threshold,
            mode="up",
        )

    def update(
        self, t: float, value: float, se: float = math.nan, bound: float | None = None
    ) -> DriftSignal | None:
        """Feed one bucket value (and its standard error, from its confidence interval);
        return a signal when a worsening change is detected, with the time to ``bound`` (the
        rule that pages on this metric; default the registry's) at the trend's slope."""
        if not math.isfinite(value):
            return None
        if math.isfinite(se) and len(self.warmup) < self.spec.min_values:
            self.warmup_se.append(se)
        self.history.append((t, value))
        self.seen += 1
        if len(self.warmup) < self.spec.min_values:
            self.warmup.append(value)
            if len(self.warmup) == self.spec.min_values:
                self.baseline = float(np.mean(self.warmup))
                # the spread seen in the warmup, but not much less than the sampling error the
                # confidence intervals report (0.7 x, tuned on simulated streams: a dozen
                # values can understate the noise)
                se = float(np.median(self.warmup_se)) if self.warmup_se else 0.0
                self.scale = max(float(np.std(self.warmup, ddof=1)), 0.7 * se, 1e-3)
                for w in self.warmup:  # the detector's own mean starts at the baseline
                    self._feed(w)
            return None
        self._feed(value)
        worse = self.sign * (value - self.baseline) > 0
        if not (self.detector.drift_detected and worse):
            return None
        bound = METRICS[self.metric].default_bound if bound is None else bound
        slope, hours = self._trend(bound=bound)
        self.detector = self._new_detector()  # a new regime starts after a detection
        self.fed = []
        change = value - self.baseline
        return DriftSignal(self.metric, value, self.baseline, change, slope, hours, bound)

    def still_worsening(self) -> bool:
        """Has the metric moved more than one baseline standard deviation for the worse over
        the last 24 values (least-squares trend)? A FairnessDrift alert does not resolve while
        it has: during a long slide the detector goes quiet between detections (it restarts
        after each one), and "resolved" there would be wrong. A flat series passes this ~93%
        of the time (the trend's error over 24 values is ~0.7 standard deviations), so a
        settled metric still resolves soon after ``min_values`` quiet values."""
        pts = list(self.history)[-24:]
        if len(pts) < 3 or not math.isfinite(self.scale):
            return False
        slope, _ = self._trend(len(pts), bound=math.nan)
        span_hours = (pts[-1][0] - pts[0][0]) / 3600.0
        return self.sign * slope * span_hours > self.scale

    def recent_mean(self, n: int) -> float:
        """The mean of the last ``n`` values (NaN with fewer): what :meth:`back_at_baseline`
        judges, and what a resolved notice quotes."""
        pts = [v for _, v in list(self.history)[-n:]]
        return float(np.mean(pts)) if len(pts) >= n else math.nan

    def back_at_baseline(self, n: int) -> bool:
        """Is the mean of the last ``n`` values within two of its standard errors
        (``2·scale/√n``) of the baseline, or better? Only then has a worsening gone away: a
        step change that stays is not recovery, however flat it is now (issue 14: no
        resolution while the change persists)."""
        mean = self.recent_mean(n)
        if not math.isfinite(mean) or not math.isfinite(self.scale):
            return False
        gap = self.sign * (mean - self.baseline)
        return gap <= 2 * self.scale / math.sqrt(n)

    def _feed(self, value: float) -> None:
        if self.spec.detector == "adwin":
            self.detector.update(value)
        else:
            self.detector.update(self.sign * (value - self.baseline) / self.scale)
        self.fed.append(value)

    def _trend(self, n: int = 12, *, bound: float) -> tuple[float, float | None]:
        pts = list(self.history)[-n:]
        if len(pts) < 3:
            return 0.0, None
        t = np.array([p[0] for p in pts]) / 3600.0
        v = np.array([p[1] for p in pts])
        slope = float(np.polyfit(t - t[0], v, 1)[0])
        if slope == 0 or self.sign * slope <= 0:
            return slope, None
        hours = (bound - v[-1]) / slope
        return slope, (float(hours) if hours > 0 else 0.0)
