"""The monitor's HTTP endpoints: ``/healthz`` (liveness), ``/readyz`` (readiness), ``/metrics``,
and the status page (``/`` and its data, ``/api/status``).

A plain ``ThreadingHTTPServer`` on a daemon thread: scrapes and probes never touch the
consumer's thread, they only read state the loop publishes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Probe = Callable[[], tuple[bool, str]]
Page = Callable[[], tuple[bytes, str]]  # body, content type


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
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._probe(outer.live)
                elif path == "/readyz":
                    self._probe(outer.ready)
                elif path == "/metrics":
                    body = generate_latest(outer.registry) + outer.extra()
                    self._send(200, body, CONTENT_TYPE_LATEST)
                elif path in outer.pages:
                    body, ctype = outer.pages[path]()
                    self._send(200, body, ctype)
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _probe(self, probe: Probe) -> None:
                ok, why = probe()
                self._send(200 if ok else 503, (why + "\n").encode(), "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.live, self.ready, self.registry, self.extra = live, ready, registry, extra
        self.pages = pages or {}
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
