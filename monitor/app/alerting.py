"""Where alerts are judged: :class:`LocalAlerts` (``alerts.scope: local``, the default) or
:class:`~monitor.app.global_alerts.GlobalAlerts` (``global``). The service loop drives either
through the same four calls: ``start``, ``turn``, ``flush`` + ``checkpoint_text``, ``close``."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.lifecycle import Alert, Key, Transition
from monitor.alerts.outbox import MAX_OWED
from monitor.alerts.sinks import Dispatcher
from monitor.app.checkpointing import Checkpointer
from monitor.app.global_alerts import GlobalAlerts
from monitor.config.spec import Config
from monitor.state.engine import Engine
from monitor.state.view import Idle


class LocalAlerts:
    """This replica's evaluator over its own partitions; its state saved with each checkpoint
    (in the same transaction as the partitions it was evaluated from)."""

    def __init__(self, config: Config, engine: Engine, checkpoints: Checkpointer) -> None:
        self.evaluator = AlertEvaluator(config, engine)
        self.checkpoints = checkpoints
        # alert -> (dispatcher ticket, newest state) of notifications not yet known delivered:
        # saved with each checkpoint, sent again after a restart (persist.py, version 3)
        self.owed: dict[Key, tuple[int, Alert]] = {}
        self.dispatcher: Dispatcher | None = None
        self.owned: Callable[[], Iterable[int]] = set  # read by GlobalAlerts only
        self.idle: Idle = lambda p, m: False  # likewise (the evaluator has its own)

    def start(self, partitions: int) -> None:
        self.checkpoints.restore_alerts(self.evaluator)

    def turn(
        self, caught_up: Callable[[int], bool], dispatcher: Dispatcher, limit: int
    ) -> list[Transition]:
        out = self.evaluator.advance(caught_up, limit=limit)
        for t in out:
            self._submit(dispatcher, t)
        return out

    def submit_owed(self, dispatcher: Dispatcher) -> None:
        """Send again what the restored checkpoint still owed (after ``dispatcher.start``), to
        the sinks that still owed it (a sink configured since has nothing owed)."""
        owed, self.evaluator.owed_at_restore = self.evaluator.owed_at_restore, []
        for alert, sinks in owed:
            if sinks is None or sinks & set(dispatcher.outboxes):
                self._submit(dispatcher, Transition(alert, None), sinks)

    def _submit(
        self, dispatcher: Dispatcher, t: Transition, only: frozenset[str] | None = None
    ) -> None:
        self.dispatcher = dispatcher
        ticket = dispatcher.submit(t, only)
        if t.alert.state != "pending":
            self.owed.pop(t.alert.key, None)  # its newest state replaces an older one
            self.owed[t.alert.key] = (ticket, t.alert)
            while len(self.owed) > MAX_OWED:
                del self.owed[next(iter(self.owed))]

    def _still_owed(self) -> tuple[list[Alert], list[list[str]] | None]:
        """The notifications some sink still owes, and the sinks owing each (None: not known
        yet, before the dispatcher started: every sink)."""
        if self.dispatcher is None:
            return [a for _, a in self.owed.values()], None
        # by ticket: one page a receiver keeps refusing does not keep the ones delivered after it
        owing = self.dispatcher.owing_sinks()
        for key in [k for k, (ticket, _) in self.owed.items() if ticket not in owing]:
            del self.owed[key]
        alerts = [a for _, a in self.owed.values()]
        return alerts, [sorted(owing[ticket]) for ticket, _ in self.owed.values()]

    def not_ready(self) -> str | None:
        return None

    def firing_at_start(self) -> list[Alert]:
        return self.evaluator.book.firing()

    def flush(self) -> bool:
        return True

    def checkpoint_text(self) -> str | None:
        return persist.dumps(self.evaluator, *self._still_owed())

    def close(self) -> None:
        pass


def make_alerting(
    config: Config, engine: Engine, checkpoints: Checkpointer
) -> LocalAlerts | GlobalAlerts:
    if config.alerts.scope == "global":
        return GlobalAlerts(config, engine, checkpoints)
    return LocalAlerts(config, engine, checkpoints)
