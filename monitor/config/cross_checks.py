"""Checks between sections of the configuration, once each section is resolved: what one
section names must exist in another (a rule's windows in the models), and the topics read and
written must fit together (one format per topic, no output topic that is also an input)."""

from __future__ import annotations

from collections.abc import Mapping

from monitor.config.decode import ConfigError
from monitor.config.durations import format_duration
from monitor.config.kafka import KafkaSpec
from monitor.config.model import ModelSpec
from monitor.config.rules import AlertsSpec
from monitor.config.serving import topic_format
from monitor.config.settings import CheckpointSpec

# buckets a model's ring may hold (its longest window, lag and lateness over its bucket): the
# counts are kept per bucket, group and partition, so a 1-second bucket over a year is refused
MAX_RING_BUCKETS = 100_000
# groups a model may have over all its attribute sets (with each set's __missing__ and
# __other__): the label join stores a pending decision's group indices as int16
MAX_MODEL_GROUPS = 32_767

# formats whose requests do not name their model: one model per monitor reads them
ONE_MODEL = {
    "oip-json": "bare Open Inference Protocol requests do not name their model (it is in the "
    "URL): one model per monitor reads oip-json; use kserve-cloudevents (which names the "
    "InferenceService) or a monitor per model",
    "seldon": "Seldon Core 2 writes each model's requests to a topic of its own "
    "(seldon.<namespace>.model.<model>.inputs): one model per monitor reads it",
}


def _check_attributes_topic(kafka: KafkaSpec, models: Mapping[str, ModelSpec]) -> None:
    """The attributes topic is read exactly when some model takes its attributes from it."""
    stream = [n for n, m in models.items() if m.serving is not None and m.serving.stream]
    if stream and not kafka.attributes_topic:
        raise ConfigError(
            "kafka.attributes_topic",
            f"required: models.{stream[0]}.input.attributes is 'stream' (attribute events keyed "
            "by decision id come on this topic)",
        )
    if kafka.attributes_topic and not stream:
        raise ConfigError(
            "kafka.attributes_topic",
            "no model reads it: set models.<model>.input.attributes: stream",
        )


def check_rule_scopes(alerts: AlertsSpec, models: Mapping[str, ModelSpec]) -> None:
    """A rule's ``windows`` and ``attributes`` name what some model has: a typo would make the
    rule apply to nothing, and the alert would never fire."""
    windows = sorted({w.name for m in models.values() for w in m.windows})
    sets = sorted({s for m in models.values() for s in m.set_names})
    for i, rule in enumerate(alerts.rules):
        for key_, names, known in (
            ("windows", rule.windows, windows),
            ("attributes", rule.attributes, sets),
        ):
            for j, name in enumerate(names):
                if name not in known:
                    raise ConfigError(
                        f"alerts.rules[{i}].{key_}[{j}]",
                        f"{name!r} is not one of the models' {key_} ({', '.join(known)}): "
                        "the rule would never apply",
                    )


def check_output_topics(kafka: KafkaSpec, alerts: AlertsSpec, checkpoint: CheckpointSpec) -> None:
    """The topics the monitor writes differ from those it reads and from each other: dead
    letters written to an input topic would be read, refused and written again forever."""
    taken = {
        t: f"kafka.{k}"
        for k in ("predictions_topic", "labels_topic", "responses_topic", "attributes_topic")
        if (t := getattr(kafka, k))
    }
    outputs = [
        ("kafka.dead_letter_topic", kafka.dead_letter_topic),
        ("alerts.sinks.kafka_topic", alerts.sinks.kafka_topic),
        ("checkpoint.state_topic", checkpoint.state_topic if checkpoint.store == "kafka" else None),
        ("alerts.partials_topic", alerts.partials_topic if alerts.scope == "global" else None),
    ]
    for where, topic in outputs:
        if not topic:
            continue
        if topic in taken:
            raise ConfigError(where, f"{topic!r} is also {taken[topic]}: the monitor writes here")
        taken[topic] = where


def check_serving_topics(kafka: KafkaSpec, models: Mapping[str, ModelSpec]) -> None:
    """The predictions topic's format (one for all models) and the topics it needs."""
    fmt = topic_format(models)  # one format for the predictions topic
    if fmt == "seldon" and not kafka.responses_topic:
        raise ConfigError(
            "kafka.responses_topic",
            "required with format seldon: Seldon Core 2 writes requests to "
            "seldon.<namespace>.model.<model>.inputs (predictions_topic) and responses to "
            "...outputs (responses_topic)",
        )
    served = [n for n, m in models.items() if m.serving is not None]
    if fmt in ONE_MODEL and len(served) > 1:  # its records would all be dead-lettered
        raise ConfigError(f"models.{served[1]}.input.format", ONE_MODEL[fmt])
    if kafka.responses_topic and fmt == "monitor-json":
        raise ConfigError(
            "kafka.responses_topic",
            "only for a serving stack's requests and responses (models.<model>.input)",
        )
    _check_attributes_topic(kafka, models)


def check_ring_sizes(models: Mapping[str, ModelSpec]) -> None:
    """Each model's ring (allocated per group and partition) within ``MAX_RING_BUCKETS``."""
    for name, m in models.items():
        if m.ring_buckets > MAX_RING_BUCKETS:
            span = m.ring_buckets * m.bucket - m.bucket
            raise ConfigError(
                f"models.{name}.bucket",
                f"{format_duration(m.bucket)} buckets over the longest window and lateness "
                f"({format_duration(span)}) are {m.ring_buckets:,}, over {MAX_RING_BUCKETS:,} "
                "(each group keeps counts per bucket): use a longer bucket or a shorter window",
            )


def check_group_counts(models: Mapping[str, ModelSpec]) -> None:
    """Each model's groups, at their caps, within ``MAX_MODEL_GROUPS`` (past it a label was
    counted in no group, or in another one)."""
    for name, m in models.items():
        caps = [a.max_groups for a in m.attributes]
        caps += [m.max_intersection_groups] * len(m.intersections)
        total = sum(caps) + 2 * len(caps)
        if total > MAX_MODEL_GROUPS:
            raise ConfigError(
                f"models.{name}.attributes",
                f"max_groups over the attributes and intersections allow {total:,} groups, over "
                f"{MAX_MODEL_GROUPS:,} per model: lower max_groups or max_intersection_groups",
            )
