"""Alert delivery: Alertmanager API v2, a JSON webhook (pager), a Kafka topic, the log.

Delivery runs on its own thread behind a bounded queue: a slow or dead receiver never blocks
consumption. What each sink still owes is kept in an :class:`~monitor.alerts.outbox.Outbox`
(``outbox.py``: retries with backoff capped at half of ``resend_interval``; a working webhook
or Kafka sink is sent every transition in order, during an outage and to Alertmanager only the
newest state of an alert is owed); how each receiver is spoken to (what Alertmanager, a webhook and the
Kafka topic are sent, and which rejections are final) is in ``receivers.py``.

Counted per sink: failed attempts (``fairness_alert_delivery_failures_total``), and pages never
delivered (``fairness_alert_pages_undelivered_total``): ``dropped`` when the queue or an outbox
is full, ``given_up`` when the receiver rejects it for good (HTTP 4xx other than 408/429).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

from monitor.alerts.lifecycle import Alert, Transition
from monitor.alerts.outbox import MAX_OWED, Outbox
from monitor.alerts.receivers import (
    RESEND_ALL,
    SINKS,
    Sender,
    alert_json,
    permanent,
    rejection,
    senders,
)
from monitor.config.rules import SinkSpec

# alert_json and SINKS live in receivers.py; imported from here by the outputs and the app
__all__ = ["QUEUE_SIZE", "SINKS", "Dispatcher", "alert_json"]

log = logging.getLogger("monitor.alerts")

QUEUE_SIZE = 10_000  # transitions waiting for the delivery thread


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
        self.queue: queue.Queue[Transition | list[Alert] | None] = queue.Queue(maxsize=queue_size)
        # transitions taken by the delivery thread, and how many of them had been delivered
        # (or given up) at the last moment no sink owed anything: what a judging replica
        # records as delivered (app/global_alerts.py)
        self.queued = 0  # transitions queued (the caller's thread): the last ticket given
        self.accepted = 0
        self.settled = 0
        self.failures: Counter[str] = Counter()
        self.delivered: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()  # at submit, queue full (the caller's thread)
        self.stop_event = threading.Event()
        self.abandoning = threading.Event()  # set by abandon(): stop sending what is owed
        self.thread = threading.Thread(target=self._run, name="alert-sinks", daemon=True)
        self.senders: dict[str, Sender] = senders(spec, kafka_send, lambda: self.clock())
        interval = float(spec.resend_interval)
        self.outboxes = {
            sink: Outbox(resend_all=sink in RESEND_ALL, interval=interval, max_owed=max_owed)
            for sink in self.senders
        }

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

    def submit(self, t: Transition) -> int | None:
        """Never blocks: with the queue full the transition is counted as dropped (``None``).
        Else its ticket: the delivery thread takes transitions in ticket order, so once
        ``settled`` reaches the ticket, the transition was delivered or given up."""
        try:
            self.queue.put_nowait(t)
        except queue.Full:
            if t.alert.state != "pending":
                for sink in self.outboxes:
                    self.dropped[sink] += 1
                if sum(self.dropped.values()) <= len(self.outboxes):
                    log.error(
                        "alert queue full (%d): %s not delivered", self.queue.maxsize, t.alert.name
                    )
            return None
        self.queued += 1
        return self.queued

    def abandon(self) -> None:
        """Another replica delivers from now on: forget what is owed (queued: the outboxes are
        the delivery thread's; the thread stops sending at once). What was being sent at this
        moment may still arrive (with the same notification id)."""
        self.abandoning.set()
        self.queue.put([])

    def reseed(self, firing: Iterable[Alert]) -> None:
        """Alerts firing when this replica took over delivery: re-posted where the sink keeps
        the active set, as at :meth:`start` (queued: the outboxes are the delivery thread's)."""
        self.queue.put(list(firing))

    def undelivered(self, sink: str, reason: str) -> int:
        """Pages never delivered to ``sink``: ``dropped`` or ``given_up``."""
        box = self.outboxes.get(sink)
        n = box.undelivered[reason] if box is not None else 0
        return n + (self.dropped[sink] if reason == "dropped" else 0)

    def close(self, timeout: float = 5.0) -> None:
        """Stop after one more attempt to deliver what was submitted before (queue full: at the
        next wake-up). A transition submitted just before is sent, not dropped on the way out
        (a page that fired in the last poll before a rolling restart)."""
        try:
            self.queue.put_nowait(None)
        except queue.Full:
            self.stop_event.set()
        if not self.thread.is_alive() and self.thread.ident is None:
            self.thread.start()  # never started: deliver what was submitted, then stop
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
                while t is not None:  # take every waiting transition before sending
                    self._accept(t)
                    try:
                        t = self.queue.get_nowait()
                    except queue.Empty:
                        break
                if t is None:  # closing: one last attempt for what was taken, then stop
                    self._last_attempt()
                    return
            self._flush()
            self._settle()

    def _last_attempt(self) -> None:
        """At close: try once more whatever the backoff says (the receiver may be back), then
        say in the log what stays undelivered (the last checkpoint keeps what it owed, and the
        restarted monitor sends that again: ``app/alerting.py``)."""
        for box in self.outboxes.values():
            box.next_try = -math.inf
        self._flush()
        for sink, box in self.outboxes.items():
            if box.owed:
                names = sorted({a.name for a in box.owed.values()})
                log.error(
                    "stopping with %d alert notification(s) to %s undelivered (%s): those the "
                    "last checkpoint owed are sent again after the restart (with scope local "
                    "or global); the rest are in this log",
                    len(box.owed),
                    sink,
                    ", ".join(names),
                )

    def _settle(self) -> None:
        """``settled``: the ticket through which every sink has what it is owed (delivered,
        given up, or replaced by a newer state), also while a later one is still owed — a
        replica handing delivery over records exactly that much as delivered."""
        owed = [t for box in self.outboxes.values() if (t := box.oldest_ticket()) is not None]
        self.settled = max(self.settled, min(owed) - 1 if owed else self.accepted)

    def _accept(self, t: Transition | list[Alert]) -> None:
        if isinstance(t, list):
            for box in self.outboxes.values():
                if t:
                    box.seed(t, self.clock())
                else:  # abandon
                    box.clear()
            if not t:
                self.abandoning.clear()
            self.settled = self.accepted
            return
        self.accepted += 1
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
            box.add(a, now, self.accepted)

    def _flush(self) -> None:
        for sink, box in self.outboxes.items():
            batch = box.due(self.clock())
            if not batch:
                continue
            if box.resend_all:
                self._attempt(sink, box, batch)
                continue
            for a in batch:  # one notification per request; stop at the first outage
                if self.abandoning.is_set():
                    return  # another replica delivers now: not one more from here
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
                log.error("alert delivery to %s rejected, not retried: %s", sink, rejection(exc))
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
