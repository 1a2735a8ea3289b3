"""Alerts restored from a checkpoint that the configuration no longer raises are resolved once,
saying why; those it still raises stay as they were (found by a review: a rule's severity
changed and the old alert stayed firing forever, re-posted to Alertmanager every interval)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.retire import moved_severity, raised_by
from monitor.config.spec import Config, parse_config
from tests.alerts.streams import alert_config, evaluate_stream, four_fifths_rule

RULE = four_fifths_rule(severity="ticket", significant=False)


def restart_at(
    hour: float, new: Callable[[AlertEvaluator], Config]
) -> tuple[Callable[[AlertEvaluator, int], AlertEvaluator], list[AlertEvaluator]]:
    """A ``drive(..., at_minute=)`` hook that restarts once, at ``hour``: the evaluator's state
    stored and restored into a new one with the configuration ``new(ev)`` gives (it may check
    the old evaluator first); the list holds the restarted evaluator."""
    restarted: list[AlertEvaluator] = []

    def restart(ev: AlertEvaluator, minute: int) -> AlertEvaluator:
        if minute < hour * 60 or restarted:
            return ev
        copy = AlertEvaluator(new(ev), ev.engine)
        persist.restore(copy, persist.dumps(ev))
        restarted.append(copy)
        return copy

    return restart, restarted


def fired() -> tuple[Any, AlertEvaluator]:
    """A DIR of 0.4 for 90 minutes: the four-fifths ticket fires on window 1h."""
    cfg = alert_config(rules=[RULE], drift={"enabled": False}, evidence={"enabled": False})
    engine, ev = evaluate_stream(90, lambda m: 0.2, cfg=cfg, per_min_b=10, seed=3)
    assert [a.labels["severity"] for a in ev.book.firing()] == ["ticket"]
    return engine, ev


@pytest.mark.parametrize(
    ("change", "retired"),
    [
        ({}, False),
        ({"rules": [{**RULE, "severity": "page"}]}, True),
        ({"rules": [{**RULE, "name": "FourFifths"}]}, True),
        ({"rules": [{**RULE, "windows": ["1h"]}]}, False),
        ({"windows": ["2h"], "rules": [RULE]}, True),
    ],
)
def test_a_restored_alert_the_configuration_no_longer_raises_is_resolved_once(
    change: dict[str, Any], retired: bool
) -> None:
    engine, ev = fired()
    text = persist.dumps(ev)
    windows = change.pop("windows", None)
    cfg = alert_config(
        windows=windows,
        **{"rules": [RULE], "drift": {"enabled": False}, "evidence": {"enabled": False}, **change},
    )
    ev2 = AlertEvaluator(cfg, engine)
    persist.restore(ev2, text)
    out = ev2.advance()
    if not retired:
        assert out == [] and len(ev2.book.firing()) == 1
        return
    assert [(t.alert.state, t.alert.labels["severity"]) for t in out] == [("resolved", "ticket")]
    assert out[0].alert.annotations["summary"].startswith("resolved: the configuration no longer")
    assert ev2.book.firing() == [] and ev2.advance() == []  # once


def test_which_alerts_a_configuration_raises() -> None:
    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}, "s": {}}, "windows": ["1h", "6h"]}},
            "alerts": {
                "rules": [{**RULE, "windows": ["6h"], "attributes": ["g"]}],
                "drift": {"metrics": ["disparate_impact_ratio"]},
            },
        }
    )
    base = {"alertname": "FourFifthsRule", "model": "m", "severity": "ticket"}
    assert raised_by(cfg, base | {"window": "6h", "attribute": "g"})
    assert not raised_by(cfg, base | {"window": "1h", "attribute": "g"})  # not its window
    assert not raised_by(cfg, base | {"window": "6h", "attribute": "s"})  # not its attribute
    assert not raised_by(cfg, base | {"window": "6h", "attribute": "g", "model": "other"})
    drift = {"alertname": "FairnessDrift", "model": "m", "attribute": "s", "severity": "ticket"}
    assert raised_by(cfg, drift | {"metric": "disparate_impact_ratio"})
    assert not raised_by(cfg, drift | {"metric": "tpr_gap"})  # a metric no longer watched
    change = {"alertname": "FairnessChange", "model": "m", "attribute": "g", "group": "x"}
    assert raised_by(cfg, change | {"severity": "page"})
    assert not raised_by(cfg, change | {"severity": "ticket"})
    # a stateful detector's alert under another severity: raised again under the configured one
    assert moved_severity(cfg, change | {"severity": "ticket"}) == change | {"severity": "page"}
    moved = moved_severity(cfg, drift | {"metric": "disparate_impact_ratio", "severity": "page"})
    assert moved == drift | {"metric": "disparate_impact_ratio"}
    assert moved_severity(cfg, drift | {"metric": "tpr_gap", "severity": "page"}) is None
    assert moved_severity(cfg, base | {"window": "6h", "attribute": "g", "severity": "x"}) is None


def test_a_firing_evidence_alert_whose_severity_changed_is_raised_again_under_it() -> None:
    """Found by a review: a restored FairnessChange alert whose detector's severity changed
    was resolved ("no longer raised"), while its detector, restored firing, never fired again:
    the problem went on and nothing paged. It is resolved under the old severity and raised
    again under the new one, at the model's last judged boundary (not its firing time)."""
    from tests.alerts.test_evidence import H, config, drive, events, hours

    preds, labs = events(48 * H, lambda m: 0.3 if m >= 24 * H else 0.5, seed=11)

    def critical(ev: AlertEvaluator) -> Config:
        assert [a.labels["severity"] for a in ev.book.firing()] == ["page"]
        return config(severity="critical")

    restart, restarted = restart_at(38, critical)
    ev = drive(preds, labs, cut_minutes=5, at_minute=restart)
    assert restarted  # the restart happened
    moved = [t.alert for t in ev.history if hours(t.alert) >= 38 - 1 / 12]
    (old,) = [a for a in moved if a.state == "resolved"]
    assert (
        old.labels["severity"] == "page"
        and "severity is now critical" in old.annotations["summary"]
    )
    new = [a for a in moved if a.state == "firing" and a.name == old.name]
    assert [a.labels["severity"] for a in new] == ["critical"]
    assert hours(old) == hours(new[0]) > 31  # the restore's time, after the first page
    assert ("critical", old.name) in {(a.labels["severity"], a.name) for a in ev.book.firing()}
    # it is the same detection, and says so: when it was first detected, under what severity
    # (it read as a fresh detection, its since the restart: a review)
    assert new[0].since == old.since < new[0].at
    was = old.annotations["summary"].split("it said: ", 1)[1]
    assert new[0].annotations["summary"].startswith(
        "raised again under severity critical after a configuration change (detected 20"
    ) and new[0].annotations["summary"].endswith(f", severity page): {was}")
    (kept,) = [a for a in ev.book.firing() if a.name == old.name]
    assert kept.since == old.since  # the book keeps it too


