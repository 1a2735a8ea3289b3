"""Answering one HTTP request: parse its head, apply the web configuration (rate limit, basic
authentication), route it to a probe, ``/metrics`` or a page, and write the response within its
deadline. The event loop that accepts connections and reads heads is :mod:`monitor.outputs.http`;
its worker threads call :meth:`Responder.serve`.

Authentication, when configured, covers every path, the probes included, as with the Prometheus
exporter-toolkit; Kubernetes probes then use the separate plain listener that serves only
``/healthz`` and ``/readyz`` (``service.probe_listen``; ``probes_only=True``).
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from io import BytesIO
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from monitor.outputs.web_auth import WebState

Probe = Callable[[], tuple[bool, str]]
Page = Callable[[], tuple[bytes, str]]  # body, content type

MAX_HEAD = 16 * 1024
REALM = "fairness-monitor"
PROBES = ("/healthz", "/readyz")


@dataclass(frozen=True)
class HttpLimits:
    workers: int = 8
    timeout: float = 10.0  # accept (or a request's first byte) -> request head; response write
    idle_timeout: float = 60.0  # between requests on a kept-alive connection
    max_connections: int = 256


class Conn:
    """One client connection, owned by the event loop or (while ``BUSY``) by one worker."""

    __slots__ = ("addr", "buf", "deadline", "events", "idle", "keep", "sock", "state")

    def __init__(self, sock: socket.socket, addr: str, deadline: float, state: int) -> None:
        self.sock, self.addr, self.deadline, self.state = sock, addr, deadline, state
        self.buf = bytearray()
        self.events = 0  # selector interest; 0 = not registered
        self.idle = False  # kept alive, waiting for the next request
        self.keep = False  # set by the worker: keep the connection open after the response


class BadRequest(Exception):
    pass


class Responder:
    """The request side of the server: what each path answers, and how a response is sent."""

    def __init__(
        self,
        *,
        live: Probe,
        ready: Probe,
        registry: CollectorRegistry,
        extra: Callable[[], bytes],
        pages: dict[str, Page],
        limits: HttpLimits,
        probes_only: bool,
    ) -> None:
        self.live, self.ready, self.registry, self.extra = live, ready, registry, extra
        self.pages, self.limits, self.probes_only = pages, limits, probes_only

    def serve(self, conn: Conn, head: bytes | None, web: WebState) -> bool:
        """Answer the request whose head is ``head`` (None: too large); keep the connection?"""
        deadline = time.monotonic() + self.limits.timeout
        conn.sock.settimeout(self.limits.timeout)
        if head is None:
            self.send(conn, web, deadline, 431, b"request head too large\n", keep=False)
            return False
        try:
            method, target, version, headers = parse_head(head)
        except BadRequest as exc:
            self.send(conn, web, deadline, 400, f"{exc}\n".encode(), keep=False)
            return False
        keep = persistent(version, headers)
        if headers.get("Content-Length", "0").strip() != "0" or "Transfer-Encoding" in headers:
            keep = False  # bodies are not read: the connection cannot be reused
        send_body = method != "HEAD"
        extra: list[tuple[str, str]] = []
        if method not in ("GET", "HEAD"):
            code, body, ctype = 405, b"method not allowed\n", "text/plain"
            extra.append(("Allow", "GET, HEAD"))
            keep = False
        elif web.bucket is not None and not web.bucket.take():
            code, body, ctype = 429, b"too many requests\n", "text/plain"
        elif not web.auth.check(headers.get("Authorization")):
            code, body, ctype = 401, b"unauthorized\n", "text/plain"
            extra.append(("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'))
        else:
            code, body, ctype = self.route(target)
        self.send(conn, web, deadline, code, body, keep=keep, ctype=ctype, extra=extra,
                   send_body=send_body)  # fmt: skip
        return keep

    def route(self, target: str) -> tuple[int, bytes, str]:
        path = urlsplit(target).path if "://" in target else target.split("?", 1)[0]
        if path in PROBES:
            ok, why = (self.live if path == "/healthz" else self.ready)()
            return 200 if ok else 503, (why + "\n").encode(), "text/plain; charset=utf-8"
        if self.probes_only:
            return 404, b"not found\n", "text/plain"
        if path == "/metrics":
            return 200, generate_latest(self.registry) + self.extra(), CONTENT_TYPE_LATEST
        if path in self.pages:
            body, ctype = self.pages[path]()
            return 200, body, ctype
        return 404, b"not found\n", "text/plain"

    def send(
        self,
        conn: Conn,
        web: WebState,
        deadline: float,
        code: int,
        body: bytes,
        *,
        keep: bool,
        ctype: str = "text/plain",
        extra: list[tuple[str, str]] | None = None,
        send_body: bool = True,
    ) -> None:
        lines = [
            f"HTTP/1.1 {code} {HTTPStatus(code).phrase}",
            f"Date: {formatdate(usegmt=True)}",
            f"Content-Type: {ctype}",
            f"Content-Length: {len(body)}",
            "Connection: keep-alive" if keep else "Connection: close",
        ]
        if keep:
            lines.append(f"Keep-Alive: timeout={int(self.limits.idle_timeout)}")
        lines += [f"{k}: {v}" for k, v in (*(extra or ()), *web.headers)]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body if send_body else b"")
        view = memoryview(data)
        while view:  # the deadline bounds the whole write, however slowly the client reads
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("response write timed out")
            conn.sock.settimeout(left)
            sent = conn.sock.send(view)
            view = view[sent:]
        conn.sock.setblocking(False)


def parse_head(head: bytes) -> tuple[str, str, str, http.client.HTTPMessage]:
    line, _, rest = head.partition(b"\n")
    try:
        method, target, version = line.decode("ascii").strip().split(" ")
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("bad request line") from None
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest("unsupported HTTP version")
    if not target.startswith("/") and "://" not in target:
        raise BadRequest("bad request target")
    try:
        headers = http.client.parse_headers(BytesIO(rest))
    except (http.client.HTTPException, UnicodeDecodeError):
        raise BadRequest("bad request headers") from None
    return method, target, version, headers


def persistent(version: str, headers: http.client.HTTPMessage) -> bool:
    tokens = {t.strip().lower() for t in headers.get("Connection", "").split(",")}
    if version == "HTTP/1.1":
        return "close" not in tokens
    return "keep-alive" in tokens
