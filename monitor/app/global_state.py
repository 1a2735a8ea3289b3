"""What the delivering replica of ``alerts.scope: global`` saves in the state store (its judging
state) and sends on the partials topic (its mark): ``app/global_alerts.py`` reads and writes
them."""

from __future__ import annotations

from typing import Any

import msgspec

from monitor.alerts import persist
from monitor.alerts.lifecycle import Alert


class Mark(msgspec.Struct, frozen=True):
    """The delivering replica's mark on the partials topic: delivered through ``delivered``,
    except the transitions in ``owed`` (a page a receiver refuses, one still in flight)."""

    delivered: int
    owed: list[int] = []


class OwedState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seq: int
    alert: persist.AlertState


class GlobalState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    scope: str  # "global": not the local evaluator's document
    offset: int  # read the partials topic on from here
    seq: int  # transitions judged through this state
    delivered: int  # transitions delivered through this sequence number
    owed: list[OwedState]
    view: dict[str, Any]
    evaluator: str  # persist.dumps of the evaluator


def owed_at_takeover(
    owed: dict[int, Alert], delivered: int, saved: GlobalState | None
) -> list[tuple[int, Alert]]:
    """At a takeover: drops from ``owed`` (this replica's, seq -> alert) what the saved state
    records delivered through ``delivered``; returns what the saved state still owed that
    ``owed`` lacks, to be owed again (unless a newer state of its alert is owed)."""
    keep = {o.seq: o.alert for o in saved.owed} if saved is not None else {}
    for seq in [s for s in owed if s <= delivered and s not in keep]:
        del owed[seq]
    newest = {a.key: s for s, a in owed.items()}
    back = []
    for seq, state in sorted(keep.items()):
        alert = persist.alert_from_state(state)
        if seq <= delivered and newest.get(alert.key, 0) < seq:
            back.append((seq, alert))
    return back
