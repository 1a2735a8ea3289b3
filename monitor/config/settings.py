"""Service settings: checkpointing, HTTP endpoints, limits (the Kafka client's are in
``kafka.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from msgspec import Meta

from monitor.config.decode import ConfigError, Doc, sub
from monitor.config.durations import Duration, seconds
from monitor.config.webconfig import WebConfig, load_web_config


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
    dead-lettered (``record_too_large``, ``id_too_long``), as is a serving stack's call of over
    ``max_rows_per_record`` rows (``too_many_rows``: each row is a decision to keep until its
    other half and label come, so rows, not bytes, are what it costs); an attribute value over
    ``max_value_length`` characters is kept, counted, under a stable shortened name (its first
    characters, ``~`` and a hash of the whole value), so the event still counts.
    """

    max_record_bytes: int = 1 << 20
    max_id_length: int = 256
    max_value_length: int = 128
    max_rows_per_record: int = 10_000


Text = Annotated[str, Meta(min_length=1)]
Positive = Annotated[int, Meta(ge=1)]


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
    max_rows_per_record: Annotated[
        int, Meta(ge=1, description="decisions one serving-stack call (a batch) may hold")
    ] = LimitsSpec.max_rows_per_record


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
    return LimitsSpec(
        doc.max_record_bytes, doc.max_id_length, doc.max_value_length, doc.max_rows_per_record
    )


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
