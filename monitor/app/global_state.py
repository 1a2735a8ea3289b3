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

from typing import Any

import msgspec

from monitor.alerts import persist
from monitor.alerts.lifecycle import Alert
from monitor.alerts.outbox import MAX_OWED

THROUGH = "delivered_through"  # the key of ``through`` in the saved view


class Mark(msgspec.Struct, frozen=True):
    """The delivering replica's mark on the partials topic: delivered through ``through``
    (older versions: ``delivered``), except the transitions in ``owed``."""

    delivered: int
    owed: list[int] = []
    through: int = 0

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


def record(owed: dict[int, Alert], through: int) -> tuple[int, list[int]]:
    """``(delivered, exceptions)`` to save and send for everything through ``through`` but
    ``owed``: ``delivered`` just below the first exception (readable by older versions)."""
    exceptions = sorted(s for s in owed if s <= through)
    return (exceptions[0] - 1 if exceptions else through), exceptions


def follow(owed: dict[int, Alert], seq: int, alert: Alert) -> None:
    """A replica that does not deliver keeps what the next deliverer would owe, bounded: each
    alert's two newest states (a short-lived alert's page and its resolve: both are sent to a
    receiver that works, as the sinks' outboxes do; many transitions of a flapping alert during
    a long outage are two notifications, not thousands), at most ``MAX_OWED`` (oldest first)."""
    same = sorted([s for s, a in owed.items() if a.key == alert.key] + [seq])
    for s in same[:-2]:
        owed.pop(s, None)
    if seq in same[-2:]:
        owed[seq] = alert
    while len(owed) > MAX_OWED:
        del owed[min(owed)]


def owed_at_takeover(
    owed: dict[int, Alert], through: int, saved: GlobalState | None
) -> list[tuple[int, Alert]]:
    """At a takeover: drops from ``owed`` (this replica's, seq -> alert) what the saved state
    records delivered through ``through``; returns what the saved state still owed that
    ``owed`` lacks, to be owed again."""
    keep = {o.seq: o.alert for o in saved.owed} if saved is not None else {}
    for seq in [s for s in owed if s <= through and s not in keep]:
        del owed[seq]
    return [
        (seq, persist.alert_from_state(state))
        for seq, state in sorted(keep.items())
        if seq <= through and seq not in owed
    ]
