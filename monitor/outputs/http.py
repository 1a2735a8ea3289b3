"""The monitor's HTTP endpoints: ``/healthz`` (liveness), ``/readyz`` (readiness), ``/metrics``,
and the status page (``/`` and its data, ``/api/status``); optionally behind TLS, client
certificates and basic authentication (``service.web_config_file``, see :mod:`monitor.config.webconfig`).

Scrapes and probes never touch the consumer's thread: they only read state the loop publishes.

Threads and memory are bounded whatever the clients do:

* one **event-loop thread** (``http``) accepts connections, does the TLS handshakes and reads
  request heads without blocking; a connection that is idle, or slow to handshake or to send its
  request head, costs a file descriptor and a few kilobytes, never a thread;
* a fixed pool of ``workers`` threads (``http-worker-N``) answers complete requests, fed by a
  queue that holds at most one request per open connection;
* every connection has a deadline: ``timeout`` from its accept (or from the first byte of a
  request on a kept-alive connection) to the end of the request head, which covers the TLS
  handshake and slowloris clients; ``timeout`` again to write the response; ``idle_timeout``
  between requests on a kept-alive connection. Past it the connection is closed;
* at most ``max_connections`` are open; one more evicts the oldest connection not in a worker,
  so a flood of idle connections cannot lock out a scrape. Request heads are limited to 16 KiB
  (431), request bodies are not accepted (GET and HEAD only).

Authentication, when configured, covers every path, the probes included, as with the Prometheus
exporter-toolkit; Kubernetes probes then use the separate plain listener that serves only
``/healthz`` and ``/readyz`` (``service.probe_listen``; ``probes_only=True`` here).
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import queue
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from io import BytesIO
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from monitor.config.node import ConfigError
from monitor.config.webconfig import (
    Authenticator,
    TokenBucket,
    WebConfig,
    allowed_san,
    load_web_config,
    server_context,
)

log = logging.getLogger(__name__)

Probe = Callable[[], tuple[bool, str]]
Page = Callable[[], tuple[bytes, str]]  # body, content type

MAX_HEAD = 16 * 1024
REALM = "fairness-monitor"
PROBES = ("/healthz", "/readyz")
_HANDSHAKE, _READ, _BUSY = 0, 1, 2


@dataclass(frozen=True)
class HttpLimits:
    workers: int = 8
    timeout: float = 10.0  # accept (or a request's first byte) -> request head; response write
    idle_timeout: float = 60.0  # between requests on a kept-alive connection
    max_connections: int = 256


class _Conn:
    __slots__ = ("addr", "buf", "deadline", "events", "idle", "keep", "sock", "state")

    def __init__(self, sock: socket.socket, addr: str, deadline: float, state: int) -> None:
        self.sock, self.addr, self.deadline, self.state = sock, addr, deadline, state
        self.buf = bytearray()
        self.events = 0  # selector interest; 0 = not registered
        self.idle = False  # kept alive, waiting for the next request
        self.keep = False  # set by the worker: keep the connection open after the response


class _WebState:
    """The web configuration in force and what is derived from it (swapped whole on reload)."""

    def __init__(self, config: WebConfig | None) -> None:
        self.config = config
        self.context = server_context(config.tls) if config and config.tls else None
        self.auth = Authenticator(config.users if config else {})
        self.bucket = TokenBucket(config.rate_limit) if config and config.rate_limit else None
        self.headers = config.headers if config else ()
        self.stamp = _stamp(config.files()) if config else ()


def _stamp(files: tuple[str, ...]) -> tuple[tuple[int, int] | None, ...]:
    out: list[tuple[int, int] | None] = []
    for f in files:
        try:
            st = os.stat(f)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class _BadRequest(Exception):
    pass


def _ensure_fds(needed: int) -> None:
    """Raise the soft open-files limit towards ``needed`` (as Go programs do at start)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < needed:
            target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            if target < needed:
                log.warning(
                    "open-files limit %d is below the %d that http max_connections needs",
                    target,
                    needed,
                )
    except (ImportError, ValueError, OSError):
        pass


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        live: Probe,
        ready: Probe,
        registry: CollectorRegistry,
        extra: Callable[[], bytes] = lambda: b"",
        pages: dict[str, Page] | None = None,
        web_config: WebConfig | None = None,
        limits: HttpLimits | None = None,
        probes_only: bool = False,
        name: str = "http",
    ) -> None:
        self.live, self.ready, self.registry, self.extra = live, ready, registry, extra
        self.pages = pages or {}
        self.limits = limits or HttpLimits()
        self.probes_only = probes_only
        self.name = name
        self.web = _WebState(web_config)
        self._web_path = web_config.path if web_config else None
        self._failed_stamp: tuple[tuple[int, int] | None, ...] | None = None
        _ensure_fds(self.limits.max_connections + 128)

        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, _, _, _, addr = infos[0]
        dual = family == socket.AF_INET6 and host in ("::", "") and socket.has_dualstack_ipv6()
        self.listener = socket.create_server(
            addr[:2], family=family, backlog=128, reuse_port=False, dualstack_ipv6=dual
        )
        self.listener.setblocking(False)
        self.port = int(self.listener.getsockname()[1])
        self.scheme = "https" if self.web.context else "http"

        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.conns: dict[_Conn, None] = {}  # oldest activity first
        self.jobs: queue.Queue[tuple[_Conn, bytes | None] | None] = queue.Queue(
            maxsize=self.limits.max_connections + self.limits.workers
        )
        self._returned: deque[_Conn] = deque()
        self._stopping = False
        self._accept_paused_until = 0.0
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.workers = [
            threading.Thread(target=self._work, name=f"{name}-worker-{i}", daemon=True)
            for i in range(self.limits.workers)
        ]

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        for w in self.workers:
            w.start()
        self.thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake()
        if self.thread.is_alive():
            self.thread.join(5)
        for _ in self.workers:
            self.jobs.put(None)
        for w in self.workers:
            if w.is_alive():
                w.join(self.limits.timeout + 1)
        for conn in list(self.conns):
            self._close(conn)
        self.sel.close()
        for s in (self.listener, self._wake_r, self._wake_w):
            s.close()

    def _wake(self) -> None:
        # OSError: the buffer is full (a wake-up is pending anyway) or the server is closed
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    # -- event loop (the "http" thread) ----------------------------------------------------------
    def _loop(self) -> None:
        tick = min(0.25, self.limits.timeout / 4)
        next_sweep = next_reload = 0.0
        while not self._stopping:
            for key, _ in self.sel.select(tick):
                if key.data == "listen":
                    self._accept()
                elif key.data == "wake":
                    self._drain()
                else:
                    self._advance(key.data)
            now = time.monotonic()
            if now >= next_sweep:
                self._sweep(now)
                next_sweep = now + tick
            if self._accept_paused_until and now >= self._accept_paused_until:
                self._accept_paused_until = 0.0
                self.sel.register(self.listener, selectors.EVENT_READ, "listen")
            if self._web_path and now >= next_reload:
                self._reload()
                next_reload = now + 1.0

    def _accept(self) -> None:
        now = time.monotonic()
        for _ in range(64):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: make room or pause
                if not self._evict():
                    log.warning("http: cannot accept connections: %s", exc.strerror)
                    self.sel.unregister(self.listener)
                    self._accept_paused_until = now + 0.1
                return
            if len(self.conns) >= self.limits.max_connections and not self._evict():
                sock.close()
                continue
            sock.setblocking(False)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            context = self.web.context
            state = _READ
            if context is not None:
                sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                state = _HANDSHAKE
            conn = _Conn(sock, f"{addr[0]}:{addr[1]}", now + self.limits.timeout, state)
            self.conns[conn] = None
            self._want(conn, selectors.EVENT_READ)

    def _evict(self) -> bool:
        """Close the connection with the oldest activity that no worker holds."""
        for conn in self.conns:
            if conn.state != _BUSY:
                log.debug("http: connection limit reached, closing %s", conn.addr)
                self._close(conn)
                return True
        return False

    def _advance(self, conn: _Conn) -> None:
        """Handshake and read as far as possible without blocking; hand a complete head over."""
        try:
            if conn.state == _HANDSHAKE:
                assert isinstance(conn.sock, ssl.SSLSocket)
                conn.sock.do_handshake()
                conn.state = _READ
                tls = self.web.config.tls if self.web.config else None
                if tls and not allowed_san(tls, conn.sock.getpeercert()):
                    log.debug("http: client certificate of %s has no allowed SAN", conn.addr)
                    self._close(conn)
                    return
            while True:
                head = self._take_head(conn)
                if head is not None or len(conn.buf) > MAX_HEAD:
                    too_large = head is None or len(head) > MAX_HEAD
                    self._dispatch(conn, None if too_large else head)
                    return
                data = conn.sock.recv(65536)
                if not data:
                    self._close(conn)
                    return
                if conn.idle:  # the next request on a kept-alive connection begins
                    conn.idle = False
                    conn.deadline = time.monotonic() + self.limits.timeout
                conn.buf += data
        except ssl.SSLWantWriteError:
            self._want(conn, selectors.EVENT_WRITE)
        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            self._want(conn, selectors.EVENT_READ)
        except ssl.SSLError as exc:
            log.debug("http: TLS with %s failed: %s", conn.addr, exc.reason or exc.strerror)
            self._close(conn)
        except OSError:
            self._close(conn)

    @staticmethod
    def _take_head(conn: _Conn) -> bytes | None:
        buf = conn.buf
        while buf[:2] == b"\r\n" or buf[:1] == b"\n":  # empty lines before a request
            del buf[: 2 if buf[:1] == b"\r" else 1]
        ends = [i + n for i, n in ((buf.find(b"\r\n\r\n"), 4), (buf.find(b"\n\n"), 2)) if i >= 0]
        if not ends:
            return None
        end = min(ends)
        head = bytes(buf[:end])
        del buf[:end]
        return head

    def _dispatch(self, conn: _Conn, head: bytes | None) -> None:
        self._want(conn, 0)
        conn.state = _BUSY
        self.jobs.put_nowait((conn, head))

    def _want(self, conn: _Conn, events: int) -> None:
        if events == conn.events:
            return
        if not events:
            self.sel.unregister(conn.sock)
        elif conn.events:
            self.sel.modify(conn.sock, events, conn)
        else:
            self.sel.register(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: _Conn) -> None:
        if conn.events:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(conn.sock)
            conn.events = 0
        self.conns.pop(conn, None)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _sweep(self, now: float) -> None:
        for conn in [c for c in self.conns if c.state != _BUSY and now >= c.deadline]:
            log.debug("http: closing %s (timeout)", conn.addr)
            self._close(conn)

    def _drain(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while self._returned:
            conn = self._returned.popleft()
            if not conn.keep or self._stopping:
                self._close(conn)
                continue
            conn.state, conn.idle = _READ, True
            conn.deadline = time.monotonic() + self.limits.idle_timeout
            self.conns.pop(conn, None)
            self.conns[conn] = None  # most recent activity last
            self._advance(conn)  # a pipelined request may already be buffered

    def _reload(self) -> None:
        assert self._web_path is not None
        stamp = _stamp(self.web.config.files() if self.web.config else (self._web_path,))
        if stamp == self.web.stamp or stamp == self._failed_stamp:
            return
        try:
            state = _WebState(load_web_config(self._web_path))
        except ConfigError as exc:  # messages never carry secrets
            self._failed_stamp = stamp
            log.error("web config not reloaded, keeping the previous one: %s", exc)
            return
        if (state.context is None) != (self.web.context is None):
            self._failed_stamp = stamp
            log.error("web config not reloaded: turning TLS on or off needs a restart")
            return
        self.web, self._failed_stamp = state, None
        log.info("web config %s reloaded", self._web_path)

    # -- workers ----------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            conn, head = job
            try:
                conn.keep = self._serve(conn, head)
            except Exception as exc:  # a broken connection, a timeout, a bug in a page
                if not isinstance(exc, OSError):
                    log.exception("http: error answering %s", conn.addr)
                conn.keep = False
            self._returned.append(conn)
            self._wake()

    def _serve(self, conn: _Conn, head: bytes | None) -> bool:
        deadline = time.monotonic() + self.limits.timeout
        conn.sock.settimeout(self.limits.timeout)
        web = self.web
        if head is None:
            self._send(conn, web, deadline, 431, b"request head too large\n", keep=False)
            return False
        try:
            method, target, version, headers = _parse_head(head)
        except _BadRequest as exc:
            self._send(conn, web, deadline, 400, f"{exc}\n".encode(), keep=False)
            return False
        keep = _persistent(version, headers)
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
            code, body, ctype = self._route(target)
        self._send(conn, web, deadline, code, body, keep=keep, ctype=ctype, extra=extra,
                   send_body=send_body)  # fmt: skip
        return keep

    def _route(self, target: str) -> tuple[int, bytes, str]:
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

    def _send(
        self,
        conn: _Conn,
        web: _WebState,
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


def _parse_head(head: bytes) -> tuple[str, str, str, http.client.HTTPMessage]:
    line, _, rest = head.partition(b"\n")
    try:
        method, target, version = line.decode("ascii").strip().split(" ")
    except (UnicodeDecodeError, ValueError):
        raise _BadRequest("bad request line") from None
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise _BadRequest("unsupported HTTP version")
    if not target.startswith("/") and "://" not in target:
        raise _BadRequest("bad request target")
    try:
        headers = http.client.parse_headers(BytesIO(rest))
    except (http.client.HTTPException, UnicodeDecodeError):
        raise _BadRequest("bad request headers") from None
    return method, target, version, headers


def _persistent(version: str, headers: http.client.HTTPMessage) -> bool:
    tokens = {t.strip().lower() for t in headers.get("Connection", "").split(",")}
    if version == "HTTP/1.1":
        return "close" not in tokens
    return "keep-alive" in tokens
