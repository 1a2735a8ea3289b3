"""What a sink owes and when it tries again (``alerts/outbox.py``), driven on a virtual clock as
the sink's thread drives it: one notification per request, in the order ``due`` gives, stopping
at the first failure. The receiver here is a function of the payload and the time, so refused
payloads, outages and their mix can be played out over hours in milliseconds."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable

import pytest

from monitor.alerts.lifecycle import Alert, Transition
from monitor.alerts.outbox import PACE, ROUND_REFUSALS, Outbox

Sent = tuple[float, str, str, bool]  # (time, model, state, accepted)
# what the receiver does with one notification: takes it ("ok" or True), answers an error for
# that payload ("refused": a 500 for a body it cannot take), answers 404 ("404": may pass, for
# an interval), or is not there ("down" or False: refused connection, timeout, 503)
Answer = str | bool


def alert(name: str, state: str = "firing", at: float = 1.0e9) -> Alert:
    labels = {"alertname": "FourFifthsRule", "model": name, "severity": "page"}
    return Alert("FourFifthsRule", labels, state, 1.0e9, at, 0.6)  # type: ignore[arg-type]


def drive(
    box: Outbox,
    until: float,
    receiver: Callable[[Alert, float], Answer],
    arrivals: dict[float, list[Alert]] | None = None,
    *,
    start: float = 0.0,
) -> list[Sent]:
    """Every request the sink's thread makes until ``until`` (or until nothing is owed and
    nothing more arrives), and how it went: as ``Dispatcher._send`` does it."""
    pending = sorted((arrivals or {}).items())
    now, log = start, []
    while now <= until:
        while pending and pending[0][0] <= now:
            for a in pending.pop(0)[1]:
                box.add(a, now)
        batch = box.due(now)
        for a in batch:
            if not box.ready(a, now):
                continue
            answer = {True: "ok", False: "down"}.get(receiver(a, now), receiver(a, now))
            log.append((now, a.labels["model"], a.state, answer == "ok"))
            if answer == "ok":
                box.delivered([a], now)
                continue
            rejected = answer == "404" and not box.doubtful([a], now)
            if not box.failed([a], now, rejected=rejected, answered=answer != "down"):
                break
        if batch:
            continue
        wake = box.wake(now)
        assert wake > now, "nothing due, yet the thread would wake at once: a busy loop"
        if wake == math.inf and not pending:
            break
        now = min(wake, pending[0][0] if pending else math.inf, until + 1)
    return log


def refusing(*models: str) -> Callable[[Alert, float], Answer]:
    return lambda a, t: "refused" if a.labels["model"] in models else "ok"


def first(log: list[Sent], model: str, *, ok: bool = True) -> float:
    return next(t for t, m, _, k in log if m == model and k == ok)


def test_a_refused_payload_holds_no_page_back_and_is_retried_on_its_own_backoff() -> None:
    box = Outbox(resend_all=False, interval=60)
    for name in "abc":
        box.add(alert(name), 0.0)
    log = drive(box, 3600, refusing("a"))
    assert first(log, "b") == 0.0 and first(log, "c") == 0.0  # at once, not after a's backoff
    tries = [t for t, m, _, _ in log if m == "a"]
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps[:3] == pytest.approx([0.2, 0.4, 0.8]) and max(gaps) == pytest.approx(30)
    assert len(tries) <= 3600 / 30 + 10  # ~2 a minute, for an hour
    assert [a.labels["model"] for a in box.owed.values()] == ["a"]  # still owed, never given up


def test_many_refused_payloads_delay_a_good_page_by_at_most_half_an_interval() -> None:
    """Found in review: each refused payload at the head was tried ``max_retries`` + 1 times at
    the sink's capped backoff before the next was: with 20 refused, a good page waited 9,649 s;
    with 100 it was not sent in 3 h. Once each refused payload has failed (until then nothing
    tells it from a good one), a good page waits at most the sink's backoff (interval/2)."""
    for refused in (1, 20, 100):
        box = Outbox(resend_all=False, interval=60)
        bad = [f"bad{i}" for i in range(refused)]
        for name in bad:
            box.add(alert(name), 0.0)
        now = 0.0
        while len(box.tried_at) < refused:  # until each has been tried
            drive(box, now + 60, refusing(*bad), start=now)
            now += 60
        print(f"{refused} refused: each tried once by {now:.0f} s")
        for arrives in (now + 5, now + 1800, now + 3 * 3600):  # then, in the middle, hours on
            drive(box, arrives, refusing(*bad), start=now)
            now = arrives + 600
            log = drive(box, now, refusing(*bad), {arrives: [alert("good")]}, start=arrives)
            waited = first(log, "good") - arrives
            print(f"  a good page arriving at {arrives:.0f} s waited {waited:.1f} s")
            assert waited <= 30, (refused, arrives, waited)
            assert [a.labels["model"] for a in box.owed.values()] == bad


