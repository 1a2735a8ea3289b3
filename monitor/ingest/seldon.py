"""Seldon Core 2's Kafka records → which half of a call each is, and its tensors.

Seldon Core 2 writes a model's requests to ``seldon.<namespace>.model.<model>.inputs`` and its
responses to ``...outputs`` (read with ``kafka.predictions_topic`` and
``kafka.responses_topic``), keyed by the request id, which the ``x-request-id`` header carries.
The payloads are the Open Inference Protocol's gRPC messages (``ModelInferRequest`` /
``ModelInferResponse``, ``oip_grpc.py``) unless the ``seldon-infer-type`` header says JSON
(``json/inferModelRequest``, ``json/inferModelResponse``; ``proto/InferModelRequest``,
``proto/InferModelResponse`` for protobuf). Without the header, the topic says which half.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from monitor.ingest import oip, oip_grpc
from monitor.ingest.events import Invalid, Reason
from monitor.ingest.oip import Table

TYPE_HEADER = "seldon-infer-type"
KINDS = {
    "json/inferModelRequest": ("request", oip.decode_request),
    "json/inferModelResponse": ("response", oip.decode_response),
    "proto/InferModelRequest": ("request", oip_grpc.decode_request),
    "proto/InferModelResponse": ("response", oip_grpc.decode_response),
}
TOPIC = re.compile(r"seldon\.[^.]+\.model\.(?P<model>.+)\.(?:inputs|outputs)")


def half(
    value: Any, headers: Sequence[tuple[str, bytes | None]] | None, responses: bool
) -> tuple[str, Table]:
    """``("request" | "response", table)`` of one record (``responses``: it was read from
    the responses topic, which says which half when the header does not)."""
    kind = None
    for key, raw in headers or ():
        if key.lower() == TYPE_HEADER:
            try:
                kind = (raw or b"").decode()
            except UnicodeDecodeError:
                kind = repr(raw[:40]) if raw else ""
            break
    if kind is None:
        if responses:
            return "response", oip_grpc.decode_response(value)
        return "request", oip_grpc.decode_request(value)
    got = KINDS.get(kind)
    if got is None:
        raise Invalid(Reason.UNDECODABLE, f"{TYPE_HEADER} {kind[:60]!r} is none of {list(KINDS)}")
    which, decode = got
    if value is None:
        raise Invalid(Reason.TOMBSTONE, "a record without a value (a tombstone)")
    return which, decode(value)


def topic_model(topic: str) -> str | None:
    """The model a Seldon topic's name gives (``seldon.<ns>.model.<model>.inputs``)."""
    m = TOPIC.fullmatch(topic)
    return m.group("model") if m else None
