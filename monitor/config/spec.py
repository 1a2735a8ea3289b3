"""Configuration: one YAML file plus environment overrides, validated once at start.

Every problem is reported as ``<key path>: <reason>`` (for example
``models.credit.windows[1].length: '1x' is not a duration``) so a bad deployment fails fast
and tells the operator which line to fix. Unknown keys are errors too: a typo in a threshold
must not silently fall back to a default.

One schema: the ``*Doc`` msgspec Structs (this module's :class:`ConfigDoc` and its sections in
``model.py``, ``settings.py``, ``rules.py``, ``webconfig.py``) say what the YAML may hold; they
are decoded with ``msgspec.convert`` (types, unknown keys, choices, integer minimums) and
``check-config --schema`` prints them as a JSON Schema. A resolve pass then does what a type
cannot (durations, multiples of the bucket width, references between keys, secrets read from
the environment or a file, files that must exist) and builds the frozen ``*Spec`` objects the
rest of the monitor reads.

Environment overrides: ``FAIRNESS_MONITOR__<path>`` with ``__`` between keys, the value read
as YAML, e.g. ``FAIRNESS_MONITOR__MODELS__CREDIT__MIN_SAMPLES=50``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from msgspec import Meta
from msgspec import field as key

from monitor.config.cross_checks import (
    check_group_counts,
    check_output_topics,
    check_ring_sizes,
    check_rule_scopes,
    check_serving_topics,
)
from monitor.config.decode import ConfigError as ConfigError
from monitor.config.decode import Doc, convert, sub
from monitor.config.durations import Duration, seconds
from monitor.config.kafka import KafkaDoc, resolve_kafka
from monitor.config.kafka import KafkaSpec as KafkaSpec
from monitor.config.label_settle import check_drift_fits
from monitor.config.model import AttributeSpec as AttributeSpec
from monitor.config.model import FieldMap as FieldMap
from monitor.config.model import FieldsDoc, ModelDoc, resolve_fields, resolve_model
from monitor.config.model import JoinSpec as JoinSpec
from monitor.config.model import ModelSpec as ModelSpec
from monitor.config.model import WindowSpec as WindowSpec
from monitor.config.reference import described_schema
from monitor.config.rules import AlertsDoc, resolve_alerts
from monitor.config.rules import AlertsSpec as AlertsSpec
from monitor.config.settings import (
    CheckpointDoc,
    LimitsDoc,
    ServiceDoc,
    resolve_checkpoint,
    resolve_limits,
    resolve_service,
)
from monitor.config.settings import CheckpointSpec as CheckpointSpec
from monitor.config.settings import LimitsSpec as LimitsSpec
from monitor.config.settings import ServiceSpec as ServiceSpec

ENV_PREFIX = "FAIRNESS_MONITOR__"
MISSING_GROUP = "__missing__"
OTHER_GROUP = "__other__"


@dataclass(frozen=True)
class Config:
    models: Mapping[str, ModelSpec]
    fields: FieldMap = FieldMap()
    unknown_models: Literal["refuse", "default"] = "refuse"
    default_model: str | None = None
    confidence: float = 0.95
    min_timestamp: float = 946684800.0  # 2000-01-01T00:00:00Z
    max_future: int = 300  # see events.py: ahead of the record's Kafka time or the wall clock
    limits: LimitsSpec = LimitsSpec()
    kafka: KafkaSpec = KafkaSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()
    service: ServiceSpec = ServiceSpec()
    alerts: AlertsSpec = AlertsSpec()


class ConfigDoc(Doc, frozen=True):
    """The configuration file of fairness-monitor (the README's "Configuration" section)."""

    models: Annotated[
        dict[str, ModelDoc],
        Meta(
            description="the monitored models by model id", extra_json_schema={"minProperties": 1}
        ),
    ] = key(default_factory=dict)
    fields: FieldsDoc | None = None
    unknown_models: Literal["refuse", "default"] = Config.unknown_models
    default_model: str | None = None
    confidence: Annotated[
        float,
        Meta(
            description="level of the confidence intervals",
            extra_json_schema={"minimum": 0.5, "exclusiveMaximum": 1},
        ),
    ] = Config.confidence
    min_timestamp: Annotated[
        float | str,
        Meta(description="events before this time (epoch seconds or ISO-8601) are invalid"),
    ] = Config.min_timestamp
    max_future: Duration = Config.max_future
    limits: LimitsDoc | None = None
    kafka: KafkaDoc | None = None
    checkpoint: CheckpointDoc | None = None
    service: ServiceDoc | None = None
    alerts: AlertsDoc | None = None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the configuration file (``check-config --schema``), for editors
    and the Helm chart's values schema."""
    schema = described_schema(ConfigDoc)  # with what each key does
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "fairness-monitor configuration",
        **schema,
    }


def _timestamp(raw: float | str, path: str) -> float:
    if isinstance(raw, str):
        try:
            dt = datetime.fromisoformat(raw)
        except ValueError:
            raise ConfigError(path, f"{raw!r} is not an ISO-8601 time") from None
        return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(raw):
        raise ConfigError(path, f"{raw!r} is not a time")
    return float(raw)


