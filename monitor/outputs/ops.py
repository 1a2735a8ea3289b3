"""Operational metrics of the service: what the loop did, read from a published snapshot.

The main loop builds an immutable :class:`OpsSnapshot` about once a second and hands it over
with one reference store; a scrape (on an HTTP thread) reads only that snapshot, never the
loop's live objects, so it needs no lock and sees one consistent moment. Alert deliveries are
the exception by nature: the sink threads own those counters, and the collector asks the
dispatcher for them. (The fairness families are rendered by ``exporter.py``.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from monitor.alerts.sinks import SINKS
from monitor.state.engine import DELAY_BOUNDS

# engine counter -> (which topic, outcome label) in fairness_events
_ENGINE_OUTCOMES = (
    ("predictions", "duplicate", "duplicate_predictions"),
    ("predictions", "shared_id", "shared_id_predictions"),  # another model's id
    ("predictions", "late", "late_predictions"),
    ("predictions", "evicted", "evicted_pending"),
    ("predictions", "expired", "expired_pending"),
    ("labels", "duplicate", "duplicate_labels"),
    ("labels", "late", "late_labels"),
    ("labels", "orphan", "orphan_labels"),
    # a serving stack's halves (state/halves.py): repeated, or never met by the other half
    ("predictions", "repeated_request", "repeated_requests"),
    ("predictions", "repeated_response", "repeated_responses"),
    ("predictions", "unanswered_request", "unanswered_requests"),
    ("predictions", "orphan_response", "orphan_responses"),
    # the attributes topic's records (state/attribute_join.py), when it is read
    ("attributes", "repeated", "repeated_attributes"),
    ("attributes", "orphan", "orphan_attributes"),
)


@dataclass(frozen=True)
class GroupBounds:
    """What the size limits did to one (model, attribute): values shortened, folded."""

    model: str
    attribute: str
    shortened: int
    overflow: int
    undeclared: int  # outside declared values (expected: as configured)


@dataclass(frozen=True)
class OpsSnapshot:
    """One moment of the service loop, as exported (immutable; replaced, never changed)."""

    predictions_topic: str
    labels_topic: str
    attributes_topic: str | None = None  # kafka.attributes_topic, when it is read
    outcomes: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (topic, outcome)
    counters: Mapping[str, int] = field(default_factory=dict)  # Engine.counters()
    labels_ahead: int = 0  # Engine.labels_ahead()
    # per model reading the attributes topic: decisions with, without attributes, waiting
    attributes: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    delays: tuple[tuple[int, ...], float] = ((0,) * (len(DELAY_BOUNDS) + 1), 0.0)
    lag: Mapping[tuple[str, int], int] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)  # main-loop time by phase
    firing: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (name, severity)
    evaluation_behind: Mapping[str, float] = field(default_factory=dict)  # model -> seconds
    windows_skipped: Mapping[str, int] = field(default_factory=dict)  # model -> not judged
    partials: Mapping[str, int] | None = None  # alerts.scope: global, by outcome
    groups: tuple[GroupBounds, ...] = ()
    dead_letters: Mapping[str, int] | None = None  # sent/truncated/failed; None: no DLQ topic
    checkpoint_wall: float | None = None  # wall time of the last good checkpoint
    checkpoint_failures: int = 0
    checkpoint_failed_in_row: int = 0
    pause_after: int = 3  # failed writes in a row before consumption pauses (help text)


class Deliveries(Protocol):
    """The dispatcher's delivery counters (kept by its sink threads)."""

    @property
    def failures(self) -> Mapping[str, int]: ...

    def undelivered(self, sink: str, reason: str) -> int: ...


class OpsCollector:
    """A prometheus_client collector over the latest published :class:`OpsSnapshot`."""

    def __init__(
        self, snapshot: Callable[[], OpsSnapshot], deliveries: Callable[[], Deliveries]
    ) -> None:
        self.snapshot = snapshot
        self.deliveries = deliveries

    def collect(self) -> Iterator[Any]:
        s = self.snapshot()
        yield from _consumption(s)
        yield from _alerts(s, self.deliveries())
        yield from _bounds(s)
        yield from _checkpoints(s)


