"""The service's HTTP endpoints: the status page, ``/metrics`` (operational and fairness
families), ``/healthz`` and ``/readyz``; with ``service.probe_listen`` also a plain probe-only
server (so a kubelet needs no TLS client certificate or password)."""

from __future__ import annotations

import logging
from typing import Protocol

from prometheus_client import CollectorRegistry

from monitor.config.spec import Config
from monitor.outputs.exporter import FairnessExposition
from monitor.outputs.http import HttpLimits, HttpServer
from monitor.outputs.status import StatusEndpoint, StatusState, page_html

log = logging.getLogger("monitor.app.service")


class Served(Protocol):
    """What the endpoints read from the service (``Monitor``)."""

    config: Config
    registry: CollectorRegistry
    exposition: FairnessExposition
    status: StatusState

    def live(self) -> tuple[bool, str]: ...

    def ready(self) -> tuple[bool, str]: ...


def start_http(m: Served) -> tuple[HttpServer, HttpServer | None]:
    """The endpoints (status page, /metrics, probes) and, with ``service.probe_listen``, a
    plain probe-only server."""
    s = m.config.service
    m.exposition.evidence = lambda: m.status.evidence  # the evidence gauges, as published
    limits = HttpLimits(
        workers=s.http_workers,
        timeout=s.http_timeout,
        idle_timeout=s.http_idle_timeout,
        max_connections=s.http_max_connections,
    )
    http = HttpServer(
        s.http_host,
        s.http_port,
        web_config=s.web_config,
        limits=limits,
        live=m.live,
        ready=m.ready,
        registry=m.registry,
        extra=m.exposition,
        pages={
            "/": lambda: (page_html(), "text/html; charset=utf-8"),
            "/api/status": StatusEndpoint(
                lambda: m.status, confidence=m.config.confidence, rules=m.config.alerts.rules
            ),
        },
    )
    http.start()
    web = s.web_config
    log.info(
        "http endpoints on %s port %d (/ status page, /metrics, /healthz, /readyz); %s",
        http.scheme,
        http.port,
        "authentication required"
        if web is not None and web.authenticates()
        else "no authentication: anyone who can reach the port reads them "
        "(see service.web_config_file)",
    )
    probes = None
    if s.probe_host is not None and s.probe_port is not None:
        probes = HttpServer(
            s.probe_host,
            s.probe_port,
            live=m.live,
            ready=m.ready,
            registry=m.registry,
            limits=HttpLimits(workers=1, timeout=s.http_timeout, max_connections=16),
            probes_only=True,
            name="http-probes",
        )
        probes.start()
        log.info("probe endpoints on http port %d (/healthz, /readyz)", probes.port)
    return http, probes


def stop_servers(*servers: HttpServer | None) -> None:
    for server in servers:
        if server is not None:
            server.stop()
