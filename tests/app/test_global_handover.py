"""The delivering role of ``alerts.scope: global`` without a broker: stand-ins for the reader,
the elector and the store; the real evaluator's state is saved as in production. What a replica
judged while another delivered is delivered once when it takes over — including what it judged
in the very turn it took over (it was submitted twice: once as owed, once as new); what a replica
abandoned at a step-down is never recorded as delivered; replicas that do not deliver forget what
the delivering one recorded (the mark it sends on the partials topic)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from kafka import TopicPartition

from monitor.alerts.lifecycle import Alert, Transition
from monitor.app.global_alerts import GlobalAlerts
from monitor.app.global_state import load
from monitor.app.step_down import StepDown
from monitor.state.engine import Engine
from tests.alerts.test_global_view import config


class Store:
    def __init__(self) -> None:
        self.text: str | None = None

    def load_alerts(self) -> str | None:
        return self.text

    def save_alerts(self, text: str) -> None:
        self.text = text


class Elector:
    """The group as kafka-python reports it: a change of owner reaches the replica through
    the rebalance listener at its next poll (revoked first, then assigned)."""

    def __init__(self, topic: TopicPartition) -> None:
        self.topic, self.owns, self.had = topic, False, False
        self.owner: GlobalAlerts | None = None
        self.bounce = False  # a rebalance inside the next poll that gives the partition back
        self.limbo = False  # revoked in the next poll, the rebalance not finished yet

    def poll(self, timeout_ms: int = 0) -> dict[Any, Any]:
        assert self.owner is not None
        listener = StepDown(self.owner)
        if self.bounce or self.limbo or self.had != self.owns:
            if self.had:
                listener.on_partitions_revoked([self.topic])
            if not self.limbo:
                listener.on_partitions_assigned([self.topic] if self.owns else [])
            self.had, self.bounce = self.owns, False
        return {}

    def assignment(self) -> set[TopicPartition]:
        # between a revocation and the end of the rebalance kafka-python still lists it
        return {self.topic} if self.owns or self.limbo else set()

    def pause(self, *tps: TopicPartition) -> None:
        pass


class Dispatcher:
    """Tickets in submit order; delivers at once (a healthy sink) unless ``down`` or the alert
    is one the receiver ``refuses``: then its ticket stays owed, a newer state of its alert
    replacing the older (as the real outbox does for an alert that failed); an abandon forgets
    them all, as the real one does."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float]] = []
        self.queued = self.accepted = 0
        self.down = False
        self.refuses: set[str] = set()
        self.owing: dict[int, object] = {}  # ticket -> its alert's key

    def submit(self, t: Transition, only: Any = None) -> int:
        self.queued += 1
        self.accepted = self.queued
        if t.alert.state != "pending":
            if self.down or t.alert.name in self.refuses:
                for ticket in [k for k, key in self.owing.items() if key == t.alert.key]:
                    del self.owing[ticket]
                self.owing[self.queued] = t.alert.key
            else:
                self.sent.append((t.alert.name, t.alert.state, t.alert.at))
        return self.queued

    def owed_tickets(self) -> set[int]:
        return set(self.owing)

    def owing_sinks(self) -> dict[int, set[str]]:
        from monitor.alerts.receivers import SINKS

        return {t: set(SINKS) for t in self.owed_tickets()}  # as if every sink owed it

    def quiet(self) -> bool:
        return True  # nothing in flight: what is owed waits for a backoff

    def reseed(self, firing: Any) -> None:
        pass

    def track(self, t: Transition) -> None:
        pass

    def dropped(self, n: int) -> None:
        pass

    def abandon(self) -> None:
        self.owing.clear()


class Reader:
    def __init__(self) -> None:
        self.records: list[Any] = []

    def poll(self, **kw: Any) -> dict[Any, Any]:
        out, self.records = self.records, []
        return {"partials": out} if out else {}

    def position(self, tp: TopicPartition) -> int:
        return 0

    def seek(self, tp: TopicPartition, offset: int) -> None:
        pass

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 0)  # nothing deleted by retention


class Out:
    """The partials topic as the replicas share it: marks sent go to every reader."""

    def __init__(self, readers: list[Reader]) -> None:
        self.readers = readers

    def publish(self, partials: Any) -> None:
        pass

    def hello(self, owned: Any, firsts: Any) -> None:
        pass

    def idle(self, idle: Any, models: Any = ()) -> None:
        pass

    def send(self, key: bytes, value: bytes) -> None:
        for r in self.readers:
            r.records.append(SimpleNamespace(key=key, value=value, offset=0))


