"""Records of the attributes topic → the protected attributes of decisions, by decision id.

When the protected attributes are not model inputs (fairness through unawareness; lawful
processing that keeps them apart), the serving stack's requests carry none, and a separate
keyed stream gives them (``kafka.attributes_topic``, for the models whose
``input.attributes`` is ``stream``). One record per decision::

    {"id": "req-7/0", "attributes": {"sex": "female", "age": 41}, "timestamp": 1767225600}

``id`` is the decision's id as the monitor names it: the request id, or ``<request id>/<row>``
for a request of several rows (as labels are keyed). ``timestamp`` is optional (else the
record's Kafka time); it only decides how long the record waits for its decision. The record's
key should be the request id, so that it lands in the partition of its request.

Each record is encoded here into the group indices of every model that reads the stream (the
decision's model is not known until it meets its attributes); a missing or null attribute is
the ``__missing__`` group, as for the monitor's own events. Anything else is a dead letter with
its reason: a tombstone, not JSON or not an object, a missing or too long id, ``attributes``
not an object, or an attribute a model reads holding a non-scalar value (``bad_attribute``), a
bad timestamp. An attribute no model reads is left alone whatever it holds.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from monitor.ingest.decode_careful import CarefulPath, dead_letters
from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.events import DeadLetter, Invalid, Reason, unforeseen
from monitor.ingest.fields import text_id
from monitor.ingest.keys import id_keys
from monitor.ingest.serving import is_number

SCALARS = (str, int, float, bool, type(None))


class _Fields(msgspec.Struct):
    """The fields a record is read for, ``attributes`` kept raw: a record whose other fields
    (or attributes no model reads) hold numbers the generic decoder rejects (``1e400``, a
    5,000-digit integer) is still read (:meth:`AttributeDecoder.salvage`)."""

    id: Any = msgspec.UNSET
    attributes: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    timestamp: Any = msgspec.UNSET


_TYPED = msgspec.json.Decoder(_Fields)
_JSON = msgspec.json.Decoder()
_BY_NAME = msgspec.json.Decoder(dict[str, msgspec.Raw])


def attribute_dtype(n_models: int, n_sets: int) -> np.dtype[Any]:
    """One attribute record's row: its decision's key, its time, and the groups it gives each
    model (``-1`` for a model that does not read the stream)."""
    return np.dtype(
        [("key", np.uint64), ("ts", np.float64), ("groups", np.int32, (n_models, n_sets))]
    )


class AttributeDecoder:
    """Decodes the attributes topic's records for one configuration."""

    def __init__(self, plan: DecodePlan) -> None:
        self.plan = plan
        self.careful = CarefulPath(plan)
        self.readers = [
            m
            for m, spec in enumerate(plan.models)
            if spec.serving is not None and spec.serving.stream
        ]
        self.dtype = attribute_dtype(len(plan.models), plan.max_sets)
        # attributes a reading model bins: finite numbers (or null), as in the monitor's events
        self.binned = {a.name for m in self.readers for a in plan.models[m].attributes if a.bins}
        self.read = {a.name for m in self.readers for a in plan.models[m].attributes}

    def decode(self, rb: Any) -> tuple[npt.NDArray[Any], list[DeadLetter]]:
        """(attribute rows, dead letters) of one batch of records."""
        plan = self.plan
        events, errors = self.careful.parse_all(rb.values, None)
        for i, err in enumerate(errors):
            if err is not None and err.reason is Reason.NOT_JSON:
                events[i], errors[i] = self.salvage(rb.values[i], err)
        lo, hi = plan.time_bounds()
        ids: list[str] = []
        times: list[float] = []
        values: list[dict[str, Any]] = []
        for i, e in enumerate(events):
            if errors[i] is not None:
                continue
            try:
                ids.append(text_id(e.get("id"), plan.limits.max_id_length))
                attrs = e.get("attributes")
                if type(attrs) is not dict:
                    raise Invalid(Reason.BAD_ATTRIBUTE, "attributes must be a JSON object")
                for name, v in attrs.items():  # what no model reads is never judged (a review)
                    if name in self.read and not isinstance(v, SCALARS):
                        raise Invalid(
                            Reason.BAD_ATTRIBUTE,
                            f"attribute {str(name)[:60]!r} is a JSON {type(v).__name__}, "
                            "not a text, number or boolean",
                        )
                    if name in self.binned and v is not None and not is_number(v):
                        raise Invalid(
                            Reason.BAD_ATTRIBUTE,
                            f"attribute {name} must be a finite number, got {str(v)[:40]!r}",
                        )
                times.append(plan.event_time(e.get("timestamp"), rb.timestamps_ms[i], lo, hi))
                values.append(attrs)
            except Invalid as bad:
                errors[i] = bad
            except Exception as exc:
                errors[i] = unforeseen(exc)
            if errors[i] is not None:
                del ids[len(values) :], times[len(values) :]
        return self.rows(ids, times, values), dead_letters(rb, errors)

    def salvage(self, value: Any, err: Invalid) -> tuple[Any, Invalid | None]:
        """A record the generic decoder rejects, read for its fields only: an attribute that
        no model reads is left out whatever it holds; one that a model reads and that cannot
        be decoded is a ``bad_attribute``; anything else stays ``err``."""
        try:
            one = _TYPED.decode(value)
        except (msgspec.DecodeError, RecursionError, ValueError):
            return None, err
        out = {k: v for k in ("id", "timestamp") if (v := getattr(one, k)) is not msgspec.UNSET}
        if isinstance(one.attributes, msgspec.UnsetType):
            return out, None
        try:
            out["attributes"] = _JSON.decode(one.attributes)
            return out, None
        except (msgspec.DecodeError, RecursionError):
            pass
        try:
            by_name = _BY_NAME.decode(one.attributes)
        except (msgspec.DecodeError, RecursionError):
            return None, err
        attrs = out["attributes"] = {}
        for name, raw in by_name.items():
            try:
                attrs[name] = _JSON.decode(raw)
            except (msgspec.DecodeError, RecursionError):
                if name in self.read:
                    why = f"attribute {name[:60]!r} holds a number no float holds, or is too deep"
                    return None, Invalid(Reason.BAD_ATTRIBUTE, why)
        return out, None

    def rows(
        self, ids: list[str], times: list[float], values: list[dict[str, Any]]
    ) -> npt.NDArray[Any]:
        """Rows of the decoded records: each reading model's registry encodes the values."""
        rows = np.zeros(len(ids), dtype=self.dtype)
        if not ids:
            return rows
        rows["key"] = id_keys(ids)
        rows["ts"] = times
        rows["groups"] = -1
        for m in self.readers:
            attrs = self.plan.models[m].attributes
            enc = self.plan.registries[m].encode([[v.get(a.name) for v in values] for a in attrs])
            rows["groups"][:, m, : enc.shape[1]] = enc
        return rows
