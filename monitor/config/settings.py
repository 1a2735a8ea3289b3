"""Service settings: Kafka client, checkpointing, HTTP endpoints, limits.

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
from monitor.config.webconfig import WebConfig, load_web_config

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
SECURITY_PROTOCOLS: tuple[str, ...] = get_args(SecurityProtocol)
SASL_MECHANISMS: tuple[str, ...] = get_args(SaslMechanism)


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``:port`` (all IPv4 interfaces) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not host:port (e.g. 0.0.0.0:9108, [::]:9108)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{value!r}: write an IPv6 address in brackets, e.g. [::1]:9108")
    return host or "0.0.0.0", int(port)


@dataclass(frozen=True)
class KafkaSpec:
    bootstrap_servers: tuple[str, ...] = ("localhost:9092",)
    client_id: str = "fairness-monitor"
    group_id: str = "fairness-monitor"
    predictions_topic: str = "predictions"
    labels_topic: str = "labels"
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


@dataclass(frozen=True)
class CheckpointSpec:
    path: str = "fairness-monitor.sqlite"
    interval: int = 10  # seconds
    every_events: int = 200_000
    on_corrupt: Literal["refuse", "fresh"] = "refuse"
    # where: a SQLite file (``path``, one instance) or a compacted Kafka topic (any replica
    # restores any partition; ``state/kafka_store.py``)
    store: Literal["sqlite", "kafka"] = "sqlite"
    state_topic: str = "fairness-monitor-state"
    state_topic_partitions: int = 1  # when the monitor creates the topic
    state_topic_replication: int = -1  # when the monitor creates it: -1 is the broker's default
    state_chunk_bytes: int = 512 * 1024  # one record's share of a state blob
    state_transactions: bool = False  # each save one Kafka transaction (atomic over partitions)
    state_segment_bytes: int = 16 << 20  # the topic's segment.bytes (state/kafka_segments.py)


@dataclass(frozen=True)
class ServiceSpec:
    # where the HTTP endpoints listen: ``listen: host:port`` or ``http_host`` + ``http_port``.
    # All interfaces by default (a pod's or container's port must be reachable); anyone who
    # can reach it reads /metrics and the status page: set web_config_file (TLS + auth).
    http_host: str = "0.0.0.0"
    http_port: int = 9108
    web_config_file: str | None = None
    web_config: WebConfig | None = field(default=None, compare=False, repr=False)
    http_workers: int = 8
    http_timeout: int = 10  # seconds: TLS handshake + request head; response write
    http_idle_timeout: int = 60  # seconds a kept-alive connection may wait for a request
    http_max_connections: int = 256
    probe_host: str | None = None  # service.probe_listen: plain /healthz + /readyz only
    probe_port: int | None = None
    max_invalid_ratio: float = 0.5
    invalid_ratio_min_events: int = 1000
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    liveness_timeout: int = 60  # seconds without a main-loop iteration -> not alive
    shutdown_timeout: int = 10


@dataclass(frozen=True)
class LimitsSpec:
    """Size limits on what one record may bring in (why: one hostile or broken record must not
    bloat memory, ``/metrics`` or the checkpoint; docs/deploy.md states the resulting bounds).

    A record over ``max_record_bytes`` or with an id over ``max_id_length`` characters is
    dead-lettered (``record_too_large``, ``id_too_long``); an attribute value over
    ``max_value_length`` characters is kept, counted, under a stable shortened name (its first
    characters, ``~`` and a hash of the whole value), so the event still counts.
    """

    max_record_bytes: int = 1 << 20
    max_id_length: int = 256
    max_value_length: int = 128


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


class CheckpointDoc(Doc, frozen=True):
    """Where and how often the state and offsets are checkpointed."""

    path: Text = CheckpointSpec.path
    interval: Duration = CheckpointSpec.interval
    every_events: Positive = CheckpointSpec.every_events
    on_corrupt: Literal["refuse", "fresh"] = CheckpointSpec.on_corrupt
    store: Annotated[
        Literal["sqlite", "kafka"],
        Meta(description="sqlite: the file at path; kafka: the compacted topic state_topic"),
    ] = CheckpointSpec.store
    state_topic: Text | None = None
    state_topic_partitions: Positive | None = None
    state_topic_replication: (
        Annotated[int, Meta(ge=-1, description="-1: the broker's default")] | None
    ) = None
    state_chunk_bytes: (
        Annotated[int, Meta(ge=1024, le=64 << 20, description="bytes of state per record")] | None
    ) = None
    state_transactions: (
        Annotated[bool, Meta(description="each save one Kafka transaction")] | None
    ) = None
    state_segment_bytes: Annotated[int, Meta(ge=1 << 20, le=1 << 30)] | None = None


Listen = Annotated[str, Meta(description="host:port, [v6]:port or :port")]


class ServiceDoc(Doc, frozen=True):
    """The HTTP endpoints, the invalid-record guard, logging and timeouts."""

    listen: Listen | None = None
    http_host: Text | None = None
    http_port: Annotated[int, Meta(ge=0, extra_json_schema={"maximum": 65535})] | None = None
    web_config_file: (
        Annotated[
            str, Meta(description="TLS and basic auth, the Prometheus exporter-toolkit format")
        ]
        | None
    ) = None
    http_workers: Positive = ServiceSpec.http_workers
    http_timeout: Duration = ServiceSpec.http_timeout
    http_idle_timeout: Duration = ServiceSpec.http_idle_timeout
    http_max_connections: Positive = ServiceSpec.http_max_connections
    probe_listen: Listen | None = None
    max_invalid_ratio: Annotated[
        float, Meta(extra_json_schema={"exclusiveMinimum": 0, "maximum": 1})
    ] = ServiceSpec.max_invalid_ratio
    invalid_ratio_min_events: Positive = ServiceSpec.invalid_ratio_min_events
    log_format: Literal["text", "json"] = ServiceSpec.log_format
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = ServiceSpec.log_level
    liveness_timeout: Duration = ServiceSpec.liveness_timeout
    shutdown_timeout: Duration = ServiceSpec.shutdown_timeout


class LimitsDoc(Doc, frozen=True):
    """Size limits on what one record may bring in."""

    max_record_bytes: Annotated[int, Meta(ge=64)] = LimitsSpec.max_record_bytes
    max_id_length: Positive = LimitsSpec.max_id_length
    max_value_length: Annotated[int, Meta(ge=16)] = LimitsSpec.max_value_length


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
    return KafkaSpec(
        bootstrap_servers=tuple(servers),
        client_id=doc.client_id,
        group_id=doc.group_id,
        predictions_topic=doc.predictions_topic,
        labels_topic=doc.labels_topic,
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
    )


def resolve_checkpoint(doc: CheckpointDoc | None, path: str) -> CheckpointSpec:
    doc, d = doc or CheckpointDoc(), CheckpointSpec()
    if doc.store != "kafka":  # the state_* keys are the Kafka store's
        for name in (f for f in CheckpointDoc.__struct_fields__ if f.startswith("state_")):
            if getattr(doc, name) is not None:
                raise ConfigError(sub(path, name), "only with store: kafka")
    if doc.state_topic_replication == 0:
        raise ConfigError(sub(path, "state_topic_replication"), "must be -1 or at least 1")
    chunk, segment = doc.state_chunk_bytes or d.state_chunk_bytes, doc.state_segment_bytes
    if segment is not None and segment < chunk + (16 << 10):  # a chunk's record must fit
        raise ConfigError(sub(path, "state_segment_bytes"), "< state_chunk_bytes + 16 KiB")
    return CheckpointSpec(
        path=doc.path,
        interval=seconds(doc.interval, sub(path, "interval"), positive=True),
        every_events=doc.every_events,
        on_corrupt=doc.on_corrupt,
        store=doc.store,
        state_topic=doc.state_topic or d.state_topic,
        state_topic_partitions=doc.state_topic_partitions or d.state_topic_partitions,
        state_topic_replication=(
            d.state_topic_replication
            if doc.state_topic_replication is None
            else doc.state_topic_replication
        ),
        state_chunk_bytes=chunk,
        state_transactions=bool(doc.state_transactions),
        state_segment_bytes=segment or max(d.state_segment_bytes, 2 * chunk),
    )


def _listen(raw: str | None, path: str) -> tuple[str, int] | None:
    if raw is None:
        return None
    try:
        return parse_listen(raw)
    except ValueError as exc:
        raise ConfigError(path, str(exc)) from None


def resolve_limits(doc: LimitsDoc | None) -> LimitsSpec:
    doc = doc or LimitsDoc()
    return LimitsSpec(doc.max_record_bytes, doc.max_id_length, doc.max_value_length)


def resolve_service(doc: ServiceDoc | None, path: str) -> ServiceSpec:
    doc, d = doc or ServiceDoc(), ServiceSpec()
    listen = _listen(doc.listen, sub(path, "listen"))
    if listen is not None and (doc.http_host is not None or doc.http_port is not None):
        raise ConfigError(sub(path, "listen"), "give listen or http_host/http_port, not both")
    host, port = listen or (
        doc.http_host or d.http_host,
        d.http_port if doc.http_port is None else doc.http_port,
    )
    if port > 65535:
        raise ConfigError(sub(path, "http_port"), f"{port} is not a port number")
    probe = _listen(doc.probe_listen, sub(path, "probe_listen"))
    ratio = doc.max_invalid_ratio
    if not 0 < ratio <= 1:
        raise ConfigError(sub(path, "max_invalid_ratio"), f"{ratio} must be in (0, 1]")
    web_file = doc.web_config_file or None
    return ServiceSpec(
        http_host=host,
        http_port=port,
        web_config_file=web_file,
        web_config=load_web_config(web_file) if web_file else None,
        http_workers=doc.http_workers,
        http_timeout=seconds(doc.http_timeout, sub(path, "http_timeout"), positive=True),
        http_idle_timeout=seconds(
            doc.http_idle_timeout, sub(path, "http_idle_timeout"), positive=True
        ),
        http_max_connections=doc.http_max_connections,
        probe_host=probe[0] if probe else None,
        probe_port=probe[1] if probe else None,
        max_invalid_ratio=ratio,
        invalid_ratio_min_events=doc.invalid_ratio_min_events,
        log_format=doc.log_format,
        log_level=doc.log_level,
        liveness_timeout=seconds(
            doc.liveness_timeout, sub(path, "liveness_timeout"), positive=True
        ),
        shutdown_timeout=seconds(
            doc.shutdown_timeout, sub(path, "shutdown_timeout"), positive=True
        ),
    )
