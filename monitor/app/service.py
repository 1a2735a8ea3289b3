"""``fairness-monitor run``: the long-running Kafka consumer.

One loop on one thread: poll a batch → handle rebalance events → decode and apply per
partition → dead-letter invalid records → checkpoint when due → commit. Processing is
synchronous, so the consumer never buffers more than one poll (``max_poll_records``): that is
the backpressure.

Exactly-once counting without transactions: each partition's state is checkpointed together
with the offsets it reflects (``checkpoint.py``); on assignment the loop restores the state and
seeks to those offsets, and it skips any record below the offset it expects next. A crash, a
SIGKILL, a rebalance or a broker outage therefore neither loses nor double-counts an event.

A checkpoint that cannot be written (disk full) does not stop the service: the state in memory
and the offsets it reflects stay consistent, so consumption goes on and offsets are not
committed; ``/readyz`` says why it is not ready and every ``checkpoint.interval`` the write is
tried again. After ``CHECKPOINT_FAILURES_BEFORE_PAUSE`` failed attempts in a row consumption
pauses (the group membership and alert delivery go on), so at most about that many intervals
(plus one ``every_events``) of records would be read again after a crash.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import numpy as np
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.lifecycle import Transition
from monitor.alerts.sinks import SINKS, Dispatcher, alert_json
from monitor.config.spec import Config
from monitor.ingest.events import ConsumerBatch, DeadLetter, RawBatch
from monitor.ingest.kafka import (
    DeadLetterSink,
    RebalanceQueue,
    check_copartitioned,
    check_dead_letter_topic,
    make_consumer,
)
from monitor.ingest.kafka_auth import check_authentication
from monitor.outputs.exporter import FairnessExposition
from monitor.outputs.http import HttpLimits, HttpServer
from monitor.outputs.status import StatusEndpoint, StatusState, page_html
from monitor.state.checkpoint import (
    CheckpointCorrupt,
    CheckpointError,
    CheckpointStore,
    encode,
    move_aside,
    open_store,
)
from monitor.state.engine import DELAY_BOUNDS, Engine, Snapshot

log = logging.getLogger("monitor.app.service")

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_INVALID_RATIO = 3
HISTORY_KEEP = 1000  # alert transitions kept in memory by a long-running monitor
CHECKPOINT_FAILURES_BEFORE_PAUSE = 3  # failed checkpoint writes in a row, then stop consuming


class InvalidRatioExceeded(RuntimeError):
    pass


class Monitor:
    """The service: owns the engine, the consumer, the checkpoint store and the probes."""

    def __init__(self, config: Config, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.k = config.kafka
        self.clock = clock
        self.engine = Engine(config)
        self.store = self._open_store()
        self.stop_requested = threading.Event()
        self.stop_signalled = False  # set by on_signal: no lock in a signal handler
        self.listener = RebalanceQueue()
        self.next_offsets: dict[TopicPartition, int] = {}
        self.owned: set[int] = set()
        self.pending_assignment = True
        self.last_loop = clock()
        self.last_checkpoint = clock()
        self.last_checkpoint_wall: float | None = None
        self.events_since_checkpoint = 0
        self.checkpoint_failures = 0  # failed writes, total (exported)
        self.checkpoint_failing: str | None = None  # why the last write failed; None when ok
        self.checkpoint_failed_in_row = 0
        self.last_checkpoint_attempt = clock()
        self.consumption_paused = False
        self.outcomes: Counter[tuple[str, str]] = Counter()
        self.seconds: dict[str, float] = dict.fromkeys(
            ("start", "poll", "process", "checkpoint", "alerts"), 0.0
        )
        self.batches = 0
        self.recent: deque[tuple[int, int]] = deque()
        self.recent_total = self.recent_invalid = 0
        self.recent_reasons: Counter[str] = Counter()
        self.consumer: Any = None
        self.dlq: DeadLetterSink | None = None
        self.evaluator = AlertEvaluator(config, self.engine)
        self.dispatcher = Dispatcher(config.alerts.sinks, kafka_send=self._alert_producer())
        self.snapshot: Snapshot | None = None  # published for scrapes (read by the HTTP thread)
        self.last_publish = -1e18
        self.lag: dict[tuple[str, int], int] = {}
        self.registry = CollectorRegistry()
        self.registry.register(_OpsCollector(self))
        self.exposition = FairnessExposition(lambda: self.snapshot, confidence=config.confidence)
        self.http: HttpServer | None = None
        self.probes: HttpServer | None = None  # service.probe_listen
        self.published: dict[str, int] = self.engine.counters()  # read by the HTTP thread
        self.published_delays = self.engine.label_delays()
        self.evaluation_behind: dict[str, float] = {}  # model -> seconds (published)
        self.status = StatusState(None, {}, [], [])  # published for the status page
        self.recent_transitions: deque[dict[str, Any]] = deque(maxlen=20)
        self.listeners: list[Callable[[Transition], None]] = []  # e.g. the demo's console

    # -- setup -------------------------------------------------------------------------------
    def _alert_producer(self) -> Callable[[bytes], None] | None:
        topic = self.config.alerts.sinks.kafka_topic
        if not topic:
            return None
        from kafka import KafkaProducer

        from monitor.ingest.kafka import client_config

        producer = KafkaProducer(**client_config(self.k), acks="all")
        return lambda value: producer.send(topic, value=value).get(timeout=10) and None

    def _open_store(self) -> CheckpointStore:
        return open_store(self.config.checkpoint.path, self.config.checkpoint.on_corrupt)

    def _load_checkpoint(self, partition: int) -> Any:
        """A partition's checkpoint; damage found only now (quick_check passed) follows
        ``on_corrupt`` too: with ``fresh`` the file is moved aside, and this partition (and any
        restored later) starts without one; those restored already are in memory."""
        try:
            return self.store.load(partition)
        except CheckpointCorrupt as exc:
            if self.config.checkpoint.on_corrupt != "fresh":
                raise
            self.store.close()
            aside = move_aside(self.config.checkpoint.path)
            log.error("%s; moved it to %s, partition %d starts fresh", exc, aside, partition)
            self.store = self._open_store()
            return None

    def start_http(self) -> None:
        s = self.config.service
        limits = HttpLimits(
            workers=s.http_workers,
            timeout=s.http_timeout,
            idle_timeout=s.http_idle_timeout,
            max_connections=s.http_max_connections,
        )
        self.http = HttpServer(
            s.http_host,
            s.http_port,
            web_config=s.web_config,
            limits=limits,
            live=self.live,
            ready=self.ready,
            registry=self.registry,
            extra=self.exposition,
            pages={
                "/": lambda: (page_html(), "text/html; charset=utf-8"),
                "/api/status": StatusEndpoint(
                    lambda: self.status,
                    confidence=self.config.confidence,
                    rules=self.config.alerts.rules,
                ),
            },
        )
        self.http.start()
        web = s.web_config
        log.info(
            "http endpoints on %s port %d (/ status page, /metrics, /healthz, /readyz); %s",
            self.http.scheme,
            self.http.port,
            "authentication required"
            if web is not None and web.authenticates()
            else "no authentication: anyone who can reach the port reads them "
            "(see service.web_config_file)",
        )
        if s.probe_host is not None and s.probe_port is not None:
            self.probes = HttpServer(
                s.probe_host,
                s.probe_port,
                live=self.live,
                ready=self.ready,
                registry=self.registry,
                limits=HttpLimits(workers=1, timeout=s.http_timeout, max_connections=16),
                probes_only=True,
                name="http-probes",
            )
            self.probes.start()
            log.info("probe endpoints on http port %d (/healthz, /readyz)", self.probes.port)

    def stop_http(self) -> None:
        for server in (self.http, self.probes):
            if server is not None:
                server.stop()

    # -- probes ------------------------------------------------------------------------------
    def live(self) -> tuple[bool, str]:
        age = self.clock() - self.last_loop
        ok = age < self.config.service.liveness_timeout
        return ok, f"main loop last ran {age:.1f}s ago"

    def ready(self) -> tuple[bool, str]:
        if self.consumer is None:
            return False, "starting"
        if self.pending_assignment:
            return False, "waiting for partition assignment / restoring state"
        if self.checkpoint_failing is not None:
            paused = ", consumption paused" if self.consumption_paused else ""
            return False, f"checkpoint failing ({self.checkpoint_failing}){paused}"
        if not self.connected():
            return False, "not connected to the Kafka group coordinator"
        return True, f"ready: partitions {sorted(self.owned)}"

    def connected(self) -> bool:
        coordinator = getattr(self.consumer, "_coordinator", None)
        try:
            return coordinator is None or not coordinator.coordinator_unknown()
        except Exception:  # private API of kafka-python: never let a probe crash
            return True

    # -- main loop ---------------------------------------------------------------------------
    def run(self) -> int:
        started = time.perf_counter()
        self.consumer = make_consumer(self.k)
        if self.k.dead_letter_topic:
            check_dead_letter_topic(self.consumer, self.k)
            self.dlq = DeadLetterSink(self.k, self.k.dead_letter_topic)
        n = check_copartitioned(self.consumer, self.k)
        log.info(
            "topics %s and %s are co-partitioned (%d partitions)",
            self.k.predictions_topic,
            self.k.labels_topic,
            n,
        )
        self.listener.consumer = self.consumer
        self.consumer.subscribe(
            [self.k.predictions_topic, self.k.labels_topic], listener=self.listener
        )
        self.store.load_alerts(self.evaluator)
        self.dispatcher.start(self.evaluator.book.firing())  # Alertmanager: re-posted at once
        tune_gc()
        self.seconds["start"] = time.perf_counter() - started
        try:
            while not (self.stop_signalled or self.stop_requested.is_set()):
                t0 = time.perf_counter()
                batch = self.consumer.poll(timeout_ms=200)
                t1 = time.perf_counter()
                self._rebalance()
                if self.consumption_paused:
                    self.consumer.pause(*self.consumer.assignment())  # also newly assigned
                if batch:
                    self._process(batch)
                t2 = time.perf_counter()
                self._maybe_checkpoint()
                t3 = time.perf_counter()
                if batch:
                    self.batches += 1
                if self._partitions_started():
                    self._alerts()
                self._publish()
                t4 = time.perf_counter()
                self.seconds["poll"] += t1 - t0
                self.seconds["process"] += t2 - t1
                self.seconds["checkpoint"] += t3 - t2
                self.seconds["alerts"] += t4 - t3
                self.last_loop = self.clock()
        except InvalidRatioExceeded as exc:
            log.error("%s", exc)
            self._close(checkpoint=False)
            return EXIT_INVALID_RATIO
        self._rebalance()
        self._close(checkpoint=True)
        return EXIT_OK

    def request_stop(self, *_: object) -> None:
        """Stop after the current batch (callable from any thread)."""
        self.stop_requested.set()

    def on_signal(self, signum: int, frame: object) -> None:
        """SIGTERM/SIGINT handler. It runs in the main thread between bytecodes, possibly
        inside another handler's call (Ctrl-C twice, SIGTERM then SIGINT): it must not take a
        lock, which ``Event.set`` does (a second signal deadlocked the loop). A plain attribute
        store is atomic."""
        self.stop_signalled = True

    def _close(self, *, checkpoint: bool) -> None:
        if checkpoint:
            self.checkpoint()
        try:
            self.consumer.close(autocommit=False, timeout_ms=5000)  # leaves the group
        except Exception as exc:
            log.warning("closing the consumer: %s", exc)
        if self.dlq:
            self.dlq.close()
        self.dispatcher.close()
        self.store.close()
        log.info("stopped")

    # -- rebalance -----------------------------------------------------------------------------
    def _rebalance(self) -> None:
        for kind, tps in self.listener.drain():
            parts = {tp.partition for tp in tps}
            if kind in ("revoked", "lost"):
                keep = self.owned - parts
                if kind == "revoked" and parts & self.owned:
                    self.checkpoint(parts & self.owned, commit=False)
                for p in parts & self.owned:
                    self.engine.drop_partition(p)
                for tp in list(self.next_offsets):
                    if tp.partition in parts:
                        del self.next_offsets[tp]
                self.owned = keep
                log.info("partitions %s %s", sorted(parts), kind)
            else:
                self._restore(tps)
        if self.pending_assignment and self.consumer.assignment():
            self.pending_assignment = False

    def _restore(self, tps: set[TopicPartition]) -> None:
        topics = (self.k.predictions_topic, self.k.labels_topic)
        for p in sorted({tp.partition for tp in tps} - self.owned):
            cp = self._load_checkpoint(p)
            if cp is not None:
                try:
                    self.engine.import_partition(p, cp.meta, cp.arrays)
                except (ValueError, KeyError) as exc:
                    raise CheckpointError(
                        f"checkpoint partition {p} cannot be restored: {exc}"
                    ) from None
            for topic in topics:
                tp = TopicPartition(topic, p)
                if tp not in tps:
                    continue
                if cp is not None and topic in cp.offsets:
                    self.consumer.seek(tp, cp.offsets[topic])
                    self.next_offsets[tp] = cp.offsets[topic]
                else:
                    if self.k.auto_offset_reset == "earliest":
                        self.consumer.seek_to_beginning(tp)
                    else:
                        self.consumer.seek_to_end(tp)
                    self.next_offsets[tp] = self.consumer.position(tp)
            self.owned.add(p)
            log.info(
                "partition %d restored (%s) from offsets %s",
                p,
                "checkpoint" if cp else "no checkpoint",
                {tp.topic: o for tp, o in self.next_offsets.items() if tp.partition == p},
            )
        # the listener paused them on assignment; fetching starts at the sought offsets
        self.consumer.resume(*(tp for tp in tps if tp.partition in self.owned))
        self.pending_assignment = False

    # -- processing ----------------------------------------------------------------------------
    def _process(self, batch: dict[TopicPartition, list[Any]]) -> None:
        by_partition: dict[int, list[ConsumerBatch | RawBatch | None]] = {}
        pred_topic = self.k.predictions_topic
        for tp, records in batch.items():
            expected = self.next_offsets.get(tp)
            if expected is None or not records:
                continue  # not (yet) restored: will be re-fetched after the seek
            if records[0].offset < expected:
                records = [r for r in records if r.offset >= expected]
                if not records:
                    continue
            raw = ConsumerBatch(records, tp.topic, tp.partition)
            slot = by_partition.setdefault(tp.partition, [None, None])
            slot[0 if tp.topic == pred_topic else 1] = raw
            self.next_offsets[tp] = records[-1].offset + 1
        decoder = self.engine.decoder
        empty = RawBatch((), ())
        for p, (maybe_p, maybe_l) in by_partition.items():
            praw, lraw = maybe_p or empty, maybe_l or empty
            pb, d1 = decoder.decode_predictions(praw)
            lb, d2 = decoder.decode_labels(lraw)
            self.engine.apply(p, pb, lb)
            dead = d1 + d2
            if dead:
                self.engine.count_invalid(p, [d.reason.value for d in dead])
                if self.dlq:
                    self.dlq.send(dead)
            self.outcomes[(self.k.predictions_topic, "ok")] += len(pb)
            self.outcomes[(self.k.labels_topic, "ok")] += len(lb)
            for d in dead:
                self.outcomes[(d.record.topic, "invalid")] += 1
            self._check_invalid_ratio(len(praw) + len(lraw), dead)
            self.events_since_checkpoint += len(praw) + len(lraw)

    def _check_invalid_ratio(self, total: int, dead: list[DeadLetter]) -> None:
        s = self.config.service
        self.recent.append((total, len(dead)))
        self.recent_total += total
        self.recent_invalid += len(dead)
        self.recent_reasons.update(d.reason.value for d in dead)
        while len(self.recent) > 1 and self.recent_total - self.recent[0][0] >= (
            s.invalid_ratio_min_events
        ):
            t, i = self.recent.popleft()
            self.recent_total -= t
            self.recent_invalid -= i
        if self.recent_total >= s.invalid_ratio_min_events and (
            self.recent_invalid / self.recent_total > s.max_invalid_ratio
        ):
            top = ", ".join(f"{r} ({n})" for r, n in self.recent_reasons.most_common(3))
            raise InvalidRatioExceeded(
                f"{self.recent_invalid} of the last {self.recent_total} records on "
                f"{self.k.predictions_topic}/{self.k.labels_topic} were invalid "
                f"({self.recent_invalid / self.recent_total:.0%} > "
                f"service.max_invalid_ratio {s.max_invalid_ratio:.0%}); most common reasons: "
                f"{top}. Stopping instead of dead-lettering the whole stream: check the topic "
                "names and the field mapping (fields.*). No checkpoint was written, so a "
                "restart after the fix re-reads these records."
            )

    def _alerts(self) -> None:
        """Evaluate the closed boundaries; hand transitions to the sinks, the status page and
        the listeners. A backtest keeps every transition; a long-running service the latest."""
        for t in self.evaluator.advance(self._labels_caught_up):
            self.dispatcher.submit(t)
            if t.alert.state != "pending":
                self.recent_transitions.appendleft(alert_json(t.alert))
            for listener in self.listeners:
                listener(t)
        history = self.evaluator.history
        if len(history) > HISTORY_KEEP:
            del history[: len(history) - HISTORY_KEEP]

    def _labels_caught_up(self, partition: int) -> bool:
        """Has this partition's label topic been read to its end (as of the last fetch)?"""
        tp = TopicPartition(self.k.labels_topic, partition)
        nxt = self.next_offsets.get(tp)
        high = self.consumer.highwater(tp)
        return nxt is not None and high is not None and nxt >= high

    def _partitions_started(self) -> bool:
        """Alert evaluation waits until every owned partition has either delivered data or is
        known to be empty: otherwise the low watermark would pass boundaries whose data still
        sits unread in a partition that has not been fetched yet."""
        for tp, nxt in self.next_offsets.items():
            if tp.topic != self.k.predictions_topic:
                continue
            st = self.engine.partitions.get(tp.partition)
            if st is not None and any(r.head is not None for r in st.rings):
                continue
            high = self.consumer.highwater(tp)
            if high is None or high > nxt:
                return False
        return True

    def _publish(self) -> None:
        """Hand a fresh snapshot (and consumer lag) to the HTTP thread about once a second."""
        now = self.clock()
        if now - self.last_publish < 1.0:
            return
        self.last_publish = now
        self.snapshot = self.engine.snapshot()
        self.published = self.engine.counters()
        self.published_delays = self.engine.label_delays()
        self.evaluation_behind = self.alerts_behind()
        self.status = StatusState(
            self.snapshot,
            {k: list(v) for k, v in self.evaluator.series.items()},
            self.evaluator.book.firing(),
            list(self.recent_transitions),
        )
        lag = {}
        for tp, nxt in self.next_offsets.items():
            high = self.consumer.highwater(tp)
            if high is not None:
                lag[(tp.topic, tp.partition)] = max(0, high - nxt)
        self.lag = lag

    def alerts_behind(self) -> dict[str, float]:
        """Per model, event time from the last boundary the rules judged to the newest closed
        one: 0 normally; up to the model's lateness while boundaries wait for labels."""
        out = {}
        for m, spec in enumerate(self.engine.models):
            head, last = self.engine.low_watermark(m), self.evaluator.last.get(m)
            if head is not None and last is not None:
                out[spec.name] = float(max(0, head - last) * spec.bucket)
        return out

    # -- checkpoints ---------------------------------------------------------------------------
    def _maybe_checkpoint(self) -> None:
        c = self.config.checkpoint
        if self.checkpoint_failing is not None:  # retry once per interval, events or not
            if self.clock() - self.last_checkpoint_attempt >= c.interval:
                self.checkpoint()
        elif self.events_since_checkpoint >= c.every_events or (
            self.events_since_checkpoint and self.clock() - self.last_checkpoint >= c.interval
        ):
            self.checkpoint()

    def checkpoint(self, partitions: set[int] | None = None, *, commit: bool = True) -> None:
        """Write the owned partitions' state + offsets atomically, then commit the offsets."""
        parts = sorted(self.owned if partitions is None else partitions & self.owned)
        if not parts:
            return
        if self.dlq:
            self.dlq.flush()  # dead letters are durable before their offsets move on
        items = []
        for p in parts:
            offsets = {tp.topic: o for tp, o in self.next_offsets.items() if tp.partition == p}
            meta, arrays = self.engine.export_partition(p)
            items.append((p, offsets, encode(meta, arrays)))
        self.last_checkpoint_attempt = self.clock()
        try:
            self.store.save(items, alerts=self.store.alerts_state(self.evaluator))
        except CheckpointError as exc:
            self._checkpoint_failed(exc)
            return
        if self.checkpoint_failing is not None and partitions is None:
            log.warning("checkpoint %s written again", self.config.checkpoint.path)
            self.checkpoint_failing, self.checkpoint_failed_in_row = None, 0
            if self.consumption_paused:
                self.consumption_paused = False
                # restored ones only: a partition assigned meanwhile waits for its restore
                self.consumer.resume(
                    *(tp for tp in self.consumer.assignment() if tp.partition in self.owned)
                )
        self.last_checkpoint = self.clock()
        self.last_checkpoint_wall = time.time()
        self.events_since_checkpoint = 0
        if commit and not self._rebalancing():
            self._commit(parts)

    def _rebalancing(self) -> bool:
        coordinator = getattr(self.consumer, "_coordinator", None)
        try:
            return bool(coordinator is not None and coordinator.rebalance_in_progress())
        except Exception:  # private API of kafka-python
            return False

    def _commit(self, parts: list[int]) -> None:
        """Commit the checkpointed offsets, for lag monitoring only (the checkpoint is the
        source of truth). Not while the group rebalances (the revoke path, or a rebalance the
        coordinator reports): such a commit fails anyway, and in a CI run a consumer that
        tried one during its first rebalance never rejoined (kafka-python 3.0.12)."""
        offsets = {
            tp: OffsetAndMetadata(o, "", -1)
            for tp, o in self.next_offsets.items()
            if tp.partition in parts
        }
        try:
            self.consumer.commit(offsets=offsets)
        except Exception as exc:
            log.warning("offset commit failed (checkpoint is saved): %s", exc)

    def _checkpoint_failed(self, exc: CheckpointError) -> None:
        """The state and offsets stay in memory, consistent; no offset is committed past the
        last good checkpoint. Consumption pauses after a few failures in a row."""
        self.checkpoint_failures += 1
        self.checkpoint_failed_in_row += 1
        self.checkpoint_failing = str(exc)
        log.error(
            "checkpoint failed (%d in a row; %d records since the last good one): %s",
            self.checkpoint_failed_in_row,
            self.events_since_checkpoint,
            exc,
        )
        if (
            self.checkpoint_failed_in_row >= CHECKPOINT_FAILURES_BEFORE_PAUSE
            and not self.consumption_paused
        ):
            self.consumption_paused = True
            self.consumer.pause(*self.consumer.assignment())
            log.error(
                "consumption paused until a checkpoint can be written (retried every %ds)",
                self.config.checkpoint.interval,
            )