def test_an_alert_held_up_by_an_outage_goes_before_the_payloads_refused_all_along() -> None:
    """Found in review: an alert set aside by an outage then waited behind every refused alert,
    one shared backoff each (100 refused: 43 intervals); and (second review) behind payloads
    that began failing after it, for ever. Those the receiver never refused go first (in turn,
    the one tried longest ago first), and a round goes on past the payloads it refuses."""
    for refused in (5, 100):
        box = Outbox(resend_all=False, interval=60)
        bad = [f"bad{i}" for i in range(refused)]
        for name in bad[: refused // 2]:
            box.add(alert(name), 0.0)
        drive(box, 3600, refusing(*bad))  # an hour of refusals, the receiver up
        down_until = 3600 + 900.0

        def receiver(a: Alert, t: float, down_until: float = down_until) -> Answer:
            if t < down_until:
                return "down"
            return "refused" if a.labels["model"].startswith("bad") else "ok"

        more = {3600.0: [alert("victim")], 3700.0: [alert(b) for b in bad[refused // 2 :]]}
        log = drive(box, 3 * 3600, receiver, more, start=3600)
        waited = first(log, "victim") - down_until
        print(f"{refused} refused: the outage's victim delivered {waited:.1f} s after the return")
        # half an interval after the return, and one sink backoff for each ROUND_REFUSALS
        # payloads refused ahead of it in the rotation (those that came during the outage)
        assert waited <= 30 * (1 + math.ceil(refused / 2 / ROUND_REFUSALS))
        assert first(log, "victim") < max(t for t, m, *_ in log if m.startswith("bad"))


def test_a_receiver_that_is_down_is_not_asked_more_often_for_many_owed_alerts() -> None:
    """Found in review: setting the head alert aside during an outage reset the sink's
    backoff, and each alert retried on its own: with 1,000 alerts owed a receiver down for
    two hours got up to 3,018 requests a minute (2 before)."""

    def requests(n: int) -> list[float]:
        box = Outbox(resend_all=False, interval=60)
        for i in range(n):
            box.add(alert(f"m{i}"), 0.0)
        return [t for t, *_ in drive(box, 7200, lambda a, t: False)]

    one, many = requests(1), requests(300)
    last_half_hour = [t for t in many if t >= 5400]
    print(f"2 h down: {len(one)} requests for 1 alert owed, {len(many)} for 300")
    assert len(many) <= 1.5 * len(one) and len(last_half_hour) <= 2 * 30 + 2


def test_the_outage_backoff_starts_short_after_a_payload_refused_for_hours() -> None:
    """A payload refused for hours makes many failures in a row; a blip of the receiver then
    must not start the sink's backoff at its cap (every page held for half an interval)."""
    box = Outbox(resend_all=False, interval=600)
    box.add(alert("bad"), 0.0)
    drive(box, 7200, refusing("bad"))
    assert box.failed_in_row > 20 and not box.outage
    blip = (7200.0, 7201.0)

    def receiver(a: Alert, t: float) -> Answer:
        if blip[0] <= t < blip[1]:
            return "down"
        return "refused" if a.labels["model"] == "bad" else "ok"

    log = drive(box, 7300, receiver, {7200.0: [alert("x"), alert("y")]}, start=7200)
    assert first(log, "x") - blip[1] <= 1.0 and first(log, "y") - blip[1] <= 1.0


def test_an_alerts_states_keep_their_order_and_a_working_sink_gets_every_one() -> None:
    """A firing page never arrives after its own resolve: once it failed, its alert is owed
    the newest state only (found in review: a newer state owed before the older one's first
    failure stayed behind it for as long as the receiver refused the older, for ever); and an
    alert that fired and resolved in one loop turn, beside a refused payload, arrives as both
    (the sink works)."""
    box = Outbox(resend_all=False, interval=60)
    box.add(alert("a"), 0.0)
    box.add(alert("a", "resolved", at=2.0e9), 0.0)  # both owed: one loop turn judged both
    box.add(alert("b"), 0.0)
    box.add(alert("bad"), 0.0)

    def receiver(a: Alert, t: float) -> Answer:  # refuses a's firing page and "bad" for good
        m = a.labels["model"]
        return "refused" if m == "bad" or (m == "a" and a.state == "firing") else "ok"

    log = drive(box, 600, receiver)
    assert [(s, ok) for _, m, s, ok in log if m == "a"] == [("firing", False), ("resolved", True)]
    assert first(log, "a") < 1.0  # the resolve at once, not after the refused firing page
    assert first(log, "b") == 0.0
    box.add(alert("short"), 600.0)
    box.add(alert("short", "resolved", at=2.0e9), 600.0)
    log = drive(box, 700, refusing("bad"), start=600)
    assert [(m, s) for _, m, s, ok in log if ok] == [("short", "firing"), ("short", "resolved")]


def test_a_newer_state_of_a_failing_alert_replaces_the_older_and_keeps_its_backoff() -> None:
    box = Outbox(resend_all=False, interval=60)
    box.add(alert("x"), 0.0)
    drive(box, 10, refusing("x"))
    fails, retry_at = box.fails[alert("x").key], box.retry_at[alert("x").key]
    box.add(alert("x", "resolved", at=2.0e9), 10.0)
    assert [a.state for a in box.owed.values()] == ["resolved"]  # the newest state only
    assert box.fails[alert("x").key] == fails and box.retry_at[alert("x").key] == retry_at
    assert box.due(retry_at - 0.01) == [] and box.due(retry_at)[0].state == "resolved"


def test_an_alert_given_up_or_dropped_leaves_no_backoff_behind() -> None:
    """Found in review: the backoff of alerts that kept failing was not reset when the last
    of them was given up or dropped; the next page of that alert waited for it."""
    box = Outbox(resend_all=False, interval=600, max_owed=2)
    x = alert("x")
    box.add(x, 0.0)
    drive(box, 3000, refusing("x"))
    assert box.fails[x.key] > 5
    box.failed([x], 3000.0, rejected=True)  # the receiver rejects it for good: given up
    assert box.undelivered["given_up"] == 1 and not box.fails and not box.retry_at
    box.add(alert("x", "resolved", at=2.0e9), 3001.0)
    assert box.due(3001.0)[0].state == "resolved"  # at once
    box.failed(box.due(3001.0)[:1], 3001.0)
    box.add(alert("y"), 3002.0)
    box.add(alert("z"), 3003.0)  # one too many: x's resolve (the oldest) is dropped
    assert box.undelivered["dropped"] == 1 and x.key not in box.fails
    assert [a.labels["model"] for a in box.owed.values()] == ["y", "z"]


def test_past_max_owed_the_oldest_goes() -> None:
    box = Outbox(resend_all=False, interval=60, max_owed=3)
    x = alert("x")
    box.add(x, 0.0)
    box.add(alert("y", "resolved"), 1.0)
    box.failed([x], 1.0, answered=True)  # x refused: in its backoff, still the oldest owed
    assert [a.labels["model"] for a in box.due(1.0)] == ["y"]
    box.add(alert("z1"), 2.0)
    box.add(alert("z2"), 3.0)  # one too many: x is the oldest
    assert [a.labels["model"] for a in box.owed.values()] == ["y", "z1", "z2"]
    assert box.undelivered["dropped"] == 1


def test_an_alert_that_failed_in_a_blip_is_not_held_back_by_a_payload_refused_later() -> None:
    """Found in review: x failed once in a blip; a refused payload that began failing just
    after it was then always first ("failing for the shortest time") and, its backoff growing
    with the sink's, due every time the sink could send: x was never sent again."""
    box = Outbox(resend_all=False, interval=60)

    def receiver(a: Alert, t: float) -> Answer:
        if a.labels["model"] == "bad":
            return "refused"
        return "ok" if t >= 0.05 else "down"  # one blip at t = 0

    log = drive(box, 3600, receiver, {0.0: [alert("x")], 0.1: [alert("bad")]})
    assert first(log, "x") <= 1.0
    assert [a.labels["model"] for a in box.owed.values()] == ["bad"]


def test_a_resolve_whose_firing_page_was_refused_is_delivered() -> None:
    """Found in review: the firing payload refused, its resolve (a new payload) would be taken:
    with one other refused payload owed it was never sent in 3 h."""
    box = Outbox(resend_all=False, interval=60)

    def receiver(a: Alert, t: float) -> Answer:
        m = a.labels["model"]
        return "refused" if m == "bad" or (m == "x" and a.state == "firing") else "ok"

    resolve = alert("x", "resolved", at=2.0e9)
    log = drive(box, 3 * 3600, receiver, {0.0: [alert("x"), alert("bad")], 600.0: [resolve]})
    assert ("x", "resolved") in [(m, s) for t, m, s, ok in log if ok and t <= 600 + 30]


def test_a_burst_of_refused_payloads_delays_a_good_page_by_a_few_backoffs() -> None:
    """Found in review: a good page arriving just after a burst of payloads the receiver
    refuses waited one sink backoff per refused payload (100: 2,780 s). A round goes on past
    ``ROUND_REFUSALS`` of them before the sink backs off."""
    for refused in (2, 20, 100):
        box = Outbox(resend_all=False, interval=60)
        bad = [f"bad{i}" for i in range(refused)]
        burst = {0.0: [alert(b) for b in bad], 1.0: [alert("good")]}
        log = drive(box, 3600, refusing(*bad), burst)
        waited = first(log, "good") - 1.0
        rounds = math.ceil(refused / ROUND_REFUSALS)
        print(f"burst of {refused} refused: the good page waited {waited:.1f} s")
        assert waited <= sum(min(0.2 * 2**i, 30) for i in range(rounds))


def test_a_newer_state_replaces_every_older_one_of_a_failing_alert() -> None:
    """Found in review: only the newest older state was replaced: firing and resolve owed, the
    firing failed, the alert fired again: both firing pages were sent, the resolve lost."""
    box = Outbox(resend_all=False, interval=60)
    box.add(alert("x"), 0.0)
    box.add(alert("x", "resolved", at=1.5e9), 0.0)
    box.failed(box.due(0.0)[:1], 0.0, answered=True)
    box.add(alert("x", at=2.0e9), 1.0)
    assert [(a.state, a.at) for a in box.owed.values()] == [("firing", 2.0e9)]


def test_a_404_for_an_alert_no_longer_owed_leaves_no_spell_behind() -> None:
    """Found in review: a 404 answered while its alert was evicted (or abandoned) re-recorded
    the alert's spell; its next 404, hours later, was given up at once, not retried."""
    box = Outbox(resend_all=False, interval=60, max_owed=1)
    x = alert("x")
    box.add(x, 0.0)
    box.due(0.0)
    box.add(alert("y"), 0.5)  # x evicted while its request is in flight
    box.doubtful([x], 1.0)  # ... and answered 404
    box.add(alert("x", "resolved", at=2.0e9), 7200.0)
    assert box.doubtful([alert("x", "resolved", at=2.0e9)], 7201.0)  # a spell of its own


def test_a_receiver_answering_404_for_ever_gives_the_pages_up_after_an_interval() -> None:
    """Found in review: with a wrong URL (404 for good) and new alerts arriving, the alerts
    never failed took every round, so none was ever retried past its interval of doubt:
    nothing was counted as given up. Now each is given up about one interval after its first
    404, and the receiver is asked about twice a minute per new alert at most."""
    box = Outbox(resend_all=False, interval=60)
    arrivals = {60.0 * i: [alert(f"m{i}")] for i in range(120)}
    log = drive(box, 7200, lambda a, t: "404", arrivals)
    print(f"2 h of 404: {box.undelivered['given_up']} given up, {len(box.owed)} owed, "
          f"{len(log)} requests")  # fmt: skip
    assert box.undelivered["given_up"] >= 115 and len(box.owed) <= 3
    assert len(log) <= 120 * 12


def test_a_payload_that_never_gets_an_answer_does_not_hold_the_others_back() -> None:
    """Found in review: a payload the receiver never answers (its body times out, or a 504 for
    it alone) was first in every round, ended it, and the pages refused once before (now
    taken) were never tried again: not delivered in 3 h. The alert whose failure ended a round
    goes last in the next."""

    def receiver(a: Alert, t: float) -> Answer:
        m = a.labels["model"]
        if m == "poison":
            return "down"
        return "refused" if t < 5 else "ok"

    box = Outbox(resend_all=False, interval=60)
    log = drive(box, 3 * 3600, receiver, {0.0: [alert("x"), alert("y"), alert("poison")]})
    assert first(log, "x") <= 60 and first(log, "y") <= 60
    assert [a.labels["model"] for a in box.owed.values()] == ["poison"]


def test_a_receiver_refusing_every_payload_is_not_flooded_however_many_are_owed() -> None:
    """Found in review: with a receiver answering 500 to every payload, 1,000 owed alerts made
    42 requests a minute for good (1 alert: 2), and one answering 404 to everything got 987
    requests in one round. After each alert's first try, retries of refused payloads are paced
    (``PACE`` per half interval), and give-ups count toward a round's refusals."""
    assert ROUND_REFUSALS > PACE

    def hour(n: int, answer: str) -> list[float]:
        box = Outbox(resend_all=False, interval=60)
        arrivals = {0.0: [alert(f"m{i}") for i in range(n)]}
        return [t for t, *_ in drive(box, 7200, lambda a, t: answer, arrivals)]

    for answer in ("refused", "404"):
        one, many = hour(1, answer), hour(1000, answer)
        per_minute = Counter(int(t // 60) for t in many)
        steady = [t for t in many if t >= 3600]
        print(f"{answer}: 1 owed {len(one)} requests, 1000 owed {len(many)} in 2 h; busiest "
              f"minute {max(per_minute.values())}, second hour {len(steady)}")  # fmt: skip
        # each alert is tried once (up to ROUND_REFUSALS a round, rounds on the sink's backoff),
        # then the retries are paced: ~PACE per half interval, not 42 a minute for good
        assert len(many) <= 1000 + 120 * (2 * PACE + 4)
        assert len(steady) <= 60 * (2 * PACE + 2)


def test_backoffs_follow_a_monotonic_timer_not_the_wall_clock() -> None:
    """Found in review: backoff deadlines were wall-clock times; a clock stepped back an hour
    after one failure held every page, new ones too, for that hour."""

    from monitor.alerts.sinks import Dispatcher
    from monitor.config.rules import SinkSpec
    from tests.helpers import wait_for

    wall, mono = [2.0e9], [100.0]
    calls: list[bytes] = []

    def send(body: bytes) -> None:
        calls.append(body)
        if len(calls) == 1:
            raise TimeoutError("the first send times out")

    d = Dispatcher(
        SinkSpec(log=False), kafka_send=send, clock=lambda: wall[0], timer=lambda: mono[0]
    )
    d.start()
    d.submit(Transition(alert("x"), "pending"))
    wait_for(lambda: d.failures["kafka"] == 1, 10, lambda: "the first attempt")
    wall[0] -= 3600  # NTP steps the wall clock back an hour
    with d.lock:
        mono[0] += 1.0  # the backoff (0.2 s) has passed on the timer
        d.wakes["kafka"].notify()
    wait_for(lambda: d.delivered["kafka"] == 1, 10, lambda: "sent on the timer's backoff")
    d.close()
    assert len(calls) == 2


def test_pacing_retries_the_refused_payloads_tried_longest_ago() -> None:
    """Found in review: the pace took the first refused payloads in sequence order: with four
    refused for good ahead, those four were retried for ever and a page refused once (in a
    blip of 500s) never again: 0 of 200 delivered in 3 h."""
    for ahead in (4, 100):
        box = Outbox(resend_all=False, interval=60)
        bad = [f"bad{i}" for i in range(ahead)]
        pages = [alert(f"p{i}") for i in range(200)]

        def receiver(a: Alert, t: float) -> Answer:
            m = a.labels["model"]
            return "refused" if m.startswith("bad") or 60 <= t < 660 else "ok"

        log = drive(box, 3 * 3600, receiver, {0.0: [alert(b) for b in bad], 60.0: pages})
        got = {m for _, m, _, ok in log if ok}
        print(f"{ahead} refused ahead: {len(got)} of 200 delivered in 3 h")
        assert got == {f"p{i}" for i in range(200)}


def test_a_state_replaced_during_its_request_is_not_charged_with_its_failure() -> None:
    """Found in review: a failure answered after the alert's newer state arrived was counted
    against the newer payload (refused, paced) though it was never sent."""
    box = Outbox(resend_all=False, interval=60)
    x = alert("x")
    box.add(x, 0.0)
    box.due(0.0)  # x's request in flight ...
    box.add(alert("y"), 0.1)
    box.failed([alert("y")], 0.1)  # (down: the sink backs off, y's newer states replace)
    box.add(alert("x", "resolved", at=2.0e9), 0.2)  # ... its resolve judged meanwhile
    box.failed([x], 0.3, answered=True)  # the firing page's answer: 500
    assert box.refusals[x.key] == 0 and box.fails[x.key] == 0


def test_the_pace_lifts_when_the_receiver_takes_what_it_refused() -> None:
    """Found in review: after a receiver answered 500 to everything for a while, the pages
    owed meanwhile trickled out at the pace (200 owed: the last 1,471 s after recovery)."""
    box = Outbox(resend_all=False, interval=60)
    pages = [alert(f"p{i}") for i in range(200)]
    log = drive(box, 3600, lambda a, t: "refused" if t < 600 else "ok", {0.0: pages})
    last = max(t for t, _, _, ok in log if ok)
    print(f"200 refused until 600 s: the last delivered at {last:.1f} s")
    assert last - 600 <= 60
    box = Outbox(resend_all=False, interval=60)
    for i in range(8):
        box.add(alert(f"q{i}"), 0.0)
    drive(box, 100, lambda a, t: "refused")
    box.hurry()  # close: a last attempt for each, whatever the backoffs and the pace
    assert {a.labels["model"] for a in box.due(101.0)} == {f"q{i}" for i in range(8)}


def test_payloads_never_answered_do_not_take_every_round_first() -> None:
    """Found in review: with two payloads never answered (timeouts), they took turns ending
    every round, and the pages a blip of 500s had refused once were never retried. Every alert
    whose failure ended a round since the last delivery goes last."""
    for never in (1, 2, 3):
        poison = [f"poison{i}" for i in range(never)]

        def receiver(a: Alert, t: float, poison: list[str] = poison) -> Answer:
            if a.labels["model"] in poison:
                return "down"
            return "refused" if t < 5 else "ok"

        box = Outbox(resend_all=False, interval=60)
        arrivals = {0.0: [alert("x"), alert("y")] + [alert(p) for p in poison]}
        log = drive(box, 3 * 3600, receiver, arrivals)
        assert first(log, "x") <= 60 and first(log, "y") <= 60, never


def test_a_resolve_owed_behind_its_refused_firing_page_is_a_new_payload() -> None:
    """Found in review: a resolve owed with its firing page (one loop turn) inherited the
    firing payload's refusal when that failed, and was paced as refused though never sent (100
    refused payloads ahead: 753 s). It is tried at once."""
    box = Outbox(resend_all=False, interval=60)
    bad = [f"bad{i}" for i in range(100)]
    for b in bad:
        box.add(alert(b), 0.0)
    drive(box, 1800, refusing(*bad))
    box.add(alert("x"), 1800.0)
    box.add(alert("x", "resolved", at=2.0e9), 1800.0)

    def receiver(a: Alert, t: float) -> Answer:
        m = a.labels["model"]
        return "refused" if m in bad or (m == "x" and a.state == "firing") else "ok"

    log = drive(box, 3600, receiver, start=1800)
    assert [(s, ok) for _, m, s, ok in log if m == "x"] == [("firing", False), ("resolved", True)]
    assert first(log, "x") - 1800 < 1.0


def test_rounds_the_receiver_answered_end_an_outage() -> None:
    """Found in review: one round that hit ROUND_REFUSALS left the sink "down" for hours
    while every later round was answered; add() then kept only the newest state, and a
    short-lived alert arrived as its resolve alone."""
    for refused in (20, 21, 100):
        box = Outbox(resend_all=False, interval=60)
        bad = [f"bad{i}" for i in range(refused)]
        for b in bad:
            box.add(alert(b), 0.0)
        drive(box, 3600, refusing(*bad))
        box.add(alert("short"), 3600.0)
        box.add(alert("short", "resolved", at=2.0e9), 3600.0)
        log = drive(box, 3700, refusing(*bad), start=3600)
        assert [s for _, m, s, ok in log if m == "short" and ok] == ["firing", "resolved"]


def test_alertmanager_seeded_during_a_rejected_post_is_posted_at_once() -> None:
    """Found in review: alerts seeded (a takeover) while a post was in flight were posted at
    once after a delivery, but after a rejection of that post only an interval later."""
    box = Outbox(resend_all=True, interval=300)
    box.add(alert("old", "resolved"), 0.0)
    post = box.due(0.0)
    box.seed([alert("b")], 0.5)
    box.failed(post, 1.0, rejected=True)
    assert box.wake(1.0) == 1.0 and [a.labels["model"] for a in box.due(1.0)] == ["b"]


def test_a_receiver_rejecting_every_page_gets_a_round_at_a_time() -> None:
    """Found in review: the sink thread went on after every final rejection whatever the
    outbox said: a receiver rejecting every page for good (400, a redirect) got all 1,000 owed
    pages in one burst."""
    import io
    import urllib.error

    from monitor.alerts.sinks import Dispatcher
    from monitor.config.rules import SinkSpec

    for code in (400, 308):
        d = Dispatcher(SinkSpec(log=False, webhook_url="http://x/"), timer=lambda: 100.0)
        box = d.outboxes["webhook"]
        calls = [0]

        def send(alerts: list[Alert], code: int = code, calls: list[int] = calls) -> None:
            calls[0] += 1
            raise urllib.error.HTTPError("http://x/", code, "no", None, io.BytesIO(b""))  # type: ignore[arg-type]

        d.senders["webhook"] = send
        for i in range(1000):
            d.submit(Transition(alert(f"m{i}"), "pending"))
        with d.lock:
            d._send("webhook", box, box.due(100.0))
        assert calls[0] == ROUND_REFUSALS + 1 and box.undelivered["given_up"] == calls[0]
