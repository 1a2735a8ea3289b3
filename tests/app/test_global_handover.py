"""The delivering role of ``alerts.scope: global`` without a broker: stand-ins for the reader,
the elector and the store; the real evaluator's state is saved as in production. What a replica
judged while another delivered is delivered once when it takes over — including what it judged
in the very turn it took over (it was submitted twice: once as owed, once as new)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kafka import TopicPartition

from monitor.alerts.lifecycle import Alert, Transition
from monitor.app.global_alerts import GlobalAlerts
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
    def __init__(self, topic: TopicPartition) -> None:
        self.topic, self.owns = topic, False

    def poll(self, timeout_ms: int = 0) -> dict[Any, Any]:
        return {}

    def assignment(self) -> set[TopicPartition]:
        return {self.topic} if self.owns else set()

    def pause(self, *tps: TopicPartition) -> None:
        pass


class Dispatcher:
    """Settles everything at once, as a healthy sink would."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float]] = []
        self.accepted = self.settled = 0
        self.queue = SimpleNamespace(qsize=lambda: 0)

    def submit(self, t: Transition) -> None:
        if t.alert.state != "pending":
            self.sent.append((t.alert.name, t.alert.state, t.alert.at))
            self.accepted += 1
            self.settled += 1

    def reseed(self, firing: Any) -> None:
        pass

    def abandon(self) -> None:
        pass


def replica(store: Store) -> tuple[GlobalAlerts, Elector, list[list[Transition]]]:
    cfg = config()
    g = GlobalAlerts(cfg, Engine(cfg), SimpleNamespace(store=store))  # type: ignore[arg-type]
    elector = Elector(g.topic)
    judged: list[list[Transition]] = []  # what each turn's evaluation returns
    g.elector, g.out = elector, SimpleNamespace(publish=lambda partials: None)  # type: ignore[assignment]
    g.reader = SimpleNamespace(poll=lambda **kw: {}, position=lambda tp: 0)  # type: ignore[assignment]
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
