"""What one alert sink still owes, and when to try again: pure, every method takes the time.

A page that failed is not lost: it is tried again with exponential backoff, capped at half of
``resend_interval`` (so it arrives within one interval of the receiver's return), until it is
delivered — a firing alert until it is delivered or resolved, a resolved one until it is
delivered.

Which states are owed. A receiver that works is sent every transition, in order: an alert that
fires and resolves within one loop turn (a backlog worked off, a short-lived evidence alert)
pages and then resolves, as the backtest says it does — otherwise whether a page is sent would
depend on how the boundaries fell into loop turns and how fast the delivery thread woke (the
Kafka backtest lost the label-arrival detectors' pages that way). Only while the receiver is
failing does a newer state replace an undelivered older one (an alert that fired and resolved
during an outage arrives as resolved, with its times), and for Alertmanager always: it keeps
the active set, so the newest state is all it needs.

A notification the receiver keeps failing (a 5xx for that one payload) while it may take others
does not hold every later page back: once it has failed ``stubborn_after`` times, its alert's
states (all of them, in their order: a firing page never arrives after its own resolve; a newer
state inherits the failures) are set aside behind the other alerts'. They are tried on a
backoff of their own, one alert a round, the one tried longest ago first (:meth:`tried`), so
one refused payload neither delays the others nor starves another set aside. An outage sets
the head alert aside too, but costs no more requests: the others still wait for the sink's
backoff, and those set aside for theirs (at most two requests per backoff period).

A sink that keeps the set of active alerts (Alertmanager: ``resend_all``) is sent every firing
alert again each interval; the others only what they are owed. Notifications never delivered
are counted by reason: ``dropped`` past ``max_owed``, ``given_up`` when the receiver rejected
them for good.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Iterable

from monitor.alerts.lifecycle import Alert

MAX_OWED = 1_000  # undelivered notifications kept per sink (oldest dropped beyond)

Key = tuple[tuple[str, str], ...]
ALL: Key = ()  # a whole post (Alertmanager's active set)


class Outbox:
    """What one sink owes, and when to try (pure: every method takes the time)."""

    def __init__(
        self,
        *,
        resend_all: bool,
        interval: float,
        backoff: float = 0.2,
        max_owed: int = MAX_OWED,
        stubborn_after: int = 6,
    ) -> None:
        self.resend_all = resend_all  # every post carries all active alerts (Alertmanager)
        self.interval = interval
        self.backoff = backoff
        self.max_owed = max_owed
        self.stubborn_after = stubborn_after
        self._tries: Counter[int] = Counter()  # sequence -> failed attempts of that state
        # alerts set aside: one backoff of their own (a refused payload must not hold back
        # or slow the others), failures in a row and the next try
        self.aside_failed, self.aside_next = 0, -math.inf
        self._streak: set[Key] = set()  # alerts whose failures make the sink's failing streak
        self._doubted: dict[Key, float] = {}  # alert (ALL: a whole post) -> first doubtful
        self.firing: dict[Key, Alert] = {}
        self.owed: OrderedDict[int, Alert] = OrderedDict()  # by sequence: in transition order
        self._tickets: dict[int, int] = {}  # sequence -> the dispatcher's ticket of that state
        self._newest: dict[Key, int] = {}  # alert -> the sequence of its newest owed state
        self._seq = 0
        self.failed_in_row = 0
        self.next_try = -math.inf  # backoff after a failure
        self.next_resend = math.inf
        self._seeds = self._seeds_sent = 0  # seeds made / as of the last batch handed out
        self.undelivered: Counter[str] = Counter()  # reason -> notifications

    def add(self, a: Alert, now: float, ticket: int = 0) -> None:
        """A firing or resolved transition to deliver (after those owed before it; see above for
        when it replaces an undelivered older state of the same alert); ``ticket``: the
        dispatcher's number for it (:meth:`oldest_ticket`)."""
        if a.state == "firing":
            self.firing[a.key] = a
            if self.resend_all and self.next_resend == math.inf:
                self.next_resend = now + self.interval
        elif a.state == "resolved":
            self.firing.pop(a.key, None)
        else:
            return  # pending alerts are not paged
        older = self._newest.get(a.key)
        tries = self._tries[older] if older is not None else 0
        if older is not None and (
            self.resend_all or self.outage or tries >= self.stubborn_after
        ):  # the newest state only: Alertmanager, during an outage, or for an alert set aside
            del self.owed[older]
            self._tickets.pop(older, None)
            self._tries.pop(older, None)
        self._seq += 1
        if tries >= self.stubborn_after:
            self._tries[self._seq] = tries  # still set aside
        self.owed[self._seq] = a
        self._tickets[self._seq] = ticket
        self._newest[a.key] = self._seq
        while len(self.owed) > self.max_owed:
            seq = min(self.owed)  # oldest by sequence, not position (rotations move)
            gone = self.owed.pop(seq)
            self._forget(gone.key, seq)
            if not (self.resend_all and self.firing.get(gone.key) is gone):
                self.undelivered["dropped"] += 1  # (a firing one is still posted with the set)

    def seed(self, firing: Iterable[Alert], now: float) -> None:
        """Alerts firing when the monitor (re)started: re-posted at once where the sink keeps
        the active set (delivered to the others before the restart)."""
        if not self.resend_all:
            return
        for a in firing:
            self.firing[a.key] = a
        if self.firing:
            self.next_resend = now
            self._seeds += 1  # a post already in flight does not carry these: post again

    def oldest_ticket(self) -> int | None:
        """The ticket of the oldest state still owed (None: nothing is owed): every ticket
        before it was delivered, given up, or replaced by a newer state of its alert."""
        return min((self._tickets.get(seq, 0) for seq in self.owed), default=None)

    def owes(self, a: Alert) -> bool:
        """Is this very notification still owed (not delivered, replaced, or forgotten)?"""
        return any(x is a for x in self.owed.values())

    def tried(self, a: Alert) -> None:
        """``a`` failed: if its alert is set aside, its states go behind the other alerts' (in
        their order), so the next round tries another alert set aside first."""
        if a.key in self._set_aside():
            for s in [s for s, x in self.owed.items() if x.key == a.key]:
                self.owed.move_to_end(s)

    def aside(self, a: Alert) -> bool:
        """Is ``a``'s alert set aside?"""
        return a.key in self._set_aside()

    def owed_tickets(self) -> set[int]:
        """The tickets of every state still owed."""
        return {self._tickets.get(seq, 0) for seq in self.owed}

    def _set_aside(self) -> set[Key]:
        """Alerts one of whose owed states failed ``stubborn_after`` times."""
        return {self.owed[s].key for s, n in self._tries.items() if n >= self.stubborn_after}

    def clear(self) -> None:
        """Forget everything owed and firing (another replica delivers from now on)."""
        self.owed.clear()
        self._tickets.clear()
        self._tries.clear()
        self.aside_failed, self.aside_next = 0, -math.inf
        self._streak.clear()
        self._doubted.clear()
        self._newest.clear()
        self.firing.clear()
        self.next_resend = math.inf

    @property
    def outage(self) -> bool:
        """Failing, as far as the alerts not set aside show (the failures of an alert now set
        aside were its payload's, as far as anyone knows: they hold the others back no more)."""
        return self.failed_in_row > 0 and bool(self._streak - self._set_aside())

    def due(self, now: float) -> list[Alert]:
        """What to send now (empty: nothing is due)."""
        if not self.resend_all:  # in order; an alert that keeps failing after the others
            aside = self._set_aside()
            fresh = [a for a in self.owed.values() if a.key not in aside]
            late = [a for a in self.owed.values() if a.key in aside]
            fresh_ok = now >= self.next_try or not self.outage
            late_ok = fresh_ok and now >= self.aside_next
            return (fresh if fresh_ok else []) + (late if late_ok else [])
        if now < self.next_try:
            return []
        self._seeds_sent = self._seeds
        if self.owed or (self.firing and now >= self.next_resend) or self.failed_in_row:
            resolved = [a for a in self.owed.values() if a.state == "resolved"]
            return list(self.firing.values()) + resolved
        return []

    def wake(self, now: float) -> float:
        """The earliest time :meth:`due` may return something (without a new transition)."""
        if not self.resend_all:
            aside = self._set_aside() if self._tries else set()
            fresh_at = self.next_try if self.outage else now
            times = [fresh_at] if any(a.key not in aside for a in self.owed.values()) else []
            if aside:
                times.append(max(fresh_at, self.aside_next))
            return max(now, min(times)) if times else math.inf
        if self.owed or (self.resend_all and self.firing and self.failed_in_row):
            return max(now, self.next_try)
        if self.resend_all and self.firing:
            return max(now, self.next_try, self.next_resend)
        return math.inf

    def doubtful(self, sent: list[Alert], now: float, *, doubtful: bool = True) -> bool:
        """A rejection of ``sent`` that may pass (a 404 while an ingress is redeployed): True
        while that notification's rejections have lasted less than one interval (retry),
        False after (give up). ``doubtful=False``: another failure, which ends the spell."""
        key = ALL if self.resend_all else sent[0].key  # per alert: its newer states too
        if not doubtful:
            self._doubted.pop(key, None)
            return False
        since = self._doubted.setdefault(key, now)
        return now - since < self.interval

    def delivered(self, sent: list[Alert], now: float) -> None:
        if self.resend_all:
            self._doubted.clear()
        elif any(self.aside(a) for a in sent):
            self.aside_failed, self.aside_next = 0, -math.inf
        for a in sent:
            self._doubted.pop(a.key, None)
        self._settle(sent)
        self.failed_in_row = 0
        self.next_try = -math.inf
        self._streak.clear()
        if self.resend_all:
            self.next_resend = now + self.interval if self.firing else math.inf
            if self._seeds != self._seeds_sent:  # seeded while this post was in flight
                self.next_resend = now

    def failed(self, sent: list[Alert], now: float, *, rejected: bool = False) -> None:
        """A transient failure backs off (capped at half an interval); a rejection gives the
        owed notifications up (an Alertmanager's active set is posted again next interval)."""
        if rejected:  # the receiver answered: no backoff, the owed ones are given up
            if self.resend_all:
                self._doubted.clear()
            self.undelivered["given_up"] += self._settle(sent)
            self.failed_in_row, self.next_try = 0, -math.inf
            self._streak.clear()
            if self.resend_all:
                self.next_resend = now + self.interval if self.firing else math.inf
            return
        aside = self._set_aside()
        ids = {id(a) for a in sent}
        for seq, a in self.owed.items():
            if id(a) in ids:
                self._tries[seq] += 1
        if sent and not self.resend_all and all(a.key in aside for a in sent):
            self.aside_failed += 1  # set aside before this try: their own backoff only
            self.aside_next = now + self._delay(self.aside_failed)
            return
        self.failed_in_row += 1
        self.next_try = now + self.retry_delay()
        self._streak.update(a.key for a in sent)
        if not self.resend_all and any(a.key not in aside for a in sent if self.aside(a)):
            # set aside just now: its backoff goes on from the sink's (an outage looks the
            # same, and a receiver that is down is not asked more often for it)
            self.aside_failed = max(self.aside_failed, self.failed_in_row)
            self.aside_next = max(self.aside_next, self.next_try)

    def retry_delay(self) -> float:
        return self._delay(self.failed_in_row)

    def _delay(self, failures: int) -> float:
        n = max(0, failures - 1)
        return min(self.backoff * float(2 ** min(n, 30)), self.interval / 2)

    def _settle(self, sent: list[Alert]) -> int:
        """Drop the sent states that are still owed (not replaced meanwhile); how many."""
        ids = {id(a) for a in sent}
        done = [seq for seq, a in self.owed.items() if id(a) in ids]
        for seq in done:
            self._forget(self.owed.pop(seq).key, seq)
        return len(done)

    def _forget(self, key: Key, seq: int) -> None:
        self._tickets.pop(seq, None)
        self._tries.pop(seq, None)
        if self._newest.get(key) == seq:
            del self._newest[key]
            self._doubted.pop(key, None)  # no state of it owed any more
