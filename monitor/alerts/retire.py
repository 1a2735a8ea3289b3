"""Alerts restored from a checkpoint that the configuration no longer raises.

After a rule is removed or renamed, its severity changed, a window or attribute dropped, or
drift or the evidence detectors switched off, a restored firing alert would never be judged
again: it stayed firing forever (re-posted to Alertmanager every interval, on the status page
and in ``fairness_alerts_active``), and a severity change paged a second time under the new
labels. Such alerts are resolved at the first evaluation after the restore (at the model's
last judged boundary), with a summary that says why; pending ones are dropped (they never
paged). A drift or evidence alert whose severity changed is raised again under the new one: its
detector, restored firing, would never fire again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

from monitor.alerts.evidence_alerts import ALERTS as EVIDENCE_ALERTS
from monitor.alerts.lifecycle import AlertBook, Transition
from monitor.config.durations import iso_utc
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


AGAIN = "raised again under severity "  # the summary of an alert raised under a new severity


def moved_severity(config: Config, labels: Mapping[str, str]) -> dict[str, str] | None:
    """The labels under which ``config`` raises a FairnessDrift or evidence alert that differs
    from ``labels`` only by its severity (else ``None``). Their detectors keep their state
    across a restart: a firing one never fires again, so the alert is raised anew under the
    new severity rather than resolved (a fixed-window rule judges afresh and pages itself)."""
    name, alerts = labels.get("alertname"), config.alerts
    if name == DRIFT_ALERT and alerts.drift.enabled:
        severity = alerts.drift.severity
    elif name in EVIDENCE_ALERTS and alerts.evidence.enabled:
        severity = alerts.evidence.severity
    else:
        return None
    moved = {**labels, "severity": severity}
    return moved if moved != labels and raised_by(config, moved) else None


def retire(
    book: AlertBook,
    config: Config,
    at: Callable[[str], float | None] = lambda model: None,
    afresh: Collection[str] = (),
) -> list[Transition]:
    """Resolve the book's firing alerts that ``config`` no longer raises (drop pending ones);
    those of a detector whose severity changed are raised again under the new one.
    ``at(model)``: the event time of the restore (the model's last judged boundary);
    ``afresh``: models whose evidence detectors start afresh (``alerts.evidence`` changed
    their layout, or a configured reference group differs from the one they compared with):
    their evidence alerts would stay firing forever, judged by nothing."""
    out: list[Transition] = []
    for key, alert in list(book.active.items()):
        model = alert.labels.get("model", "")
        reset = alert.name in EVIDENCE_ALERTS and model in afresh
        if raised_by(config, alert.labels) and not reset:
            continue
        book.drop(key)
        if alert.state != "firing":
            continue
        when = at(model)
        when = alert.at if when is None else when
        was = alert.annotations.get("summary", "")
        moved = None if reset else moved_severity(config, alert.labels)
        why = (
            "its detectors start afresh after a change of alerts.evidence or of a reference "
            "group: a change from the "
            "old baseline is not seen again; the four-fifths and equalized-odds evidence pages "
            "again if the disparity persists"
            if reset
            else f"its severity is now {moved['severity']}: raised again under it"
            if moved is not None
            else "its rule was removed or changed, or its detector switched off"
        )
        notes = {
            **alert.annotations,
            "summary": f"resolved: the configuration no longer raises this alert ({why}); it "
            f"said: {was}",
        }
        resolved = replace(alert, state="resolved", at=when, annotations=notes)
        out.append(Transition(resolved, "firing"))
        if moved is not None:  # the same detection under the new severity: it says so and
            # keeps when it was first detected (it read as a fresh detection: a review)
            first = iso_utc(alert.since)
            core = was.split("): ", 1)[1] if was.startswith(AGAIN) else was  # once, not nested
            again = (
                f"{AGAIN}{moved['severity']} after a configuration change (detected {first}, "
                f"severity {alert.labels.get('severity', '')}): {core}"
            )
            t = book.observe(
                name=alert.name,
                labels=moved,
                breached=True,
                recovered=False,
                at=when,
                for_=0,
                value=alert.value,
                annotations={**alert.annotations, "summary": again},
                since=alert.since,
            )
            if t is not None:
                out.append(t)
    return out