def _plain(data: object, path: str = "") -> object:
    """YAML's reading made JSON-like: mapping keys as text (``0:``), times as ISO-8601 text, so
    the schema (and its JSON Schema) speaks of text only. A key YAML read as true, false or
    null (``yes:``, ``no:``, ``on:``, ``~:``) is refused: its text would be ``True``, not what
    was written (``prediction_values: {yes: 1}`` would never match an event's ``"yes"``)."""
    if isinstance(data, Mapping):
        out = {}
        for k, v in data.items():
            if isinstance(k, bool) or k is None:
                written = "null or ~" if k is None else "yes, no, on, off, true or false"
                raise ConfigError(
                    path or "(top level)",
                    f'a key written {written} is read by YAML as {k}: quote it ("yes": 1)',
                )
            out[str(k)] = _plain(v, sub(path, str(k)) if path else str(k))
        return out
    if isinstance(data, list):
        return [_plain(v, sub(path, i)) for i, v in enumerate(data)]
    if isinstance(data, datetime):
        return (data if data.tzinfo else data.replace(tzinfo=UTC)).isoformat()
    if isinstance(data, date):
        return data.isoformat()
    return data


def parse_config(data: object) -> Config:
    """Validate a parsed YAML document and build the frozen :class:`Config`."""
    doc = convert(_plain(data if data is not None else {}), ConfigDoc)
    fields = resolve_fields(doc.fields, "fields")
    if not doc.models:
        raise ConfigError("models", "at least one model must be configured")
    models = {
        name: resolve_model(name, m, f"models.{name}", fields) for name, m in doc.models.items()
    }
    default_model = doc.default_model
    if default_model is not None and default_model not in models:
        raise ConfigError("default_model", f"{default_model!r} is not a configured model")
    if doc.unknown_models == "default" and default_model is None:
        if len(models) != 1:
            raise ConfigError("default_model", "required when unknown_models is 'default'")
        default_model = next(iter(models))
    if not 0.5 <= doc.confidence < 1:
        raise ConfigError("confidence", f"{doc.confidence} must be in [0.5, 1)")
    check_ring_sizes(models)
    check_group_counts(models)
    kafka = resolve_kafka(doc.kafka, "kafka")
    check_serving_topics(kafka, models)
    alerts = resolve_alerts(doc.alerts, "alerts")
    explicit = doc.alerts is not None and doc.alerts.drift is not None
    check_drift_fits(alerts, models, "alerts", explicit=explicit)
    check_rule_scopes(alerts, models)
    checkpoint = resolve_checkpoint(doc.checkpoint, "checkpoint")
    check_output_topics(kafka, alerts, checkpoint)
    if alerts.scope == "global" and checkpoint.store != "kafka":
        raise ConfigError(
            "alerts.scope",
            "global needs checkpoint.store: kafka (the judging replica's state must be where "
            "any replica can take it over)",
        )
    return Config(
        models=models,
        fields=fields,
        unknown_models=doc.unknown_models,
        default_model=default_model,
        confidence=doc.confidence,
        min_timestamp=_timestamp(doc.min_timestamp, "min_timestamp"),
        max_future=seconds(doc.max_future, "max_future"),
        limits=resolve_limits(doc.limits),
        kafka=kafka,
        checkpoint=checkpoint,
        service=resolve_service(doc.service, "service"),
        alerts=alerts,
    )


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping: the last one would
    silently win (a second ``models:`` dropping every model of the first)."""


def _unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # << merges: the keys written beside it override the merged ones
        k = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(k)
        except TypeError:
            continue  # an unhashable key: YAML's own constructor says so
        if first is not None:
            raise ConfigError(
                "", f"line {line}: key {k!r} is written twice (first on line {first})"
            )
        seen[k] = line
    return loader.construct_mapping(node, deep=True)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def apply_env_overrides(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Overlay ``FAIRNESS_MONITOR__A__B=value`` variables onto the parsed YAML document.

    Environment names are upper case: each key matches an existing key case aside
    (``__RACE__`` is the file's ``Race``), and a new key is written in lower case."""
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in name[len(ENV_PREFIX) :].split("__") if k]
        if not keys:
            continue
        target, where = data, ""
        for i, k in enumerate(keys):
            same = [have for have in target if str(have).lower() == k]
            if len(same) > 1:
                raise ConfigError(
                    sub(where, k), f"environment override {name} matches keys {same!r}"
                )
            key_ = same[0] if same else k
            where = sub(where, str(key_))
            if i == len(keys) - 1:
                try:
                    target[key_] = yaml.load(raw, Loader=UniqueKeyLoader)
                except yaml.YAMLError as exc:
                    raise ConfigError(where, f"environment override {name}: {exc}") from None
                break
            nxt = target.setdefault(key_, {})
            if not isinstance(nxt, dict):
                raise ConfigError(where, f"environment override {name} crosses a value")
            target = nxt
    return data


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Read, overlay the environment, validate. Raises :class:`ConfigError` on any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"config file {path} is not UTF-8 (byte {exc.start})") from None
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader) or {}  # a safe loader
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{path} is not valid YAML: {exc}") from None
    except ConfigError as exc:
        raise ConfigError("", f"{path}, {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("", f"{path} must contain a mapping at the top level")
    return parse_config(apply_env_overrides(data, os.environ if env is None else env))
