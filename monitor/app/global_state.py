"""What the delivering replica of ``alerts.scope: global`` saves in the state store (its judging
state) and sends on the partials topic (its mark): ``app/global_alerts.py`` reads and writes
them."""

from __future__ import annotations

from typing import Any

import msgspec

from monitor.alerts import persist


class Mark(msgspec.Struct, frozen=True):
    """The delivering replica's mark on the partials topic: delivered through ``delivered``."""

    delivered: int


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
