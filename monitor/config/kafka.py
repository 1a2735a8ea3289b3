"""The Kafka client's settings: brokers, topics, consumer group, TLS and SASL.

Secrets never need to sit in the YAML file: ``sasl_password_env: NAME`` reads an environment
variable and ``sasl_password_file: PATH`` a mounted file (Kubernetes secrets).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, get_args

from msgspec import Meta

from monitor.config.decode import ConfigError, Doc, sub
from monitor.config.durations import Duration, seconds

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
SECURITY_PROTOCOLS: tuple[str, ...] = get_args(SecurityProtocol)
SASL_MECHANISMS: tuple[str, ...] = get_args(SaslMechanism)


@dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: tuple[str, ...] = ("localhost:9092",)
    client_id: str = "fairness-monitor"
    group_id: str = "fairness-monitor"
    predictions_topic: str = "predictions"
    labels_topic: str = "labels"
    # a serving stack's responses, when they come on a topic of their own (Seldon Core 2's
    # ``.outputs``): read with the predictions topic's requests, co-partitioned with it
    responses_topic: str | None = None
    # protected attributes keyed by decision id, when they are not model inputs
    # (``models.<m>.input.attributes: stream``), co-partitioned with the predictions topic
    attributes_topic: str | None = None
    dead_letter_topic: str | None = None
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    max_poll_records: int = 10_000
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    session_timeout_ms: int = 30_000
    # seconds without a decision record after which a read-to-its-end partition stops holding
    # back the boundaries the alerts judge (0: never)
    idle_partition_timeout: int = 300

    @property
    def prediction_topics(self) -> tuple[str, ...]:
        """The topics whose records make decisions: predictions (or requests), responses."""
        extra = (self.responses_topic,) if self.responses_topic else ()
        return (self.predictions_topic, *extra)

    @property
    def input_topics(self) -> tuple[str, ...]:
        """Every topic read, co-partitioned: partition p of each is owned together."""
        extra = (self.attributes_topic,) if self.attributes_topic else ()
        return (*self.prediction_topics, self.labels_topic, *extra)


Secret = Annotated[str, Meta(description="prefer the _env or _file variant")]
Text = Annotated[str, Meta(min_length=1)]
Positive = Annotated[int, Meta(ge=1)]


class KafkaDoc(Doc, frozen=True):
    """The Kafka client: brokers, topics, consumer group, TLS and SASL."""

    bootstrap_servers: str | list[str] = "localhost:9092"
    client_id: Text = KafkaSpec.client_id
    group_id: Text = KafkaSpec.group_id
    predictions_topic: Text = KafkaSpec.predictions_topic
    labels_topic: Text = KafkaSpec.labels_topic
    responses_topic: (
        Annotated[
            str,
            Meta(
                min_length=1,
                description="a serving stack's responses on their own topic (Seldon's .outputs)",
            ),
        ]
        | None
    ) = None
    attributes_topic: (
        Annotated[
            str,
            Meta(
                min_length=1,
                description="protected attributes keyed by decision id, when they are not "
                "model inputs (input.attributes: stream)",
            ),
        ]
        | None
    ) = None
    dead_letter_topic: Text | None = None
    security_protocol: SecurityProtocol = KafkaSpec.security_protocol
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: Secret | None = None
    sasl_username_env: Annotated[str, Meta(description="environment variable")] | None = None
    sasl_username_file: Annotated[str, Meta(description="a mounted file")] | None = None
    sasl_password: Secret | None = None
    sasl_password_env: Annotated[str, Meta(description="environment variable")] | None = None
    sasl_password_file: Annotated[str, Meta(description="a mounted file")] | None = None
    ssl_cafile: Text | None = None
    ssl_certfile: Text | None = None
    ssl_keyfile: Text | None = None
    max_poll_records: Positive = KafkaSpec.max_poll_records
    auto_offset_reset: Literal["earliest", "latest"] = KafkaSpec.auto_offset_reset
    session_timeout_ms: Annotated[int, Meta(ge=1000)] = KafkaSpec.session_timeout_ms
    idle_partition_timeout: Annotated[
        Duration,
        Meta(
            description="a partition without decisions this long, read to its end, stops "
            "holding back alert evaluation (0: never)"
        ),
    ] = KafkaSpec.idle_partition_timeout


def _secret(doc: KafkaDoc, key: str, path: str) -> str | None:
    """``key``, ``key_env`` (environment variable name) or ``key_file`` (path)."""
    value = getattr(doc, key)
    env = getattr(doc, f"{key}_env")
    file = getattr(doc, f"{key}_file")
    if sum(v is not None for v in (value, env, file)) > 1:
        raise ConfigError(sub(path, key), f"give only one of {key}, {key}_env, {key}_file")
    if env is not None:
        if env not in os.environ:
            raise ConfigError(sub(path, f"{key}_env"), f"environment variable {env} is not set")
        return os.environ[env]
    if file is not None:
        try:
            return Path(file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                sub(path, f"{key}_file"), f"cannot read {file}: {exc.strerror}"
            ) from None
    return value  # type: ignore[no-any-return]


def _file(value: str | None, path: str) -> str | None:
    if value is not None and not Path(value).is_file():
        raise ConfigError(path, f"{value} is not a readable file")
    return value


def resolve_kafka(doc: KafkaDoc | None, path: str) -> KafkaSpec:
    doc = doc or KafkaDoc()
    servers = doc.bootstrap_servers
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",") if s.strip()]
    if not servers or not all(":" in s for s in servers):
        raise ConfigError(
            sub(path, "bootstrap_servers"), f"{doc.bootstrap_servers!r} must be host:port entries"
        )
    if doc.security_protocol.startswith("SASL") and doc.sasl_mechanism is None:
        raise ConfigError(sub(path, "sasl_mechanism"), f"required with {doc.security_protocol}")
    if doc.predictions_topic == doc.labels_topic:
        raise ConfigError(sub(path, "labels_topic"), "must differ from predictions_topic")
    taken = [doc.predictions_topic, doc.labels_topic]
    for key in ("responses_topic", "attributes_topic"):
        topic = getattr(doc, key)
        if topic is None:
            continue
        if topic in taken:
            raise ConfigError(sub(path, key), "must differ from the other input topics")
        taken.append(topic)
    return KafkaSpec(
        bootstrap_servers=tuple(servers),
        client_id=doc.client_id,
        group_id=doc.group_id,
        predictions_topic=doc.predictions_topic,
        labels_topic=doc.labels_topic,
        responses_topic=doc.responses_topic,
        attributes_topic=doc.attributes_topic,
        dead_letter_topic=doc.dead_letter_topic,
        security_protocol=doc.security_protocol,
        sasl_mechanism=doc.sasl_mechanism,
        sasl_username=_secret(doc, "sasl_username", path),
        sasl_password=_secret(doc, "sasl_password", path),
        ssl_cafile=_file(doc.ssl_cafile, sub(path, "ssl_cafile")),
        ssl_certfile=_file(doc.ssl_certfile, sub(path, "ssl_certfile")),
        ssl_keyfile=_file(doc.ssl_keyfile, sub(path, "ssl_keyfile")),
        max_poll_records=doc.max_poll_records,
        auto_offset_reset=doc.auto_offset_reset,
        session_timeout_ms=doc.session_timeout_ms,
        idle_partition_timeout=seconds(
            doc.idle_partition_timeout, sub(path, "idle_partition_timeout")
        ),
    )
