"""The delivering replica's step-down at a rebalance of the partials topic's group
(``alerts.scope: global``): the group waits until what was delivered is recorded."""

from __future__ import annotations

import logging
import time
from typing import Any

from kafka.consumer.subscription_state import ConsumerRebalanceListener

log = logging.getLogger("monitor.app.global_alerts")

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


def step_down(o: Any) -> None:
    """The group is moving delivery elsewhere (the listener waits for this): the delivering
    replica ``o`` (a GlobalAlerts) lets its dispatcher finish what it was handed (at most
    ``step_down_seconds``), records it, forgets the rest. The listener's thread and the loop
    may both get here at once: it runs once."""
    with o.stepping:
        dispatcher = o.dispatcher
        if o.leading and dispatcher is not None:
            deadline = time.monotonic() + o.step_down_seconds
            while not dispatcher.quiet():  # requests under way, or due now: let them finish
                if time.monotonic() > deadline:
                    break
                o.stopped.wait(0.02)
            o._save(dispatcher, True)
            dispatcher.abandon()  # settles what it abandons: none of it counts as ours now
            o.submitted.clear()
            log.info("handing alert delivery over (delivered through %d)", o.delivered)
        o.leading = False
        o.revoking.clear()
        o.stepped_down.set()
