"""What the delivering replica of ``alerts.scope: global`` saves in the state store (its judging
state) and sends on the partials topic (its mark), and how the record of what was delivered is
kept exact: ``app/global_alerts.py`` reads and writes them.

The record: every transition through a sequence number (``through``) was delivered, given up
or replaced by a newer state of its alert, except those listed as still owed (a page a receiver
refuses, one in flight). For a version before stop 36, which read ``delivered`` as "all through
here" and restored only what was owed above it, ``delivered`` is saved just below the first
exception: an older replica that takes over sends some pages twice (with the same notification
id), never none. ``through`` travels in the mark and in the saved view's ``delivered_through``
(the saved state's own fields are closed to additions: older versions refuse unknown ones)."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import msgspec

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.global_view import GlobalView
from monitor.alerts.lifecycle import Alert, Key
from monitor.alerts.outbox import MAX_OWED

THROUGH = "delivered_through"  # the key of ``through`` in the saved view
SINKS = "owed_sinks"  # and of each owed transition's sinks still owing it (none listed: all)
Sinks = frozenset[str] | None  # the sinks to send a transition to (None: every one)
# transitions let go (to judge them again) remembered with their alerts' keys; past that, seqs
EVICTED_KEPT = 10 * MAX_OWED


class Mark(msgspec.Struct, frozen=True):
    """The delivering replica's mark on the partials topic: delivered through ``through``
    (older versions: ``delivered``), except the transitions in ``owed``."""

    delivered: int
    owed: list[int] = []
    through: int = 0
    sinks: dict[str, list[str]] = {}  # per owed seq, the sinks still owing it (none: all)

    def last(self) -> int:
        return max(self.through, self.delivered)


class OwedState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seq: int
    alert: persist.AlertState


class GlobalState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    scope: str  # "global": not the local evaluator's document
    offset: int  # read the partials topic on from here
    seq: int  # transitions judged through this state
    delivered: int  # delivered through this seq (below the first still owed: see above)
    owed: list[OwedState]
    view: dict[str, Any]
    evaluator: str  # persist.dumps of the evaluator

    def through(self) -> int:
        return int(self.view.get(THROUGH, self.delivered))


def sinks_of(doc: Any) -> dict[int, frozenset[str]]:
    """Per owed seq, the sinks that still owe it, as a record lists them. A takeover sends an
    owed page to those only: while Alertmanager was down, a webhook that had the page got it
    again at every takeover and restart (found by a review, as in ``app/alerting.py``)."""
    out: dict[int, frozenset[str]] = {}
    for k, v in (doc if isinstance(doc, dict) else {}).items():
        if isinstance(v, list):
            try:
                out[int(k)] = frozenset(str(x) for x in v)
            except ValueError:
                continue
    return out


def saved_sinks(saved: GlobalState | None) -> dict[int, frozenset[str]]:
    return sinks_of(saved.view.get(SINKS)) if saved is not None else {}


def merge_sinks(*known: dict[int, frozenset[str]]) -> dict[int, frozenset[str]]:
    """What every record says still owes each seq (a sink only ever stops owing one)."""
    out: dict[int, frozenset[str]] = {}
    for record in known:
        for s, v in record.items():
            out[s] = out[s] & v if s in out else v
    return out


def listed(sinks: dict[int, frozenset[str]], owed: Any) -> dict[str, list[str]]:
    return {str(s): sorted(v) for s, v in sorted(sinks.items()) if s in owed}


def load(text: str | None, warn: Callable[..., None]) -> GlobalState | None:
    """The saved judging state (None: none, or not this scope's: ``warn`` says why)."""
    try:
        return msgspec.json.decode(text.encode(), type=GlobalState) if text else None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        warn("the saved judging state is not alerts.scope: global's (%s)", exc)
        return None


def rewind(
    ev: AlertEvaluator, view: GlobalView, saved: GlobalState | None
) -> tuple[int | None, int]:
    """The evaluator and the view as ``saved`` left them (afresh without one); returns the
    offset to read the partials on from (None: the first) and the transitions judged."""
    if saved is None:
        persist.restore(ev, persist.dumps(AlertEvaluator(ev.config, view)))
        view.restore({})
        return None, 0
    persist.restore(ev, saved.evaluator)
    view.restore(saved.view)
    return saved.offset, saved.seq


def record(owed: dict[int, Alert], through: int) -> tuple[int, list[int]]:
    """``(delivered, exceptions)`` to save and send for everything through ``through`` but
    ``owed``: ``delivered`` just below the first exception (readable by older versions)."""
    exceptions = sorted(s for s in owed if s <= through)
    return (exceptions[0] - 1 if exceptions else through), exceptions


class Follower:
    """What a replica that does not deliver keeps, to take delivery over exactly: what the next
    deliverer would owe (bounded), the newest mark read, and the transitions it had to let go
    past the bound while no record said they were delivered (with their alerts' keys)."""

    def __init__(self) -> None:
        self.mark = Mark(0)
        self.listed: set[int] = set()  # the mark's exceptions
        self.evicted: dict[int, Key] = {}
        self.trimmed = array("q")  # let go past EVICTED_KEPT: seqs only

    def owe(self, owed: dict[int, Alert], seq: int, alert: Alert) -> None:
        """Each alert's newest firing state and what follows it (a short-lived alert's page and
        its resolve: both are sent to a receiver that works, as the sinks' outboxes do; never a
        resolve whose page is not sent, nor thousands of states of an alert flapping through an
        outage), at most ``MAX_OWED``: the oldest let go first, those the mark lists as still
        owed last. (``owed`` is in the order of its seqs: they are added in that order.)"""
        labels = alert.labels
        same = [s for s, a in owed.items() if a.labels == labels]
        firing = [s for s in same if owed[s].state == "firing"]
        keep = firing[-1] if firing and alert.state != "firing" else None
        for s in same:
            if s != keep:
                del owed[s]
        owed[seq] = alert
        while len(owed) > MAX_OWED:
            gone = next((s for s in owed if s not in self.listed), None)
            gone = next(iter(owed)) if gone is None else gone
            self.evicted[gone] = owed.pop(gone).key
            if len(self.evicted) > EVICTED_KEPT:  # no mark for long (a store outage): the
                old = next(iter(self.evicted))  # oldest kept as a bare seq (lost, if not
                del self.evicted[old]  # judged again, counted: its alert is not known)
                self.trimmed.append(old)

    def saw(self, mark: Mark, owed: dict[int, Alert]) -> None:
        """The delivering replica's mark: what it recorded delivered is owed here no more."""
        if mark.last() >= self.mark.last():
            self.mark, self.listed = mark, set(mark.owed)
        keep, last = set(mark.owed), mark.last()
        for seq in [s for s in owed if s <= last and s not in keep]:
            del owed[seq]
        for seq in [s for s in self.evicted if s <= last and s not in keep]:
            del self.evicted[seq]
        if self.trimmed:
            self.trimmed = array("q", (s for s in self.trimmed if s > last or s in keep))

    def takeover(
        self, owed: dict[int, Alert], delivered: int, saved: GlobalState | None, judged: int
    ) -> tuple[int, dict[int, Key], set[int]]:
        """Takes every record of delivery there is (the saved state and the newest mark, with
        the transitions each lists as still owed): a transition is delivered if either says so
        (neither says it wrongly; a store fallback or a late save makes one older than the
        other); this replica's ``delivered`` (from when it last delivered) speaks only above
        both. ``owed`` is left with what is still owed through the newest record (the saved
        state's own pages added). Returns that record's seq; the transitions let go here that
        no record says were delivered (to be judged again), with their alerts' keys; and those
        still owed that this replica has not judged yet (above ``judged``: sent when it does)."""
        records = [(0, self.mark.last(), set(self.mark.owed))]
        alerts = dict(owed)
        if saved is not None:
            records.append((0, saved.through(), {o.seq for o in saved.owed}))
            alerts |= {o.seq: persist.alert_from_state(o.alert) for o in saved.owed}
        newest = max(t for _, t, _ in records)
        records.append((newest, delivered, set(owed) | set(self.evicted)))
        through = max(newest, delivered)

        def still_owed(seq: int) -> bool:
            return not any(lo < seq <= t and seq not in owing for lo, t, owing in records)

        owed.clear()
        for seq, alert in sorted(alerts.items()):
            if still_owed(seq):
                owed[seq] = alert
        lost = {s: k for s, k in sorted(self.evicted.items()) if s not in owed and still_owed(s)}
        lost |= {s: () for s in self.trimmed if still_owed(s)}  # (no key: no alert matches)
        self.trimmed = array("q")
        listed = set().union(*(owing for _, _, owing in records[:-1]))
        unjudged = {s for s in listed if s > judged and s not in owed and still_owed(s)}
        self.evicted = {}
        return through, lost, unjudged


def orphans(owed: dict[int, Alert], lost: dict[int, Key]) -> int:
    """Drops from ``owed`` the resolves whose firing page was ``lost`` before them (sent alone,
    a resolve of a page the receiver never had); how many."""
    gone = []
    for s, a in owed.items():
        page = max((p for p, k in lost.items() if k == a.key and p < s), default=None)
        if a.state == "resolved" and page is not None:  # unless a later page of it is kept
            kept = (b.state == "firing" and b.key == a.key for f, b in owed.items() if page < f < s)
            if not any(kept):
                gone.append(s)
    for s in gone:
        del owed[s]
    return len(gone)


def firing(saved: GlobalState) -> list[Alert] | None:
    """The alerts firing in the saved judging state (None: not readable)."""
    try:
        alerts = persist.loads(saved.evaluator).alerts
    except (persist.AlertStateError, msgspec.ValidationError):
        return None
    return [a for a in map(persist.alert_from_state, alerts) if a.state == "firing"]