def test_firing_evidence_alerts_are_resolved_when_their_detectors_start_afresh() -> None:
    """Found by a review: a restart with another ``alerts.evidence.baseline`` (the detectors'
    layout changed) started them afresh, with no record of what fired, while the book kept the
    FairnessChange alert: it stayed firing forever, judged by nothing, re-posted to
    Alertmanager. It is resolved at the restore, saying why."""
    from tests.alerts.test_evidence import H, config, drive, events

    preds, labs = events(48 * H, lambda m: 0.3 if 24 * H <= m < 40 * H else 0.5, seed=11)

    def longer_baseline(ev: AlertEvaluator) -> Config:
        assert "FairnessChange" in {a.name for a in ev.book.firing()}
        return config(baseline="6d")

    restart, restarted = restart_at(38, longer_baseline)
    ev = drive(preds, labs, cut_minutes=5, at_minute=restart)
    assert restarted  # the restart happened
    resolved = [t.alert for t in ev.history if t.alert.state == "resolved"]
    assert "FairnessChange" in {a.name for a in resolved}
    assert all("start afresh" in a.annotations["summary"] for a in resolved)
    assert "FairnessChange" not in {a.name for a in ev.book.firing()}


def test_evidence_detectors_start_afresh_when_the_reference_group_is_configured_otherwise() -> None:
    """Found by a review: a restart with ``reference_groups`` naming another group restored
    the detectors' old reference, so FairnessChange and FourFifthsEvidence kept paging
    "relative to a" while the window rules compared with b. The detectors start afresh (their
    firing alerts resolved at the restore, saying why) and compare with the configured one."""
    from tests.alerts.test_evidence import H, config, drive, events

    def with_reference(group: str) -> Config:
        cfg = config()
        doc = {
            "models": {
                "credit": {
                    "attributes": {"group": {}},
                    "windows": ["1h"],
                    "bucket": "5m",
                    "lateness": "5m",
                    "reference_groups": {"group": group},
                }
            },
            "alerts": {"rules": [], "drift": {"enabled": False}, "evidence": {}},
        }
        assert cfg.alerts == parse_config(doc).alerts  # only the reference differs
        return parse_config(doc)

    preds, labs = events(48 * H, lambda m: 0.3 if 24 * H <= m < 40 * H else 0.5, seed=11)

    def reference_b(ev: AlertEvaluator) -> Config:
        me = ev.evidence.models[0]
        assert me.labels[0][int(me.refs[0])] == "a"  # the largest group, chosen by volume
        assert "FairnessChange" in {a.name for a in ev.book.firing()}
        new = with_reference("b")
        # the restarted process counts with the new configuration (its engine restored from
        # the checkpoint); here the same engine goes on, with the new model spec
        ev.engine.models[0] = new.models["credit"]
        return new

    restart, restarted = restart_at(38, reference_b)
    ev = drive(preds, labs, cut_minutes=5, at_minute=restart)
    assert restarted  # the restart happened
    resolved = [t.alert for t in ev.history if t.alert.state == "resolved"]
    assert "FairnessChange" in {a.name for a in resolved}
    assert any("or of a reference group" in a.annotations["summary"] for a in resolved)
    me = ev.evidence.models[0]
    assert me.labels[0][int(me.refs[0])] == "b"  # the configured reference, once it is seen


