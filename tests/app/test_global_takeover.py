"""Takeovers of ``alerts.scope: global`` delivery after what a replica that does not deliver
had to forget or never saw (found by helper-53's review, reproduced here without a broker):

* it judged more pages than it may keep (``MAX_OWED``) while nobody delivered: the oldest were
  let go and, at the takeover, recorded as delivered — never sent;
* an alert fired, resolved and fired again: the receiver got the first resolve without its page;
* with Alertmanager, a replica behind the last deliverer skipped what was delivered before but
  never let it correct the active set it posts (a resolved alert posted as firing for good);
* the saved judging state was older than the last mark (a store fallback): a firing page was
  owed again after its resolve had been delivered.

The partials topic is modelled by :class:`Feed`: reading offset ``i`` makes the evaluator judge
batch ``i``, so a replica that reads again from a saved offset judges the same again."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kafka import TopicPartition

from monitor.alerts.lifecycle import Transition
from monitor.alerts.outbox import MAX_OWED
from monitor.alerts.sinks import Dispatcher as RealDispatcher
from monitor.app.global_alerts import GlobalAlerts
from monitor.config.rules import SinkSpec
from tests.app.test_global_handover import Dispatcher, Elector, Reader, Store, fired, replica


class Feed(Reader):
    """One replica's reader of the shared partials: each poll reads one more offset."""

    def __init__(self, batches: list[list[Transition]]) -> None:
        super().__init__()
        self.batches, self.at = batches, 0
        self.judged: list[Transition] = []  # what the partials read so far make it judge

    def poll(self, **kw: Any) -> dict[Any, Any]:
        if self.at < len(self.batches):
            self.judged.extend(self.batches[self.at])
            self.at += 1
        return super().poll(**kw)

    def position(self, tp: TopicPartition) -> int:
        return self.at

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.at, self.judged[:] = offset, []

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        self.seek(tps[0], 0)


def fed(
    store: Store, readers: list[Reader], batches: list[list[Transition]]
) -> tuple[GlobalAlerts, Elector]:
    g, elector, _ = replica(store, readers)
    feed = Feed(batches)
    readers[-1] = feed  # marks sent on the topic reach it
    g.reader = feed  # type: ignore[assignment]

    def advance(*a: Any, **kw: Any) -> list[Transition]:
        out = list(feed.judged)
        feed.judged.clear()
        return out

    g.evaluator.advance = advance  # type: ignore[method-assign]
    return g, elector


def resolved(t: Transition, at: float) -> Transition:
    return Transition(replace(t.alert, state="resolved", at=at), "firing")


def turns(g: GlobalAlerts, hook: Any, n: int) -> None:
    for _ in range(n):
        g.turn(lambda p: True, hook, 32)


def test_pages_a_follower_could_not_keep_are_judged_again_at_its_takeover() -> None:
    pages = 1_500
    assert pages > MAX_OWED
    batches = [[fired("A", 60.0)]] + [
        [fired(f"B{k}", 120.0) for k in range(j, j + 100)] for j in range(0, pages, 100)
    ]
    store, hook, readers = Store(), Dispatcher(), []
    lead, el_lead = fed(store, readers, batches)
    follow, el_follow = fed(store, readers, batches)
    el_lead.owns = True
    turns(lead, hook, 1)  # delivers A, saves; then dies (no step-down, no save)
    turns(follow, hook, len(batches))  # judges every B while nobody delivers
    assert len(follow.owed) <= MAX_OWED  # bounded
    el_lead.owns, el_follow.owns = False, True
    turns(follow, hook, len(batches) + 2)  # takes over, reads again from the saved offset
    names = [n for n, _, _ in hook.sent]
    assert len(names) == len(set(names)) == pages + 1  # every page, once
    assert follow.delivered == follow.seq == pages + 1 and follow.owed == {}


def test_a_fire_resolve_fire_judged_by_a_follower_sends_no_resolve_without_its_page() -> None:
    a1 = fired("A", 60.0)
    a2 = fired("A", 180.0)
    for batches, expected in (
        ([[a1], [resolved(a1, 120.0)], [a2]], [("A", "firing", 180.0)]),
        ([[a1, resolved(a1, 120.0), a2]], [("A", "firing", 180.0)]),
        (
            [[a1], [resolved(a1, 120.0)], [a2], [resolved(a2, 240.0)]],
            [("A", "firing", 180.0), ("A", "resolved", 240.0)],
        ),
        ([[a1], [resolved(a1, 120.0)]], [("A", "firing", 60.0), ("A", "resolved", 120.0)]),
    ):
        store, hook, readers = Store(), Dispatcher(), []
        follow, elector = fed(store, readers, batches)
        turns(follow, hook, len(batches))  # nobody delivers
        elector.owns = True
        turns(follow, hook, 1)
        assert hook.sent == expected, batches


def test_a_lagging_takeover_lets_what_was_delivered_correct_alertmanagers_active_set() -> None:
    a, b = fired("A", 60.0), fired("B", 60.0)
    batches = [[a, b], [resolved(b, 120.0)]]
    store, hook, readers = Store(), Dispatcher(), []
    old, el_old = fed(store, readers, batches)
    new, el_new = fed(store, readers, [[], *batches])  # a turn behind
    el_old.owns = True
    turns(old, hook, 2)  # A and B page, B resolves: all delivered
    assert [(n, s) for n, s, _ in hook.sent] == [("A", "firing"), ("B", "firing"),
                                                  ("B", "resolved")]  # fmt: skip
    new.evaluator.book.active[b.alert.key] = b.alert  # restored from an older state
    am = RealDispatcher(SinkSpec(alertmanager_url="http://127.0.0.1:9/", log=False))
    el_old.owns, el_new.owns = False, True
    turns(old, hook, 1)  # steps down
    turns(new, am, 1)  # takes over behind: posts B as firing for now
    box = am.outboxes["alertmanager"]
    assert set(box.firing) == {b.alert.key}
    turns(new, am, 3)  # catches up: nothing owed, but the set follows what was delivered
    assert set(box.firing) == {a.alert.key} and not box.owed
    assert len(hook.sent) == 3


def test_a_saved_state_older_than_the_last_mark_owes_no_page_after_its_resolve() -> None:
    a = fired("A", 60.0)
    batches = [[a], [], [resolved(a, 120.0)]]
    store, hook, readers = Store(), Dispatcher(), []
    old, el_old = fed(store, readers, batches)
    new, el_new = fed(store, readers, batches)
    el_old.owns, hook.down = True, True
    turns(old, hook, 1)  # A owed (the receiver is down): saved with A owed
    turns(new, hook, 1)
    older = store.text
    hook.down, hook.owing = False, {}  # the receiver is back: the outbox delivers A
    hook.sent.append(("A", "firing", 60.0))
    turns(old, hook, 2)  # A delivered, then its resolve; saved and marked
    turns(new, hook, 2)  # reads the mark: nothing owed
    assert [(n, s) for n, s, _ in hook.sent] == [("A", "firing"), ("A", "resolved")]
    store.text = older  # the store falls back to an older generation
    el_old.owns, el_new.owns = False, True
    turns(new, hook, 2)  # the old deliverer died; the next one takes over
    assert [(n, s) for n, s, _ in hook.sent] == [("A", "firing"), ("A", "resolved")]
    assert new.owed == {} and new.delivered >= 2
