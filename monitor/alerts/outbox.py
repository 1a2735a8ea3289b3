"""What one alert sink still owes, and when to try again: pure, every method takes the time.

A page that failed is not lost: it is tried again with exponential backoff, capped at half of
``resend_interval`` (so it arrives within one interval of the receiver's return), until it is
delivered — a firing alert until it is delivered or resolved, a resolved one until it is
delivered.

Which states are owed. A receiver that works is sent every transition, in order (an alert that
fires and resolves within one loop turn pages and then resolves, as the backtest says: whether
a page is sent must not depend on how boundaries fell into loop turns). Only for an alert that
has failed, or while the receiver is down, does a newer state replace an undelivered older one
(an alert that fired and resolved during an outage arrives as resolved, with its times), and
for Alertmanager always: it keeps the active set, so the newest state is all it needs.

Two backoffs: each alert has its own (a payload the receiver refuses holds no other page
back), and the sink one for a receiver that is down. The sink's thread sends in rounds that go
on past errors the receiver answered for a payload (``receivers.answered``, up to
``ROUND_REFUSALS``); refused payloads are retried ``PACE`` times per half interval; once an
alert failed only its newest state is owed. The order, the rounds and the bounds they give are
in docs/architecture.md ("Alert delivery: what is sent when").

A sink that keeps the set of active alerts (Alertmanager: ``resend_all``) is sent every firing
alert again each interval; the others what they are owed. Notifications never delivered are
counted: ``dropped`` past ``max_owed``, ``given_up`` when the receiver rejected them for good.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable

from monitor.alerts.lifecycle import Alert

MAX_OWED = 1_000  # undelivered notifications kept per sink (oldest dropped beyond)
ROUND_REFUSALS = 20  # answered failures a round goes on past (more: a broken receiver)
PACE = 4  # retries of payloads refused before, per half interval (many are not a flood)

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
    ) -> None:
        self.resend_all = resend_all  # every post carries all active alerts (Alertmanager)
        self.interval = interval
        self.backoff = backoff
        self.max_owed = max_owed
        # per alert with a state owed: failed attempts in a row, the receiver's refusals of its
        # current payload, when it was last tried and when to try it again
        self.fails: Counter[Key] = Counter()
        self.refusals: Counter[Key] = Counter()
        self.tried_at: dict[Key, float] = {}
        self.retry_at: dict[Key, float] = {}
        # the round under way: delivered something, answered failures, stopped by a failure
        self._round_ok, self._round_refused, self._round_stopped = False, 0, False
        self._enders: set[Key] = set()  # alerts whose failures ended rounds since a delivery
        self._paced: deque[float] = deque()  # when refused payloads were retried, recently
        self.pace = PACE
        self._doubted: dict[Key, float] = {}  # alert (ALL: a whole post) -> first doubtful
        self.firing: dict[Key, Alert] = {}
        self.owed: OrderedDict[int, Alert] = OrderedDict()  # by sequence: in transition order
        self._tickets: dict[int, int] = {}  # sequence -> the dispatcher's ticket of that state
        self._newest: dict[Key, int] = {}  # alert -> the sequence of its newest owed state
        self._seq = 0
        self.failed_in_row = 0  # the sink's failed attempts in a row (any alert)
        self.down = 0  # rounds in a row that delivered nothing (the sink's backoff grows by them)
        self.next_try = -math.inf  # the sink's backoff
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
        if a.key in self._newest and (self.resend_all or self.outage or self.fails[a.key]):
            for seq in [s for s, x in self.owed.items() if x.key == a.key]:
                del self.owed[seq]  # the newest state only (its alert's backoff goes on)
                self._tickets.pop(seq, None)
            self.refusals.pop(a.key, None)  # a new payload: not refused yet
        self._seq += 1
        self.owed[self._seq] = a
        self._tickets[self._seq] = ticket
        self._newest[a.key] = self._seq
        while len(self.owed) > self.max_owed:
            seq, gone = self.owed.popitem(last=False)  # the oldest
            self._forget(gone.key, seq)
            if not (self.resend_all and self.firing.get(gone.key) is gone):
                self.undelivered["dropped"] += 1  # (a firing one is still posted with the set)

    def track(self, a: Alert, now: float) -> None:
        """A transition another replica delivered: owed nothing, but the active set follows."""
        if a.state == "firing":
            self.seed([a], now)
        elif a.state == "resolved":
            self.firing.pop(a.key, None)

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
        return a.key in self._newest and any(x is a for x in self.owed.values())

    def ready(self, a: Alert, now: float) -> bool:
        """Still owed, and its alert not in a backoff (an earlier state of it failed in this
        round: the later ones wait, in order)."""
        return self.retry_at.get(a.key, -math.inf) <= now and self.owes(a)

    def owed_tickets(self) -> set[int]:
        """The tickets of every state still owed."""
        return {self._tickets.get(seq, 0) for seq in self.owed}

    def clear(self) -> None:
        """Forget everything owed and firing (another replica delivers from now on)."""
        self.owed.clear()
        self._tickets.clear()
        self.fails.clear()
        self.refusals.clear()
        self._paced.clear()
        self._enders.clear()
        self.tried_at.clear()
        self.retry_at.clear()
        self._doubted.clear()
        self._newest.clear()
        self.firing.clear()
        self.failed_in_row = self.down = 0
        self.next_try = -math.inf
        self.next_resend = math.inf

    @property
    def outage(self) -> bool:
        """The last round delivered nothing and ended on a failure not a payload's (or on too
        many of those): the receiver looks down."""
        return self.down > 0

    def due(self, now: float) -> list[Alert]:
        """What to send now, in the order to send it (empty: nothing is due); a new round."""
        if self._round_refused and not self._round_stopped:  # every attempt was answered:
            self.down, self.next_try = 0, -math.inf  # the receiver is there, not down
        self._round_ok, self._round_refused, self._round_stopped = False, 0, False
        if now < self.next_try and self.outage:
            return []
        if not self.resend_all:
            return self._due_alerts(now)
        self._seeds_sent = self._seeds
        if self.owed or (self.firing and now >= self.next_resend) or self.failed_in_row:
            resolved = [a for a in self.owed.values() if a.state == "resolved"]
            return list(self.firing.values()) + resolved
        return []

    def _due_alerts(self, now: float) -> list[Alert]:
        """Every owed state of each alert past its own backoff: never refused, then refused;
        each group never tried first, then the one tried longest ago (then by sequence); each
        alert's states in their order."""
        tried, refused, enders = self.tried_at, self.refusals, self._enders

        def order(key: Key) -> tuple[bool, bool, int, float]:
            # the enders of rounds since the last delivery last (payloads never answered must
            # not end every round first); a page refused once or twice (a blip) before those
            # refused again and again
            return key in enders, refused[key] > 0, min(refused[key], 3), tried.get(key, -math.inf)

        due = [a for a in self.owed.values() if self.retry_at.get(a.key, -math.inf) <= now]
        # payloads refused before are retried within the pace: those tried longest ago
        waiting = sorted({a.key for a in due if refused[a.key]}, key=order)
        skip = set(waiting[max(self._room(now), 0) :])
        return sorted((a for a in due if a.key not in skip), key=lambda a: order(a.key))

    def _room(self, now: float) -> int:
        """Refused payloads that may be retried now (``PACE`` per half interval)."""
        while self._paced and self._paced[0] + self.interval / 2 <= now:  # (as wake() adds)
            self._paced.popleft()
        return self.pace - len(self._paced)

    def wake(self, now: float) -> float:
        """The earliest time :meth:`due` may return something (without a new transition)."""
        sink = self.next_try if self.outage else -math.inf
        if not self.resend_all:
            if not self.owed:
                return math.inf
            paced = self._paced[0] + self.interval / 2 if self._room(now) <= 0 else -math.inf
            alert = min(
                max(self.retry_at.get(a.key, -math.inf), paced if self.refusals[a.key] else -1)
                for a in self.owed.values()
            )
            return max(now, sink, alert)
        if self.owed or (self.firing and self.failed_in_row):
            return max(now, self.next_try)
        if self.firing:
            return max(now, self.next_try, self.next_resend)
        return math.inf

    def hurry(self) -> None:
        """Everything owed is due now, whatever the backoffs and the pace (at close)."""
        self.next_try = -math.inf
        self.retry_at.clear()
        self._paced.clear()
        self.pace = self.max_owed

    def doubtful(self, sent: list[Alert], now: float, *, doubtful: bool = True) -> bool:
        """A rejection of ``sent`` that may pass (a 404 while an ingress is redeployed): True
        while that notification's rejections have lasted less than one interval (retry),
        False after (give up). ``doubtful=False``: another failure, which ends the spell."""
        key = ALL if self.resend_all else sent[0].key  # per alert: its newer states too
        if not doubtful:
            self._doubted.pop(key, None)
            return False
        if key is not ALL and key not in self._newest:
            return True  # no longer owed (evicted, abandoned): nothing to start a spell for
        since = self._doubted.setdefault(key, now)
        return now - since < self.interval

    def delivered(self, sent: list[Alert], now: float) -> None:
        if self.resend_all:
            self._doubted.clear()
        for a in sent:
            self._doubted.pop(a.key, None)
            if self.refusals[a.key]:  # it takes what it refused: the pace is lifted
                self._paced.clear()
            self._clear_backoff(a.key)  # the receiver takes this alert's payloads
        self._settle(sent)
        self._round_ok = True
        self._enders.clear()
        self.failed_in_row = self.down = 0
        self.next_try = -math.inf
        if self.resend_all:
            self.next_resend = now + self.interval if self.firing else math.inf
            if self._seeds != self._seeds_sent:  # seeded while this post was in flight
                self.next_resend = now

    def failed(
        self, sent: list[Alert], now: float, *, rejected: bool = False, answered: bool = False
    ) -> bool:
        """A transient failure backs off (capped at half an interval); a rejection gives the
        owed notifications up (an Alertmanager's active set is posted again next interval).
        ``answered``: the receiver answered with an error (a payload it may not take), not the
        sink's (no answer, 429, 502, 503, 504). Returns whether the round goes on."""
        if rejected and self.resend_all:  # the receiver answered: posted again next interval
            self._doubted.clear()
            self.undelivered["given_up"] += self._settle(sent)
            self.failed_in_row = self.down = 0
            self.next_try = -math.inf
            self.next_resend = now + self.interval if self.firing else math.inf
            if self._seeds != self._seeds_sent:  # seeded while this post was in flight
                self.next_resend = now
            return True
        # what is still owed as sent (a state replaced meanwhile: the new one was not tried)
        keys = {a.key for a in sent if not self.resend_all and self.owes(a)}
        for key in keys:
            self._pace(key, now)
        if rejected:  # given up: the receiver answered, but it is no delivery
            self.undelivered["given_up"] += self._settle(sent)
            answered = True
        else:
            self.failed_in_row += 1
            for a in sent:
                if a.key not in keys:
                    continue
                key = a.key
                self.fails[key] += 1
                self.tried_at[key] = now
                delay = self._delay(self.fails[key])
                if self.owed.get(self._newest[key]) is a:  # its newest state failed
                    self.refusals[key] += answered
                    self.retry_at[key] = now + delay
                else:  # an older one: the newer owed is another payload, tried at once
                    self.refusals.pop(key, None)  # if the receiver answered
                    self.retry_at[key] = now if answered else now + delay
                self._newest_only(key)  # failed: only the newest state is owed
        if answered and not self.resend_all and self._round_refused < ROUND_REFUSALS:
            self._round_refused += 1
            return True  # the receiver is there: the next alert may well pass
        self._round_stopped = True
        if sent and not self.resend_all:
            self._enders.add(sent[0].key)
        if not self._round_ok:  # this round delivered nothing: the receiver looks down
            self.down += 1
            self.next_try = now + self.retry_delay()
        return False

    def _newest_only(self, key: Key) -> None:
        """Of an alert that failed, only its newest state is owed (as :meth:`add` keeps it)."""
        newest = self._newest[key]
        for seq in [s for s, x in self.owed.items() if x.key == key and s != newest]:
            del self.owed[seq]
            self._tickets.pop(seq, None)

    def _pace(self, key: Key, now: float) -> None:
        """An attempt for ``key``: one of the paced retries if the receiver refused it before."""
        if self.refusals[key]:
            self._paced.append(now)

    def retry_delay(self) -> float:
        """The sink's backoff after a round that delivered nothing."""
        return self._delay(self.down)

    def _delay(self, failures: int) -> float:
        return min(self.backoff * float(2 ** min(max(0, failures - 1), 30)), self.interval / 2)

    def _settle(self, sent: list[Alert]) -> int:
        """Drop the sent states that are still owed (not replaced meanwhile); how many."""
        ids = {id(a) for a in sent}
        done = [seq for seq, a in self.owed.items() if id(a) in ids]
        for seq in done:
            self._forget(self.owed.pop(seq).key, seq)
        return len(done)

    def _forget(self, key: Key, seq: int) -> None:
        self._tickets.pop(seq, None)
        if self._newest.get(key) == seq:  # no state of it owed any more
            del self._newest[key]
            self._doubted.pop(key, None)
            self._clear_backoff(key)

    def _clear_backoff(self, key: Key) -> None:
        for d in (self.fails, self.refusals, self.tried_at, self.retry_at):
            d.pop(key, None)
        self._enders.discard(key)
