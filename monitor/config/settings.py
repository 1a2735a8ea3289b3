"""Service settings: Kafka client, checkpointing, HTTP endpoints, limits.

Secrets never need to sit in the YAML file: ``sasl_password_env: NAME`` reads an environment
variable and ``sasl_password_file: PATH`` a mounted file (Kubernetes secrets).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from monitor.config.node import ConfigError, _Node
from monitor.config.webconfig import WebConfig, load_web_config

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


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
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
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
    log_level: str = "INFO"
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


def _secret(node: _Node, key: str) -> str | None:
    """``key``, ``key_env`` (environment variable name) or ``key_file`` (path)."""
    value = node.get(key)
    env = node.get(f"{key}_env")
    path = node.get(f"{key}_file")
    if sum(v is not None for v in (value, env, path)) > 1:
        raise ConfigError(node.sub(key), f"give only one of {key}, {key}_env, {key}_file")
    if env is not None:
        if str(env) not in os.environ:
            raise ConfigError(node.sub(f"{key}_env"), f"environment variable {env} is not set")
        return os.environ[str(env)]
    if path is not None:
        try:
            return Path(str(path)).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                node.sub(f"{key}_file"), f"cannot read {path}: {exc.strerror}"
            ) from None
    if value is not None and not isinstance(value, str):
        # YAML (and FAIRNESS_MONITOR__… overrides, read as YAML) turns 0123 into 83 and yes
        # into True: a secret that is not text would silently be another secret
        raise ConfigError(
            node.sub(key),
            f"must be text, got a {type(value).__name__} (quote it, or use {key}_env / {key}_file)",
        )
    return value


def _text(node: _Node, key: str, default: str | None) -> str | None:
    raw = node.get(key, default)
    if raw is not None and (not isinstance(raw, str) or not raw):
        raise ConfigError(node.sub(key), f"{raw!r} must be a non-empty string")
    return raw


def _file(node: _Node, key: str) -> str | None:
    path = _text(node, key, None)
    if path is not None and not Path(path).is_file():
        raise ConfigError(node.sub(key), f"{path} is not a readable file")
    return path


def parse_kafka(node: _Node) -> KafkaSpec:
    d = KafkaSpec()
    servers = node.get("bootstrap_servers", list(d.bootstrap_servers))
    if isinstance(servers, str):
        servers = [s.strip() for s in servers.split(",") if s.strip()]
    if (
        not isinstance(servers, list)
        or not servers
        or not all(isinstance(s, str) and ":" in s for s in servers)
    ):
        raise ConfigError(node.sub("bootstrap_servers"), f"{servers!r} must be host:port entries")
    protocol = node.choice("security_protocol", d.security_protocol, SECURITY_PROTOCOLS)
    mechanism = node.get("sasl_mechanism")
    if mechanism is not None and mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            node.sub("sasl_mechanism"), f"{mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}"
        )
    if protocol.startswith("SASL") and mechanism is None:
        raise ConfigError(node.sub("sasl_mechanism"), f"required with {protocol}")
    spec = KafkaSpec(
        bootstrap_servers=tuple(servers),
        client_id=_text(node, "client_id", d.client_id) or d.client_id,
        group_id=_text(node, "group_id", d.group_id) or d.group_id,
        predictions_topic=_text(node, "predictions_topic", d.predictions_topic) or "",
        labels_topic=_text(node, "labels_topic", d.labels_topic) or "",
        dead_letter_topic=_text(node, "dead_letter_topic", None),
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_username=_secret(node, "sasl_username"),
        sasl_password=_secret(node, "sasl_password"),
        ssl_cafile=_file(node, "ssl_cafile"),
        ssl_certfile=_file(node, "ssl_certfile"),
        ssl_keyfile=_file(node, "ssl_keyfile"),
        max_poll_records=node.integer("max_poll_records", d.max_poll_records, minimum=1),
        auto_offset_reset=node.choice(
            "auto_offset_reset",
            "earliest",  # type: ignore[arg-type]
            ("earliest", "latest"),
        ),
        session_timeout_ms=node.integer("session_timeout_ms", d.session_timeout_ms, minimum=1000),
    )
    if spec.predictions_topic == spec.labels_topic:
        raise ConfigError(node.sub("labels_topic"), "must differ from predictions_topic")
    node.finish()
    return spec


def parse_checkpoint(node: _Node) -> CheckpointSpec:
    d = CheckpointSpec()
    spec = CheckpointSpec(
        path=_text(node, "path", d.path) or d.path,
        interval=node.duration("interval", d.interval, positive=True),
        every_events=node.integer("every_events", d.every_events, minimum=1),
        on_corrupt=node.choice("on_corrupt", d.on_corrupt, ("refuse", "fresh")),  # type: ignore[arg-type]
    )
    node.finish()
    return spec


def _listen(node: _Node, key: str) -> tuple[str, int] | None:
    raw = node.get(key)
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ConfigError(node.sub(key), f"{raw!r} is not host:port")
    try:
        return parse_listen(raw)
    except ValueError as exc:
        raise ConfigError(node.sub(key), str(exc)) from None


def parse_limits(node: _Node) -> LimitsSpec:
    d = LimitsSpec()
    spec = LimitsSpec(
        max_record_bytes=node.integer("max_record_bytes", d.max_record_bytes, minimum=64),
        max_id_length=node.integer("max_id_length", d.max_id_length, minimum=1),
        max_value_length=node.integer("max_value_length", d.max_value_length, minimum=16),
    )
    node.finish()
    return spec


def parse_service(node: _Node) -> ServiceSpec:
    d = ServiceSpec()
    listen = _listen(node, "listen")
    if listen is not None and (node.has("http_host") or node.has("http_port")):
        raise ConfigError(node.sub("listen"), "give listen or http_host/http_port, not both")
    host, port = listen or (
        _text(node, "http_host", d.http_host) or d.http_host,
        node.integer("http_port", d.http_port, minimum=0),
    )
    if port > 65535:
        raise ConfigError(node.sub("http_port"), f"{port} is not a port number")
    web_file = _text(node, "web_config_file", None)
    probe = _listen(node, "probe_listen")
    ratio = node.number("max_invalid_ratio", d.max_invalid_ratio)
    if ratio is None or not 0 < ratio <= 1:
        raise ConfigError(node.sub("max_invalid_ratio"), f"{ratio} must be in (0, 1]")
    spec = ServiceSpec(
        http_host=host,
        http_port=port,
        web_config_file=web_file,
        web_config=load_web_config(web_file) if web_file else None,
        http_workers=node.integer("http_workers", d.http_workers, minimum=1),
        http_timeout=node.duration("http_timeout", d.http_timeout, positive=True),
        http_idle_timeout=node.duration("http_idle_timeout", d.http_idle_timeout, positive=True),
        http_max_connections=node.integer(
            "http_max_connections", d.http_max_connections, minimum=1
        ),
        probe_host=probe[0] if probe else None,
        probe_port=probe[1] if probe else None,
        max_invalid_ratio=ratio,
        invalid_ratio_min_events=node.integer(
            "invalid_ratio_min_events", d.invalid_ratio_min_events, minimum=1
        ),
        log_format=node.choice("log_format", d.log_format, ("text", "json")),  # type: ignore[arg-type]
        log_level=node.choice("log_level", d.log_level, ("DEBUG", "INFO", "WARNING", "ERROR")),
        liveness_timeout=node.duration("liveness_timeout", d.liveness_timeout, positive=True),
        shutdown_timeout=node.duration("shutdown_timeout", d.shutdown_timeout, positive=True),
    )
    node.finish()
    return spec
