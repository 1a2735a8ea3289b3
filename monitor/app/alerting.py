"""Where alerts are judged: :class:`LocalAlerts` (``alerts.scope: local``, the default) or
:class:`~monitor.app.global_alerts.GlobalAlerts` (``global``). The service loop drives either
through the same four calls: ``start``, ``turn``, ``flush`` + ``checkpoint_text``, ``close``."""

from __future__ import annotations

from collections.abc import Callable

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.lifecycle import Alert, Transition
from monitor.alerts.sinks import Dispatcher
from monitor.app.checkpointing import Checkpointer
from monitor.app.global_alerts import GlobalAlerts
from monitor.config.spec import Config
from monitor.state.engine import Engine


class LocalAlerts:
    """This replica's evaluator over its own partitions; its state saved with each checkpoint
    (in the same transaction as the partitions it was evaluated from)."""

    def __init__(self, config: Config, engine: Engine, checkpoints: Checkpointer) -> None:
        self.evaluator = AlertEvaluator(config, engine)
        self.checkpoints = checkpoints

    def start(self, partitions: int) -> None:
        self.checkpoints.restore_alerts(self.evaluator)

    def turn(
        self, caught_up: Callable[[int], bool], dispatcher: Dispatcher, limit: int
    ) -> list[Transition]:
        out = self.evaluator.advance(caught_up, limit=limit)
        for t in out:
            dispatcher.submit(t)
        return out

    def not_ready(self) -> str | None:
        return None

    def firing_at_start(self) -> list[Alert]:
        return self.evaluator.book.firing()

    def flush(self) -> bool:
        return True

    def checkpoint_text(self) -> str | None:
        return persist.dumps(self.evaluator)

    def close(self) -> None:
        pass


def make_alerting(
    config: Config, engine: Engine, checkpoints: Checkpointer
) -> LocalAlerts | GlobalAlerts:
    if config.alerts.scope == "global":
        return GlobalAlerts(config, engine, checkpoints)
    return LocalAlerts(config, engine, checkpoints)
