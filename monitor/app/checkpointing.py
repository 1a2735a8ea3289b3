"""Checkpoint policy: when the service writes a checkpoint, and what a failed write does.

When: after ``checkpoint.every_events`` records, or ``checkpoint.interval`` seconds after the
last good checkpoint if any record arrived since (an idle service writes nothing).

A failed write (disk full, read-only volume) does not stop the service: the state in memory
and the offsets it reflects stay consistent, so consumption goes on and no offset is committed
past the last good checkpoint; ``/readyz`` says why it is not ready and the write is retried
once every ``checkpoint.interval``, records or not. After ``FAILURES_BEFORE_PAUSE`` failures in a
row consumption pauses, so at most about that many intervals (plus one ``every_events``) of
records would be read again after a crash; the first good write resumes it.

A partition's checkpoint that turns out damaged only when it is read (``quick_check`` passed)
follows ``checkpoint.on_corrupt`` too: with ``fresh`` the file is moved aside and the partition
starts without one (with ``checkpoint.store: kafka`` nothing is moved: the partition starts
without one and its next save writes a new generation over it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Literal

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.state.checkpoint import (
    CheckpointCorrupt,
    CheckpointError,
    PartitionCheckpoint,
    move_aside,
    open_store,
)
from monitor.state.stores import StateStore, describe, open_state_store

log = logging.getLogger("monitor.app.checkpointing")

FAILURES_BEFORE_PAUSE = 3  # failed checkpoint writes in a row, then stop consuming
Outcome = Literal["saved", "failed", "paused", "resumed"]


class Checkpointer:
    """The store plus the policy's bookkeeping (read by the ops snapshot and ``/readyz``)."""

    def __init__(
        self,
        settings: CheckpointSpec,
        *,
        kafka: KafkaSpec | None = None,  # the client settings of checkpoint.store: kafka
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.where = describe(settings)
        self.store: StateStore = open_state_store(settings, kafka)
        self.last = self.last_attempt = clock()
        self.last_wall: float | None = None  # wall time of the last good checkpoint
        self.events_since = 0
        self.failures = 0  # failed writes, total (exported)
        self.failing: str | None = None  # why the last write failed; None when it succeeded
        self.failed_in_row = 0
        self.paused = False  # consumption paused until a write succeeds

    def record(self, events: int) -> None:
        """``events`` records were applied since the last checkpoint."""
        self.events_since += events

    def due(self) -> bool:
        """Is a checkpoint (or, after a failure, a retry) due now?"""
        now = self.clock()
        if self.failing is not None:  # retry once per interval, events or not
            return now - self.last_attempt >= self.settings.interval
        return self.events_since >= self.settings.every_events or bool(
            self.events_since and now - self.last >= self.settings.interval
        )

    def save(
        self, items: list[tuple[int, dict[str, int], bytes]], alerts: str | None, *, full: bool
    ) -> Outcome:
        """Write the rows (and the alert state) in one transaction. ``full``: every owned
        partition is in it, so a success clears a failure (a revoke's partial write does not).
        Returns what the caller must do with the consumer: nothing (``saved``/``failed``),
        ``paused`` (pause every assigned partition) or ``resumed`` (resume the owned ones)."""
        self.last_attempt = self.clock()
        try:
            self.store.save(items, alerts=alerts)
        except CheckpointError as exc:
            return self._failed(exc)
        outcome: Outcome = "saved"
        if self.failing is not None and full:
            log.warning("%s written again", self.where)
            self.failing, self.failed_in_row = None, 0
            if self.paused:
                self.paused, outcome = False, "resumed"
        if full:  # a revoke's partial write leaves the other partitions' records unsaved: the
            self.last = self.clock()  # next full one stays due, and the age is not reset
            self.last_wall = time.time()  # (found by a review)
            self.events_since = 0
        return outcome

    def _failed(self, exc: CheckpointError) -> Outcome:
        self.failures += 1
        self.failed_in_row += 1
        self.failing = str(exc)
        log.error(
            "checkpoint failed (%d in a row; %d records since the last good one): %s",
            self.failed_in_row,
            self.events_since,
            exc,
        )
        if self.failed_in_row >= FAILURES_BEFORE_PAUSE and not self.paused:
            self.paused = True
            log.error(
                "consumption paused until a checkpoint can be written (retried every %ds)",
                self.settings.interval,
            )
            return "paused"
        return "failed"

    def load(self, partition: int, along: Collection[int] = ()) -> PartitionCheckpoint | None:
        """A partition's checkpoint (``along``: the partitions restored with it, which a state
        topic reads in one pass); damage found only now follows ``on_corrupt``: with
        ``fresh`` the file is moved aside, and this partition (and any restored later) starts
        without one; those restored already are in memory. In a state topic only this
        partition starts without one (its next save supersedes the damaged record)."""
        try:
            return self.store.load(partition, along)
        except CheckpointCorrupt as exc:
            if self.settings.on_corrupt != "fresh":
                raise
            if self.settings.store == "kafka":
                log.error("%s; partition %d starts fresh", exc, partition)
                return None
            self.store.close()
            aside = move_aside(self.settings.path)
            log.error("%s; moved it to %s, partition %d starts fresh", exc, aside, partition)
            self.store = open_store(self.settings.path, self.settings.on_corrupt)
            return None

    def restore_alerts(self, evaluator: AlertEvaluator) -> None:
        """The alert state of the newest checkpoint. One that cannot be read (an older
        monitor's pickle, an unknown version, damage) follows ``on_corrupt``: ``refuse`` stops
        with :class:`CheckpointCorrupt`; ``fresh`` starts the alert state afresh (the partition
        state is intact and kept; alerts still firing will page again)."""
        try:
            persist.restore(evaluator, self.store.load_alerts())
        except (persist.AlertStateError, CheckpointCorrupt) as exc:
            if isinstance(exc, CheckpointCorrupt) and self.settings.store != "kafka":
                raise  # a damaged SQLite file: the store's own fault, as before
            what = str(exc) if isinstance(exc, CheckpointCorrupt) else f"{self.where}: {exc}"
            if self.settings.on_corrupt != "fresh":
                raise CheckpointCorrupt(what, self.settings.path) from None
            log.error("%s; alert state starts fresh (firing alerts will page again)", what)

    def not_ready(self) -> str | None:
        """Why ``/readyz`` fails because of checkpoints, or None."""
        if self.failing is None:
            return None
        return f"checkpoint failing ({self.failing}){', consumption paused' if self.paused else ''}"

    def close(self) -> None:
        self.store.close()
