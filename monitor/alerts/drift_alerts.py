"""FairnessDrift alerts: per (model, attribute set, metric) a river detector over
non-overlapping drift-bucket values (see :mod:`monitor.alerts.drift`)."""

from __future__ import annotations

import math

from monitor.alerts.drift import DriftTracker
from monitor.alerts.lifecycle import AlertBook, Transition
from monitor.alerts.window_rules import _finite, _fmt
from monitor.config.rules import DriftSpec
from monitor.metrics.intervals import z_value
from monitor.metrics.results import AttributeResult


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
) -> list[Transition]:
    """Feed one drift bucket's values to the detectors of one attribute set; FairnessDrift
    fires on a worsening change and resolves after ``min_values`` quiet values."""
    out = []
    # a two-sided interval of the configured confidence spans 2·z standard errors
    z = z_value(confidence)
    for metric in d.metrics:
        key = (model, attribute, metric)
        tracker = trackers.get(key)
        if tracker is None:
            tracker = trackers[key] = DriftTracker(d, metric)
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
            quiet_values[key] = 0
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
            quiet = quiet_values.get(key, 0) + 1
            quiet_values[key] = quiet
            t = book.observe(
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