def replica(
    store: Store, readers: list[Reader] | None = None
) -> tuple[GlobalAlerts, Elector, list[list[Transition]]]:
    cfg = config()
    g = GlobalAlerts(cfg, Engine(cfg), SimpleNamespace(store=store))  # type: ignore[arg-type]
    elector = Elector(g.topic)
    judged: list[list[Transition]] = []  # what each turn's evaluation returns
    readers = [] if readers is None else readers
    readers.append(reader := Reader())
    g.elector, g.out, g.reader = elector, Out(readers), reader  # type: ignore[assignment]
    elector.owner = g
    g.publisher.advance = lambda *a, **kw: []  # type: ignore[method-assign]
    g.evaluator.advance = lambda *a, **kw: judged.pop(0) if judged else []  # type: ignore[method-assign]
    return g, elector, judged


def fired(name: str, at: float) -> Transition:
    return Transition(Alert(name, {"alertname": name}, "firing", at, at, 0.5), "pending")


def test_a_takeover_delivers_what_it_judged_before_and_in_that_turn_once() -> None:
    store, hook = Store(), Dispatcher()
    g, elector, judged = replica(store)
    judged.append([fired("A", 60.0)])
    g.turn(lambda p: True, hook, 32)  # judged while another replica delivers
    assert hook.sent == [] and sorted(g.owed) == [1]
    elector.owns = True
    judged.append([fired("B", 120.0), Transition(fired("C", 120.0).alert, None)])
    g.turn(lambda p: True, hook, 32)
    assert hook.sent == [("A", "firing", 60.0), ("B", "firing", 120.0), ("C", "firing", 120.0)]
    judged.append([fired("D", 180.0)])
    g.turn(lambda p: True, hook, 32)
    assert [s[0] for s in hook.sent] == ["A", "B", "C", "D"]
    assert g.delivered == 4 and g.owed == {}
    assert store.text is not None and '"delivered":4' in store.text.replace(" ", "")


def test_a_takeover_skips_what_the_last_delivering_replica_recorded() -> None:
    store, hook = Store(), Dispatcher()
    first, elector1, judged1 = replica(store)
    second, elector2, judged2 = replica(store)
    for judged in (judged1, judged2):
        judged.append([fired("A", 60.0)])
    elector1.owns = True
    first.turn(lambda p: True, hook, 32)
    second.turn(lambda p: True, hook, 32)
    assert hook.sent == [("A", "firing", 60.0)]  # by the first, recorded in the store
    elector1.owns, elector2.owns = False, True
    for judged in (judged1, judged2):
        judged.append([fired("B", 120.0)])
    first.turn(lambda p: True, hook, 32)
    second.turn(lambda p: True, hook, 32)
    assert hook.sent == [("A", "firing", 60.0), ("B", "firing", 120.0)]


def test_a_replica_that_does_not_deliver_forgets_what_the_delivering_one_recorded() -> None:
    store, hook, readers = Store(), Dispatcher(), []
    first, elector1, judged1 = replica(store, readers)
    second, _, judged2 = replica(store, readers)
    elector1.owns = True
    for k in range(50):
        for judged in (judged1, judged2):
            judged.append([fired("A", 60.0 * k)])
        first.turn(lambda p: True, hook, 32)
        second.turn(lambda p: True, hook, 32)
        assert len(second.owed) <= 1  # at most the one just judged: memory stays bounded
    assert len(hook.sent) == 50


def test_what_a_replica_abandoned_is_not_recorded_delivered_when_it_leads_again() -> None:
    store, hook, readers = Store(), Dispatcher(), []
    first, elector1, judged1 = replica(store, readers)
    second, elector2, judged2 = replica(store, readers)
    elector1.owns, hook.down = True, True  # the webhook is down
    for judged in (judged1, judged2):
        judged.append([fired("A", 60.0)])
    first.turn(lambda p: True, hook, 32)
    second.turn(lambda p: True, hook, 32)
    elector1.owns, elector2.owns = False, True  # first steps down, abandoning A
    first.turn(lambda p: True, hook, 32)
    second.turn(lambda p: True, hook, 32)  # takes over: A still owed, still failing
    elector1.owns, elector2.owns = True, False  # and back: A's abandon settled nothing
    second.turn(lambda p: True, hook, 32)
    first.turn(lambda p: True, hook, 32)
    saved = json.loads(store.text or "{}")
    assert [o["seq"] for o in saved["owed"]] == [1]  # recorded as still owed
    hook.down = False
    elector1.owns, elector2.owns = False, True  # the other takes over and delivers it
    first.turn(lambda p: True, hook, 32)
    second.turn(lambda p: True, hook, 32)
    assert hook.sent == [("A", "firing", 60.0)]
    saved = json.loads(store.text or "{}")
    assert saved["delivered"] == 1 and saved["owed"] == []


