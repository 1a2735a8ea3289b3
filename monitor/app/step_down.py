"""The delivering replica's step-down at a rebalance of the partials topic's group
(``alerts.scope: global``): the group waits until what was delivered is recorded."""

from __future__ import annotations

from typing import Any

from kafka.consumer.subscription_state import ConsumerRebalanceListener

STEP_DOWN_SECONDS = 3.0  # how long a handover waits for deliveries under way (at least the
# sinks' request timeout and a second: GlobalAlerts.step_down_seconds)


class StepDown(ConsumerRebalanceListener):  # type: ignore[misc]
    """Holds the group's rebalance until the delivering replica has recorded what it
    delivered (else the next one would deliver it again), at most ``step_down_seconds``."""

    def __init__(self, owner: Any) -> None:  # a GlobalAlerts (which imports this module)
        self.owner = owner

    def on_partitions_revoked(self, revoked: Any) -> None:
        o = self.owner
        if o.topic not in set(revoked):
            return
        o.granted = False
        if not o.leading:
            return
        if o.in_poll:  # the loop waits in poll(): nothing else touches the state meanwhile
            o._step_down()
            return
        o.stepped_down.clear()
        o.revoking.set()
        o.stepped_down.wait(o.step_down_seconds + 2)

    def on_partitions_assigned(self, assigned: Any) -> None:
        if self.owner.topic in set(assigned):
            self.owner.granted = True
