"""Alert delivery: Alertmanager API v2, a JSON webhook (pager), a Kafka topic, the log.

Each sink has its own delivery thread, so a slow or dead receiver holds back only itself, and
never the consumer: :meth:`Dispatcher.submit` puts a transition straight into each sink's
:class:`~monitor.alerts.outbox.Outbox` (``outbox.py``: what the sink still owes, retries with
backoff capped at half of ``resend_interval``; a working webhook or Kafka sink is sent every
transition in order, during an outage and to Alertmanager only the newest state of an alert is
owed) and wakes the sink's thread. There is no queue in between that could fill: what a sink
owes is bounded by the outbox (``MAX_OWED``, the oldest dropped and counted), and a resolved
notice always reaches the outbox, where it replaces its alert's firing state. Every request
must finish within ``sinks.timeout`` as a whole (``receivers.post_json``). How each receiver is
spoken to (what Alertmanager, a webhook and the Kafka topic are sent, and which rejections are
final) is in ``receivers.py``.

Counted per sink: failed attempts (``fairness_alert_delivery_failures_total``), and pages never
delivered (``fairness_alert_pages_undelivered_total``): ``dropped`` when a sink owes more than
``MAX_OWED``, ``given_up`` when the receiver rejects it for good (HTTP 4xx other than 408/429).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable

from monitor.alerts.lifecycle import Alert, Transition
from monitor.alerts.outbox import MAX_OWED, Outbox
from monitor.alerts.receivers import (
    RESEND_ALL,
    SINKS,
    Sender,
    alert_json,
    answered,
    doubtful,
    permanent,
    rejection,
    senders,
)
from monitor.config.rules import SinkSpec

# alert_json and SINKS live in receivers.py; imported from here by the outputs and the app
__all__ = ["SINKS", "Dispatcher", "alert_json"]

log = logging.getLogger("monitor.alerts")


class Dispatcher:
    """Delivers transitions to the configured sinks, each from its own background thread.

    One lock guards every outbox and the tickets; a sink's thread holds it only to read what is
    due and to record how a send went, never while it sends."""

    def __init__(
        self,
        spec: SinkSpec,
        *,
        kafka_send: Callable[[bytes], None] | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.monotonic,
        max_owed: int = MAX_OWED,
    ) -> None:
        self.spec = spec
        self.clock = clock  # wall time: what the bodies say (startsAt, endsAt)
        self.timer = timer  # backoffs and resends: a wall clock stepped back holds no page
        self.kafka_send = kafka_send
        self.lock = threading.Lock()
        self.queued = 0  # transitions submitted: the last ticket given
        self._settled = 0
        self.failures: Counter[str] = Counter()
        self.delivered: Counter[str] = Counter()
        self.stopping = False
        self.sending = 0  # requests under way (the lock released meanwhile)
        self.senders: dict[str, Sender] = senders(spec, kafka_send, lambda: self.clock())
        interval = float(spec.resend_interval)
        self.outboxes = {
            sink: Outbox(
                resend_all=sink in RESEND_ALL,
                interval=interval,
                max_owed=max_owed,
            )
            for sink in self.senders
        }
        self.wakes = {sink: threading.Condition(self.lock) for sink in self.senders}
        self.threads = [
            threading.Thread(target=self._run, args=(sink,), name=f"alert-{sink}", daemon=True)
            for sink in self.senders
        ]
        self.started = False

    @property
    def accepted(self) -> int:
        """Transitions the outboxes have taken (all submitted ones: submit puts them there)."""
        return self.queued

    @property
    def settled(self) -> int:
        """The ticket through which every sink has what it is owed (delivered, given up, or
        replaced by a newer state), also while a later one is still owed. A watermark: what is
        recorded as delivered reads :meth:`owed_tickets` instead (a refused page holds this)."""
        with self.lock:
            owed = [t for box in self.outboxes.values() if (t := box.oldest_ticket()) is not None]
            self._settled = max(self._settled, min(owed) - 1 if owed else self.queued)
            return self._settled

    @property
    def backoff(self) -> float:
        return min((box.backoff for box in self.outboxes.values()), default=0.2)

    @backoff.setter
    def backoff(self, seconds: float) -> None:
        for box in self.outboxes.values():
            box.backoff = seconds

    def start(self, firing: Iterable[Alert] = ()) -> None:
        """Start delivering; ``firing``: alerts active when the monitor (re)started."""
        self.reseed(firing)
        self.started = True
        for thread in self.threads:
            thread.start()

    def submit(self, t: Transition, only: Collection[str] | None = None) -> int:
        """Never blocks on a receiver: the transition goes into every sink's outbox (``only``:
        into those sinks' alone). Its ticket: once ``settled`` reaches it, the transition was
        delivered or given up."""
        a = t.alert
        if self.spec.log:
            log.warning(
                "alert %s %s %s: %s",
                a.name,
                a.state,
                ",".join(f"{k}={v}" for k, v in a.labels.items() if k != "alertname"),
                a.annotations.get("summary", ""),
            )
        with self.lock:
            self.queued += 1
            if a.state != "pending":
                now = self.timer()
                for sink, box in self.outboxes.items():
                    if only is not None and sink not in only:
                        continue
                    before = box.undelivered["dropped"]
                    box.add(a, now, self.queued)
                    if box.undelivered["dropped"] > before:
                        self._said_dropped(sink, box.undelivered["dropped"])
                    self.wakes[sink].notify()
            return self.queued

    def abandon(self) -> None:
        """Another replica delivers from now on: forget what is owed, at once. What was being
        sent at this moment may still arrive (with the same notification id)."""
        with self.lock:
            for box in self.outboxes.values():
                box.clear()
            self._settled = self.queued

    def reseed(self, firing: Iterable[Alert]) -> None:
        """Alerts firing when this replica took over delivery (or started): re-posted where the
        sink keeps the active set."""
        alerts = list(firing)
        with self.lock:
            now = self.timer()
            for sink, box in self.outboxes.items():
                box.seed(alerts, now)
                self.wakes[sink].notify()

    def track(self, t: Transition) -> None:
        """A transition another replica delivered (``alerts.scope: global``): owed nothing,
        but the active set posted to Alertmanager follows it."""
        with self.lock:
            now = self.timer()
            for box in self.outboxes.values():
                box.track(t.alert, now)

    def dropped(self, n: int) -> None:
        """``n`` notifications lost before any sink had them (``alerts.scope: global``: judged
        while no replica delivered, let go past the bound, not to be judged again): counted
        as each sink's ``dropped``."""
        with self.lock:
            for box in self.outboxes.values():
                box.undelivered["dropped"] += n

    def quiet(self) -> bool:
        """Nothing under way: no request in flight and nothing due now (what is still owed
        waits for a backoff). A handover waits for this, not for every page to be delivered:
        a page a receiver refuses would hold it for its whole wait."""
        with self.lock:
            now = self.timer()
            return not self.sending and all(b.wake(now) > now for b in self.outboxes.values())

    def owed_tickets(self) -> set[int]:
        """The tickets some sink still owes (every other one was delivered, given up, or
        replaced by a newer state): what a restart must send again, whatever came after it."""
        return set(self.owing_sinks())

    def owing_sinks(self) -> dict[int, set[str]]:
        """Each ticket still owed, with the sinks that owe it: a restart sends it to those only
        (the others had it)."""
        out: dict[int, set[str]] = {}
        with self.lock:
            for sink, box in self.outboxes.items():
                for ticket in box.owed_tickets():
                    out.setdefault(ticket, set()).add(sink)
        return out

    def undelivered(self, sink: str, reason: str) -> int:
        """Pages never delivered to ``sink``: ``dropped`` or ``given_up``."""
        box = self.outboxes.get(sink)
        return box.undelivered[reason] if box is not None else 0

    def close(self, timeout: float = 5.0) -> None:
        """Stop after one more attempt to deliver what was submitted (whatever the backoff): a
        page that fired in the last poll before a rolling restart is sent, not dropped on the
        way out. Each sink's last attempt is bounded by its request timeout; ``timeout`` bounds
        the wait for all of them."""
        with self.lock:
            self.stopping = True
            for wake in self.wakes.values():
                wake.notify()
        if not self.started:  # never started: deliver what was submitted, then stop
            self.started = True
            for thread in self.threads:
                thread.start()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- a sink's delivery thread (holding the lock except while it sends) ----------------------
    def _run(self, sink: str) -> None:
        box, wake = self.outboxes[sink], self.wakes[sink]
        with self.lock:
            while not self.stopping:
                now = self.timer()
                batch = box.due(now)
                if batch:
                    self._send(sink, box, batch)
                else:
                    wake.wait(min(max(0.0, box.wake(now) - now), 1.0))
            self._last_attempt(sink, box)

    def _last_attempt(self, sink: str, box: Outbox) -> None:
        """At close: try once more whatever the backoff says (the receiver may be back), then
        say in the log what stays undelivered (the last checkpoint keeps what it owed, and the
        restarted monitor sends that again: ``app/alerting.py``)."""
        box.hurry()
        batch = box.due(self.timer())
        if batch:
            self._send(sink, box, batch)
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

    def _send(self, sink: str, box: Outbox, batch: list[Alert]) -> None:
        if box.resend_all:
            self._attempt(sink, box, batch)
            return
        for a in batch:  # one notification per request, in the order and rounds of outbox.py
            if not box.ready(a, self.timer()):
                continue  # abandoned, replaced, or an earlier state of its alert just failed
            if not self._attempt(sink, box, [a]):
                break  # the round is over

    def _attempt(self, sink: str, box: Outbox, alerts: list[Alert]) -> bool:
        """Send (the lock released meanwhile); whether the round goes on (``Outbox.failed``)."""
        self.sending += 1
        self.lock.release()
        try:
            self.senders[sink](alerts)
        except Exception as exc:  # any delivery problem: count, back off, try again
            failure: Exception | None = exc
        else:
            failure = None
        finally:
            self.lock.acquire()
            self.sending -= 1
        if failure is not None:
            self.failures[sink] += 1
            now = self.timer()
            maybe = box.doubtful(alerts, now, doubtful=doubtful(failure))  # may pass: retried
            rejected = permanent(failure) and not maybe
            go_on = box.failed(alerts, now, rejected=rejected, answered=answered(failure))
            if rejected:
                log.error(
                    "alert delivery to %s rejected, not retried: %s", sink, rejection(failure)
                )
                return go_on  # (a receiver rejecting every page ends the round too)
            if box.failed_in_row == 1 or box.failed_in_row == self.spec.max_retries + 1:
                log.error(
                    "alert delivery to %s failed (%d attempts in a row; retrying every %.0fs "
                    "at most): %s",
                    sink,
                    box.failed_in_row,
                    box.interval / 2,
                    failure,
                )
            return go_on
        if box.failed_in_row:
            log.warning(
                "alert delivery to %s works again after %d failed attempts", sink, box.failed_in_row
            )
        box.delivered(alerts, self.timer())
        self.delivered[sink] += 1
        return True

    def _said_dropped(self, sink: str, dropped: int) -> None:
        """Log the first notification a sink had no room for, then every tenfold more."""
        if str(dropped).rstrip("0") == "1":  # 1, 10, 100, ...
            log.error(
                "alert sink %s owes more than %d notifications: %d dropped, oldest first "
                '(fairness_alert_pages_undelivered_total{reason="dropped"})',
                sink,
                self.outboxes[sink].max_owed,
                dropped,
            )
