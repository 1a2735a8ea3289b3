"""Alert delivery: Alertmanager API v2, a JSON webhook (pager), a Kafka topic, the log.

Delivery runs on its own thread behind a queue: a slow or dead receiver never blocks
consumption. Each delivery is retried with exponential backoff; failures are counted per sink
(``fairness_alert_delivery_failures_total``). Firing alerts are re-sent to Alertmanager every
``resend_interval`` with an ``endsAt`` in the future (as Prometheus does), and a resolved alert
is sent with ``endsAt`` = now.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from monitor.alerts.lifecycle import Alert, Transition
from monitor.alerts.rules import SinkSpec

log = logging.getLogger("monitor.alerts")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat().replace("+00:00", "Z")


def alert_json(alert: Alert) -> dict[str, Any]:
    """The alert as the webhook and Kafka sinks send it (event times, state, evidence)."""
    return {
        "name": alert.name,
        "state": alert.state,
        "labels": alert.labels,
        "annotations": alert.annotations,
        "value": None if alert.value != alert.value else alert.value,
        "since": _iso(alert.since),
        "at": _iso(alert.at),
    }


def post_json(url: str, body: Any, timeout: float) -> None:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        if resp.status >= 300:
            raise urllib.error.HTTPError(url, resp.status, "bad status", resp.headers, None)


class Dispatcher:
    """Delivers transitions to the configured sinks from a background thread."""

    def __init__(
        self,
        spec: SinkSpec,
        *,
        kafka_send: Callable[[bytes], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.spec = spec
        self.clock = clock
        self.kafka_send = kafka_send
        self.queue: queue.Queue[Transition | None] = queue.Queue()
        self.failures: Counter[str] = Counter()
        self.delivered: Counter[str] = Counter()
        self.firing: dict[tuple[tuple[str, str], ...], Alert] = {}
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="alert-sinks", daemon=True)
        self.backoff = 0.2

    def start(self) -> None:
        self.thread.start()

    def submit(self, t: Transition) -> None:
        self.queue.put(t)  # never blocks: unbounded, and transitions are rare

    def close(self, timeout: float = 5.0) -> None:
        self.queue.put(None)
        self.thread.join(timeout)

    # -- the delivery thread -------------------------------------------------------------------
    def _run(self) -> None:
        next_resend = self.clock() + self.spec.resend_interval
        while True:
            try:
                t = self.queue.get(timeout=max(0.05, next_resend - self.clock()))
            except queue.Empty:
                t = None
                if self.stop_event.is_set():
                    return
            else:
                if t is None:
                    return
                self._deliver(t)
            if self.clock() >= next_resend:
                if self.firing and self.spec.alertmanager_url:
                    self._retry(
                        "alertmanager", lambda: self._alertmanager(list(self.firing.values()))
                    )
                next_resend = self.clock() + self.spec.resend_interval

    def _deliver(self, t: Transition) -> None:
        a = t.alert
        if a.state == "firing":
            self.firing[a.key] = a
        elif a.state == "resolved":
            self.firing.pop(a.key, None)
        if self.spec.log:
            log.warning(
                "alert %s %s %s: %s",
                a.name,
                a.state,
                ",".join(f"{k}={v}" for k, v in a.labels.items() if k != "alertname"),
                a.annotations.get("summary", ""),
            )
        if a.state == "pending":
            return  # pending alerts are not paged
        if self.spec.alertmanager_url:
            self._retry("alertmanager", lambda: self._alertmanager([a]))
        if self.spec.webhook_url:
            url = self.spec.webhook_url
            self._retry("webhook", lambda: post_json(url, alert_json(a), self.spec.timeout))
        if self.kafka_send is not None:
            send = self.kafka_send
            self._retry("kafka", lambda: send(json.dumps(alert_json(a)).encode()))

    def _alertmanager(self, alerts: list[Alert]) -> None:
        now = self.clock()
        body = []
        for a in alerts:
            ends = now if a.state == "resolved" else now + 4 * self.spec.resend_interval
            body.append(
                {
                    "labels": a.labels,
                    "annotations": {k: str(v) for k, v in a.annotations.items()},
                    "startsAt": _iso(min(now, a.since) if a.since > 0 else now),
                    "endsAt": _iso(ends),
                }
            )
        post_json(f"{self.spec.alertmanager_url}/api/v2/alerts", body, self.spec.timeout)

    def _retry(self, sink: str, send: Callable[[], None]) -> None:
        delay = self.backoff
        for attempt in range(self.spec.max_retries + 1):
            try:
                send()
                self.delivered[sink] += 1
                return
            except Exception as exc:  # any delivery problem: count, back off, try again
                self.failures[sink] += 1
                if attempt == self.spec.max_retries:
                    log.error(
                        "alert delivery to %s failed after %d attempts: %s", sink, attempt + 1, exc
                    )
                    return
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
