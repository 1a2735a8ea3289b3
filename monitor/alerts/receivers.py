"""How each alert receiver is spoken to: the alert's JSON, Alertmanager's v2 body, an HTTP
POST, and which rejections are final.

- **Alertmanager** expects clients to re-send firing alerts (its ``resolve_timeout`` logic relies
  on it): every post carries *all* active alerts, with ``endsAt`` four intervals ahead (as
  Prometheus does), so a monitor that died leaves no alert firing forever, and an Alertmanager
  that restarted empty sees them again within one interval. A resolved alert is posted with
  ``endsAt`` = now until Alertmanager takes it.
- **Webhook** (one JSON alert per POST): failed deliveries are retried until delivered; delivered
  alerts are *not* re-sent every interval — a generic receiver (chat, ticketing, a pager's event
  API) would notify again each time.
- **Kafka** (a log of transitions): like the webhook; periodic re-sends would put duplicate
  transitions in the log. A send that timed out may still have landed, so delivery is
  at-least-once: deduplicate on (labels, state, at).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from monitor.alerts.lifecycle import Alert
from monitor.config.durations import iso_utc
from monitor.config.rules import SinkSpec

SINKS = ("alertmanager", "webhook", "kafka")
RESEND_ALL = frozenset({"alertmanager"})  # sinks that keep the active set: sent it each interval

Sender = Callable[[list[Alert]], None]


def notification_id(alert: Alert) -> str:
    """The same for a transition whichever replica (or restart) sends it: alert, labels, state
    and event time hashed. A receiver that keeps the ids it has seen drops the repeat a replica
    killed between a delivery and recording it causes (docs/deploy.md, Scaling out)."""
    key = json.dumps([alert.name, sorted(alert.labels.items()), alert.state, alert.at])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def alert_json(alert: Alert) -> dict[str, Any]:
    """The alert as the webhook and Kafka sinks send it (event times, state, evidence)."""
    return {
        "id": notification_id(alert),
        "name": alert.name,
        "state": alert.state,
        "labels": alert.labels,
        "annotations": alert.annotations,
        "value": None if alert.value != alert.value else alert.value,
        "since": iso_utc(alert.since),
        "at": iso_utc(alert.at),
    }


def alertmanager_body(alerts: list[Alert], now: float, interval: float) -> list[dict[str, Any]]:
    """Alertmanager API v2 alerts: a firing one ends four intervals ahead, a resolved one now."""
    body = []
    for a in alerts:
        ends = now if a.state == "resolved" else now + 4 * interval
        body.append(
            {
                "labels": a.labels,
                "annotations": {k: str(v) for k, v in a.annotations.items()},
                "startsAt": iso_utc(min(now, a.since) if a.since > 0 else now),
                "endsAt": iso_utc(ends),
            }
        )
    return body


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: urllib follows a 301/302/303 answer to a POST with a GET
    without the body, which a receiver (Alertmanager's ``GET /api/v2/alerts``) answers 200 —
    the page was lost and counted as delivered. The 3xx is an error naming where it points."""

    def redirect_request(self, *args: Any) -> None:
        return None


