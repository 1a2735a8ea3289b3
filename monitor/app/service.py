"""``fairness-monitor run``: the long-running Kafka consumer.

One loop on one thread: poll a batch → apply rebalance events (:mod:`.ownership`) → decode and
apply per partition, dead-letter invalid records, check the invalid ratio
(:mod:`monitor.ingest.invalid_guard`) → checkpoint when due (:mod:`.checkpointing`) → evaluate
alerts → publish snapshots for the HTTP threads (:mod:`monitor.outputs.ops`). Processing is
synchronous, so the consumer never buffers more than one poll (``max_poll_records``): that is
the backpressure.

Exactly-once counting without transactions: each partition's state is checkpointed together
with the offsets it reflects (and the alert state evaluated from it); on assignment the state is
restored and the consumer seeks to those offsets, and records below the offset expected next are
skipped. A crash, a SIGKILL, a rebalance or a broker outage therefore neither loses nor
double-counts an event. A checkpoint that cannot be written does not stop the service (see
:mod:`.checkpointing`).
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from functools import partial
from typing import Any

from kafka import TopicPartition
from prometheus_client import CollectorRegistry

from monitor.alerts.lifecycle import Transition
from monitor.alerts.sinks import Dispatcher, alert_json
from monitor.app.alerting import make_alerting
from monitor.app.checkpointing import FAILURES_BEFORE_PAUSE, Checkpointer
from monitor.app.endpoints import start_http, stop_servers
from monitor.app.idle import IdlePartitions
from monitor.app.intake import Intake
from monitor.app.label_ends import LabelEnds
from monitor.app.outage import PollGuard
from monitor.app.ownership import PartitionOwnership
from monitor.app.published import ops_snapshot, status_state
from monitor.config.spec import Config
from monitor.ingest.invalid_guard import InvalidRatioExceeded, InvalidRatioGuard
from monitor.ingest.kafka import (
    DeadLetterSink,
    RebalanceQueue,
    check_copartitioned,
    check_dead_letter_topic,
    make_consumer,
)
from monitor.ingest.kafka_auth import check_authentication
from monitor.outputs.exporter import FairnessExposition
from monitor.outputs.http import HttpServer
from monitor.outputs.ops import OpsCollector, OpsSnapshot
from monitor.outputs.status import StatusState
from monitor.state.checkpoint import encode
from monitor.state.engine import Engine, Snapshot
from monitor.state.stores import StateStore

log = logging.getLogger("monitor.app.service")

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_INVALID_RATIO = 3
HISTORY_KEEP = 1000  # alert transitions kept in memory by a long-running monitor
# boundaries judged per model per loop turn: a backlog (a restore, a second instance taking
# partitions with hours of new data) is worked off over several turns, so polls, checkpoints and
# a SIGTERM never wait for it (judging 1000 boundaries held a stop up for over 15 s under load)
ALERT_BOUNDARIES_PER_TURN = 32
CHECKPOINT_FAILURES_BEFORE_PAUSE = FAILURES_BEFORE_PAUSE
PHASES = ("start", "poll", "process", "checkpoint", "alerts")
__all__ = ["InvalidRatioExceeded", "Monitor", "run_service"]


class Monitor:
    """The service loop. It composes the parts (each tested without a broker) and owns what
    they share: the engine, the consumer's lifetime, the alert evaluator and its sinks."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.k, self.clock = config, config.kafka, clock
        self.engine = Engine(config)
        self.checkpoints = Checkpointer(config.checkpoint, kafka=config.kafka, clock=clock)
        self.ownership = PartitionOwnership(self.k, self.engine, self.checkpoints.load)
        self.label_ends = LabelEnds(self.ownership, clock)  # may a boundary close early?
        self.intake = Intake(self.engine, self.k, invalid_guard(config))
        self.stop_requested = threading.Event()
        self.stop_signalled = False  # set by on_signal: no lock in a signal handler
        self.listener = RebalanceQueue()
        self.polls = PollGuard(self.stop_requested)  # a Kafka outage is waited out
        self.last_loop, self.last_publish = clock(), -1e18
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.alerting = make_alerting(config, self.engine, self.checkpoints)  # local / global
        self.evaluator = self.alerting.evaluator
        self.idle = IdlePartitions(self.ownership, self.engine, clock)
        self.evaluator.idle = self.alerting.idle = self.idle  # holds no boundary back
        self.alerting.owned = lambda: self.ownership.owned  # global: said on the partials topic
        self.dispatcher = Dispatcher(config.alerts.sinks, kafka_send=_alert_producer(config))
        self.recent_transitions: deque[dict[str, Any]] = deque(maxlen=20)
        self.listeners: list[Callable[[Transition], None]] = []  # e.g. the demo's console
        # published by the loop for the HTTP threads: immutable, replaced about once a second
        self.snapshot: Snapshot | None = None
        self.status = StatusState(None, {}, [], [])
        self.ops = OpsSnapshot(
            self.k.predictions_topic, self.k.labels_topic, self.k.attributes_topic
        )
        self.registry = CollectorRegistry()
        self.registry.register(OpsCollector(lambda: self.ops, lambda: self.dispatcher))
        self.exposition = FairnessExposition(lambda: self.snapshot, confidence=config.confidence)
        self.http: HttpServer | None = None
        self.probes: HttpServer | None = None  # service.probe_listen

    @property
    def store(self) -> StateStore:
        return self.checkpoints.store

    def start_http(self) -> None:
        self.http, self.probes = start_http(self)

    def stop_http(self) -> None:
        stop_servers(self.http, self.probes)

    def live(self) -> tuple[bool, str]:
        age = self.clock() - self.last_loop
        return age < self.config.service.liveness_timeout, f"main loop last ran {age:.1f}s ago"

    def ready(self) -> tuple[bool, str]:
        return readiness(self)

    def run(self) -> int:
        started = time.perf_counter()
        consumer = self.listener.consumer = self.ownership.consumer = make_consumer(self.k)
        self.intake.dlq = subscribe(consumer, self.k, self.listener)
        self.alerting.start(len(consumer.partitions_for_topic(self.k.predictions_topic)))
        self.dispatcher.start(self.alerting.firing_at_start())  # Alertmanager: re-posted at once
        self.alerting.submit_owed(self.dispatcher)  # what the checkpoint still owed: sent again
        tune_gc()
        revoked = partial(self.checkpoint, commit=False)  # a commit would fail in a rebalance
        self.seconds["start"] = time.perf_counter() - started
        try:
            while not (self.stop_signalled or self.stop_requested.is_set()):
                t0 = time.perf_counter()
                batch = self.polls.poll(consumer)
                t1 = time.perf_counter()
                restored = self.ownership.apply(self.listener.drain(), revoked)
                if self.checkpoints.paused:
                    self.ownership.pause_all()  # also newly assigned
                if batch:
                    self._process(batch, restored)
                t2 = time.perf_counter()
                if self.checkpoints.due():
                    self.checkpoint()
                t3 = time.perf_counter()
                if self.ownership.started():
                    self._alerts()
                self.publish()
                for phase, secs in zip(PHASES[1:], (t1 - t0, t2 - t1, t3 - t2), strict=False):
                    self.seconds[phase] += secs
                self.seconds["alerts"] += time.perf_counter() - t3
                self.last_loop = self.clock()
        except InvalidRatioExceeded as exc:
            log.error("%s", exc)
            self._close()  # no checkpoint: a restart after the fix reads these records again
            return EXIT_INVALID_RATIO
        log.info("stopping: final checkpoint, then leaving the group")
        self.ownership.apply(self.listener.drain(), revoked)
        self.checkpoint()
        self._close()
        return EXIT_OK

    def request_stop(self, *_: object) -> None:
        """Stop after the current batch (callable from any thread)."""
        self.stop_requested.set()

    def on_signal(self, signum: int, frame: object) -> None:
        """SIGTERM/SIGINT: an atomic store, no lock (a signal inside the handler deadlocked)."""
        self.stop_signalled = True

    def _close(self) -> None:
        self.alerting.close()
        self.ownership.close()  # leaves the group
        self.intake.close()
        self.dispatcher.close(self.config.service.shutdown_timeout)  # a last try to deliver
        self.checkpoints.close()
        log.info("stopped")

    def _process(self, batch: dict[TopicPartition, list[Any]], stale: Collection[int] = ()) -> None:
        accepted = self.ownership.accept(batch, stale)
        self.checkpoints.record(self.intake.apply(accepted))
        self.idle.saw()  # after the decisions are counted: they make their model busy now

    def _alerts(self) -> None:
        """Judge the closed boundaries; hand transitions to sinks, status page and listeners."""
        ends, limit = self.label_ends.caught_up, ALERT_BOUNDARIES_PER_TURN
        for t in self.alerting.turn(ends, self.dispatcher, limit):
            if t.alert.state != "pending":
                self.recent_transitions.appendleft(alert_json(t.alert))
            for listener in self.listeners:
                listener(t)
        del self.evaluator.history[:-HISTORY_KEEP]

    def publish(self, *, force: bool = False) -> None:
        """Hand fresh snapshots to the HTTP threads about once a second."""
        if not force and self.clock() - self.last_publish < 1.0:
            return
        self.last_publish = self.clock()
        self.snapshot = self.engine.snapshot()
        self.status, self.ops = status_state(self), ops_snapshot(self)

    def checkpoint(self, partitions: set[int] | None = None, *, commit: bool = True) -> None:
        """Write the owned partitions' state + offsets and the alert state evaluated from them
        in one transaction; then commit the offsets (for lag monitoring only)."""
        parts = self.ownership.select(partitions)
        if not parts:
            return
        self.intake.flush()  # dead letters are durable before their offsets move on
        if not self.alerting.flush():  # partials durable before they count as published
            return
        self.publish(force=partitions is None)  # what a checkpoint holds, /metrics shows
        own, export = self.ownership, self.engine.export_partition
        items = [(p, own.offsets_of(p), encode(*export(p))) for p in parts]
        alerts = self.alerting.checkpoint_text()  # global: the delivering replica saves its own
        outcome = self.checkpoints.save(items, alerts, full=partitions is None)
        own.settle(outcome, parts, commit=commit)


