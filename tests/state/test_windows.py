"""Windowing: random out-of-order streams with random label delays, checked against a
brute-force per-event recount (hypothesis property test)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.state.engine import Engine
from monitor.state.windows import CAL, FAV, FN, FP, TN, TP, N, WindowRing, estimate_cell, hist_cell
from tests.helpers import T0, config, label, pred

BUCKET = 60
WINDOWS = [{"length": "5m"}, {"length": "15m"}, {"length": "5m", "lag": "10m", "name": "lagged"}]
LATENESS = 600
N_BUCKETS = (900 + LATENESS) // BUCKET + 1

event = st.tuples(
    st.integers(0, 40 * 60),  # prediction time offset (s)
    st.integers(0, 25 * 60),  # how much later than its time it arrives (s) -> disorder
    st.sampled_from(["a", "b", "c"]),
    st.integers(0, 1),  # prediction
    st.integers(0, 1),  # label
    st.one_of(st.none(), st.integers(0, 30 * 60)),  # label delay after arrival, None = never
    st.one_of(
        st.none(), st.integers(0, 1_000_000), st.sampled_from([0, 499_999, 500_000, 10**6])
    ),  # score in millionths
)


@settings(max_examples=200)
@given(
    events=st.lists(event, min_size=1, max_size=80),
    cuts=st.lists(st.integers(1, 20), min_size=1, max_size=30),
)
def test_window_counts_equal_brute_force(events: list, cuts: list[int]) -> None:
    cfg = config(windows=WINDOWS, bucket="1m", lateness="10m", score_bins=2)
    engine = Engine(cfg)

    def score(i: int) -> float | None:
        return None if events[i][6] is None else events[i][6] / 1_000_000

    # arrival stream: (arrival time, kind, index)
    stream = []
    for i, (t, lag, _g, _p, _y, ldelay, _s) in enumerate(events):
        stream.append((t + lag, 0, i))
        if ldelay is not None:
            stream.append((t + lag + ldelay, 1, i))
    stream.sort()
    # cut into batches of random sizes
    batches, pos, k = [], 0, 0
    while pos < len(stream):
        size = cuts[k % len(cuts)]
        batches.append(stream[pos : pos + size])
        pos += size
        k += 1

    # ---- brute force, one event at a time (predictions of a batch before its labels) ----
    head = None
    accepted: dict[int, int] = {}  # event index -> bucket
    labelled: dict[int, int] = {}
    late_p = late_l = 0
    for batch in batches:
        for _, kind, i in batch:
            if kind != 0:
                continue
            b = (T0 + events[i][0]) // BUCKET
            head = b if head is None else max(head, b)
            if b <= head - N_BUCKETS:
                late_p += 1
            else:
                accepted[i] = b
        for _, kind, i in batch:
            if kind != 1 or i not in accepted or i in labelled:
                continue
            b = accepted[i]
            if b <= head - N_BUCKETS:
                late_l += 1
            else:
                labelled[i] = b

    # ---- the engine, batch by batch ----
    for batch in batches:
        preds = [
            pred(i, T0 + events[i][0], events[i][2], events[i][3], score(i))
            for _, k_, i in batch
            if k_ == 0
        ]
        labels = [label(i, T0 + events[i][0] + 1, events[i][4]) for _, k_, i in batch if k_ == 1]
        pb, _ = engine.decoder.decode_predictions(preds)
        lb, _ = engine.decoder.decode_labels(labels)
        engine.apply(0, pb, lb)

    snap = engine.snapshot().models["m"]
    idx, names = snap.groups[0]
    c = engine.snapshot().counters
    assert c["late_predictions"] == late_p
    assert c["late_labels"] == late_l
    assert c["predictions"] == len(accepted)
    assert c["labels"] == len(labelled)
    for w in snap.windows.values():
        end = head + 1 - w.window.lag // BUCKET
        start = end - w.window.length // BUCKET
        lo = max(start, head - N_BUCKETS + 1)
        got = w.counts[idx]
        for gi, name in enumerate(names):

            def in_win(i: int, b: int, name: str = name, lo: int = lo, end: int = end) -> bool:
                return lo <= b < end and events[i][2] == name

            exp_n = sum(1 for i, b in accepted.items() if in_win(i, b))
            exp_fav = sum(events[i][3] for i, b in accepted.items() if in_win(i, b))
            cells = {TP: (1, 1), FP: (1, 0), FN: (0, 1), TN: (0, 0)}
            assert got[gi, N] == exp_n
            assert got[gi, FAV] == exp_fav
            for cell, (p, y) in cells.items():
                exp = sum(
                    1
                    for i, b in labelled.items()
                    if in_win(i, b) and events[i][3] == p and events[i][4] == y
                )
                assert got[gi, cell] == exp, (w.window.name, name, cell)
            # score cells, recounted from the scores as written
            mine = [
                (i, events[i][6])
                for i, b in accepted.items()
                if in_win(i, b) and events[i][6] is not None
            ]
            lab = [(i, u) for i, u in mine if i in labelled]
            hist = got[gi, hist_cell(2) : hist_cell(2) + 2]
            assert hist.tolist() == [
                sum(u < 500_000 for _, u in mine),
                sum(u >= 500_000 for _, u in mine),
            ]
            est = got[gi, estimate_cell(2) :]
            for first, pool in ((0, mine), (6, lab)):
                for off, cls in ((0, 1), (3, 0)):
                    us = [u for i, u in pool if events[i][3] == cls]
                    exp3 = [len(us), sum(us), sum((u * u + 500_000) // 1_000_000 for u in us)]
                    assert est[first + off : first + off + 3].tolist() == exp3
            cal = [(CAL + 3 * (u >= 500_000), events[i][4], u) for i, u in lab]
            for b_ in (0, 1):
                in_b = [(y, u) for c_, y, u in cal if c_ == CAL + 3 * b_]
                exp_cal = [len(in_b), sum(y for y, _ in in_b), sum(u for _, u in in_b)]
                assert got[gi, CAL + 3 * b_ : CAL + 3 * b_ + 3].tolist() == exp_cal
    # nothing is lost: ring + expired = every accepted prediction and counted label
    totals = snap.totals[idx]
    assert totals[:, N].sum() == len(accepted)
    assert totals[:, [TP, FP, FN, TN]].sum() == len(labelled)


def test_ring_eviction_moves_counts_to_expired() -> None:
    ring = WindowRing(n_buckets=3, n_cells=1, n_groups=1)
    one = np.ones(1, np.int64)
    zero = np.zeros(1, np.int64)
    for b in (10, 11, 12):
        late, gone = ring.admit(np.array([b]))
        ring.add(np.array([b]), zero, zero, one)
    assert ring.window(10, 13)[0, 0] == 3
    late, gone = ring.admit(np.array([14]))  # evicts 10 and 11
    assert not late[0] and not gone[0]
    assert ring.window(0, 100)[0, 0] == 1
    assert ring.expired[0, 0] == 2
    late, _ = ring.admit(np.array([11]))
    assert late[0]  # 11 <= 14 - 3


def test_batch_with_big_jump_counts_in_time_events_as_expired_not_late() -> None:
    ring = WindowRing(n_buckets=3, n_cells=1, n_groups=1)
    late, gone = ring.admit(np.array([5, 6, 100, 7]))
    assert list(late) == [False, False, False, True]
    assert list(gone) == [True, True, False, False]  # late events are not also "gone"


def test_gone_through_is_the_newest_bucket_whose_counts_left_the_ring() -> None:
    """What a window reaching back needs to know: were counts of its buckets evicted? A head
    jumping over a silence evicts nothing (no window there lost data); counts leaving the
    ring, or counted and gone within one batch, do."""
    ring = WindowRing(n_buckets=10, n_cells=1)
    ring.grow(1)
    one = np.ones((1, 1), dtype=np.int64)
    late, gone = ring.admit(np.array([100]))
    cell = np.zeros((1, 1), dtype=np.int64)  # cell 0 of group 0, weight 1
    ring.scatter(np.array([100]), np.zeros((1, 1), np.int32), cell, one, ~late & ~gone, gone)
    assert ring.counts.sum() == 1
    ring.advance(105)
    assert ring.gone_through < 0  # nothing has left
    ring.advance(115)  # bucket 100 (with a count) leaves; 101..105 were empty
    assert ring.gone_through == 100
    ring.advance(500)  # a silence: slots 106..115 held nothing
    assert ring.gone_through == 100
    late, gone = ring.admit(np.array([495, 700]))  # 495 counted, then gone in the same batch
    assert gone.tolist() == [True, False] and ring.gone_through == 495


def test_after_a_restore_a_silence_leaves_only_the_checkpoints_counts_gone() -> None:
    """Restored, a ring does not know what left it before the checkpoint (its span counts as
    gone); a silence after it must not make every window since look truncated — else each
    restart followed by a quiet night raised FairnessAlertWindowsSkipped."""
    ring = WindowRing(n_buckets=10, n_cells=1)
    ring.grow(1)
    ring.head, ring.gone_through = 100, None  # as import_partition leaves it
    ring.counts[100 % 10, 0, 0] = 3  # bucket 100 holds a count
    ring.advance(500)  # a silence
    assert ring.gone_through == 100  # the count of bucket 100 left; nothing after it did