def tune_gc() -> None:
    """Long-lived objects (config, registries, the client) need no cyclic-GC scans, and every
    poll allocates thousands of short-lived objects (one per Kafka record) that reference
    counting frees: collect young objects far less often than the default 700 allocations.
    (The Kafka benchmark gives raw kafka-python the same settings.)"""
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


class _OpsCollector:
    """Operational metrics (the fairness families are rendered by ``exporter.py``)."""

    def __init__(self, monitor: Monitor) -> None:
        self.m = monitor

    def collect(self) -> Any:
        m = self.m
        ev = CounterMetricFamily(
            "fairness_events",
            "Records consumed, by topic and outcome.",
            labels=["topic", "outcome"],
        )
        for (topic, outcome), n in sorted(m.outcomes.items()):
            ev.add_metric([topic, outcome], n)
        counters = m.published
        pt, lt = m.k.predictions_topic, m.k.labels_topic
        for (topic, outcome), name in (
            ((pt, "duplicate"), "duplicate_predictions"),
            ((pt, "late"), "late_predictions"),
            ((pt, "evicted"), "evicted_pending"),
            ((pt, "expired"), "expired_pending"),
            ((lt, "duplicate"), "duplicate_labels"),
            ((lt, "late"), "late_labels"),
            ((lt, "orphan"), "orphan_labels"),
        ):
            ev.add_metric([topic, outcome], counters[name])
        yield ev
        pending = GaugeMetricFamily(
            "fairness_pending_labels",
            "Predictions awaiting their label (held by the join until it arrives or the TTL).",
        )
        pending.add_metric([], counters["awaiting_label"])
        yield pending
        kept = GaugeMetricFamily(
            "fairness_join_labelled_kept",
            "Labelled predictions the join keeps until their TTL, to recognise a repeated "
            "prediction or label.",
        )
        kept.add_metric([], counters["labelled_kept_until_ttl"])
        yield kept
        counts, total = m.published_delays
        cumulative = np.cumsum(counts).tolist()
        buckets = [(str(b), float(c)) for b, c in zip(DELAY_BOUNDS, cumulative, strict=False)]
        buckets.append(("+Inf", float(cumulative[-1])))
        yield HistogramMetricFamily(
            "fairness_label_delay_seconds",
            "Time from a prediction (the start of its bucket) to its label's arrival.",
            buckets=buckets,
            sum_value=total,
        )
        lag = GaugeMetricFamily(
            "fairness_consumer_lag",
            "Records behind the partition end.",
            labels=["topic", "partition"],
        )
        for (topic, part), n in sorted(m.lag.items()):
            lag.add_metric([topic, str(part)], n)
        yield lag
        proc = CounterMetricFamily(
            "fairness_processing_seconds", "Main-loop time by phase.", labels=["phase"]
        )
        for phase, secs in m.seconds.items():
            proc.add_metric([phase], secs)
        yield proc
        active = GaugeMetricFamily(
            "fairness_alerts_active", "Alerts firing now.", labels=["alertname", "severity"]
        )
        firing = Counter((a.name, a.labels.get("severity", "")) for a in m.evaluator.book.firing())
        for (name, sev), n in sorted(firing.items()):
            active.add_metric([name, sev], n)
        yield active
        fails = CounterMetricFamily(
            "fairness_alert_delivery_failures",
            "Failed alert delivery attempts, by sink.",
            labels=["sink"],
        )
        for sink in SINKS:
            fails.add_metric([sink], m.dispatcher.failures[sink])
        yield fails
        lost = CounterMetricFamily(
            "fairness_alert_pages_undelivered",
            "Alert notifications never delivered, by sink and reason: dropped (queue or outbox "
            "full) or given_up (rejected by the receiver).",
            labels=["sink", "reason"],
        )
        for sink in SINKS:
            for reason in ("dropped", "given_up"):
                lost.add_metric([sink, reason], m.dispatcher.undelivered(sink, reason))
        yield lost
        behind = GaugeMetricFamily(
            "fairness_alert_evaluation_behind_seconds",
            "Event time from the last bucket boundary the alert rules judged to the newest "
            "closed one: grows while boundaries wait for a partition's labels (at most the "
            "model's lateness).",
            labels=["model"],
        )
        for model, secs in sorted(m.evaluation_behind.items()):
            behind.add_metric([model], secs)
        yield behind
        yield from _bounds_metrics(m)
        age = GaugeMetricFamily(
            "fairness_checkpoint_age_seconds",
            "Seconds since the last checkpoint (NaN before the first).",
        )
        age.add_metric(
            [],
            float("nan")
            if m.last_checkpoint_wall is None
            else time.time() - m.last_checkpoint_wall,
        )
        yield age
        cpf = CounterMetricFamily(
            "fairness_checkpoint_failures",
            "Checkpoint writes that failed (disk full, read-only, I/O); offsets are not "
            "committed past the last good checkpoint.",
        )
        cpf.add_metric([], m.checkpoint_failures)
        yield cpf
        failing = GaugeMetricFamily(
            "fairness_checkpoint_failing",
            "Failed checkpoint writes in a row (0: the last one succeeded); consumption pauses "
            f"at {CHECKPOINT_FAILURES_BEFORE_PAUSE}.",
        )
        failing.add_metric([], m.checkpoint_failed_in_row)
        yield failing


