"""``alerts.scope: global``: every replica publishes its partitions' partials; one delivers.

* **Publishing** (every replica): each loop turn, the partials of the boundaries its partitions
  closed (``alerts/partials.py``) go to the partials topic (one partition). A checkpoint records
  a boundary as published only after the broker acknowledged its partial (:meth:`flush`; one
  that failed is sent again first), so a partition's next owner never leaves a gap.
* **Judging** (every replica, hot): a reader outside any group reads the partials topic into a
  :class:`~monitor.alerts.global_view.GlobalView` and an evaluator over it — the status page of
  any replica shows the whole model, and a takeover judges on without a restore.
* **Delivering** (one replica): the member of the consumer group ``<group_id>.alerts`` that owns
  the topic's partition. It saves the judging state (``GlobalState``) with the record of what
  it delivered; a new owner delivers what no record says was delivered — once, or twice with
  the same notification id, never not at all. How (and the takeover's cases) is in
  docs/architecture.md, "Global alerts: one deliverer".

All replicas read the same partials in the same order from the same saved state: they judge
alike and number the transitions alike. A handover waits for the deliveries under way."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from threading import Event, Lock
from typing import Any, cast

import msgspec
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.global_view import GlobalView
from monitor.alerts.lifecycle import Alert, Transition
from monitor.alerts.partials import PartialPublisher
from monitor.alerts.sinks import Dispatcher
from monitor.app import global_state as gs
from monitor.app.checkpointing import Checkpointer
from monitor.app.global_state import GlobalState, Mark, OwedState
from monitor.app.partials_out import (
    PartialsOut,
    ensure_partials_topic,
    partials_lost,
    read_partials,
)
from monitor.app.step_down import STEP_DOWN_SECONDS, StepDown, step_down
from monitor.config.spec import Config
from monitor.ingest.kafka import client_config
from monitor.ingest.kafka_join import finish_unawaited_joins
from monitor.state.engine import Engine
from monitor.state.stores import StateStore
from monitor.state.view import Idle

log = logging.getLogger("monitor.app.global_alerts")

SAVE_EVERY = 1.0  # seconds between saves of the judging state while nothing new was delivered
FLUSH_TIMEOUT = 30.0
DELIVERED_KEY = b"delivered"  # the key of the delivering replica's mark on the partials topic


class GlobalAlerts:
    """The three roles above, driven by the service loop (:meth:`turn`, :meth:`flush`)."""

    def __init__(self, config: Config, engine: Engine, checkpoints: Checkpointer) -> None:
        self.config, self.checkpoints = config, checkpoints
        self.publisher = PartialPublisher(config, engine)
        self.view = GlobalView(config)
        self.evaluator = AlertEvaluator(config, self.view)
        self.seq = 0  # transitions judged
        self.delivered = 0  # through this sequence number, as last saved
        self.owed: dict[int, Alert] = {}  # judged, not known delivered (seq -> alert)
        self.owed_sinks: dict[int, frozenset[str]] = {}  # the sinks owing each (none: all)
        self.follower = gs.Follower()  # what it keeps while another replica delivers
        self.leading = False
        # the group's word (its listener): the partition was assigned and not revoked since.
        # The consumer's assignment() alone still lists it between a revocation and the end of
        # the rebalance, so a replica took delivery back while the new owner began (two pages)
        self.granted = False
        # dispatcher ticket -> seq of each transition handed over that a sink still owes
        self.submitted: dict[int, int] = {}
        self.handed = 0  # the last seq handed to the dispatcher
        self.resend: set[int] = set()  # recorded delivered, yet owed: sent when judged again
        self.seeded = 0  # Alertmanager's set was seeded as of this seq (at the takeover)
        self.shown = 0  # the last seq returned by turn (judged again: not returned twice)
        self.saved_at = -1e18
        self.marked = Mark(0)  # the last mark sent
        self.bad = 0  # records of the partials topic that are not partials
        self.lost: str | None = None  # partials deleted before the saved offset (why)
        self.out: PartialsOut | None = None
        self.reader: KafkaConsumer | None = None
        self.elector: KafkaConsumer | None = None
        self.topic = TopicPartition(config.alerts.partials_topic, 0)
        # a request under way may take sinks.timeout (shorter: a firing page after its resolve)
        self.step_down_seconds = max(STEP_DOWN_SECONDS, config.alerts.sinks.timeout + 1.0)
        # a revocation (on kafka-python's thread) waits until the loop has stepped down
        self.revoking, self.stepped_down, self.stopped = Event(), Event(), Event()
        self.stepping = Lock()
        self.in_poll, self.dispatcher = False, cast("Dispatcher | None", None)
        self.owned: Callable[[], Iterable[int]] = set  # the input partitions owned (service)
        self.idle: Idle = lambda p, m: False  # app/idle.py (service)

    def start(self, partitions: int) -> None:
        """Restore the last saved judging state and start reading (``partitions``: of the
        input topics, each of which the view waits to hear from)."""
        ensure_partials_topic(self.config)
        self.view.expected = partitions
        k = self.config.kafka
        self.out = PartialsOut(self.config)
        self.reader = KafkaConsumer(
            **client_config(k),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # an offset the broker deleted: the oldest kept
        )
        self.reader.assign([self.topic])
        self._restore(gs.load(self.store.load_alerts(), log.error))
        self.elector = KafkaConsumer(
            **client_config(k),
            group_id=f"{k.group_id}.alerts",
            enable_auto_commit=False,
            session_timeout_ms=k.session_timeout_ms,
            heartbeat_interval_ms=max(1000, k.session_timeout_ms // 10),
        )
        self.elector.subscribe([self.topic.topic], listener=StepDown(self))
        finish_unawaited_joins(self.elector)

    def _restore(self, s: GlobalState | None) -> None:
        """Judge on from the saved state ``s`` (None: afresh, from the first partial)."""
        assert self.reader is not None
        offset, self.seq = gs.rewind(self.evaluator, self.view, s)
        self.delivered = 0 if s is None else s.through()
        self.owed = {o.seq: persist.alert_from_state(o.alert) for o in (s.owed if s else [])}
        self.owed_sinks = gs.saved_sinks(s)
        if offset is None:
            self.reader.seek_to_beginning(self.topic)
            return
        self.lost = partials_lost(self.reader, self.topic, offset)
        self.reader.seek(self.topic, offset)
        log.info("judging state restored: partials from offset %d, %d transitions judged, %d "
                 "delivered", offset, self.seq, self.delivered)  # fmt: skip

    @property
    def store(self) -> StateStore:
        return self.checkpoints.store

    def flush(self) -> bool:
        """Before a checkpoint: every partial acknowledged (else the checkpoint waits)."""
        if self.out is None or self.out.flush():
            return True
        log.error("partials not acknowledged by the broker: checkpoint postponed")
        return False

    def not_ready(self) -> str | None:
        return self.lost

    def submit_owed(self, dispatcher: Dispatcher) -> None:
        """Owed notifications are this class's own (``owed``, in the state it saves)."""

    def firing_at_start(self) -> list[Alert]:
        return []  # only the delivering replica posts: it re-posts them when it takes over

    def checkpoint_text(self) -> str | None:
        return None  # the judging state is the delivering replica's, saved by it (_save)

    def turn(
        self, caught_up: Callable[[int], bool], dispatcher: Dispatcher, limit: int
    ) -> list[Transition]:
        """Publish this replica's partials; read everyone's, judge, and (when leading) deliver
        and save the judging state. Returns the new transitions."""
        assert self.reader is not None and self.elector is not None and self.out is not None
        self.out.hello(self.owned(), self.publisher.firsts)
        names = [m.name for m in self.view.models]
        idle = [(p, n) for p in self.owned() for m, n in enumerate(names) if self.idle(p, m)]
        self.out.idle(idle, names)
        self.out.publish(self.publisher.advance(caught_up, limit=limit))
        marks = {DELIVERED_KEY: self._delivered_elsewhere}
        self.bad += read_partials(
            self.reader.poll(timeout_ms=0, max_records=2000), self.view, marks
        )
        out = self.evaluator.advance(limit=limit)
        for t in out:
            self.seq += 1
            if t.alert.state != "pending":
                self._owe(self.seq, t.alert)
        first = self.seq - len(out) + 1
        fresh, self.shown = out[max(0, self.shown + 1 - first) :], max(self.shown, self.seq)
        if self._elect(dispatcher):
            self._save(dispatcher, True)  # took over: this turn's were submitted as owed
        elif self.leading:
            handed = set(self.submitted.values())
            for seq, t in enumerate(out, first):  # a replica behind the last deliverer's mark
                if seq > self.delivered or seq in self.resend:  # judges again what was sent:
                    self.resend.discard(seq)  # not sent twice, but the set Alertmanager is
                    self._submit(dispatcher, seq, t)  # posted follows it (one still owed
                    continue  # was handed at the takeover)
                if seq not in handed:
                    self.owed.pop(seq, None)
                if seq > self.seeded:
                    dispatcher.track(t)
            self._save(dispatcher, bool(out))
        return fresh

    def _owe(self, seq: int, alert: Alert) -> None:
        """Owed until recorded delivered: the deliverer's exactly what its sinks owe (they
        collapse and bound it), the others' bounded (``global_state.Follower``)."""
        if self.leading:  # (not what is recorded delivered: a step-down in this turn saves it)
            if seq > self.delivered or seq in self.resend or seq in self.owed:
                self.owed[seq] = alert
        else:
            self.follower.owe(self.owed, seq, alert)

    def _submit(self, dispatcher: Dispatcher, seq: int, t: Transition, to: gs.Sinks = None) -> None:
        self.submitted[dispatcher.submit(t, to)] = seq
        self.handed = max(self.handed, seq)

    def _delivered(self, dispatcher: Dispatcher) -> int:
        """What no sink owes any more (delivered, given up, or replaced by a newer state) is
        owed here no more; returns the seq through which every transition is delivered or
        still in ``owed`` (everything handed over: the exceptions are listed)."""
        owing = dispatcher.owing_sinks()
        for ticket in [t for t in self.submitted if t not in owing]:
            self.owed.pop(self.submitted.pop(ticket), None)
        self.owed_sinks = {s: frozenset(owing[t]) for t, s in self.submitted.items()}
        return max(self.delivered, self.handed)

    def _delivered_elsewhere(self, value: bytes | None) -> None:
        """The delivering replica's mark: what it delivered is no longer owed here (a replica
        that never delivers keeps only what is in flight, not every transition since start)."""
        try:
            mark = msgspec.json.decode(value or b"", type=Mark)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.bad += 1
            return
        if not self.leading:
            self.follower.saw(mark, self.owed)
            self.owed_sinks = gs.sinks_of(mark.sinks)

    def _elect(self, dispatcher: Dispatcher) -> bool:
        """Follow the group; True when this call took delivery over (also just after stepping
        down within it: a rebalance that gave the partition back)."""
        assert self.elector is not None
        self.dispatcher = dispatcher
        if self.revoking.is_set():
            self._step_down()
        self.in_poll = True  # a revocation inside this poll steps down on kafka-python's thread
        try:
            self.elector.poll(timeout_ms=0)
        finally:
            self.in_poll = False
        leading = self.granted and self.topic in self.elector.assignment()
        if self.leading and not leading:
            self._step_down()  # lost without a revocation (e.g. the session expired)
            log.info("another replica delivers alerts now")
        if leading and not self.leading:
            self.elector.pause(self.topic)
            self._take_over(dispatcher)
            log.info("delivering alerts now (%d transitions owed)", len(self.owed))
            for seq in sorted(self.owed):
                t = Transition(self.owed[seq], None)
                self._submit(dispatcher, seq, t, self.owed_sinks.get(seq))
        took, self.leading = leading and not self.leading, leading
        return took

    def _step_down(self) -> None:
        step_down(self)

    def _take_over(self, dispatcher: Dispatcher) -> None:
        """Owed no more: what any record says was delivered (``Follower.takeover``); owed
        still: what the newest record lists (sent as judged, if not judged yet). Judged again
        from the saved state: what this replica let go past its bound that no record says was
        delivered. Alertmanager is posted the newer of the saved state's set and its own."""
        saved = gs.load(self.store.load_alerts(), log.warning)
        firing, self.seeded = self.evaluator.book.firing(), self.seq
        if saved is not None and saved.seq > self.seq and (got := gs.firing(saved)) is not None:
            firing, self.seeded = got, saved.seq
        self.delivered, lost, self.resend = self.follower.takeover(
            self.owed, self.delivered, saved, self.seq
        )
        self.owed_sinks = gs.merge_sinks(self.owed_sinks, gs.saved_sinks(saved))
        if lost and not self._judge_again(saved, lost):
            dispatcher.dropped(len(lost) + gs.orphans(self.owed, lost))
        dispatcher.reseed(firing)

    def _judge_again(self, saved: GlobalState | None, lost: dict[int, Any]) -> bool:
        """From the saved state (or the first partial): False when the partials since were
        deleted by the topic's retention (numbered from there, they would not match)."""
        assert self.reader is not None
        offset = 0 if saved is None else saved.offset
        try:
            first = self.reader.beginning_offsets([self.topic]).get(self.topic) or 0
        except KafkaError:  # not known: they are most likely there (retention is days)
            first = offset
        what = f"{len(lost)} alert notifications judged while no replica delivered were let go"
        if first > offset:
            log.error("%s and cannot be judged again (partials deleted): lost", what)
            return False
        log.warning("%s: judging again from the saved state", what)
        owed, delivered, resend = self.owed, self.delivered, self.resend
        self.evaluator.series.clear()  # (the sparklines would show the span twice)
        self._restore(saved)
        keep = max(delivered, 0 if saved is None else saved.seq)  # judged, not to be again
        self.owed = {s: a for s, a in owed.items() if s <= keep}
        self.delivered, self.resend = delivered, resend | {s for s in lost if s <= delivered}
        return True

    def _save(self, dispatcher: Dispatcher, changed: bool) -> None:
        now, before = time.monotonic(), (len(self.owed), self.owed_sinks, self.delivered)
        delivered = self._delivered(dispatcher)  # (a sink that delivered: saved, and spared)
        changed = changed or (len(self.owed), self.owed_sinks, delivered) != before
        if not changed and now - self.saved_at < SAVE_EVERY:
            return
        offset = self.view.resume_offset()
        if offset is None:
            assert self.reader is not None
            offset = self.reader.position(self.topic)
        # owed but not judged yet (no alert to save): recorded as not delivered from there on
        pending = [s for s in self.resend if s > self.seq]
        recorded = min([delivered, *[s - 1 for s in pending]])
        safe, exceptions = gs.record(self.owed, recorded)
        view = self.view.progress(self.evaluator.last)
        view |= {gs.THROUGH: recorded, gs.SINKS: gs.listed(self.owed_sinks, self.owed)}
        state = GlobalState(
            "global",
            offset,
            self.seq,
            safe,
            [OwedState(s, persist.alert_to_state(a)) for s, a in sorted(self.owed.items())],
            view,
            persist.dumps(self.evaluator),
        )
        try:
            self.store.save_alerts(json.dumps(msgspec.to_builtins(state)))
        except Exception as exc:  # a failed save is tried again next turn
            log.error("saving the judging state failed: %s", exc)
            return
        mark = Mark(safe, exceptions, recorded, gs.listed(self.owed_sinks, exceptions))
        if mark != self.marked and self.out is not None:  # saved: tell the others
            self.out.send(DELIVERED_KEY, msgspec.json.encode(mark))
            self.marked = mark
        self.delivered, self.saved_at = delivered, now

    def close(self) -> None:
        self.stopped.set()
        self.stepped_down.set()
        for c in (self.reader, self.elector):
            if c is not None:
                c.close()
        if self.out is not None:
            self.out.close()