def test_a_second_severity_change_does_not_nest_the_raised_again_summary() -> None:
    """Found by a review: two restarts, each changing FairnessDrift's severity, wrote "raised
    again under severity critical … : raised again under severity page … : <summary>". The
    summary says the latest change once, with the first detection's time and the original
    words."""
    from monitor.alerts.lifecycle import Alert, AlertBook
    from monitor.alerts.retire import retire

    def drift_config(severity: str) -> Any:
        return parse_config(
            {
                "models": {"credit": {"attributes": {"sex": {}}, "windows": ["1h"]}},
                "alerts": {"drift": {"severity": severity}},
            }
        )

    labels = {"alertname": "FairnessDrift", "model": "credit", "attribute": "sex",
              "metric": "disparate_impact_ratio", "severity": "ticket"}  # fmt: skip
    words = "disparate_impact_ratio of credit/sex is drifting worse: 0.959 → 0.700"
    book = AlertBook()
    first = Alert("FairnessDrift", labels, "firing", 100.0, 100.0, 0.7, {"summary": words})
    book.active[first.key] = first
    for severity in ("page", "critical"):
        retire(book, drift_config(severity), lambda model: 7200.0)
    (now,) = book.firing()
    assert now.labels["severity"] == "critical" and now.since == 100.0
    assert now.annotations["summary"] == (
        "raised again under severity critical after a configuration change "
        f"(detected 1970-01-01T00:01:40Z, severity page): {words}"
    )
