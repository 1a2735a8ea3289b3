"""The takeover's reading of the records of delivery (``global_state.Follower.takeover``), pure:
a transition is delivered if any record says so, whichever record is older; what the newest
lists as owed stays owed; this replica's own record speaks only above both."""

from __future__ import annotations

import pytest

from monitor.alerts import persist
from monitor.alerts.lifecycle import Alert
from monitor.app.global_state import Follower, GlobalState, Mark, OwedState


def alert(seq: int) -> Alert:
    return Alert(f"A{seq}", {"alertname": f"A{seq}"}, "firing", 60.0 * seq, 60.0 * seq, 0.5)


def saved(through: int, owed: list[int]) -> GlobalState:
    states = [OwedState(s, persist.alert_to_state(alert(s))) for s in owed]
    return GlobalState("global", 0, through, through, states, {"delivered_through": through}, "")


@pytest.mark.parametrize(
    ("mark", "store", "own", "held", "through", "owed"),
    [
        # the store fell back: the mark is newer, and records 1 and 3 delivered since
        (Mark(0, [2], 6), saved(4, [1, 2, 3]), 0, [], 6, [2]),
        # the mark read is older than the save: the save records 2 delivered since
        (Mark(0, [1, 2], 3), saved(5, [1]), 0, [1, 2], 5, [1]),
        # the same seq in both: what either says was delivered is
        (Mark(0, [1, 2], 4), saved(4, [2, 3]), 0, [1, 2], 4, [2]),
        # judged here above every record: still owed
        (Mark(0, [], 4), saved(4, []), 0, [5, 6], 4, [5, 6]),
        # its own record (it delivered last) speaks above the others only
        (Mark(0, [1], 2), saved(2, [1]), 5, [1, 4], 5, [1, 4]),
        (Mark(0, [], 2), saved(2, []), 5, [1, 4, 6], 5, [4, 6]),
        # no saved state: the mark alone
        (Mark(0, [3], 4), None, 0, [3, 5], 4, [3, 5]),
    ],
)
def test_a_transition_is_delivered_if_any_record_says_so(
    mark: Mark,
    store: GlobalState | None,
    own: int,
    held: list[int],
    through: int,
    owed: list[int],
) -> None:
    f = Follower()
    f.mark = mark
    have = {s: alert(s) for s in held}
    got, again = f.takeover(have, own, store)
    assert (got, sorted(have), again) == (through, owed, [])
    assert all(have[s].name == f"A{s}" for s in have)  # the saved state's pages, restored


def test_what_was_let_go_is_lost_only_where_no_record_says_it_was_delivered() -> None:
    f = Follower()
    f.evicted = {3, 7}
    assert f.takeover({}, 0, saved(7, [])) == (7, [])  # recorded delivered: nothing lost
    f.evicted = {3, 8, 9}
    assert f.takeover({}, 0, saved(7, [3])) == (7, [8, 9])  # the saved state still owes 3
    assert f.evicted == set()  # forgotten once acted on
    f.evicted, f.mark = {3, 5}, Mark(0, [5], 6)
    assert f.takeover({}, 0, saved(4, [3])) == (6, [5])  # the mark: 3 delivered, 5 owed


def test_a_follower_lets_go_what_the_mark_still_owes_last() -> None:
    from monitor.alerts.outbox import MAX_OWED

    f = Follower()
    f.mark = Mark(0, [1, 2], 2)
    owed = {1: alert(1), 2: alert(2)}
    for s in range(3, MAX_OWED + 5):
        f.owe(owed, s, alert(s))
    assert len(owed) == MAX_OWED and {1, 2} <= set(owed)
    assert f.evicted == {3, 4, 5, 6}  # the oldest of the others


def test_a_newer_mark_is_kept_and_an_older_one_read_late_is_not() -> None:
    f = Follower()
    owed = {s: alert(s) for s in (1, 2, 3)}
    f.saw(Mark(0, [2], 3), owed)
    f.saw(Mark(0, [1, 2], 2), owed)  # older, read late
    assert f.mark == Mark(0, [2], 3) and sorted(owed) == [2]
