"""Alert delivery: Alertmanager API v2, a JSON webhook (pager), a Kafka topic, the log.

Delivery runs on its own thread behind a bounded queue: a slow or dead receiver never blocks
consumption. What each sink still owes is kept in an :class:`Outbox` (pure: the time is passed
in), so a page that failed is not lost: it is tried again with exponential backoff, capped at
half of ``resend_interval`` (so it arrives within one interval of the receiver's return), until
it is delivered — a firing alert until it is delivered or resolved, a resolved one until it is
delivered. Only the newest state of an alert is owed: a newer one replaces an undelivered older
one (an alert that fired and resolved during an outage arrives as resolved, with its times).

Per sink:

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

Counted per sink: failed attempts (``fairness_alert_delivery_failures_total``), and pages never
delivered (``fairness_alert_pages_undelivered_total``): ``dropped`` when the queue or an outbox
is full, ``given_up`` when the receiver rejects it for good (HTTP 4xx other than 408/429).
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from monitor.alerts.lifecycle import Alert, Transition
from monitor.config.rules import SinkSpec

log = logging.getLogger("monitor.alerts")

QUEUE_SIZE = 10_000  # transitions waiting for the delivery thread
MAX_OWED = 1_000  # undelivered notifications kept per sink (oldest dropped beyond)
SINKS = ("alertmanager", "webhook", "kafka")

Key = tuple[tuple[str, str], ...]


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


def permanent(exc: BaseException) -> bool:
    """A rejection that a retry cannot fix (a 4xx other than timeout / rate limit)."""
    return (
        isinstance(exc, urllib.error.HTTPError)
        and 400 <= exc.code < 500
        and exc.code
        not in (
            408,
            429,
        )
    )


class Outbox:
    """What one sink owes, and when to try (pure: every method takes the time)."""

    def __init__(
        self,
        *,
        resend_all: bool,
        interval: float,
        backoff: float = 0.2,
        max_owed: int = MAX_OWED,
    ) -> None:
        self.resend_all = resend_all  # every post carries all active alerts (Alertmanager)
        self.interval = interval
        self.backoff = backoff
        self.max_owed = max_owed
        self.firing: dict[Key, Alert] = {}
        self.owed: OrderedDict[Key, Alert] = OrderedDict()
        self.failed_in_row = 0
        self.next_try = -math.inf  # backoff after a failure
        self.next_resend = math.inf
        self.undelivered: Counter[str] = Counter()  # reason -> notifications

    def add(self, a: Alert, now: float) -> None:
        """A firing or resolved transition to deliver (it replaces an undelivered older one)."""
        if a.state == "firing":
            self.firing[a.key] = a
            if self.resend_all and self.next_resend == math.inf:
                self.next_resend = now + self.interval
        elif a.state == "resolved":
            self.firing.pop(a.key, None)
        else:
            return  # pending alerts are not paged
        self.owed.pop(a.key, None)
        self.owed[a.key] = a
        while len(self.owed) > self.max_owed:
            self.owed.popitem(last=False)
            self.undelivered["dropped"] += 1

    def seed(self, firing: Iterable[Alert], now: float) -> None:
        """Alerts firing when the monitor (re)started: re-posted at once where the sink keeps
        the active set (delivered to the others before the restart)."""
        if not self.resend_all:
            return
        for a in firing:
            self.firing[a.key] = a
        if self.firing:
            self.next_resend = now

    def due(self, now: float) -> list[Alert]:
        """What to send now (empty: nothing is due)."""
        if now < self.next_try:
            return []
        if not self.resend_all:
            return list(self.owed.values())
        if self.owed or (self.firing and now >= self.next_resend) or self.failed_in_row:
            resolved = [a for a in self.owed.values() if a.state == "resolved"]
            return list(self.firing.values()) + resolved
        return []

    def wake(self, now: float) -> float:
        """The earliest time :meth:`due` may return something (without a new transition)."""
        if self.owed or (self.resend_all and self.firing and self.failed_in_row):
            return max(now, self.next_try)
        if self.resend_all and self.firing:
            return max(now, self.next_try, self.next_resend)
        return math.inf

    def delivered(self, sent: list[Alert], now: float) -> None:
        self._settle(sent)
        self.failed_in_row = 0
        self.next_try = -math.inf
        if self.resend_all:
            self.next_resend = now + self.interval if self.firing else math.inf

    def failed(self, sent: list[Alert], now: float, *, rejected: bool = False) -> None:
        """A transient failure backs off (capped at half an interval); a rejection gives the
        owed notifications up (an Alertmanager's active set is posted again next interval)."""
        if rejected:  # the receiver answered: no backoff, the owed ones are given up
            self.undelivered["given_up"] += self._settle(sent)
            self.failed_in_row, self.next_try = 0, -math.inf
            if self.resend_all:
                self.next_resend = now + self.interval if self.firing else math.inf
            return
        self.failed_in_row += 1
        self.next_try = now + self.retry_delay()

    def retry_delay(self) -> float:
        n = max(0, self.failed_in_row - 1)
        return min(self.backoff * float(2 ** min(n, 30)), self.interval / 2)

    def _settle(self, sent: list[Alert]) -> int:
        n = 0
        for a in sent:
            if self.owed.get(a.key) is a:  # not replaced by a newer state meanwhile
                del self.owed[a.key]
                n += 1
        return n


class Dispatcher:
    """Delivers transitions to the configured sinks from a background thread."""

    def __init__(
        self,
        spec: SinkSpec,
        *,
        kafka_send: Callable[[bytes], None] | None = None,
        clock: Callable[[], float] = time.time,
        queue_size: int = QUEUE_SIZE,
        max_owed: int = MAX_OWED,
    ) -> None:
        self.spec = spec
        self.clock = clock
        self.kafka_send = kafka_send
        self.queue: queue.Queue[Transition | None] = queue.Queue(maxsize=queue_size)
        self.failures: Counter[str] = Counter()
        self.delivered: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()  # at submit, queue full (the caller's thread)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="alert-sinks", daemon=True)
        self.outboxes: dict[str, Outbox] = {}
        self.senders: dict[str, Callable[[list[Alert]], None]] = {}
        interval = float(spec.resend_interval)
        if spec.alertmanager_url:
            self.outboxes["alertmanager"] = Outbox(
                resend_all=True, interval=interval, max_owed=max_owed
            )
            self.senders["alertmanager"] = self._alertmanager
        if spec.webhook_url:
            url = spec.webhook_url
            self.outboxes["webhook"] = Outbox(
                resend_all=False, interval=interval, max_owed=max_owed
            )
            self.senders["webhook"] = lambda alerts: post_json(
                url, alert_json(alerts[0]), spec.timeout
            )
        if kafka_send is not None:
            send = kafka_send
            self.outboxes["kafka"] = Outbox(resend_all=False, interval=interval, max_owed=max_owed)
            self.senders["kafka"] = lambda alerts: send(json.dumps(alert_json(alerts[0])).encode())

    @property
    def backoff(self) -> float:
        return min((box.backoff for box in self.outboxes.values()), default=0.2)

    @backoff.setter
    def backoff(self, seconds: float) -> None:
        for box in self.outboxes.values():
            box.backoff = seconds

    def start(self, firing: Iterable[Alert] = ()) -> None:
        """Start delivering; ``firing``: alerts active when the monitor (re)started."""
        alerts, now = list(firing), self.clock()
        for box in self.outboxes.values():
            box.seed(alerts, now)
        self.thread.start()

    def submit(self, t: Transition) -> None:
        """Never blocks: with the queue full the transition is counted as dropped."""
        try:
            self.queue.put_nowait(t)
        except queue.Full:
            if t.alert.state == "pending":
                return
            for sink in self.outboxes:
                self.dropped[sink] += 1
            if sum(self.dropped.values()) <= len(self.outboxes):
                log.error(
                    "alert queue full (%d): %s not delivered", self.queue.maxsize, t.alert.name
                )

    def undelivered(self, sink: str, reason: str) -> int:
        """Pages never delivered to ``sink``: ``dropped`` or ``given_up``."""
        box = self.outboxes.get(sink)
        n = box.undelivered[reason] if box is not None else 0
        return n + (self.dropped[sink] if reason == "dropped" else 0)

    def close(self, timeout: float = 5.0) -> None:
        """Stop after what was submitted before (queue full: at the next wake-up)."""
        try:
            self.queue.put_nowait(None)
        except queue.Full:
            self.stop_event.set()
        self.thread.join(timeout)

    # -- the delivery thread -------------------------------------------------------------------
    def _run(self) -> None:
        while not self.stop_event.is_set():
            now = self.clock()
            wake = min((box.wake(now) for box in self.outboxes.values()), default=math.inf)
            try:
                t = self.queue.get(timeout=min(max(0.0, wake - now), 1.0))
            except queue.Empty:
                pass
            else:
                if t is None:
                    return
                self._accept(t)
                while True:  # take every waiting transition before sending
                    try:
                        t = self.queue.get_nowait()
                    except queue.Empty:
                        break
                    if t is None:
                        return
                    self._accept(t)
            self._flush()

    def _accept(self, t: Transition) -> None:
        a = t.alert
        if self.spec.log:
            log.warning(
                "alert %s %s %s: %s",
                a.name,
                a.state,
                ",".join(f"{k}={v}" for k, v in a.labels.items() if k != "alertname"),
                a.annotations.get("summary", ""),
            )
        now = self.clock()
        for box in self.outboxes.values():
            box.add(a, now)

    def _flush(self) -> None:
        for sink, box in self.outboxes.items():
            batch = box.due(self.clock())
            if not batch:
                continue
            if box.resend_all:
                self._attempt(sink, box, batch)
                continue
            for a in batch:  # one notification per request; stop at the first outage
                if not self._attempt(sink, box, [a]):
                    break

    def _attempt(self, sink: str, box: Outbox, alerts: list[Alert]) -> bool:
        """Send; True unless the receiver is unreachable or failing (try again later)."""
        try:
            self.senders[sink](alerts)
        except Exception as exc:  # any delivery problem: count, back off, try again
            self.failures[sink] += 1
            rejected = permanent(exc)
            box.failed(alerts, self.clock(), rejected=rejected)
            if rejected:
                log.error("alert delivery to %s rejected, not retried: %s", sink, exc)
                return True
            if box.failed_in_row == 1 or box.failed_in_row == self.spec.max_retries + 1:
                log.error(
                    "alert delivery to %s failed (%d attempts in a row; retrying every %.0fs "
                    "at most): %s",
                    sink,
                    box.failed_in_row,
                    box.interval / 2,
                    exc,
                )
            return False
        if box.failed_in_row:
            log.warning(
                "alert delivery to %s works again after %d failed attempts", sink, box.failed_in_row
            )
        box.delivered(alerts, self.clock())
        self.delivered[sink] += 1
        return True

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
