"""The alert book (``alerts/lifecycle.py``): a kept alert's text is written only when it is
read or changes state, with the numbers of the evaluation that made it, and never lost."""

from __future__ import annotations

from collections.abc import Callable

from monitor.alerts.lifecycle import AlertBook, Transition

LABELS = {"alertname": "R", "model": "m", "window": "1h", "attribute": "g", "severity": "page"}


def observe(
    book: AlertBook,
    at: float,
    notes: dict[str, str] | Callable[[], dict[str, str]],
    *,
    breached: bool = True,
    recovered: bool = False,
    for_: float = 0,
) -> Transition | None:
    return book.observe(
        name="R", labels=LABELS, breached=breached, recovered=recovered, at=at, for_=for_,
        value=at, annotations=notes,
    )  # fmt: skip


def test_a_kept_alerts_text_is_written_when_read_from_its_last_evaluation() -> None:
    book, calls = AlertBook(), []

    def text(at: float) -> Callable[[], dict[str, str]]:
        def write() -> dict[str, str]:
            calls.append(at)
            return {"summary": f"at {at:.0f}"}

        return write

    t = observe(book, 0, text(0))
    assert t is not None and t.alert.annotations == {"summary": "at 0"} and calls == [0]
    for at in (60, 120, 180):  # firing, still breached: nothing to tell, nothing written
        assert observe(book, at, text(at)) is None
    assert calls == [0]
    (alert,) = book.firing()  # a reader: the last evaluation's text, written once
    assert (alert.annotations, alert.value, calls) == ({"summary": "at 180"}, 180, [0, 180])
    assert book.firing()[0].annotations == {"summary": "at 180"} and calls == [0, 180]


def test_a_pending_alert_fires_with_the_text_of_the_evaluation_that_fired_it() -> None:
    book = AlertBook()
    assert observe(book, 0, lambda: {"summary": "first"}, for_=120) is not None  # pending
    assert observe(book, 60, lambda: {"summary": "second"}, for_=120) is None
    t = observe(book, 120, lambda: {"summary": "third"}, for_=120)
    assert t is not None and (t.previous, t.alert.state) == ("pending", "firing")
    assert t.alert.annotations == {"summary": "third"}


def test_no_new_text_keeps_the_last_and_a_resolution_carries_it() -> None:
    """A drift detector without a new signal says nothing ({}): the firing alert keeps its
    summary (on the status page, in the checkpoint, in what is sent again), and so does its
    resolved notice if the resolution has no text of its own."""
    book = AlertBook()
    observe(book, 0, {"summary": "drifting"})
    observe(book, 60, lambda: {"summary": "still drifting"})
    assert observe(book, 120, {}, breached=False) is None
    assert book.firing()[0].annotations == {"summary": "still drifting"}
    t = observe(book, 180, {}, breached=False, recovered=True)
    assert t is not None and t.alert.state == "resolved"
    assert t.alert.annotations == {"summary": "still drifting"} and not book.active


def test_a_pending_alert_that_clears_leaves_nothing_behind() -> None:
    book = AlertBook()
    observe(book, 0, lambda: {"summary": "x"}, for_=300)
    observe(book, 60, lambda: {"summary": "y"}, for_=300)
    assert observe(book, 120, {}, breached=False, for_=300) is None
    assert book.active == {} and observe(book, 180, {}, breached=False) is None


def test_an_alert_kept_on_is_about_what_its_last_evaluation_judged() -> None:
    """``stays`` (an active alert left in its state, the path most evaluations take) keeps the
    subject too: a firing alert whose compared pair moved is checked on the new pair."""
    book = AlertBook()
    key = tuple(sorted(LABELS.items()))
    steps = [(0, ("b", "a", "tpr")), (30, ("c", "a", "tpr")), (60, None), (90, ("d", "a", "fpr"))]
    for at, subject in steps:  # pending, pending (kept), firing, firing (kept)
        t = book.observe(
            name="R", labels=LABELS, breached=True, recovered=False, at=at, for_=60,
            value=at, annotations={"summary": "x"}, key=key, subject=subject,
        )  # fmt: skip
        assert (t is None) == (at in (30, 90))
        assert book.subject(key) == (subject or steps[1][1])
    assert not book.stays(key, False, True, 120, 60, 1.0, {}, ("e", "a", "tpr"))  # recovers
    assert book.subject(key) == ("d", "a", "fpr")
    assert book.stays(key, True, False, 120, 60, 1.0, {}, ("e", "a", "tpr"))
    assert book.subject(key) == ("e", "a", "tpr")