def _bounds_metrics(m: Monitor) -> Any:
    """What the size limits did: attribute values shortened or folded into ``__other__``,
    dead letters truncated or refused by the broker."""
    shortened = CounterMetricFamily(
        "fairness_group_values_shortened",
        "Attribute values longer than limits.max_value_length, counted under a shortened name.",
        labels=["model", "attribute"],
    )
    overflow = CounterMetricFamily(
        "fairness_group_overflow",
        "Events whose value was a new group past max_groups, counted as __other__.",
        labels=["model", "attribute"],
    )
    for spec, reg in zip(m.engine.models, m.engine.registries, strict=True):
        for name, short, over in zip(reg.set_names, reg.shortened, reg.overflow, strict=True):
            shortened.add_metric([spec.name, name], short)
            overflow.add_metric([spec.name, name], over)
    yield shortened
    yield overflow
    if m.dlq is not None:
        dead = CounterMetricFamily(
            "fairness_dead_letters",
            "Records written to the dead-letter topic: sent, truncated to fit, refused.",
            labels=["outcome"],
        )
        for outcome, n in (("sent", m.dlq.sent), ("truncated", m.dlq.truncated)):
            dead.add_metric([outcome], n)
        dead.add_metric(["failed"], m.dlq.failed)
        yield dead


def run_service(config: Config) -> int:
    """Entry point for ``fairness-monitor run``: signals, HTTP, loop, exit code.

    A broker that rejects the credentials or certificates raises ``KafkaAuthError`` here, at
    once, before any client retries a bootstrap that cannot succeed."""
    check_authentication(config.kafka)
    monitor = Monitor(config)
    signal.signal(signal.SIGTERM, monitor.on_signal)
    signal.signal(signal.SIGINT, monitor.on_signal)
    monitor.start_http()
    try:
        return monitor.run()
    finally:
        monitor.stop_http()