class _Watched:
    """Hands urllib connections whose sockets it keeps (urllib lets go of the connection once
    the answer's headers are in), so :func:`post_json` can cut them off."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []
        self.expired = False
        self.lock = threading.Lock()

    def connection(self, cls: Any) -> Callable[..., http.client.HTTPConnection]:
        def make(*args: Any, **kwargs: Any) -> http.client.HTTPConnection:
            conn: http.client.HTTPConnection = cls(*args, **kwargs)
            create = conn._create_connection  # type: ignore[attr-defined]

            def create_and_keep(*a: Any, **kw: Any) -> socket.socket:
                # kept as soon as it is connected: a proxy's CONNECT answer and the TLS
                # handshake are read on it before connect() returns
                sock: socket.socket = create(*a, **kw)
                with self.lock:
                    self.sockets.append(sock)
                    if self.expired:  # the deadline passed while connecting
                        _cut(sock)
                return sock

            conn._create_connection = create_and_keep  # type: ignore[attr-defined]
            return conn

        return make

    def expire(self) -> None:
        """Shut the sockets: a read blocked in another thread returns at once."""
        with self.lock:
            self.expired = True
            for sock in self.sockets:
                _cut(sock)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, watched: _Watched) -> None:
        super().__init__()
        self.watched = watched

    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(self.watched.connection(http.client.HTTPConnection), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, watched: _Watched) -> None:
        super().__init__()
        self.watched = watched

    def do_open(self, http_class: Any, req: urllib.request.Request, **kwargs: Any) -> Any:
        return super().do_open(self.watched.connection(http_class), req, **kwargs)


def post_json(url: str, body: Any, timeout: float) -> None:
    """POST ``body``; the whole request (connect, send, answer) must finish within
    ``timeout`` seconds. urllib's own timeout bounds each socket operation only: a receiver
    answering a byte every half second held the delivery for as long as it liked."""
    watched = _Watched()
    opener = urllib.request.build_opener(_NoRedirect, _HTTP(watched), _HTTPS(watched))
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    deadline = threading.Timer(timeout, watched.expire)
    deadline.daemon = True
    deadline.start()
    try:
        with opener.open(req, timeout=timeout) as resp:
            if resp.status >= 300:
                raise urllib.error.HTTPError(url, resp.status, "bad status", resp.headers, None)
            resp.read(1 << 16)  # the whole answer (what it says is not used)
    except (OSError, http.client.HTTPException) as exc:
        if watched.expired and not isinstance(exc, urllib.error.HTTPError):
            raise _late(url, timeout) from exc
        raise
    finally:
        deadline.cancel()
    if watched.expired:  # a cut-off answer reads as a short one
        raise _late(url, timeout)


def _late(url: str, timeout: float) -> TimeoutError:
    return TimeoutError(f"no complete answer from {url} within {timeout:g}s")


# answers that may come from something in front of the receiver for a while (an ingress being
# redeployed answers 404, a proxy or an expired session 401/403): retried like a failure for
# one resend interval (``Outbox.doubtful``), then final
DOUBTFUL = frozenset({401, 403, 404})


def permanent(exc: BaseException) -> bool:
    """A rejection that a retry cannot fix: a 4xx other than timeout / rate limit (and, once
    they have lasted, :data:`DOUBTFUL`), or a redirect (the sink's URL is wrong: it names the
    Location to configure instead)."""
    return isinstance(exc, urllib.error.HTTPError) and (
        300 <= exc.code < 400 or (400 <= exc.code < 500 and exc.code not in (408, 429))
    )


# answers that say the receiver (or the way to it) takes nothing now, whatever the payload
SINK_DOWN = frozenset({429, 502, 503, 504})


def answered(exc: BaseException) -> bool:
    """The receiver answered this payload with an error it may not give the next one (a 500
    for a body it cannot take, a 404 that may pass): not evidence that it is down, unlike no
    answer at all (refused, timed out) or :data:`SINK_DOWN`."""
    return isinstance(exc, urllib.error.HTTPError) and exc.code not in SINK_DOWN


def doubtful(exc: BaseException) -> bool:
    """A rejection that may pass: see :data:`DOUBTFUL`."""
    return isinstance(exc, urllib.error.HTTPError) and exc.code in DOUBTFUL


def rejection(exc: BaseException) -> str:
    """What a final rejection says in the log: a redirect's Location, else the error."""
    if isinstance(exc, urllib.error.HTTPError) and 300 <= exc.code < 400:
        where = exc.headers.get("Location") if exc.headers is not None else None
        return f"HTTP {exc.code} redirect to {where!r}: configure that URL (redirects are not followed)"
    return str(exc)


def senders(
    spec: SinkSpec, kafka_send: Callable[[bytes], None] | None, clock: Callable[[], float]
) -> dict[str, Sender]:
    """The configured sinks, by name (in :data:`SINKS` order), each a function that delivers
    a list of alerts or raises. The webhook and Kafka sinks get one alert per call."""
    out: dict[str, Sender] = {}
    if spec.alertmanager_url:
        url = f"{spec.alertmanager_url}/api/v2/alerts"
        interval = float(spec.resend_interval)
        out["alertmanager"] = lambda alerts: post_json(
            url, alertmanager_body(alerts, clock(), interval), spec.timeout
        )
    if spec.webhook_url:
        hook = spec.webhook_url
        out["webhook"] = lambda alerts: post_json(hook, alert_json(alerts[0]), spec.timeout)
    if kafka_send is not None:
        send = kafka_send
        out["kafka"] = lambda alerts: send(json.dumps(alert_json(alerts[0])).encode())
    return out
