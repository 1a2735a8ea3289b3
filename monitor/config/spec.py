"""Configuration: one YAML file plus environment overrides, validated once at start.

Every problem is reported as ``<key path>: <reason>`` (for example
``models.credit.windows[1].length: '1x' is not a duration``) so a bad deployment fails fast
and tells the operator which line to fix. Unknown keys are errors too: a typo in a threshold
must not silently fall back to a default.

Environment overrides: ``FAIRNESS_MONITOR__<path>`` with ``__`` between keys, the value read
as YAML, e.g. ``FAIRNESS_MONITOR__MODELS__CREDIT__MIN_SAMPLES=50``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

import yaml

from monitor.config.durations import format_duration
from monitor.config.node import ConfigError as ConfigError
from monitor.config.node import _Node
from monitor.config.rules import AlertsSpec, parse_alerts
from monitor.config.settings import (
    CheckpointSpec,
    KafkaSpec,
    LimitsSpec,
    ServiceSpec,
    parse_checkpoint,
    parse_kafka,
    parse_limits,
    parse_service,
)

ENV_PREFIX = "FAIRNESS_MONITOR__"
MISSING_GROUP = "__missing__"
OTHER_GROUP = "__other__"


@dataclass(frozen=True)
class AttributeSpec:
    """A protected attribute: categorical, or numeric bucketed by ``bins`` edges."""

    name: str
    path: tuple[str, ...]
    bins: tuple[float, ...] | None = None
    max_groups: int = 50


@dataclass(frozen=True)
class WindowSpec:
    """A sliding window of ``length`` seconds ending ``lag`` seconds before now."""

    name: str
    length: int
    lag: int = 0


@dataclass(frozen=True)
class JoinSpec:
    """Bounds of the delayed-label join (see ``join.py``)."""

    ttl: int = 30 * 86400
    max_pending: int = 2_000_000
    early_label_grace: int = 3600
    max_early_labels: int = 200_000


@dataclass(frozen=True)
class ModelSpec:
    name: str
    attributes: tuple[AttributeSpec, ...]
    intersections: tuple[tuple[str, ...], ...] = ()
    favourable: int = 1
    threshold: float | None = None
    prediction_values: Mapping[str, int] = field(default_factory=dict)
    label_values: Mapping[str, int] = field(default_factory=dict)
    windows: tuple[WindowSpec, ...] = (WindowSpec("1h", 3600),)
    bucket: int = 60
    lateness: int = 3600
    min_samples: int = 30
    max_intersection_groups: int = 200
    score_bins: int = 10
    label_time: Literal["prediction", "arrival"] = "prediction"
    reference_groups: Mapping[str, str] = field(default_factory=dict)
    join: JoinSpec = JoinSpec()

    @property
    def attribute_sets(self) -> tuple[tuple[str, ...], ...]:
        """Single attributes first, then intersections, in configuration order."""
        return tuple((a.name,) for a in self.attributes) + self.intersections

    @property
    def ring_buckets(self) -> int:
        """Buckets the ring must hold: the longest window (with its lag) plus lateness."""
        span = max(w.length + w.lag for w in self.windows) + self.lateness
        return span // self.bucket + 1


@dataclass(frozen=True)
class FieldMap:
    """Where each field lives in an event (dotted paths)."""

    prediction_id: tuple[str, ...] = ("prediction_id",)
    model_id: tuple[str, ...] = ("model_id",)
    timestamp: tuple[str, ...] = ("timestamp",)
    prediction: tuple[str, ...] = ("prediction",)
    score: tuple[str, ...] = ("score",)
    label: tuple[str, ...] = ("label",)
    attributes: tuple[str, ...] = ("attributes",)


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


def _value_map(node: _Node, key: str) -> dict[str, int]:
    raw = node.get(key, {}) or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(node.sub(key), "expected a mapping of value -> 0 or 1")
    out: dict[str, int] = {}
    for k, v in raw.items():
        if v not in (0, 1) or isinstance(v, bool):
            raise ConfigError(f"{node.sub(key)}.{k}", f"{v!r} must be 0 or 1")
        out[str(k)] = int(v)
    return out


def _window(raw: object, path: str, bucket: int) -> WindowSpec:
    if isinstance(raw, str | int) and not isinstance(raw, bool):
        raw = {"length": raw}
    node = _Node(raw, path)
    length = node.duration("length", 0, positive=True)
    lag = node.duration("lag", 0)
    for key, value in (("length", length), ("lag", lag)):
        if value % bucket:
            raise ConfigError(
                node.sub(key),
                f"{format_duration(value)} is not a multiple of the bucket width "
                f"{format_duration(bucket)}",
            )
    default_name = format_duration(length) + (f"_lag{format_duration(lag)}" if lag else "")
    name = node.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ConfigError(node.sub("name"), f"{name!r} is not a window name")
    node.finish()
    return WindowSpec(name=name, length=length, lag=lag)


def _attribute(name: str, raw: object, path: str, fields: FieldMap) -> AttributeSpec:
    node = _Node(raw or {}, path)
    bins_raw = node.get("bins")
    bins: tuple[float, ...] | None = None
    if bins_raw is not None:
        if not isinstance(bins_raw, list) or not bins_raw:
            raise ConfigError(node.sub("bins"), "expected a non-empty list of bin edges")
        if any(isinstance(b, bool) or not isinstance(b, int | float) for b in bins_raw):
            raise ConfigError(node.sub("bins"), f"{bins_raw!r} must be numbers")
        if sorted(set(bins_raw)) != list(bins_raw):
            raise ConfigError(node.sub("bins"), f"{bins_raw!r} must be strictly increasing")
        bins = tuple(float(b) for b in bins_raw)
    default_path = ".".join((*fields.attributes, name))
    spec = AttributeSpec(
        name=name,
        path=node.path_value("field", default_path),
        bins=bins,
        max_groups=node.integer("max_groups", 50, minimum=1),
    )
    node.finish()
    return spec


def _model(name: str, raw: object, path: str, fields: FieldMap) -> ModelSpec:
    node = _Node(raw, path)
    attrs_node = node.node("attributes")
    if not attrs_node.data:
        raise ConfigError(attrs_node.path, "at least one protected attribute is required")
    attributes = tuple(
        _attribute(str(a), attrs_node.get(a), attrs_node.sub(str(a)), fields)
        for a in attrs_node.data
    )
    names = {a.name for a in attributes}
    inters_raw = node.get("intersections", []) or []
    if not isinstance(inters_raw, list):
        raise ConfigError(node.sub("intersections"), "expected a list of attribute lists")
    intersections = []
    for i, combo in enumerate(inters_raw):
        p = f"{node.sub('intersections')}[{i}]"
        if not isinstance(combo, list) or len(combo) < 2:
            raise ConfigError(p, "an intersection lists two or more attributes")
        for a in combo:
            if a not in names:
                raise ConfigError(p, f"{a!r} is not one of the model's attributes")
        intersections.append(tuple(str(a) for a in combo))
    bucket = node.duration("bucket", 60, positive=True)
    windows_raw = node.get("windows", ["1h"])
    if not isinstance(windows_raw, list) or not windows_raw:
        raise ConfigError(node.sub("windows"), "expected a non-empty list of windows")
    windows = tuple(
        _window(w, f"{node.sub('windows')}[{i}]", bucket) for i, w in enumerate(windows_raw)
    )
    if len({w.name for w in windows}) != len(windows):
        raise ConfigError(node.sub("windows"), "window names must be unique")
    fav = node.get("favourable", 1)
    if fav not in (0, 1) or isinstance(fav, bool):
        raise ConfigError(
            node.sub("favourable"),
            f"{fav!r} must be 0 or 1 (the favourable "
            "prediction value, e.g. 0 when 1 means 'predicted default')",
        )
    threshold = node.number("threshold", None)
    refs = node.get("reference_groups", {}) or {}
    if not isinstance(refs, Mapping):
        raise ConfigError(node.sub("reference_groups"), "expected a mapping attribute -> group")
    set_names = {"&".join(s) for s in ((a.name,) for a in attributes)} | {
        "&".join(s) for s in intersections
    }
    for k in refs:
        if k not in set_names:
            raise ConfigError(f"{node.sub('reference_groups')}.{k}", "unknown attribute")
    join = node.node("join")
    join_spec = JoinSpec(
        ttl=join.duration("ttl", JoinSpec.ttl, positive=True),
        max_pending=join.integer("max_pending", JoinSpec.max_pending, minimum=1),
        early_label_grace=join.duration("early_label_grace", JoinSpec.early_label_grace),
        max_early_labels=join.integer("max_early_labels", JoinSpec.max_early_labels, minimum=0),
    )
    join.finish()
    lateness = node.duration("lateness", 3600)
    spec = ModelSpec(
        name=name,
        attributes=attributes,
        intersections=tuple(intersections),
        favourable=int(fav),
        threshold=threshold,
        prediction_values=_value_map(node, "prediction_values"),
        label_values=_value_map(node, "label_values"),
        windows=windows,
        bucket=bucket,
        lateness=lateness - lateness % bucket,
        min_samples=node.integer("min_samples", 30),
        max_intersection_groups=node.integer("max_intersection_groups", 200, minimum=1),
        score_bins=node.integer("score_bins", 10, minimum=1),
        label_time=node.choice("label_time", "prediction", ("prediction", "arrival")),  # type: ignore[arg-type]
        reference_groups={str(k): str(v) for k, v in refs.items()},
        join=join_spec,
    )
    node.finish()
    return spec


def _timestamp(node: _Node, key: str, default: float) -> float:
    raw = node.get(key, default)
    if isinstance(raw, datetime):
        return (raw if raw.tzinfo else raw.replace(tzinfo=UTC)).timestamp()
    if isinstance(raw, date):
        return datetime(raw.year, raw.month, raw.day, tzinfo=UTC).timestamp()
    if isinstance(raw, str):
        try:
            dt = datetime.fromisoformat(raw)
        except ValueError:
            raise ConfigError(node.sub(key), f"{raw!r} is not an ISO-8601 time") from None
        return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ConfigError(node.sub(key), f"{raw!r} is not a time")
    return float(raw)


def parse_config(data: object) -> Config:
    """Validate a parsed YAML document and build the frozen :class:`Config`."""
    root = _Node(data if data is not None else {}, "")
    fnode = root.node("fields")
    d = FieldMap()
    fields = FieldMap(
        **{k: fnode.path_value(k, ".".join(getattr(d, k))) for k in d.__dataclass_fields__}
    )
    fnode.finish()
    models_node = root.node("models")
    if not models_node.data:
        raise ConfigError("models", "at least one model must be configured")
    models = {
        str(m): _model(str(m), models_node.get(m), models_node.sub(str(m)), fields)
        for m in models_node.data
    }
    unknown = root.choice("unknown_models", "refuse", ("refuse", "default"))
    default_model = root.get("default_model")
    if default_model is not None and default_model not in models:
        raise ConfigError("default_model", f"{default_model!r} is not a configured model")
    if unknown == "default" and default_model is None:
        if len(models) != 1:
            raise ConfigError("default_model", "required when unknown_models is 'default'")
        default_model = next(iter(models))
    confidence = root.number("confidence", 0.95)
    assert confidence is not None
    if not 0.5 <= confidence < 1:
        raise ConfigError("confidence", f"{confidence} must be in [0.5, 1)")
    min_ts = _timestamp(root, "min_timestamp", 946684800.0)
    cfg = Config(
        models=models,
        fields=fields,
        unknown_models=unknown,  # type: ignore[arg-type]
        default_model=default_model,
        confidence=confidence,
        min_timestamp=min_ts,
        max_future=root.duration("max_future", Config.max_future),
        limits=parse_limits(root.node("limits")),
        kafka=parse_kafka(root.node("kafka")),
        checkpoint=parse_checkpoint(root.node("checkpoint")),
        service=parse_service(root.node("service")),
        alerts=parse_alerts(root.node("alerts")),
    )
    root.finish()
    return cfg


def apply_env_overrides(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Overlay ``FAIRNESS_MONITOR__A__B=value`` variables onto the parsed YAML document."""
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in name[len(ENV_PREFIX) :].split("__") if k]
        if not keys:
            continue
        target = data
        for k in keys[:-1]:
            nxt = target.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise ConfigError(".".join(keys), f"environment override {name} crosses a value")
            target = nxt
        try:
            target[keys[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise ConfigError(".".join(keys), f"environment override {name}: {exc}") from None
    return data


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Read, overlay the environment, validate. Raises :class:`ConfigError` on any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("", f"{path} must contain a mapping at the top level")
    return parse_config(apply_env_overrides(data, os.environ if env is None else env))
