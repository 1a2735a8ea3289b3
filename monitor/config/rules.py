"""Alert rules are configuration, not code.

A rule names a disparity metric of the report (``disparate_impact_ratio``,
``equalized_odds_difference``, ``tpr_gap``, …), a comparator and a bound, and how sure we must
be before paging: minimum samples per compared group, optionally *significance* (the whole
confidence interval beyond the bound, e.g. the upper limit of the DIR below 0.8), a ``for``
duration, and a hysteresis margin for resolving (an alert that flaps pages twice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from monitor.config.node import ConfigError, _Node

METRICS = (
    "disparate_impact_ratio",
    "statistical_parity_difference",
    "tpr_gap",
    "fpr_gap",
    "ppv_gap",
    "equalized_odds_difference",
    "equal_opportunity_difference",
    "predictive_parity_difference",
)
DETECTORS = ("page-hinkley", "adwin")


@dataclass(frozen=True)
class AlertRule:
    name: str
    metric: str
    op: Literal["<", ">"]
    bound: float
    min_samples: int = 30
    significant: bool = False
    for_: int = 600  # seconds of event time the condition must hold
    hysteresis: float = 0.02
    severity: str = "page"
    runbook_url: str = ""
    windows: tuple[str, ...] = ()  # empty: every window
    attributes: tuple[str, ...] = ()  # empty: every attribute set

    def breached(self, value: float, lower: float, upper: float) -> bool:
        """Is the condition met? With significance, the whole interval must be beyond."""
        v = (upper if self.op == "<" else lower) if self.significant else value
        if v != v:  # NaN: insufficient data never fires
            return False
        return v < self.bound if self.op == "<" else v > self.bound

    def recovered(self, value: float) -> bool:
        """Resolve only past the bound by the hysteresis margin (NaN counts as recovered)."""
        if value != value:
            return True
        if self.op == "<":
            return value >= self.bound + self.hysteresis
        return value <= self.bound - self.hysteresis


RUNBOOK = "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md"

DEFAULT_RULES = (
    AlertRule(
        "FourFifthsRule",
        "disparate_impact_ratio",
        "<",
        0.8,
        significant=True,
        runbook_url=f"{RUNBOOK}#fourfifthsrule",
    ),
    AlertRule(
        "EqualizedOddsGap",
        "equalized_odds_difference",
        ">",
        0.1,
        significant=True,
        runbook_url=f"{RUNBOOK}#equalizedoddsgap",
    ),
    AlertRule(
        "TruePositiveRateGap",
        "tpr_gap",
        ">",
        0.1,
        significant=True,
        severity="ticket",
        runbook_url=f"{RUNBOOK}#truepositiverategap",
    ),
    AlertRule(
        "FalsePositiveRateGap",
        "fpr_gap",
        ">",
        0.1,
        significant=True,
        severity="ticket",
        runbook_url=f"{RUNBOOK}#falsepositiverategap",
    ),
)


@dataclass(frozen=True)
class DriftSpec:
    """Fairness-drift detection: a river change detector per (model, attribute, metric)."""

    enabled: bool = True
    detector: Literal["page-hinkley", "adwin"] = "page-hinkley"
    metrics: tuple[str, ...] = ("disparate_impact_ratio", "tpr_gap", "fpr_gap")
    bucket: int = 3600  # seconds per value fed to the detector (non-overlapping)
    min_samples: int = 30
    threshold: float = 8.0  # Page-Hinkley lambda, in baseline standard deviations
    delta: float = 0.5  # Page-Hinkley tolerance per value, in baseline standard deviations
    min_values: int = 12  # values that set the baseline before detection starts
    severity: str = "ticket"


@dataclass(frozen=True)
class SinkSpec:
    alertmanager_url: str | None = None
    webhook_url: str | None = None
    kafka_topic: str | None = None
    log: bool = True
    resend_interval: int = 60  # Alertmanager re-post period; failed pages retried within it
    timeout: float = 5.0
    max_retries: int = 5  # failed attempts in a row before a second error line (retries go on)


@dataclass(frozen=True)
class AlertsSpec:
    rules: tuple[AlertRule, ...] = DEFAULT_RULES
    drift: DriftSpec = field(default_factory=DriftSpec)
    sinks: SinkSpec = field(default_factory=SinkSpec)


def _rule(node: _Node) -> AlertRule:
    name = node.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(node.sub("name"), f"{name!r} must be an identifier (AlertName)")
    metric = node.choice("metric", "", METRICS)
    op = node.choice("op", "<", ("<", ">"))
    bound = node.number("bound", None)
    if bound is None:
        raise ConfigError(node.sub("bound"), "a bound is required")
    hysteresis = node.number("hysteresis", 0.02) or 0.0

    def names(key: str) -> tuple[str, ...]:
        raw = node.get(key, []) or []
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise ConfigError(node.sub(key), "expected a list of names")
        return tuple(raw)

    rule = AlertRule(
        name=name,
        metric=metric,
        op=op,  # type: ignore[arg-type]
        bound=bound,
        min_samples=node.integer("min_samples", 30),
        significant=bool(node.get("significant", False)),
        for_=node.duration("for", 600),
        hysteresis=hysteresis,
        severity=str(node.get("severity", "page")),
        runbook_url=str(node.get("runbook_url", "")),
        windows=names("windows"),
        attributes=names("attributes"),
    )
    node.finish()
    return rule


def parse_alerts(node: _Node) -> AlertsSpec:
    rules: tuple[AlertRule, ...] = DEFAULT_RULES
    raw_rules = node.get("rules")
    if raw_rules is not None:
        if not isinstance(raw_rules, list):
            raise ConfigError(node.sub("rules"), "expected a list of rules")
        rules = tuple(_rule(_Node(r, f"{node.sub('rules')}[{i}]")) for i, r in enumerate(raw_rules))
        if len({r.name for r in rules}) != len(rules):
            raise ConfigError(node.sub("rules"), "rule names must be unique")
    d = node.node("drift")
    dd = DriftSpec()
    metrics = d.get("metrics", list(dd.metrics))
    if not isinstance(metrics, list) or any(m not in METRICS for m in metrics):
        raise ConfigError(
            d.sub("metrics"), f"{metrics!r}: each must be one of {', '.join(METRICS)}"
        )
    drift = DriftSpec(
        enabled=bool(d.get("enabled", True)),
        detector=d.choice("detector", dd.detector, DETECTORS),  # type: ignore[arg-type]
        metrics=tuple(metrics),
        bucket=d.duration("bucket", dd.bucket, positive=True),
        min_samples=d.integer("min_samples", dd.min_samples),
        threshold=d.number("threshold", dd.threshold) or dd.threshold,
        delta=d.number("delta", dd.delta) or dd.delta,
        min_values=d.integer("min_values", dd.min_values, minimum=2),
        severity=str(d.get("severity", dd.severity)),
    )
    d.finish()
    s = node.node("sinks")
    sd = SinkSpec()
    sinks = SinkSpec(
        alertmanager_url=_url(s, "alertmanager_url"),
        webhook_url=_url(s, "webhook_url"),
        kafka_topic=s.get("kafka_topic"),
        log=bool(s.get("log", True)),
        resend_interval=s.duration("resend_interval", sd.resend_interval, positive=True),
        timeout=s.number("timeout", sd.timeout) or sd.timeout,
        max_retries=s.integer("max_retries", sd.max_retries),
    )
    s.finish()
    node.finish()
    return AlertsSpec(rules=rules, drift=drift, sinks=sinks)


def _url(node: _Node, key: str) -> str | None:
    raw: Any = node.get(key)
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.startswith(("http://", "https://")):
        raise ConfigError(node.sub(key), f"{raw!r} is not an http(s) URL")
    return raw.rstrip("/")
