"""A broker that goes away mid-run is an outage to wait out, not a reason to exit.

kafka-python 3 can raise a connection or timeout error from ``poll`` (from the group
coordinator's tasks: seen in CI when the broker stopped during a second group join, and the
service exited with status 2). :class:`PollGuard` turns such an error into an empty poll: the
service is not ready meanwhile (``/readyz`` gives the error), the first error of an outage is
logged with its traceback, and each failed attempt backs off half a second (on the stop event,
so a SIGTERM is not held up).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kafka.errors import KafkaError

log = logging.getLogger("monitor.app.service")
BACKOFF_SECONDS = 0.5


class PollGuard:
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.trouble = ""  # the last Kafka error of a poll while it lasts (read by HTTP threads)

    def not_ready(self) -> str | None:
        """Why the service is not ready because of Kafka, if it is not."""
        return f"Kafka unavailable: {self.trouble}" if self.trouble else None

    def poll(self, consumer: Any, timeout_ms: int = 200) -> dict[Any, list[Any]]:
        """One poll; ``{}`` while Kafka is unavailable."""
        try:
            batch: dict[Any, list[Any]] = consumer.poll(timeout_ms=timeout_ms)
        except KafkaError as exc:
            if not self.trouble:
                log.warning("Kafka unavailable, retrying: %s", exc, exc_info=True)
            self.trouble = f"{type(exc).__name__}: {exc}"
            self.stop.wait(BACKOFF_SECONDS)
            return {}
        if self.trouble:
            log.info("Kafka reachable again (after %s)", self.trouble)
            self.trouble = ""
        return batch