def readiness(m: Monitor) -> tuple[bool, str]:
    """Ready, or the first reason not to be: starting, restoring, checkpoints failing, Kafka
    polls failing, a next offset unknown, partials lost, no group coordinator."""
    own = m.ownership
    if own.consumer is None:
        return False, "starting"
    if own.pending:
        return False, "waiting for partition assignment / restoring state"
    why = (
        m.checkpoints.not_ready()
        or m.polls.not_ready()
        or own.not_ready()
        or m.alerting.not_ready()
    )
    if why is None and not own.connected():
        why = "not connected to the Kafka group coordinator"
    return why is None, why or f"ready: partitions {sorted(own.owned)}"


def invalid_guard(config: Config) -> InvalidRatioGuard:
    s, k = config.service, config.kafka
    where = "/".join(k.input_topics)
    return InvalidRatioGuard(s.max_invalid_ratio, s.invalid_ratio_min_events, where)


def _alert_producer(config: Config) -> Callable[[bytes], None] | None:
    topic = config.alerts.sinks.kafka_topic
    if not topic:
        return None
    from kafka import KafkaProducer

    from monitor.ingest.kafka import client_config

    # the whole send within sinks.timeout: kafka-python's send() waits up to max_block_ms
    # (60 s by default) for metadata while the brokers are away, then the acknowledgement
    wait = config.alerts.sinks.timeout
    producer = KafkaProducer(
        **client_config(config.kafka), acks="all", max_block_ms=max(1, int(wait * 1000))
    )

    def send(value: bytes) -> None:
        start = time.monotonic()
        future = producer.send(topic, value=value)
        future.get(timeout=max(0.001, wait - (time.monotonic() - start)))

    return send