def _consumption(s: OpsSnapshot) -> Iterator[Any]:
    ev = CounterMetricFamily(
        "fairness_events", "Records consumed, by topic and outcome.", labels=["topic", "outcome"]
    )
    for (topic, outcome), n in sorted(s.outcomes.items()):
        ev.add_metric([topic, outcome], n)
    topics = {"predictions": s.predictions_topic, "labels": s.labels_topic}
    if s.attributes_topic:
        topics["attributes"] = s.attributes_topic
    for which, outcome, name in _ENGINE_OUTCOMES:
        if which in topics:
            ev.add_metric([topics[which], outcome], s.counters.get(name, 0))
    yield ev
    if s.attributes_topic:
        yield from _coverage(s.attributes)
    pending = GaugeMetricFamily(
        "fairness_pending_labels",
        "Predictions awaiting their label (held by the join until it arrives or the TTL).",
    )
    pending.add_metric([], s.counters.get("awaiting_label", 0))
    yield pending
    kept = GaugeMetricFamily(
        "fairness_join_labelled_kept",
        "Labelled predictions the join keeps until their TTL, to recognise a repeated "
        "prediction or label.",
    )
    kept.add_metric([], s.counters.get("labelled_kept_until_ttl", 0))
    yield kept
    ahead = GaugeMetricFamily(
        "fairness_label_ledger_entries",
        "Labels counted whose own time is after the last boundary the rules read (kept to "
        "read windows as of each boundary); grows while a partition holds boundaries back.",
    )
    ahead.add_metric([], s.labels_ahead)
    yield ahead
    counts, total = s.delays
    cumulative = np.cumsum(counts).tolist()
    buckets = [(str(b), float(c)) for b, c in zip(DELAY_BOUNDS, cumulative, strict=False)]
    buckets.append(("+Inf", float(cumulative[-1])))
    yield HistogramMetricFamily(
        "fairness_label_delay_seconds",
        "Time from a prediction (the start of its bucket) to its label's arrival.",
        buckets=buckets,
        sum_value=total,
    )
    lag = GaugeMetricFamily(
        "fairness_consumer_lag", "Records behind the partition end.", labels=["topic", "partition"]
    )
    for (topic, part), n in sorted(s.lag.items()):
        lag.add_metric([topic, str(part)], n)
    yield lag
    proc = CounterMetricFamily(
        "fairness_processing_seconds", "Main-loop time by phase.", labels=["phase"]
    )
    for phase, secs in s.seconds.items():
        proc.add_metric([phase], secs)
    yield proc


def _coverage(models: Mapping[str, tuple[int, int, int]]) -> Iterator[Any]:
    """Per model, how many decisions had their protected attributes from the attributes topic:
    those without (none arrived within ``attributes_ttl``) are counted in ``__missing__``
    groups. Per model, so one model's producer failing is not averaged away by another's."""
    decisions = CounterMetricFamily(
        "fairness_attribute_decisions",
        "Decisions of models whose attributes come on the attributes topic, by whether theirs "
        "arrived within attributes_ttl (without: counted in the __missing__ groups).",
        labels=["model", "outcome"],
    )
    waiting = GaugeMetricFamily(
        "fairness_attribute_decisions_waiting",
        "Decisions waiting for their attributes (not counted yet): growing while none are "
        "released, the attributes topic has stopped.",
        labels=["model"],
    )
    coverage = GaugeMetricFamily(
        "fairness_attribute_coverage_ratio",
        "Share of those decisions that had their attributes (NaN before the first).",
        labels=["model"],
    )
    for model, (with_, without, wait) in sorted(models.items()):
        decisions.add_metric([model, "with_attributes"], with_)
        decisions.add_metric([model, "without_attributes"], without)
        waiting.add_metric([model], wait)
        coverage.add_metric([model], with_ / (with_ + without) if with_ + without else math.nan)
    yield decisions
    yield waiting
    yield coverage


