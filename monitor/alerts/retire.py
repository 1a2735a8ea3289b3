"""Alerts restored from a checkpoint that the configuration no longer raises.

After a rule is removed or renamed, its severity changed, a window or attribute dropped, or
drift or the evidence detectors switched off, a restored firing alert would never be judged
again: it stayed firing forever (re-posted to Alertmanager every interval, on the status page
and in ``fairness_alerts_active``), and a severity change paged a second time under the new
labels. Such alerts are resolved at the first evaluation after the restore, with a summary
that says why; pending ones are dropped (they never paged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from monitor.alerts.evidence_alerts import ALERTS as EVIDENCE_ALERTS
from monitor.alerts.lifecycle import AlertBook, Transition
from monitor.config.spec import Config

DRIFT_ALERT = "FairnessDrift"


def raised_by(config: Config, labels: Mapping[str, str]) -> bool:
    """Whether some rule or detector of ``config`` raises an alert with these labels."""
    model = config.models.get(labels.get("model", ""))
    if model is None:
        return False
    attribute, window = labels.get("attribute"), labels.get("window")
    if attribute is not None and attribute not in model.set_names:
        return False
    if window is not None and window not in {w.name for w in model.windows}:
        return False
    name, severity, alerts = labels.get("alertname"), labels.get("severity"), config.alerts
    for rule in alerts.rules:
        if rule.name == name and rule.severity == severity and window is not None:
            return rule.applies(window, attribute or "")
    if name == DRIFT_ALERT:
        drift = alerts.drift
        return (
            drift.enabled and drift.severity == severity and labels.get("metric") in drift.metrics
        )
    if name in EVIDENCE_ALERTS:
        return alerts.evidence.enabled and alerts.evidence.severity == severity
    return False


def retire(book: AlertBook, config: Config) -> list[Transition]:
    """Resolve the book's firing alerts that ``config`` no longer raises (drop pending ones)."""
    out: list[Transition] = []
    for key, alert in list(book.active.items()):
        if raised_by(config, alert.labels):
            continue
        book.drop(key)
        if alert.state != "firing":
            continue
        was = alert.annotations.get("summary", "")
        notes = {
            **alert.annotations,
            "summary": "resolved: the configuration no longer raises this alert (its rule was "
            f"removed or changed, or its detector switched off); it said: {was}",
        }
        out.append(Transition(replace(alert, state="resolved", annotations=notes), "firing"))
    return out
