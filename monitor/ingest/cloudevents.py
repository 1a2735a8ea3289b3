"""CloudEvents on Kafka (the KServe inference logger's records) → the event's attributes and
payload.

The Kafka protocol binding of CloudEvents 1.0 (cloudevents/spec ``kafka-protocol-binding.md``)
has two modes:

* **binary**: each attribute in a header ``ce_<name>`` (UTF-8), ``content-type`` for
  ``datacontenttype``, the record's value is the data itself — what KServe's logger produces
  through a Knative Kafka sink (its HTTP headers ``ce-id``, ``ce-type``... become ``ce_id``,
  ``ce_type``...; both spellings are read);
* **structured**: ``content-type: application/cloudevents+json`` and the whole event as JSON in
  the value, the payload in ``data`` (JSON) or ``data_base64``.

KServe's logger writes one event per request and one per response, with the same ``id``, of
type ``org.kubeflow.serving.inference.request`` / ``...response``, plus the extensions
``inferenceservicename``, ``namespace``, ``component``, ``endpoint``. The response is logged
only when the model answered.

Bytes from anyone: headers are read once and bounded, a time must be RFC 3339, and every
refusal is an :class:`~monitor.ingest.events.Invalid` with its reason.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from monitor.ingest.events import Invalid, Reason

REQUEST = "org.kubeflow.serving.inference.request"
RESPONSE = "org.kubeflow.serving.inference.response"
STRUCTURED = "application/cloudevents+json"
MAX_ATTRIBUTES = 64  # CloudEvent attributes (ce_ headers): more than any event needs
MAX_HEADERS = 1024  # all headers (tracing, baggage, a mesh's own): a record with more is refused
MAX_ATTRIBUTE_BYTES = 4096
REQUIRED = ("id", "source", "specversion", "type")
# what the monitor reads: one of these too long or not UTF-8 refuses the record; any other
# extension (a tracer's, a custom one) that is, is left out of the attributes, never the record
READ = frozenset({*REQUIRED, "time", "inferenceservicename"})


@dataclass(frozen=True)
class CloudEvent:
    id: str
    type: str
    source: str
    time: float | None  # seconds since the epoch (``time``), None when the event has none
    attributes: dict[str, str]  # every attribute read, extensions included
    data: bytes

    @property
    def kind(self) -> str:
        """``request``, ``response`` (KServe's types), or the type itself."""
        return {REQUEST: "request", RESPONSE: "response"}.get(self.type, self.type)


def from_kafka(
    headers: Sequence[tuple[str, bytes | None]] | None, value: bytes | None
) -> CloudEvent:
    """The event of one record, or :class:`Invalid` with its reason. Every header is looked at
    (a ``ce_`` header after many tracing ones is still read), up to ``MAX_HEADERS``; more
    headers, or more than ``MAX_ATTRIBUTES`` CloudEvent attributes, refuse the record."""
    attrs: dict[str, str] = {}
    content_type, name = "", ""
    headers = headers or ()
    if len(headers) > MAX_HEADERS:
        raise Invalid(Reason.RECORD_TOO_LARGE, f"{len(headers)} headers, over {MAX_HEADERS}")
    try:  # inline, not a call per header: this runs for every record of the topic
        for key, raw in headers:
            name = key.lower()
            if name.startswith(("ce_", "ce-")):  # other headers (tracing, baggage) are not read
                if len(attrs) >= MAX_ATTRIBUTES and name[3:] not in attrs:
                    raise Invalid(
                        Reason.RECORD_TOO_LARGE, f"over {MAX_ATTRIBUTES} CloudEvent attributes"
                    )
                if raw is not None and len(raw) > MAX_ATTRIBUTE_BYTES:
                    if name[3:] not in READ:
                        continue
                    raise Invalid(
                        _reason(name[3:], Reason.ID_TOO_LONG),
                        f"header {name[:64]!r} over {MAX_ATTRIBUTE_BYTES} bytes",
                    )
                try:
                    attrs[name[3:]] = "" if raw is None else raw.decode()
                except UnicodeDecodeError:
                    if name[3:] in READ:
                        raise
            elif name == "content-type":  # only compared with the structured mode's type
                content_type = "" if raw is None else raw[:256].decode(errors="replace")
    except UnicodeDecodeError:
        raise Invalid(_reason(name[3:]), f"header {name[:64]!r} is not UTF-8") from None
    if content_type.split(";")[0].strip().lower() == STRUCTURED:
        attrs, data = _structured(value)
    else:
        if value is None:
            raise Invalid(Reason.TOMBSTONE, "a CloudEvent without data (a tombstone)")
        if "specversion" not in attrs:  # (with its ce_id: the envelope is what is wrong)
            reason = Reason.BAD_CLOUDEVENT if attrs.get("id") else Reason.MISSING_ID
            raise Invalid(reason, "not a CloudEvent: no ce_specversion header")
        data = value
        if content_type:
            attrs.setdefault("datacontenttype", content_type)
    missing = [a for a in REQUIRED if not attrs.get(a)]
    if missing:
        reason = Reason.MISSING_ID if "id" in missing else Reason.BAD_CLOUDEVENT
        raise Invalid(reason, f"CloudEvent without {', '.join(missing)}")
    return CloudEvent(
        attrs["id"], attrs["type"], attrs["source"], _time(attrs.get("time")), attrs, data
    )


_ENVELOPE = msgspec.json.Decoder(dict[str, msgspec.Raw])
_JSON = msgspec.json.Decoder()


def _structured(value: bytes | None) -> tuple[dict[str, str], bytes]:
    """A structured-mode event's string attributes and its data, as it is in the record:
    members that are not strings are never decoded, so a number no float holds or a deep
    nesting in an extension or in ``data`` costs nothing here (re-encoding ``data`` with the
    standard library refused the record: found by a review)."""
    if value is None:
        raise Invalid(Reason.TOMBSTONE, "a structured CloudEvent without a value")
    try:
        doc = _ENVELOPE.decode(value)
    except msgspec.ValidationError:
        raise Invalid(Reason.NOT_OBJECT, "structured CloudEvent is not a JSON object") from None
    except msgspec.DecodeError:  # what msgspec refuses and the standard library reads
        return _structured_stdlib(value)  # (NaN, a BOM, \ud800 escapes) is read as before
    except RecursionError:
        raise Invalid(Reason.TOO_DEEP, "structured CloudEvent nested too deeply") from None
    attrs = {}
    for k, raw in doc.items():
        if k in READ and not _is_string(raw) and bytes(raw) != b"null":
            _not_a_string(k)
        if k not in ("data", "data_base64") and _is_string(raw):
            try:  # JSON's \ud800 escapes are lone surrogates, which are no UTF-8
                attrs[k] = _JSON.decode(raw)
            except msgspec.DecodeError:
                raise Invalid(
                    _reason(k), f"structured CloudEvent attribute {k[:64]!r} is not Unicode"
                ) from None
    if "data_base64" in doc:
        if not _is_string(doc["data_base64"]):  # null or 1234 is no payload (was read as "None")
            raise Invalid(Reason.BAD_CLOUDEVENT, "data_base64 is not a string")
        try:
            return attrs, base64.b64decode(_JSON.decode(doc["data_base64"]), validate=True)
        except (msgspec.DecodeError, RecursionError, binascii.Error, ValueError):
            raise Invalid(Reason.BAD_CLOUDEVENT, "data_base64 is not base64") from None
    if "data" not in doc:
        raise Invalid(Reason.BAD_CLOUDEVENT, "structured CloudEvent without data")
    raw = doc["data"]
    if not _is_string(raw):
        return attrs, bytes(raw)  # a JSON value: the payload as it was written
    try:
        return attrs, str(_JSON.decode(raw)).encode()
    except (msgspec.DecodeError, UnicodeEncodeError):
        raise Invalid(Reason.BAD_CLOUDEVENT, "structured CloudEvent data is not Unicode") from None


def _structured_stdlib(value: bytes) -> tuple[dict[str, str], bytes]:
    try:
        doc = json.loads(value)
    except RecursionError:  # as _structured says it (NaN elsewhere sent it here: a review)
        raise Invalid(Reason.TOO_DEEP, "structured CloudEvent nested too deeply") from None
    except ValueError as exc:
        raise Invalid(Reason.NOT_JSON, f"structured CloudEvent: {exc}") from None
    if not isinstance(doc, dict):
        raise Invalid(Reason.NOT_OBJECT, "structured CloudEvent is not a JSON object")
    for k in READ.intersection(doc):
        if not isinstance(doc[k], str | None):
            _not_a_string(k)
    attrs = {
        k: v for k, v in doc.items() if k not in ("data", "data_base64") and isinstance(v, str)
    }
    for k, v in attrs.items():  # JSON's \ud800 escapes decode to lone surrogates: no UTF-8
        try:
            v.encode()
        except UnicodeEncodeError:
            raise Invalid(
                _reason(k), f"structured CloudEvent attribute {k[:64]!r} is not Unicode"
            ) from None
    try:
        data = doc.get("data")
        out = data.encode() if isinstance(data, str) else json.dumps(data).encode()
    except UnicodeEncodeError:
        raise Invalid(Reason.BAD_CLOUDEVENT, "structured CloudEvent data is not Unicode") from None
    if "data_base64" in doc:
        encoded = doc["data_base64"]
        if not isinstance(encoded, str):
            raise Invalid(Reason.BAD_CLOUDEVENT, "data_base64 is not a string")
        try:
            return attrs, base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise Invalid(Reason.BAD_CLOUDEVENT, "data_base64 is not base64") from None
    if "data" not in doc:
        raise Invalid(Reason.BAD_CLOUDEVENT, "structured CloudEvent without data")
    return attrs, out


def _not_a_string(name: str) -> None:
    """An attribute the monitor reads must be a string (CloudEvents' JSON format): a number for
    ``time`` was ignored, the event then timed by its record (found by a review)."""
    raise Invalid(_reason(name), f"structured CloudEvent attribute {name!r} is not a string")


def _reason(attribute: str, of_id: Reason = Reason.BAD_ID) -> Reason:
    """The dead-letter reason of an attribute that cannot be read: the id's (``of_id``), the
    time's, or the envelope's (a review: a bad ``time`` was called a bad id)."""
    if attribute == "id":
        return of_id
    return Reason.BAD_TIMESTAMP if attribute == "time" else Reason.BAD_CLOUDEVENT


def _is_string(raw: msgspec.Raw) -> bool:
    return bytes(memoryview(raw)[:1]) == b'"'


def _time(text: str | None) -> float | None:
    """RFC 3339 (``2026-01-01T10:00:00.123Z``) → epoch seconds."""
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise Invalid(Reason.BAD_TIMESTAMP, f"ce time {text[:64]!r} is not RFC 3339") from None
    if when.tzinfo is None:
        raise Invalid(Reason.BAD_TIMESTAMP, f"ce time {text[:64]!r} has no offset (RFC 3339)")
    return when.timestamp()


@dataclass(frozen=True)
class Columns:
    """A batch of binary-mode CloudEvents as columns (what :func:`from_kafka` reads, per
    attribute): ``time`` is None when no event of the batch has one."""

    id: list[str]
    kind: list[str]
    time: list[float | None] | None
    servicename: list[str] | list[None]
    data: list[bytes]


def columns(records: Sequence[Any]) -> Columns | None:
    """The batch's events read attribute by attribute, or None when one of them needs
    :func:`from_kafka` (structured mode, ``ce-`` or capitalised names, more than
    ``MAX_ATTRIBUTES`` headers, a repeated header name, a value read over
    ``MAX_ATTRIBUTE_BYTES`` or not UTF-8, a required attribute missing, a tombstone): the same attributes, read once per batch and name."""
    headers = [r.headers or () for r in records]
    if max(map(len, headers), default=0) > MAX_ATTRIBUTES:
        return None
    maps = [dict(h) for h in headers]
    if any(len(m) != len(h) for m, h in zip(maps, headers, strict=True)):
        return None  # a repeated name: from_kafka checks every copy (a review: the fast path
        # read the last alone, and a bad first copy's record counted or not by its batch)
    names = set().union(*maps)
    if any(n != n.lower() or n.startswith("ce-") for n in names):
        return None
    if "content-type" in names and any(
        STRUCTURED.encode() in v.lower() for v in {m.get("content-type") or b"" for m in maps}
    ):
        return None
    text: dict[str, list[Any]] = {}
    for name in names:
        if name.startswith("ce_") and name[3:] in READ:  # the others are not read
            raw = [m.get(name, b"") for m in maps]  # absent reads as empty: see servicename
            if None in raw or max(map(len, raw)) > MAX_ATTRIBUTE_BYTES:
                return None
            text[name[3:]] = list(map(bytes.decode, raw))
    for name in REQUIRED:
        if name not in text or not all(text[name]):
            return None
    data = [r.value for r in records]
    if None in data:
        return None
    # An empty name and none differ (a request naming "" names no model): only all or none
    services = text.get("inferenceservicename")
    if services is not None and "" in services:
        return None
    kinds = {REQUEST: "request", RESPONSE: "response"}
    times = text.get("time")
    return Columns(
        id=text["id"],
        kind=[kinds.get(t, t) for t in text["type"]],
        time=None if times is None else list(map(_time, times)),
        servicename=[None] * len(data) if services is None else list(services),
        data=data,
    )
