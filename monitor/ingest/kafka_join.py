"""Group joins kafka-python leaves unfinished: finish them.

kafka-python 3 (3.0.12, and its master as of 3.1.0.dev) runs a group join, JoinGroup then
SyncGroup, as a task on its network thread. ``consumer.poll(timeout_ms)`` waits for that task
only until its timeout and leaves it in flight for the next poll. Two flaws then strand a
member in REBALANCING, unassigned, with heartbeats off (the "revoked, never reassigned" stall
of the service tests under load):

* **A pending join is forgotten.** ``need_rejoin()`` only asks whether a join is wanted, not
  whether one is under way. A rebalance the leader starts because the topic metadata changed
  (the "quick second rebalance": the first assignment was made from an empty metadata snapshot)
  stops being wanted once the leader's assignment, inside that very join, records the new
  metadata. If the poll that began the join returned first, no later poll looks at the join
  again. Seen in a SIGTERM test run: ``need_rejoin: False`` on every poll after the
  generation-2 SyncGroup response, and no ``Setting newly assigned partitions``.
* **A finished join is dropped.** When the next poll does look, and finds the task completed,
  ``join_group_async`` sends a new JoinGroup instead of applying it (it checks
  ``self._join_task.is_done``): the generation and assignment are lost, and for a leader, or
  whenever the join again outlasts a poll, this repeats.

Java's consumer keeps joining while a join is needed *or pending* and completes a join future
it finds done. This module does the same for one consumer's coordinator: ``need_rejoin`` also
says yes while a join is under way (``rejoining``), and a join that succeeded while no poll
waited is applied: the member becomes stable with that generation, heartbeats resume and the
assignment goes to the rebalance listener as usual. Anything else goes to kafka-python
unchanged. Each half is installed only where the library's source shows its flaw, so a
kafka-python that fixes them retires this module.
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
# what BaseCoordinator.need_rejoin would mention if it counted a join under way
PENDING = ("rejoining", "_join_task")
# what the workaround reads and calls on the coordinator (private API, checked before use)
NEEDS = (
    "_join_task",
    "_generation",
    "_lock",
    "rejoining",
    "rejoin_needed",
    "state",
    "need_rejoin",
    "_subscription",
    "_enable_heartbeat",
    "_on_join_complete_async",
    "join_group_async",
)


def _source(name: str) -> str:
    try:
        return inspect.getsource(getattr(BaseCoordinator, name))
    except (AttributeError, OSError, TypeError):  # renamed, or no source shipped
        return ""


def library_drops_finished_joins() -> bool:
    """Does the installed kafka-python replace a join that completed between polls?"""
    return FLAW in _source("join_group_async")


def library_forgets_pending_joins() -> bool:
    """Does the installed kafka-python's ``need_rejoin`` ignore a join under way?"""
    source = _source("need_rejoin")
    return bool(source) and not any(name in source for name in PENDING)


class FinishedJoins:
    """The wrappers around one coordinator's ``need_rejoin`` and ``join_group_async``; counts
    the joins it finished (``finished``) and the generation of the last one."""

    def __init__(self, coordinator: Any) -> None:
        self.coordinator = coordinator
        self.original: Callable[..., Awaitable[bool]] = coordinator.join_group_async
        self.original_need_rejoin: Callable[[], bool] = coordinator.need_rejoin
        self.finished = 0
        self.last_generation: int | None = None

    def need_rejoin(self) -> bool:
        """kafka-python's answer, or yes while a join is under way (begun and not applied; Java's
        ``rejoinNeededOrPending``), as long as the consumer is still subscribed."""
        co = self.coordinator
        if self.original_need_rejoin():
            return True
        return bool(co.rejoining) and bool(co._subscription.partitions_auto_assigned())

    def completed_join(self) -> Any:
        """The join task that succeeded while no poll waited for it, or None. Only while
        nothing happened since: the member is still rebalancing in this attempt and still
        subscribed (a reset or an unsubscribe meanwhile leaves it to kafka-python)."""
        co = self.coordinator
        task = co._join_task
        if task is None or not task.is_done or not task.succeeded():
            return None
        if co.state != MemberState.REBALANCING or not co.rejoining:
            return None
        return task if co._subscription.partitions_auto_assigned() else None

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
            "3.0.12 would send a new JoinGroup, or forget it)",
            gen.generation_id,
        )
        await co._on_join_complete_async(gen.generation_id, gen.member_id, gen.protocol, task.value)
        return True


def finish_unawaited_joins(consumer: Any) -> FinishedJoins | None:
    """Install the workaround on ``consumer``'s coordinator, each half where its flaw is;
    None where neither is (the library is fixed) or it cannot apply (no group, a coordinator
    without these internals)."""
    co = getattr(consumer, "_coordinator", None)
    drops, forgets = library_drops_finished_joins(), library_forgets_pending_joins()
    if co is None or not (drops or forgets):
        return None
    missing = [name for name in NEEDS if not hasattr(co, name)]
    if missing:
        log.warning("kafka-python join workaround not installed: coordinator lacks %s", missing)
        return None
    joins = FinishedJoins(co)
    if drops:
        co.join_group_async = joins.join_group_async
    if forgets:
        co.need_rejoin = joins.need_rejoin
    return joins
