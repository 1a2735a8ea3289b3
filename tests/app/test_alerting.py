"""Local alert judging (``app/alerting.py``): what is owed to the sinks survives a restart.

Found by a review: a page that a webhook had not taken (an outage) when the monitor restarted
was logged as undelivered and lost — the restored alert was firing, but nothing sent its page
again (Alertmanager is re-posted the active set; a webhook is sent transitions only)."""

from __future__ import annotations

import json
from typing import Any

from monitor.alerts import persist
from monitor.alerts.lifecycle import Transition
from monitor.alerts.sinks import Dispatcher
from monitor.app.alerting import LocalAlerts
from monitor.config.rules import SinkSpec
from monitor.config.spec import parse_config
from monitor.state.engine import Engine
from tests.alerts.test_sinks import Receiver, transition, wait_for

CONFIG = {"models": {"m": {"attributes": {"race": {}}, "windows": ["1h"]}}}


def judging(transitions: list[Transition]) -> LocalAlerts:
    """Local alerts whose evaluator judges ``transitions`` at its next turn (a fake of the
    evaluator's judging: the owed bookkeeping is under test)."""
    config = parse_config(CONFIG)
    alerting = LocalAlerts(config, Engine(config), checkpoints=None)  # type: ignore[arg-type]
    todo = list(transitions)

    def advance(*_: Any, **__: Any) -> list[Transition]:
        out, todo[:] = list(todo), []
        return out

    alerting.evaluator.advance = advance  # type: ignore[method-assign]
    return alerting


def dispatcher(url: str) -> Dispatcher:
    d = Dispatcher(SinkSpec(webhook_url=url, log=False, resend_interval=3600))
    d.backoff = 0.01
    return d


def test_a_page_owed_through_an_outage_is_sent_after_a_restart() -> None:
    down, up = Receiver(fail=10**9), Receiver()
    fired = transition("firing")
    before = judging([fired])
    d = dispatcher(down.url)
    d.start()
    before.turn(lambda p: True, d, 100)
    wait_for(lambda: d.failures["webhook"] >= 2)  # tried, and failing
    text = before.checkpoint_text()
    assert text is not None
    d.close(timeout=0.5)
    owed = json.loads(text)["owed"]
    assert [(a["name"], a["state"]) for a in owed] == [("FourFifthsRule", "firing")]

    after = judging([])  # the restarted monitor: its checkpoint restored, the receiver back
    persist.restore(after.evaluator, text)
    d2 = dispatcher(up.url)
    d2.start(after.firing_at_start())
    after.submit_owed(d2)
    wait_for(lambda: len(up.bodies) == 1)
    page = up.bodies[0]
    assert page["state"] == "firing" and page["labels"] == fired.alert.labels  # type: ignore[index]
    wait_for(lambda: d2.settled >= 1)
    again = after.checkpoint_text()
    assert again is not None and json.loads(again)["owed"] == []  # delivered: owed no more
    d2.close()
    down.close()
    up.close()


def test_only_the_newest_state_of_an_alert_is_owed_and_delivered_ones_are_not() -> None:
    up = Receiver()
    alerting = judging([transition("firing"), transition("resolved")])
    d = dispatcher(up.url)
    d.start()
    alerting.turn(lambda p: True, d, 100)
    text = alerting.checkpoint_text()
    assert text is not None
    assert [a["state"] for a in json.loads(text)["owed"]] in (["resolved"], [])
    wait_for(lambda: d.settled >= 2)
    text = alerting.checkpoint_text()
    assert text is not None and json.loads(text)["owed"] == []
    assert [b["state"] for b in up.bodies] == ["firing", "resolved"]  # type: ignore[index]
    d.close()
    up.close()


def test_pages_delivered_after_a_refused_one_are_not_owed_at_the_next_restart() -> None:
    """Found in review: the checkpoint kept every page from the oldest undelivered one on (a
    ticket watermark), so with one payload a receiver refuses for good, every page delivered
    after it was sent again after each restart. Now exactly the tickets a sink still owes."""
    from monitor.alerts.lifecycle import Alert

    def page(model: str) -> Transition:
        labels = {"alertname": "FourFifthsRule", "model": model, "severity": "page"}
        return Transition(Alert("FourFifthsRule", labels, "firing", 1e9, 1e9, 0.6), "pending")

    hook = Receiver(refuse="poison")
    alerting = judging([page("poison"), *(page(f"ok{i}") for i in range(4))])
    d = Dispatcher(SinkSpec(webhook_url=hook.url, log=False, max_retries=1))
    d.backoff = 0.01
    d.start()
    alerting.turn(lambda p: True, d, 100)
    wait_for(lambda: d.delivered["webhook"] == 4)  # taken, and the answer read
    text = alerting.checkpoint_text()
    assert text is not None
    assert [a["labels"]["model"] for a in json.loads(text)["owed"]] == ["poison"]
    d.close(timeout=0.5)
    hook.close()


def test_a_restart_sends_an_owed_page_only_to_the_sinks_that_owe_it() -> None:
    """Found by a review: what a checkpoint owed was one set for every sink, so while
    Alertmanager was down a webhook that had taken the page got it again at every restart (a
    crash loop paged it once per restart). The checkpoint keeps the sinks that owe each page;
    a restart sends it to those only, and the one that was down gets it once it is back."""
    hook, am_down, am_up = Receiver(), Receiver(fail=10**9), Receiver()

    def start(am: Receiver, alerting: LocalAlerts) -> Dispatcher:
        d = Dispatcher(SinkSpec(webhook_url=hook.url, alertmanager_url=am.url, log=False,
                                resend_interval=3600))  # fmt: skip
        d.backoff = 0.01
        d.start(alerting.firing_at_start())
        alerting.submit_owed(d)
        return d

    alerting = judging([transition("firing")])
    d = start(am_down, alerting)
    alerting.turn(lambda p: True, d, 100)
    wait_for(lambda: len(hook.bodies) == 1 and d.failures["alertmanager"] >= 2)
    text = alerting.checkpoint_text()
    d.close(timeout=0.5)
    assert text is not None and json.loads(text)["owed_sinks"] == [["alertmanager"]]
    for _ in range(3):  # restarts while Alertmanager stays down
        alerting = judging([])
        persist.restore(alerting.evaluator, text)
        d = start(am_down, alerting)
        tried = am_down.calls
        wait_for(lambda t=tried: am_down.calls >= t + 2)  # type: ignore[misc]  # (resent, refused)
        text = alerting.checkpoint_text()
        d.close(timeout=0.5)
        assert text is not None and json.loads(text)["owed_sinks"] == [["alertmanager"]]
    assert len(hook.bodies) == 1, "the webhook was paged again at a restart"
    alerting = judging([])  # Alertmanager is back: it gets the page, the webhook nothing more
    persist.restore(alerting.evaluator, text)
    d = start(am_up, alerting)
    wait_for(lambda: len(am_up.bodies) >= 1 and d.settled >= 1)
    text = alerting.checkpoint_text()
    assert text is not None and json.loads(text)["owed"] == []
    d.close()
    assert len(hook.bodies) == 1
    for r in (hook, am_down, am_up):
        r.close()
