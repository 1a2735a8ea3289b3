"""How a serving stack's payloads map to what the monitor counts (``models.<m>.input``).

Where the predictions topic carries a serving stack's traffic rather than the monitor's own
events, each model says which tensor holds its score or decision (in the response) and which
hold its protected attributes (in the request)::

    input:
      format: kserve-cloudevents                # or oip-json (requests and responses as they are)
      score: {tensor: probabilities, column: 1}   # P(positive class); the model's threshold decides
      prediction: {tensor: label}               # or the decision itself (0/1, true/false)
      attributes:
        sex: {tensor: sex}                      # a BYTES tensor: its strings are the groups
        age: {tensor: features, column: 3}      # a number column: binned by the attribute's bins

or, when the protected attributes are not model inputs (they come keyed by the decision's id on
``kafka.attributes_topic``, see ``ingest/attribute_events.py``)::

      attributes: stream
      attributes_ttl: 30m                       # how long a decision waits for them (≤ lateness)

Errors name the key path (``models.credit.input.score.column: -1 is not a column``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor.config.decode import ConfigError, sub
from monitor.config.durations import seconds

FORMATS = ("oip-json", "kserve-cloudevents", "seldon")


@dataclass(frozen=True)
class Column:
    """Where a value is: the tensor's name and, for a tensor of several columns, which one."""

    tensor: str
    column: int | None = None


@dataclass(frozen=True)
class TensorMapping:
    format: str = "oip-json"
    score: Column | None = None
    prediction: Column | None = None
    attributes: dict[str, Column] = field(default_factory=dict)
    # the attributes come from the attributes topic, not from the request's tensors: a decision
    # waits for them at most ``attributes_ttl`` seconds (event time), then counts as without
    stream: bool = False
    attributes_ttl: int = 0


KEYS = ("format", "score", "prediction", "attributes", "attributes_ttl")


def resolve_mapping(
    raw: object,
    path: str,
    *,
    attributes: tuple[str, ...],
    threshold: float | None,
    lateness: int,
) -> TensorMapping:
    """The ``input`` section of a model, checked against the model's attributes."""
    if not isinstance(raw, dict):
        raise ConfigError(path, "must be a mapping with score or prediction, and attributes")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ConfigError(sub(path, unknown[0]), f"unknown key ({', '.join(KEYS)})")
    fmt = raw.get("format", "oip-json")
    if fmt not in FORMATS:
        raise ConfigError(sub(path, "format"), f"{fmt!r} is not one of {', '.join(FORMATS)}")
    score = _column(raw.get("score"), sub(path, "score"))
    prediction = _column(raw.get("prediction"), sub(path, "prediction"))
    if score is None and prediction is None:
        raise ConfigError(path, "names neither score nor prediction: nothing to count")
    if prediction is None and threshold is None:
        raise ConfigError(sub(path, "score"), "a score without the model's threshold cannot decide")
    attrs_raw = raw.get("attributes")
    where = sub(path, "attributes")
    ttl = _ttl(raw.get("attributes_ttl"), sub(path, "attributes_ttl"), lateness)
    if attrs_raw == "stream":
        return TensorMapping(fmt, score, prediction, {}, True, lateness if ttl is None else ttl)
    if ttl is not None:
        raise ConfigError(sub(path, "attributes_ttl"), "only with attributes: stream")
    if not isinstance(attrs_raw, dict) or not attrs_raw:
        raise ConfigError(
            where,
            "must map each of the model's attributes to a tensor, or be 'stream' (they come "
            "on kafka.attributes_topic)",
        )
    out: dict[str, Column] = {}
    for name, spec in attrs_raw.items():
        if name not in attributes:
            raise ConfigError(sub(where, str(name)), f"not an attribute of the model {attributes}")
        col = _column(spec, sub(where, name))
        assert col is not None
        out[name] = col
    missing = [a for a in attributes if a not in out]
    if missing:
        raise ConfigError(where, f"no tensor for the model's attribute(s) {missing}")
    return TensorMapping(fmt, score, prediction, out)


def _ttl(raw: object, path: str, lateness: int) -> int | None:
    """How long a decision waits for its attributes: at most the model's lateness (released
    later, its bucket would be closed and the decision counted late instead)."""
    if raw is None:
        return None
    ttl = seconds(raw, path)
    if ttl > lateness:
        raise ConfigError(
            path,
            f"{ttl} s exceeds the model's lateness ({lateness} s): a decision released later "
            "would find its bucket closed",
        )
    return ttl


def _column(raw: object, path: str) -> Column | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or "tensor" not in raw:
        raise ConfigError(path, "must be {tensor: <name>} or {tensor: <name>, column: <index>}")
    extra = sorted(set(raw) - {"tensor", "column"})
    if extra:
        raise ConfigError(sub(path, extra[0]), "unknown key (tensor, column)")
    name, column = raw["tensor"], raw.get("column")
    if not isinstance(name, str) or not name:
        raise ConfigError(sub(path, "tensor"), f"{name!r} is not a tensor name")
    if column is not None and (type(column) is not int or column < 0):
        raise ConfigError(sub(path, "column"), f"{column!r} is not a column (0, 1, ...)")
    return Column(name, column)


def topic_format(models: Mapping[str, Any]) -> str:
    """What the predictions topic carries: ``monitor-json`` (no model maps tensors) or the one
    format every model's ``input`` names (a topic has one format; models differ by name)."""
    seen: dict[str, str] = {}
    for name, m in models.items():
        fmt = m.serving.format if m.serving is not None else "monitor-json"
        seen.setdefault(fmt, name)
        if len(seen) > 1:
            other, first = fmt, next(iter(seen))
            where = f"models.{name}.input" + (".format" if m.serving is not None else "")
            raise ConfigError(
                where,
                f"{other}, but models.{seen[first]} reads {first}: every model reads the "
                "predictions topic, in one format",
            )
    return next(iter(seen), "monitor-json")