def test_a_takeover_never_saves_a_delivered_mark_below_the_last_saved_one() -> None:
    store, hook, readers = Store(), Dispatcher(), []
    first, elector1, judged1 = replica(store, readers)
    elector1.owns = True
    judged1.append([fired("A", 60.0), fired("B", 120.0)])
    first.turn(lambda p: True, hook, 32)
    assert json.loads(store.text or "{}")["delivered"] == 2
    late, elector2, _ = replica(store)  # started before the save: its own mark is 0
    elector1.owns, elector2.owns = False, True
    hook.down = True  # nothing it delivers settles
    late.turn(lambda p: True, hook, 32)
    assert json.loads(store.text or "{}")["delivered"] == 2


def test_a_rebalance_that_gives_delivery_back_within_a_turn_sends_that_turn_once() -> None:
    store, hook = Store(), Dispatcher()
    g, elector, judged = replica(store)
    elector.owns = True
    judged.append([fired("A", 60.0)])
    g.turn(lambda p: True, hook, 32)
    elector.bounce = True  # steps down in the poll, then finds the partition still its own
    judged.append([fired("B", 120.0), fired("C", 120.0)])
    g.turn(lambda p: True, hook, 32)
    assert hook.sent == [("A", "firing", 60.0), ("B", "firing", 120.0), ("C", "firing", 120.0)]
    assert json.loads(store.text or "{}")["delivered"] == 3


def test_a_replica_revoked_mid_rebalance_does_not_deliver_before_the_group_says_so() -> None:
    store, hook = Store(), Dispatcher()
    first, elector1, judged1 = replica(store)
    elector1.owns = True
    judged1.append([fired("A", 60.0)])
    first.turn(lambda p: True, hook, 32)
    elector1.owns, elector1.limbo = False, True  # revoked; the new owner not known yet
    judged1.append([fired("B", 120.0)])
    first.turn(lambda p: True, hook, 32)
    judged1.append([fired("C", 180.0)])
    first.turn(lambda p: True, hook, 32)  # still listed by assignment(): not its to deliver
    assert hook.sent == [("A", "firing", 60.0)]
    assert sorted(first.owed) == [2, 3]  # kept for whoever delivers next


def test_what_is_owed_through_a_long_outage_is_each_alerts_newest_state() -> None:
    """Found by a review: with the receiver down, 3,000 transitions of 3 flapping alerts were
    all kept owed (leader and followers), re-saved every second and re-submitted at a
    takeover. The outboxes owe an alert's newest state only; so does the judging state."""
    store, hook, readers = Store(), Dispatcher(), []
    lead, elector, judged1 = replica(store, readers)
    follow, _, judged2 = replica(store, readers)
    elector.owns, hook.down = True, True
    for k in range(1, 301):
        t = fired(f"A{k % 3}", 60.0 * k)
        if k % 2 == 0:
            t = Transition(replace(t.alert, state="resolved"), "firing")
        for judged in (judged1, judged2):
            judged.append([t])
        lead.turn(lambda p: True, hook, 32)
        follow.turn(lambda p: True, hook, 32)
    assert sorted(lead.owed) == [298, 299, 300]  # what its sinks owe: each alert's newest
    assert [(a.name, a.state) for _, a in sorted(lead.owed.items())] == [
        ("A1", "resolved"), ("A2", "firing"), ("A0", "resolved")
    ]  # fmt: skip
    assert sorted(follow.owed) == [298, 299, 300]  # the mark's exceptions
    saved = json.loads(store.text or "{}")
    assert [o["seq"] for o in saved["owed"]] == [298, 299, 300]
    hook.down = False
    elector.owns = False
    lead.turn(lambda p: True, hook, 32)  # steps down
    follow_elector = follow.elector
    follow_elector.owns = True  # type: ignore[attr-defined]
    follow.turn(lambda p: True, hook, 32)  # takes over: three notifications, not 300
    assert [(n, s) for n, s, _ in hook.sent] == [
        ("A1", "resolved"), ("A2", "firing"), ("A0", "resolved")
    ]  # fmt: skip