def _alerts(s: OpsSnapshot, d: Deliveries) -> Iterator[Any]:
    active = GaugeMetricFamily(
        "fairness_alerts_active",
        "Alerts firing now (alerts.scope: global: on the delivering replica only).",
        labels=["alertname", "severity"],
    )
    for (name, sev), n in sorted(s.firing.items()):
        active.add_metric([name, sev], n)
    yield active
    fails = CounterMetricFamily(
        "fairness_alert_delivery_failures",
        "Failed alert delivery attempts, by sink.",
        labels=["sink"],
    )
    for sink in SINKS:
        fails.add_metric([sink], d.failures[sink])
    yield fails
    lost = CounterMetricFamily(
        "fairness_alert_pages_undelivered",
        "Alert notifications never delivered, by sink and reason: dropped (queue or outbox "
        "full) or given_up (rejected by the receiver).",
        labels=["sink", "reason"],
    )
    for sink in SINKS:
        for reason in ("dropped", "given_up"):
            lost.add_metric([sink, reason], d.undelivered(sink, reason))
    yield lost
    yield _per_model(
        GaugeMetricFamily(
            "fairness_alert_evaluation_behind_seconds",
            "Event time from the last bucket boundary the alert rules judged to the newest "
            "partition's head: grows while boundaries wait for a partition's labels (at most "
            "the model's lateness) or for a partition behind the others.",
            labels=["model"],
        ),
        s.evaluation_behind,
    )
    yield _per_model(
        CounterMetricFamily(
            "fairness_alert_windows_skipped",
            "Windows (and evidence steps) the alert rules did not judge because counts they "
            "held had left the ring before evaluation reached them (it fell behind by more than "
            "the model's lateness): judged, their truncated counts would page on numbers no "
            "window has.",
            labels=["model"],
        ),
        s.windows_skipped,
    )
    if s.partials is not None:
        partials = CounterMetricFamily(
            "fairness_alert_partials",
            "alerts.scope: global: partials this replica sent (sent, send_failed and retried, "
            "too_large: sent without its groups, the partition's counts left out) and read (duplicate; "
            "missing: a boundary judged without a partition's counts; let_go: waited too long, "
            "its windows skipped; unknown_model, not_partial: another configuration's).",
            labels=["outcome"],
        )
        for outcome, n in s.partials.items():
            partials.add_metric([outcome], n)
        yield partials


def _per_model(family: Any, values: Mapping[str, float]) -> Any:
    """``family`` with one sample per model, in model order."""
    for model, value in sorted(values.items()):
        family.add_metric([model], value)
    return family


def _bounds(s: OpsSnapshot) -> Iterator[Any]:
    """What the size limits did: attribute values shortened or folded into ``__other__``,
    dead letters truncated or refused by the broker."""
    shortened = CounterMetricFamily(
        "fairness_group_values_shortened",
        "Attribute values longer than limits.max_value_length, counted under a shortened name.",
        labels=["model", "attribute"],
    )
    overflow = CounterMetricFamily(
        "fairness_group_overflow",
        "Events whose value was a new group past max_groups, counted as __other__: groups the "
        "monitor cannot see (FairnessGroupsOverflowing).",
        labels=["model", "attribute"],
    )
    undeclared = CounterMetricFamily(
        "fairness_group_values_undeclared",
        "Events whose value is not among the attribute's declared values, counted as __other__.",
        labels=["model", "attribute"],
    )
    for g in s.groups:
        shortened.add_metric([g.model, g.attribute], g.shortened)
        overflow.add_metric([g.model, g.attribute], g.overflow)
        undeclared.add_metric([g.model, g.attribute], g.undeclared)
    yield shortened
    yield overflow
    yield undeclared
    if s.dead_letters is not None:
        dead = CounterMetricFamily(
            "fairness_dead_letters",
            "Records written to the dead-letter topic: sent, truncated to fit, refused.",
            labels=["outcome"],
        )
        for outcome in ("sent", "truncated", "failed"):
            dead.add_metric([outcome], s.dead_letters.get(outcome, 0))
        yield dead


def _checkpoints(s: OpsSnapshot) -> Iterator[Any]:
    age = GaugeMetricFamily(
        "fairness_checkpoint_age_seconds",
        "Seconds since the last checkpoint (NaN before the first).",
    )
    wall = s.checkpoint_wall
    age.add_metric([], float("nan") if wall is None else time.time() - wall)
    yield age
    cpf = CounterMetricFamily(
        "fairness_checkpoint_failures",
        "Checkpoint writes that failed (disk full, read-only, I/O); offsets are not "
        "committed past the last good checkpoint.",
    )
    cpf.add_metric([], s.checkpoint_failures)
    yield cpf
    failing = GaugeMetricFamily(
        "fairness_checkpoint_failing",
        "Failed checkpoint writes in a row (0: the last one succeeded); consumption pauses "
        f"at {s.pause_after}.",
    )
    failing.add_metric([], s.checkpoint_failed_in_row)
    yield failing