def subscribe(consumer: Any, k: Any, listener: RebalanceQueue) -> DeadLetterSink | None:
    """Check the topics (co-partitioned; the dead-letter topic usable) and subscribe."""
    dlq = None
    if k.dead_letter_topic:
        check_dead_letter_topic(consumer, k)
        dlq = DeadLetterSink(k, k.dead_letter_topic)
    n = check_copartitioned(consumer, k)
    log.info("topics %s are co-partitioned (%d partitions)", ", ".join(k.input_topics), n)
    consumer.subscribe(list(k.input_topics), listener=listener)
    return dlq


def tune_gc() -> None:
    """Long-lived objects (config, registries, the client) need no cyclic-GC scans, and every
    poll allocates thousands of short-lived objects (one per Kafka record) that reference
    counting frees: collect young objects far less often than the default 700 allocations.
    (The Kafka benchmark gives raw kafka-python the same settings.)"""
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def run_service(config: Config) -> int:
    """Entry point for ``fairness-monitor run``: signals, HTTP, loop, exit code.

    A broker that rejects the credentials or certificates raises ``KafkaAuthError`` here, at
    once, before any client retries a bootstrap that cannot succeed."""
    check_authentication(config.kafka)
    monitor = Monitor(config)
    signal.signal(signal.SIGTERM, monitor.on_signal)
    signal.signal(signal.SIGINT, monitor.on_signal)
    if hasattr(signal, "SIGUSR1"):  # a monitor that seems stuck: every thread's stack, and on
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # (docs/runbook.md)
    monitor.start_http()
    try:
        return monitor.run()
    finally:
        monitor.stop_http()
