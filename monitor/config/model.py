"""The ``models`` section: what a model's events look like and how its fairness is measured.

:class:`ModelDoc` and its parts are the schema of the YAML (msgspec Structs: types, unknown
keys, integer minimums are checked when it is decoded); :func:`resolve_model` adds what a type
cannot say (durations, windows that are whole buckets, intersections and reference groups that
name the model's attributes) and builds the frozen :class:`ModelSpec` the engine reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from msgspec import Meta
from msgspec import field as key

from monitor.config.decode import ConfigError, Doc, sub
from monitor.config.durations import Duration, format_duration, seconds
from monitor.config.serving import TensorMapping, resolve_mapping

FIELD_PATH = r"^[^.]+(\.[^.]+)*$"
FieldPath = Annotated[
    str,
    Meta(
        description="dotted path of the field in an event",
        extra_json_schema={"pattern": FIELD_PATH},
    ),
]


@dataclass(frozen=True)
class AttributeSpec:
    """A protected attribute: categorical, or numeric bucketed by ``bins`` edges."""

    name: str
    path: tuple[str, ...]
    bins: tuple[float, ...] | None = None
    max_groups: int = 50
    # the groups expected (declared): they have their places from the start, and any other
    # value is counted in __other__, so no stream of odd values can take the places first
    values: tuple[str, ...] | None = None


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
    serving: TensorMapping | None = None  # the predictions topic carries a serving stack's

    @property
    def attribute_sets(self) -> tuple[tuple[str, ...], ...]:
        """Single attributes first, then intersections, in configuration order."""
        return tuple((a.name,) for a in self.attributes) + self.intersections

    @property
    def set_names(self) -> tuple[str, ...]:
        """The attribute sets as labels name them (an intersection's parts joined by ``&``)."""
        return tuple("&".join(s) for s in self.attribute_sets)

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


class FieldsDoc(Doc, frozen=True):
    """Where each field lives in an event (dotted paths)."""

    prediction_id: FieldPath = ".".join(FieldMap.prediction_id)
    model_id: FieldPath = ".".join(FieldMap.model_id)
    timestamp: FieldPath = ".".join(FieldMap.timestamp)
    prediction: FieldPath = ".".join(FieldMap.prediction)
    score: FieldPath = ".".join(FieldMap.score)
    label: FieldPath = ".".join(FieldMap.label)
    attributes: FieldPath = ".".join(FieldMap.attributes)


class AttributeDoc(Doc, frozen=True):
    """A protected attribute: categorical, or numeric bucketed by ``bins`` edges."""

    field: FieldPath | None = None
    bins: Annotated[list[int | float], Meta(extra_json_schema={"minItems": 1})] | None = None
    max_groups: Annotated[int, Meta(ge=1)] = AttributeSpec.max_groups
    values: Annotated[list[str], Meta(extra_json_schema={"minItems": 1})] | None = None


class WindowDoc(Doc, frozen=True):
    """A sliding window of ``length`` ending ``lag`` before now (whole buckets)."""

    length: Duration
    lag: Duration = 0
    name: str | None = None


class JoinDoc(Doc, frozen=True):
    """Bounds of the delayed-label join."""

    ttl: Duration = JoinSpec.ttl
    max_pending: Annotated[int, Meta(ge=1)] = JoinSpec.max_pending
    early_label_grace: Duration = JoinSpec.early_label_grace
    max_early_labels: Annotated[int, Meta(ge=0)] = JoinSpec.max_early_labels


ValueMap = Annotated[dict[str, int], Meta(description="event value -> 0 or 1")]


class ModelDoc(Doc, frozen=True):
    """One monitored model: its protected attributes, windows and prediction encoding."""

    attributes: Annotated[
        dict[str, AttributeDoc | None],
        Meta(description="protected attributes", extra_json_schema={"minProperties": 1}),
    ] = key(default_factory=dict)
    intersections: list[list[str]] | None = None
    favourable: Annotated[
        int,
        Meta(description="the favourable prediction value", extra_json_schema={"enum": [0, 1]}),
    ] = ModelSpec.favourable
    threshold: float | None = None
    prediction_values: ValueMap | None = None
    label_values: ValueMap | None = None
    windows: list[Duration | WindowDoc] = key(default_factory=lambda: ["1h"])
    bucket: Duration = ModelSpec.bucket
    lateness: Duration = ModelSpec.lateness
    min_samples: Annotated[int, Meta(ge=0)] = ModelSpec.min_samples
    max_intersection_groups: Annotated[int, Meta(ge=1)] = ModelSpec.max_intersection_groups
    score_bins: Annotated[int, Meta(ge=1, le=1000)] = ModelSpec.score_bins
    label_time: Literal["prediction", "arrival"] = ModelSpec.label_time
    reference_groups: (
        Annotated[dict[str, str | int], Meta(description="attribute set -> reference group")] | None
    ) = None
    join: JoinDoc | None = None
    input: (
        Annotated[
            dict[str, Any],
            Meta(description="a serving stack's tensors: format, score/prediction, attributes"),
        ]
        | None
    ) = None


def field_path(raw: str, path: str) -> tuple[str, ...]:
    """``a.b.c`` -> ``("a", "b", "c")``; empty parts are an error naming ``path``."""
    if not raw or any(not p for p in raw.split(".")):
        raise ConfigError(path, f"{raw!r} is not a dotted field path")
    return tuple(raw.split("."))


def resolve_fields(doc: FieldsDoc | None, path: str) -> FieldMap:
    doc = doc or FieldsDoc()
    names = FieldMap.__dataclass_fields__
    return FieldMap(**{k: field_path(getattr(doc, k), sub(path, k)) for k in names})


def _values(raw: dict[str, int] | None, path: str) -> dict[str, int]:
    for k, v in (raw or {}).items():
        if v not in (0, 1):
            raise ConfigError(sub(path, k), f"{v!r} must be 0 or 1")
    return dict(raw or {})


def _window(raw: int | str | WindowDoc, path: str, bucket: int) -> WindowSpec:
    doc = raw if isinstance(raw, WindowDoc) else WindowDoc(length=raw)
    length = seconds(doc.length, sub(path, "length"), positive=True)
    lag = seconds(doc.lag, sub(path, "lag"))
    for name, value in (("length", length), ("lag", lag)):
        if value % bucket:
            raise ConfigError(
                sub(path, name),
                f"{format_duration(value)} is not a multiple of the bucket width "
                f"{format_duration(bucket)}",
            )
    default_name = format_duration(length) + (f"_lag{format_duration(lag)}" if lag else "")
    name = default_name if doc.name is None else doc.name
    if not name:
        raise ConfigError(sub(path, "name"), f"{name!r} is not a window name")
    return WindowSpec(name=name, length=length, lag=lag)


def _attribute(name: str, doc: AttributeDoc | None, path: str, fields: FieldMap) -> AttributeSpec:
    doc = doc or AttributeDoc()
    bins: tuple[float, ...] | None = None
    if doc.bins is not None:
        if not doc.bins:
            raise ConfigError(sub(path, "bins"), "expected a non-empty list of bin edges")
        if not all(math.isfinite(b) for b in doc.bins):
            raise ConfigError(sub(path, "bins"), f"{doc.bins!r}: every edge must be finite")
        if sorted(set(doc.bins)) != list(doc.bins):
            raise ConfigError(sub(path, "bins"), f"{doc.bins!r} must be strictly increasing")
        bins = tuple(float(b) for b in doc.bins)
    values = None
    if doc.values is not None:
        where = sub(path, "values")
        if bins is not None:
            raise ConfigError(where, "a numeric attribute's groups are its bins")
        twice = [v for v in set(doc.values) if doc.values.count(v) > 1]
        bad = [v for v in doc.values if not v.strip() or v.startswith("__")] + sorted(twice)
        if bad or not doc.values:
            raise ConfigError(where, f"expected distinct non-blank group names, not {bad!r}")
        values = tuple(doc.values)
    default_path = ".".join((*fields.attributes, name))
    return AttributeSpec(
        name=name,
        path=field_path(default_path if doc.field is None else doc.field, sub(path, "field")),
        bins=bins,
        max_groups=doc.max_groups if values is None else len(values),
        values=values,
    )


def resolve_model(name: str, doc: ModelDoc, path: str, fields: FieldMap) -> ModelSpec:
    """The checks between keys of one model, and its :class:`ModelSpec`."""
    if not doc.attributes:
        raise ConfigError(sub(path, "attributes"), "at least one protected attribute is required")
    attributes = tuple(
        _attribute(a, d, sub(sub(path, "attributes"), a), fields) for a, d in doc.attributes.items()
    )
    names = {a.name for a in attributes}
    for spec in attributes:  # "&" joins an intersection's names: "g&s" would name two sets
        if "&" in spec.name:
            raise ConfigError(sub(sub(path, "attributes"), spec.name), "a name without '&'")
    intersections: list[tuple[str, ...]] = []
    for i, combo in enumerate(doc.intersections or []):
        p = sub(sub(path, "intersections"), i)
        if len(set(combo)) < 2 or len(set(combo)) != len(combo):
            raise ConfigError(
                p, f"{combo!r}: an intersection lists two or more distinct attributes"
            )
        for a in combo:
            if a not in names:
                raise ConfigError(p, f"{a!r} is not one of the model's attributes")
        same = next((c for c in intersections if set(c) == set(combo)), None)
        if same is not None:
            raise ConfigError(p, f"{combo!r} repeats the intersection {list(same)!r}")
        intersections.append(tuple(combo))
    if doc.favourable not in (0, 1):
        raise ConfigError(
            sub(path, "favourable"),
            f"{doc.favourable!r} must be 0 or 1 (the favourable "
            "prediction value, e.g. 0 when 1 means 'predicted default')",
        )
    bucket = seconds(doc.bucket, sub(path, "bucket"), positive=True)
    if not doc.windows:
        raise ConfigError(sub(path, "windows"), "expected a non-empty list of windows")
    windows = tuple(
        _window(w, sub(sub(path, "windows"), i), bucket) for i, w in enumerate(doc.windows)
    )
    if len({w.name for w in windows}) != len(windows):
        raise ConfigError(sub(path, "windows"), "window names must be unique")
    if doc.threshold is not None and not math.isfinite(doc.threshold):
        raise ConfigError(sub(path, "threshold"), f"{doc.threshold!r} is not a finite number")
    refs = doc.reference_groups or {}
    set_names = names | {"&".join(s) for s in intersections}
    for k in refs:
        if k not in set_names:
            raise ConfigError(sub(sub(path, "reference_groups"), k), "unknown attribute")
        declared = next((a.values for a in attributes if a.name == k), None)
        if declared is not None and str(refs[k]) not in declared:
            raise ConfigError(
                sub(sub(path, "reference_groups"), k),
                f"{refs[k]!r} is not one of attributes.{k}.values",
            )
    join, jpath = doc.join or JoinDoc(), sub(path, "join")
    lateness = seconds(doc.lateness, sub(path, "lateness"))
    lateness -= lateness % bucket
    serving = None
    if doc.input is not None:
        names_in_order = tuple(a.name for a in attributes)
        serving = resolve_mapping(
            doc.input,
            sub(path, "input"),
            attributes=names_in_order,
            threshold=doc.threshold,
            lateness=lateness,
        )
    return ModelSpec(
        name=name,
        attributes=attributes,
        intersections=tuple(intersections),
        favourable=doc.favourable,
        threshold=doc.threshold,
        prediction_values=_values(doc.prediction_values, sub(path, "prediction_values")),
        label_values=_values(doc.label_values, sub(path, "label_values")),
        windows=windows,
        bucket=bucket,
        lateness=lateness,
        min_samples=doc.min_samples,
        max_intersection_groups=doc.max_intersection_groups,
        score_bins=doc.score_bins,
        label_time=doc.label_time,
        reference_groups={k: str(v) for k, v in refs.items()},
        join=JoinSpec(
            ttl=seconds(join.ttl, sub(jpath, "ttl"), positive=True),
            max_pending=join.max_pending,
            early_label_grace=seconds(join.early_label_grace, sub(jpath, "early_label_grace")),
            max_early_labels=join.max_early_labels,
        ),
        serving=serving,
    )
