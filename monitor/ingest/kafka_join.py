"""Group joins that kafka-python would throw away: finish them instead.

kafka-python 3 (3.0.12, and its master as of 3.1.0.dev) runs a group join, JoinGroup then
SyncGroup, as a task on its network thread. ``consumer.poll(timeout_ms)`` waits for that task
only until its timeout and leaves it in flight, so that the next poll waits for the same task.
But when the task has *completed* in between, ``BaseCoordinator.join_group_async`` sees
``self._join_task.is_done`` and sends a new JoinGroup: the finished join (its generation and the
member's assignment) is dropped. The member stays unassigned while the broker starts the next
generation, and for the group leader, or whenever the join again outlasts a poll, it happens
again: the "revoked, never reassigned" stall. It takes only a join that takes longer than what is left of a
poll's budget (200 ms in the service loop): a loaded machine, or a broker that holds the
JoinGroup until the other members rejoin.

Java's consumer keeps its join future and completes the join when it finds it done. This
module does the same: installed on one consumer's coordinator, it finishes a join that
succeeded while no poll waited for it: the member becomes stable with that generation,
heartbeats resume and the assignment is applied (the rebalance listener sees it as usual).
Anything else (no join in flight, a failed one, the member reset or unsubscribed meanwhile)
goes to kafka-python unchanged. It is installed only where the library has the flaw (its
source shows the check), so a kafka-python that fixes it retires this module.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.coordinator.base import BaseCoordinator
from kafka.structs import MemberState

log = logging.getLogger(__name__)

# the check in BaseCoordinator.join_group_async that replaces a completed join with a new one
FLAW = "self._join_task is None or self._join_task.is_done"
# what the workaround reads and calls on the coordinator (private API, checked before use)
NEEDS = (
    "_join_task",
    "_generation",
    "_lock",
    "rejoining",
    "rejoin_needed",
    "state",
    "need_rejoin",
    "_enable_heartbeat",
    "_on_join_complete_async",
    "join_group_async",
)


def library_drops_finished_joins() -> bool:
    """Does the installed kafka-python replace a join that completed between polls?"""
    try:
        source = inspect.getsource(BaseCoordinator.join_group_async)
    except (AttributeError, OSError, TypeError):  # renamed, or no source shipped
        return False
    return FLAW in source


class FinishedJoins:
    """The wrapper around one coordinator's ``join_group_async``; counts the joins it
    finished (``finished``) and the generation of the last one."""

    def __init__(self, coordinator: Any) -> None:
        self.coordinator = coordinator
        self.original: Callable[..., Awaitable[bool]] = coordinator.join_group_async
        self.finished = 0
        self.last_generation: int | None = None

    def completed_join(self) -> Any:
        """The join task that succeeded while no poll waited for it, or None. Only while
        nothing happened since: the member is still rebalancing in this attempt and still
        wants to join (a reset or an unsubscribe meanwhile leaves it to kafka-python)."""
        co = self.coordinator
        task = co._join_task
        if task is None or not task.is_done or not task.succeeded():
            return None
        if co.state != MemberState.REBALANCING or not co.rejoining:
            return None
        return task if co.need_rejoin() else None

    async def join_group_async(self, timeout_ms: float | None = None) -> bool:
        task = self.completed_join()
        if task is None:
            return await self.original(timeout_ms=timeout_ms)
        co = self.coordinator
        # what join_group_async does after awaiting a successful join (kafka-python 3.0.12)
        co._join_task = None
        with co._lock:
            co.rejoining = False
            co.rejoin_needed = False
            co.state = MemberState.STABLE
            co._enable_heartbeat()
        gen = co._generation
        self.finished += 1
        self.last_generation = gen.generation_id
        log.info(
            "group join (generation %s) completed between polls: applying it (kafka-python "
            "would drop it and join again)",
            gen.generation_id,
        )
        await co._on_join_complete_async(gen.generation_id, gen.member_id, gen.protocol, task.value)
        return True


def finish_unawaited_joins(consumer: Any) -> FinishedJoins | None:
    """Install the workaround on ``consumer``'s coordinator; None where it is not needed (the
    library is fixed) or cannot apply (no group, a coordinator without these internals)."""
    co = getattr(consumer, "_coordinator", None)
    if co is None or not library_drops_finished_joins():
        return None
    missing = [name for name in NEEDS if not hasattr(co, name)]
    if missing:
        log.warning("kafka-python join workaround not installed: coordinator lacks %s", missing)
        return None
    joins = FinishedJoins(co)
    co.join_group_async = joins.join_group_async
    return joins
