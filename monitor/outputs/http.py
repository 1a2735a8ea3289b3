"""The monitor's HTTP endpoints: ``/healthz`` (liveness), ``/readyz`` (readiness), ``/metrics``,
and the status page (``/`` and its data, ``/api/status``); optionally behind TLS, client
certificates and basic authentication (``service.web_config_file``). This module is the
connection side; answering a request is :mod:`monitor.outputs.http_requests`.

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
"""

from __future__ import annotations

import contextlib
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from monitor.config.decode import ConfigError
from monitor.config.webconfig import WebConfig, load_web_config
from monitor.outputs.http_requests import MAX_HEAD, Conn, HttpLimits, Page, Probe, Responder
from monitor.outputs.web_auth import WebState, allowed_san, stamp

__all__ = ["HttpLimits", "HttpServer", "Page", "Probe"]

log = logging.getLogger(__name__)

_HANDSHAKE, _READ, _BUSY = 0, 1, 2


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
        self.limits = limits or HttpLimits()
        self.responder = Responder(
            live=live,
            ready=ready,
            registry=registry,
            extra=extra,
            pages=pages or {},
            limits=self.limits,
            probes_only=probes_only,
        )
        self.name = name
        self.web = WebState(web_config)
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
        self.conns: dict[Conn, None] = {}  # oldest activity first
        self.jobs: queue.Queue[tuple[Conn, bytes | None] | None] = queue.Queue(
            maxsize=self.limits.max_connections + self.limits.workers
        )
        self._returned: deque[Conn] = deque()
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
            conn = Conn(sock, f"{addr[0]}:{addr[1]}", now + self.limits.timeout, state)
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

    def _advance(self, conn: Conn) -> None:
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
    def _take_head(conn: Conn) -> bytes | None:
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

    def _dispatch(self, conn: Conn, head: bytes | None) -> None:
        self._want(conn, 0)
        conn.state = _BUSY
        self.jobs.put_nowait((conn, head))

    def _want(self, conn: Conn, events: int) -> None:
        if events == conn.events:
            return
        if not events:
            self.sel.unregister(conn.sock)
        elif conn.events:
            self.sel.modify(conn.sock, events, conn)
        else:
            self.sel.register(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: Conn) -> None:
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
        now = stamp(self.web.config.files() if self.web.config else (self._web_path,))
        if now == self.web.stamp or now == self._failed_stamp:
            return
        try:
            state = WebState(load_web_config(self._web_path))
        except Exception as exc:  # never the server's end (a ConfigError carries no secret)
            self._failed_stamp = now
            why = exc if isinstance(exc, ConfigError) else type(exc).__name__
            log.error("web config not reloaded, keeping the previous one: %s", why)
            return
        if (state.context is None) != (self.web.context is None):
            self._failed_stamp = now
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
                conn.keep = self.responder.serve(conn, head, self.web)
            except Exception as exc:  # a broken connection, a timeout, a bug in a page
                if not isinstance(exc, OSError):
                    log.exception("http: error answering %s", conn.addr)
                conn.keep = False
            self._returned.append(conn)
            self._wake()