def test_a_takeover_by_a_replica_behind_sends_nothing_the_last_one_delivered() -> None:
    """Found by a review: the new deliverer learnt ``delivered = 2`` at the takeover, but when
    it caught up and judged those two transitions itself (a replica just started, restoring
    the state saved a moment ago), it sent them again: every page twice."""
    store, hook, readers = Store(), Dispatcher(), []
    old, el_old, j_old = replica(store, readers)
    new, el_new, j_new = replica(store, readers)
    el_old.owns = True
    j_old.append([fired("A", 60.0), fired("B", 60.0)])
    old.turn(lambda p: True, hook, 32)
    new.turn(lambda p: True, hook, 32)  # behind: it has judged nothing yet
    el_old.owns, el_new.owns = False, True
    old.turn(lambda p: True, hook, 32)  # steps down
    new.turn(lambda p: True, hook, 32)  # takes over, still behind
    j_new.append([fired("A", 60.0), fired("B", 60.0), fired("C", 120.0)])  # it catches up
    new.turn(lambda p: True, hook, 32)
    assert hook.sent == [("A", "firing", 60.0), ("B", "firing", 60.0), ("C", "firing", 120.0)]


def test_a_step_down_run_by_the_listener_and_the_loop_at_once_runs_once() -> None:
    """Found by a review: ``poll(0)`` can return while kafka-python's thread is inside the
    listener's step-down (entered because the loop was in poll); the loop, seeing the grant
    gone, stepped down too. Both waited for the deliveries, both saved, and the one that came
    second found the handed-over tickets cleared and could save a delivered mark of 0 last:
    the next replica would page again. The step-down now runs once."""
    import threading

    from monitor.app.step_down import StepDown
    from tests.helpers import wait_for

    class Slow(Dispatcher):
        """Holds what it took in flight until released; counts abandons; notes who waits."""

        def __init__(self) -> None:
            super().__init__()
            self.release, self.readers, self.abandons = threading.Event(), set(), 0

        def quiet(self) -> bool:
            self.readers.add(threading.current_thread().name)
            return self.release.is_set()

        def owed_tickets(self) -> set[int]:
            return set() if self.release.is_set() else set(range(1, self.queued + 1))

        def abandon(self) -> None:
            self.abandons += 1
            super().abandon()

    store, hook = Store(), Slow()
    g, elector, judged = replica(store)
    elector.owns = True
    g.turn(lambda p: True, hook, 32)
    judged.append([fired("A", 60.0), fired("B", 60.0)])
    g.turn(lambda p: True, hook, 32)  # handed to the sink, not settled yet
    g.in_poll = True  # the loop is in poll() when the group revokes
    listener = threading.Thread(
        target=StepDown(g).on_partitions_revoked, args=([g.topic],), name="listener"
    )
    listener.start()
    wait_for(lambda: "listener" in hook.readers, 10, lambda: "the listener's step-down")
    loop = threading.Thread(target=g._step_down, name="loop")
    loop.start()
    hook.release.set()
    listener.join(10)
    loop.join(10)
    assert hook.abandons == 1
    assert store.text is not None and '"delivered":2' in store.text.replace(" ", "")


def test_a_refused_page_holds_back_neither_the_record_nor_memory() -> None:
    """Found in review: the record was a watermark of the dispatcher's settled tickets, so a
    page the receiver kept refusing held it: every later transition stayed "handed over" (the
    list grew for ever) and the next deliverer paged them all again. The record now lists the
    transitions still owed; the others are delivered, once."""
    store, hook, readers = Store(), Dispatcher(), []
    lead, elector, judged1 = replica(store, readers)
    follow, follow_elector, judged2 = replica(store, readers)
    elector.owns, hook.refuses = True, {"A"}
    for k in range(200):
        for judged in (judged1, judged2):
            judged.append([fired("A" if k == 0 else f"B{k}", 60.0 * k)])
        lead.turn(lambda p: True, hook, 32)
        follow.turn(lambda p: True, hook, 32)
        assert len(lead.submitted) <= 1 and len(follow.owed) <= 2  # bounded
    saved = json.loads(store.text or "{}")
    assert saved["view"]["delivered_through"] == 200 and [o["seq"] for o in saved["owed"]] == [1]
    assert saved["delivered"] == 0  # below the exception: an older version owes it again too
    assert sorted(follow.owed) == [1, 200]  # the mark's exception (and the last, judged after it)
    hook.refuses = set()
    elector.owns, follow_elector.owns = False, True
    lead.turn(lambda p: True, hook, 32)  # steps down
    follow.turn(lambda p: True, hook, 32)  # takes over: only the page still owed is sent
    assert [n for n, _, _ in hook.sent].count("A") == 1 and len(hook.sent) == 200
    assert json.loads(store.text or "{}")["owed"] == []


