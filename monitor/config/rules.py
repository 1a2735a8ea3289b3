"""Alert rules are configuration, not code.

A rule names a disparity metric of the report (``disparate_impact_ratio``,
``equalized_odds_difference``, ``tpr_gap``, …), a comparator and a bound, and how sure we must
be before paging: minimum samples per compared group, optionally *significance* (the whole
confidence interval beyond the bound, e.g. the upper limit of the DIR below 0.8), a ``for``
duration, and a hysteresis margin for resolving (an alert that flaps pages twice). A significant
rule resolves on the interval too (its near limit back past the bound), never on missing data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Literal, get_args
from urllib.parse import urlsplit

from msgspec import Meta
from msgspec import field as key

from monitor.config.decode import ConfigError, Doc, finite, sub
from monitor.config.durations import Duration, seconds
from monitor.config.evidence import (
    BudgetDoc,
    BudgetSpec,
    EvidenceDoc,
    EvidenceSpec,
    resolve_budget,
    resolve_evidence,
)

Metric = Literal[
    "disparate_impact_ratio",
    "statistical_parity_difference",
    "tpr_gap",
    "fpr_gap",
    "ppv_gap",
    "equalized_odds_difference",
    "equal_opportunity_difference",
    "predictive_parity_difference",
    "score_ks_distance",
    "score_wasserstein_distance",
]
Detector = Literal["page-hinkley", "adwin"]
METRICS: tuple[str, ...] = get_args(Metric)
DETECTORS: tuple[str, ...] = get_args(Detector)


@dataclass(frozen=True)
class AlertRule:
    name: str
    metric: Metric
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

    def applies(self, window: str, attribute: str) -> bool:
        """Whether the rule judges this window and attribute set (its lists, empty: all)."""
        return (not self.windows or window in self.windows) and (
            not self.attributes or attribute in self.attributes
        )

    def breached(self, value: float, lower: float, upper: float) -> bool:
        """Is the condition met? With significance, the whole interval must be beyond."""
        return self.point_past((upper if self.op == "<" else lower) if self.significant else value)

    def point_past(self, value: float) -> bool:
        """Is ``value`` beyond the bound, whatever the significance? NaN (no data): never."""
        return value < self.bound if self.op == "<" else value > self.bound

    def recovered(self, value: float, lower: float = math.nan, upper: float = math.nan) -> bool:
        """Is there evidence of recovery? The point estimate must be back past the bound by the
        hysteresis margin and, for a ``significant`` rule, the interval's near limit past the
        bound too (the symmetric test: it fired on the interval, it resolves on it). NaN (no
        data, too few samples) is no evidence: the caller keeps the alert as it was."""
        near = (lower if self.op == "<" else upper) if self.significant else value
        if value != value or near != near:
            return False
        # rounded: 0.8 + 0.02 is 0.8200000000000001 in binary, and a user who wrote those
        # two numbers expects a ratio of 0.82 to resolve
        if self.op == "<":
            return value >= round(self.bound + self.hysteresis, 12) and near >= self.bound
        return value <= round(self.bound - self.hysteresis, 12) and near <= self.bound


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
    metrics: tuple[Metric, ...] = ("disparate_impact_ratio", "tpr_gap", "fpr_gap")
    bucket: int = 3600  # seconds per value fed to the detector (non-overlapping)
    min_samples: int = 30
    threshold: float = 8.0  # Page-Hinkley lambda, in baseline standard deviations
    delta: float = 0.5  # Page-Hinkley tolerance per value, in baseline standard deviations
    min_values: int = 12  # values that set the baseline before detection starts
    severity: str = "ticket"
    # label-based metrics: how long after a cohort's predictions its labels are complete
    # enough (None: per model, its largest window lag; see config/label_settle.py)
    label_settle: int | None = None


@dataclass(frozen=True)
class SinkSpec:
    alertmanager_url: str | None = None
    webhook_url: str | None = None
    kafka_topic: str | None = None
    log: bool = True
    resend_interval: int = 60  # Alertmanager re-post period; failed pages retried within it
    timeout: float = 5.0  # seconds for a whole request
    max_retries: int = 5  # failures in a row before a second error line


@dataclass(frozen=True)
class AlertsSpec:
    rules: tuple[AlertRule, ...] = DEFAULT_RULES
    drift: DriftSpec = field(default_factory=DriftSpec)
    sinks: SinkSpec = field(default_factory=SinkSpec)
    false_page_budget: BudgetSpec = field(default_factory=BudgetSpec)
    evidence: EvidenceSpec = field(default_factory=EvidenceSpec)
    # local: each replica judges its own partitions; global: every partition's partials, one
    # replica delivering (alerts/global_view.py, app/global_alerts.py)
    scope: Literal["local", "global"] = "local"
    partials_topic: str = "fairness-monitor-partials"


IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"
Names = Annotated[list[str], Meta(description="empty or absent: all")]


class RuleDoc(Doc, frozen=True):
    """An alert rule: a disparity metric beyond a bound, for a while."""

    name: Annotated[
        str, Meta(description="the alert name", extra_json_schema={"pattern": IDENTIFIER})
    ]
    metric: Metric
    bound: float
    op: Literal["<", ">"] = "<"
    min_samples: Annotated[int, Meta(ge=0)] = AlertRule.min_samples
    significant: Annotated[
        bool, Meta(description="the whole confidence interval must be beyond the bound")
    ] = AlertRule.significant
    for_: Duration = key(name="for", default=AlertRule.for_)
    hysteresis: float = AlertRule.hysteresis
    severity: str = AlertRule.severity
    runbook_url: str = AlertRule.runbook_url
    windows: Names | None = None
    attributes: Names | None = None


class DriftDoc(Doc, frozen=True):
    """Fairness-drift detection per (model, attribute set, metric)."""

    enabled: bool = DriftSpec.enabled
    detector: Detector = DriftSpec.detector
    metrics: list[Metric] = key(default_factory=lambda: list(DriftSpec.metrics))
    bucket: Duration = DriftSpec.bucket
    min_samples: Annotated[int, Meta(ge=0)] = DriftSpec.min_samples
    threshold: float = DriftSpec.threshold
    delta: float = DriftSpec.delta
    min_values: Annotated[int, Meta(ge=2)] = DriftSpec.min_values
    severity: str = DriftSpec.severity
    label_settle: (
        Annotated[
            Duration,
            Meta(
                description="how long labels take to be complete enough: TPR/FPR drift reads "
                "the cohort predicted one drift bucket before that (absent: the model's "
                "largest window lag)"
            ),
        ]
        | None
    ) = None


Url = Annotated[str, Meta(extra_json_schema={"pattern": "^https?://"})]


class SinkDoc(Doc, frozen=True):
    """Where alerts go: Alertmanager, a webhook, a Kafka topic, the log."""

    alertmanager_url: Url | None = None
    webhook_url: Url | None = None
    kafka_topic: str | None = None
    log: bool = SinkSpec.log
    resend_interval: Duration = SinkSpec.resend_interval
    timeout: float = SinkSpec.timeout
    max_retries: Annotated[int, Meta(ge=0)] = SinkSpec.max_retries


class AlertsDoc(Doc, frozen=True):
    """Alert rules (absent: the defaults), drift detection, sinks, the false-page budget and
    the evidence detectors."""

    rules: list[RuleDoc] | None = None
    drift: DriftDoc | None = None
    sinks: SinkDoc | None = None
    false_page_budget: BudgetDoc | None = None
    evidence: EvidenceDoc | None = None
    scope: Annotated[
        Literal["local", "global"],
        Meta(
            description="local: each replica judges the partitions it owns; global: every "
            "replica publishes its partitions' partials to partials_topic and one (the owner "
            "of that topic's partition in the group <group_id>.alerts) judges and delivers "
            "over all of them (needs checkpoint.store: kafka)"
        ),
    ] = "local"
    partials_topic: Annotated[
        str, Meta(min_length=1, description="the partials topic of alerts.scope: global")
    ] = AlertsSpec.partials_topic


def _rule(doc: RuleDoc, path: str) -> AlertRule:
    if not doc.name.isidentifier():
        raise ConfigError(sub(path, "name"), f"{doc.name!r} must be an identifier (AlertName)")
    return AlertRule(
        name=doc.name,
        metric=doc.metric,
        op=doc.op,
        bound=finite(doc.bound, sub(path, "bound")),
        min_samples=doc.min_samples,
        significant=doc.significant,
        for_=seconds(doc.for_, sub(path, "for")),
        hysteresis=_not_negative(doc.hysteresis, sub(path, "hysteresis")),
        severity=doc.severity,
        runbook_url=doc.runbook_url,
        windows=tuple(doc.windows or ()),
        attributes=tuple(doc.attributes or ()),
    )


def resolve_alerts(doc: AlertsDoc | None, path: str) -> AlertsSpec:
    doc = doc or AlertsDoc()
    rules: tuple[AlertRule, ...] = DEFAULT_RULES
    if doc.rules is not None:
        rpath = sub(path, "rules")
        rules = tuple(_rule(r, sub(rpath, i)) for i, r in enumerate(doc.rules))
        if len({r.name for r in rules}) != len(rules):
            raise ConfigError(rpath, "rule names must be unique")
    d, dpath = doc.drift or DriftDoc(), sub(path, "drift")
    drift = DriftSpec(
        enabled=d.enabled,
        detector=d.detector,
        metrics=tuple(d.metrics),
        bucket=seconds(d.bucket, sub(dpath, "bucket"), positive=True),
        min_samples=d.min_samples,
        threshold=_positive(d.threshold, sub(dpath, "threshold")),
        delta=_positive(d.delta, sub(dpath, "delta")),
        min_values=d.min_values,
        severity=d.severity,
        label_settle=(
            None if d.label_settle is None else seconds(d.label_settle, sub(dpath, "label_settle"))
        ),
    )
    if drift.detector == "adwin" and drift.delta >= 1:
        raise ConfigError(sub(dpath, "delta"), f"{d.delta!r}: ADWIN's confidence is below 1")
    s, spath = doc.sinks or SinkDoc(), sub(path, "sinks")
    sinks = SinkSpec(
        alertmanager_url=_url(s.alertmanager_url, sub(spath, "alertmanager_url")),
        webhook_url=_url(s.webhook_url, sub(spath, "webhook_url")),
        kafka_topic=s.kafka_topic,
        log=s.log,
        resend_interval=seconds(s.resend_interval, sub(spath, "resend_interval"), positive=True),
        timeout=_positive(s.timeout, sub(spath, "timeout")),
        max_retries=s.max_retries,
    )
    return AlertsSpec(
        rules=rules,
        drift=drift,
        sinks=sinks,
        false_page_budget=resolve_budget(doc.false_page_budget, sub(path, "false_page_budget")),
        evidence=resolve_evidence(doc.evidence, sub(path, "evidence")),
        scope=doc.scope,
        partials_topic=doc.partials_topic,
    )


def _not_negative(raw: float, path: str) -> float:
    value = finite(raw, path)
    if value < 0:
        raise ConfigError(path, f"{raw!r} is negative")
    return value


def _positive(raw: float, path: str) -> float:
    value = finite(raw, path)
    if value <= 0:
        raise ConfigError(path, f"{raw!r} must be more than zero")
    return value


def _url(raw: str | None, path: str) -> str | None:
    if raw is None:
        return None
    if not raw.startswith(("http://", "https://")):
        raise ConfigError(path, f"{raw!r} is not an http(s) URL")
    if "@" in urlsplit(raw).netloc:  # user:password@host: never sent (urllib reads it as the
        # host), every delivery failed, and the password was logged with each failure
        raise ConfigError(path, "credentials in the URL are not supported (they are not sent)")
    return raw.rstrip("/")
