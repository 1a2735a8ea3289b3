"""The checkpoint store the configuration selects (``checkpoint.store``): the SQLite file
(``checkpoint.path``, the default, one instance) or the compacted Kafka topic
(``checkpoint.state_topic``, any replica restores any partition). Both have one interface,
:class:`StateStore`; the service (``app/checkpointing.py``) uses either."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Protocol

from monitor.config.kafka import KafkaSpec
from monitor.config.settings import CheckpointSpec
from monitor.state.checkpoint import (
    CheckpointError,
    CheckpointStore,
    PartitionCheckpoint,
    open_store,
)
from monitor.state.kafka_store import KafkaStateStore


class StateStore(Protocol):
    def save(
        self, items: list[tuple[int, dict[str, int], bytes]], *, alerts: str | None = None
    ) -> None: ...

    def load(self, partition: int, along: Collection[int] = ()) -> PartitionCheckpoint | None: ...

    def save_alerts(self, alerts: str) -> None: ...

    def load_alerts(self) -> str | None: ...

    def partitions(self) -> list[int]: ...

    def check_writable(self) -> None: ...

    def close(self) -> None: ...


def describe(settings: CheckpointSpec) -> str:
    """What messages call the store: the file, or the topic."""
    if settings.store == "kafka":
        return f"state topic {settings.state_topic}"
    return f"checkpoint {settings.path}"


def open_state_store(settings: CheckpointSpec, kafka: KafkaSpec | None) -> StateStore:
    """The configured store, checked and writable (raises :class:`CheckpointError`)."""
    if settings.store != "kafka":
        return open_store(settings.path, settings.on_corrupt)
    if kafka is None:
        raise ValueError("checkpoint.store: kafka needs the kafka settings")
    store = KafkaStateStore(settings, kafka)
    try:
        store.check_writable()
    except CheckpointError:
        store.close()
        raise
    return store


def open_for_reading(
    settings: CheckpointSpec, kafka: KafkaSpec | None, path: str | None = None
) -> StateStore:
    """The store ``status`` and ``report --checkpoint`` read: the SQLite file ``path`` when one
    is given, else the configured store. The state topic is opened read-only: it must exist
    (never created), and no producer is built, so no transactional id is initialised that
    could fence or abort a running monitor's save. Nor is the file created: a mistyped path
    gave an empty report of a new, empty checkpoint."""
    if path is None and settings.store == "kafka":
        if kafka is None:
            raise ValueError("checkpoint.store: kafka needs the kafka settings")
        return KafkaStateStore(settings, kafka, read_only=True)
    file = Path(path or settings.path)
    if not file.is_file():
        raise FileNotFoundError(f"no checkpoint file at {file}")
    return CheckpointStore(file)