def test_a_takeover_sends_what_the_saved_state_still_owed_even_if_it_had_forgotten_it() -> None:
    """A replica that started after the mark (restored from an older save, or that read the
    mark before the exception was listed) still sends the page the last deliverer owed."""
    store, hook = Store(), Dispatcher()
    old, el_old, j_old = replica(store)
    el_old.owns, hook.refuses = True, {"A"}
    j_old.append([fired("A", 60.0), fired("B", 60.0)])
    old.turn(lambda p: True, hook, 32)
    new, el_new, j_new = replica(store)  # judged nothing: owes nothing of its own
    hook.refuses = set()
    el_old.owns, el_new.owns = False, True
    old.turn(lambda p: True, hook, 32)
    new.turn(lambda p: True, hook, 32)
    assert hook.sent == [("B", "firing", 60.0), ("A", "firing", 60.0)]
    j_new.append([fired("A", 60.0), fired("B", 60.0)])  # it catches up: nothing twice
    new.turn(lambda p: True, hook, 32)
    assert len(hook.sent) == 2 and new.owed == {}


def test_a_short_lived_alert_judged_by_the_next_deliverer_pages_and_resolves() -> None:
    """Found in review: the judging state kept only each alert's newest state, so an alert
    that fired and resolved in one turn of a replica about to take over (or restarted from the
    saved state) arrived as a resolve alone. A replica that does not deliver keeps each alert's
    two newest states; the deliverer keeps exactly what its sinks owe."""
    store, hook = Store(), Dispatcher()
    g, elector, judged = replica(store)
    short = [fired("A", 60.0), Transition(replace(fired("A", 90.0).alert, state="resolved"),
                                          "firing")]  # fmt: skip
    judged.append(short)
    g.turn(lambda p: True, hook, 32)  # judged while another delivers
    elector.owns = True
    g.turn(lambda p: True, hook, 32)  # takes over
    assert [(n, s) for n, s, _ in hook.sent] == [("A", "firing"), ("A", "resolved")]


def test_the_saved_record_stays_safe_for_the_previous_version() -> None:
    """The previous version read ``delivered`` as "everything through here" and restored only
    what was owed above it: every transition still owed must lie above the saved
    ``delivered``, and the exact mark travels beside it (found in review: a rollback lost the
    refused pages)."""
    store, hook = Store(), Dispatcher()
    g, elector, judged = replica(store)
    elector.owns, hook.refuses = True, {"B"}
    judged.append([fired("A", 60.0), fired("B", 60.0), fired("C", 60.0), fired("D", 60.0)])
    g.turn(lambda p: True, hook, 32)
    saved = json.loads(store.text or "{}")
    owed = [o["seq"] for o in saved["owed"]]
    assert owed == [2] and all(s > saved["delivered"] for s in owed)
    assert saved["view"]["delivered_through"] == 4
    restarted, _, _ = replica(store)  # this version, restored: the exact record
    restarted._restore(load(store.text, print))
    assert restarted.delivered == 4 and sorted(restarted.owed) == [2]


def test_a_handover_waits_as_long_as_a_request_may_take() -> None:
    """Found in review: the step-down waited 3 s for requests under way, while one may take
    ``sinks.timeout`` (5 s by default): the old deliverer's firing page then landed after the
    next deliverer's resend and resolve, leaving "firing" as the receiver's last word. The wait
    (and the listener's, which holds the rebalance) covers the timeout."""
    from monitor.app.step_down import STEP_DOWN_SECONDS
    from monitor.config.spec import parse_config

    for timeout, at_least in ((1.0, STEP_DOWN_SECONDS), (5.0, 6.0), (30.0, 31.0)):
        cfg = parse_config(
            {
                "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}},
                "alerts": {"sinks": {"timeout": timeout}},
            }
        )
        g = GlobalAlerts(cfg, Engine(cfg), SimpleNamespace(store=Store()))  # type: ignore[arg-type]
        assert g.step_down_seconds >= at_least and g.step_down_seconds > timeout
