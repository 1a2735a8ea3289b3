"""The request/response join: every decision whose two halves arrive is joined once, in any
order and batching, stamped with the request's time; what never meets is counted by kind."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.ingest.serving_decode import RESPONSE_DTYPE, request_dtype
from monitor.state.halves import HalfJoin

SETS = 2


def requests(keys: list[int], ts: float = 100.0) -> Any:
    rows = np.zeros(len(keys), dtype=request_dtype(SETS))
    rows["key"] = keys
    rows["ts"] = [ts + k for k in keys]
    rows["groups"] = [[k % 3, k % 2] for k in keys] or rows["groups"]
    return rows


def responses(keys: list[int], ts: float = 200.0) -> Any:
    rows = np.zeros(len(keys), dtype=RESPONSE_DTYPE)
    rows["key"] = keys
    rows["ts"] = [ts + k for k in keys]
    rows["score"] = [k / 1000 for k in keys]
    rows["pred"] = [k % 2 for k in keys]
    return rows


def test_either_half_first_gives_the_decision_at_the_request_time() -> None:
    j = HalfJoin(SETS, max_size=100)
    assert len(j.add_requests(requests([5, 7]))) == 0
    out = j.add_responses(responses([7, 9]))
    assert list(out.key) == [7] and list(out.ts) == [107.0] and list(out.score) == [0.007]
    assert list(out.pred) == [1] and out.groups.tolist() == [[1, 1]]
    out = j.add_requests(requests([9]))  # its response came first
    assert list(out.key) == [9] and list(out.ts) == [109.0] and list(out.score) == [0.009]
    assert (len(j.requests), len(j.responses)) == (1, 0)  # 5 waits


@pytest.mark.parametrize("seed", range(20))
def test_any_interleaving_joins_each_decision_once(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    keys = np.unique(rng.integers(0, 2**63, size=n, dtype=np.uint64))
    halves = [("q", int(k)) for k in keys] + [("r", int(k)) for k in keys]
    halves = [halves[i] for i in rng.permutation(len(halves))]
    j, joined = HalfJoin(SETS, max_size=10_000), []
    batches: list[tuple[str, list[int]]] = []  # runs of one kind, cut as polls would bring them
    for kind, k in halves:
        if not batches or batches[-1][0] != kind or len(batches[-1][1]) >= rng.integers(1, 50):
            batches.append((kind, []))
        batches[-1][1].append(k)
    for kind, run in batches:
        if kind == "q":
            out = j.add_requests(requests(run, 0.0))
        else:
            out = j.add_responses(responses(run, 0.0))
        joined += [
            (int(k), float(t), float(s)) for k, t, s in zip(out.key, out.ts, out.score, strict=True)
        ]
    truth = sorted((int(k), float(k), int(k) / 1000) for k in keys)
    assert sorted(joined) == truth
    assert len(j.requests) == len(j.responses) == 0


def test_repeats_are_counted_and_dropped_the_first_kept() -> None:
    j = HalfJoin(SETS, max_size=100)
    j.add_requests(requests([1, 1, 2]))
    j.add_requests(requests([2], ts=500.0))
    assert j.counts["repeated_requests"] == 2
    out = j.add_responses(responses([2, 2]))
    assert list(out.ts) == [102.0]  # the first request's time
    assert j.counts["repeated_responses"] == 1


def test_halves_that_never_meet_are_counted_when_they_expire_or_are_evicted() -> None:
    j = HalfJoin(SETS, max_size=3)
    j.add_requests(requests([1, 2]))
    j.add_responses(responses([10, 11]))
    j.expire(wait=109.5, hold=1e9)  # request 1 (ts 101) is 110 behind the responses (211)
    assert (j.counts["unanswered_requests"], j.counts["orphan_responses"]) == (1, 0)
    j.add_responses(responses([12, 13]))  # over the bound: the oldest response evicted
    assert j.counts["orphan_responses"] == 1 and len(j.responses) == 3
    j.expire(wait=0.0, hold=1e9)  # the requests' clock (102) is behind every response
    assert (j.counts["unanswered_requests"], j.counts["orphan_responses"]) == (2, 1)
    j.add_requests(requests([500]))  # the requests' clock moves on: the responses expire
    j.expire(wait=0.0, hold=1e9)
    assert (j.counts["unanswered_requests"], j.counts["orphan_responses"]) == (2, 4)


def test_a_half_waits_while_its_partners_topic_is_behind_however_far_its_own_runs() -> None:
    """Two topics read at their own pace: responses read hours ahead of their requests are
    not orphans; their own clock bounds the wait only at ``hold`` (the other topic stalled)."""
    j = HalfJoin(SETS, max_size=100)
    j.add_requests(requests([1]))  # the requests' clock: 101
    j.add_responses(responses([2, 3], ts=100.0))  # 102, 103: their requests still to come
    j.add_responses(responses([5000], ts=100.0))  # the responses' clock runs 5000 s ahead
    j.expire(wait=60.0, hold=6000.0)
    assert j.counts["orphan_responses"] == 0  # the requests' clock (101) is behind them all
    assert j.counts["unanswered_requests"] == 1  # request 1: the responses are past it
    met = j.add_requests(requests([2, 3], ts=100.0))
    assert sorted(met.key.tolist()) == [2, 3]
    j.add_responses(responses([12000], ts=100.0))  # own clock 12100: 5100 is past the hold
    j.expire(wait=60.0, hold=6000.0)
    assert j.counts["orphan_responses"] == 1  # response 5000, on its own kind's clock


def test_orphan_responses_are_handed_over_with_their_record_offsets_once() -> None:
    """They are dead-lettered by their records' offsets: evicted or expired, each once."""
    j = HalfJoin(SETS, max_size=2)
    rows = responses([10, 11, 12])
    rows["offset"] = [500, 501, 502]
    rows["on_responses"] = 1
    j.add_requests(requests([11]))
    j.add_responses(rows)  # 11 meets; 10 and 12 wait
    assert len(j.take_orphans()) == 0
    j.add_responses(responses([13]))  # over the bound: 10, the oldest, is evicted
    assert j.take_orphans()[["offset", "on_responses"]].tolist() == [(500, 1)]
    j.add_requests(requests([900]))  # the requests' clock past the responses
    j.expire(wait=0.0, hold=1e9)
    assert sorted(j.take_orphans()["offset"].tolist()) == [0, 502]
    assert len(j.take_orphans()) == 0


def test_waiting_halves_survive_an_export_and_load() -> None:
    j = HalfJoin(SETS, max_size=100)
    j.add_requests(requests([3, 4]))
    j.add_responses(responses([8]))
    again = HalfJoin(SETS, max_size=100)
    again.load(j.export())
    out = again.add_responses(responses([4]))
    assert list(out.key) == [4] and out.groups.tolist() == [[1, 0]]
    assert list(again.add_requests(requests([8])).key) == [8]


def test_halves_of_two_models_with_one_id_never_meet_and_each_models_pair_does() -> None:
    """An id passed on from one served model to the next (``X-Request-Id``): model 0's request
    and model 1's response must not be joined (their groups are numbers of another model's
    registry: the engine would count them in the wrong groups, or fail on a group it does
    not have). Each model's own pair joins, with the id's key; the odd halves are counted."""
    j = HalfJoin(SETS, max_size=100)
    first, second = requests([5, 6]), responses([5, 6])
    first["model"], second["model"] = [0, 1], [1, 0]  # id 5: request of 0, response of 1
    assert len(j.add_requests(first)) == 0
    out = j.add_responses(second)  # id 6: request of 1, response of 0
    assert len(out) == 0 and (len(j.requests), len(j.responses)) == (2, 2)
    mine = responses([5])  # model 0's own response to id 5
    out = j.add_responses(mine)
    assert out.key.tolist() == [5] and out.model.tolist() == [0]
    assert out.groups.tolist() == [[5 % 3, 5 % 2]] and out.ts.tolist() == [105.0]
    theirs = requests([5], ts=150.0)
    theirs["model"] = 1  # model 1's own request with that id
    out = j.add_requests(theirs)
    assert out.key.tolist() == [5] and out.model.tolist() == [1] and out.ts.tolist() == [155.0]
    assert len(j.add_requests(requests([99], ts=10_000.0))) == 0  # the clocks move on
    j.expire(wait=100.0, hold=100.0)  # id 6's two halves (models 1 and 0) never met
    assert (j.counts["unanswered_requests"], j.counts["orphan_responses"]) == (1, 1)
    orphans = j.take_orphans()
    assert orphans["key"].tolist() == [6] and orphans["model"].tolist() == [0]


class DictJoin:
    """The join's meaning, one half at a time with dicts (the oracle of ``HalfJoin.add``): a
    poll's responses first, then its requests; a half repeating one of the poll or a waiting
    one (of its kind and model) is counted and dropped, the first kept; a half whose partner
    waits, or came earlier in the poll, meets it; the rest wait."""

    def __init__(self) -> None:
        self.requests: dict[tuple[int, int], Any] = {}
        self.responses: dict[tuple[int, int], Any] = {}
        self.counts = {"repeated_requests": 0, "repeated_responses": 0}

    def add(self, q: Any, r: Any) -> list[list[tuple[Any, ...]]]:
        met_r: list[tuple[Any, ...]] = []
        met_q: list[tuple[Any, ...]] = []
        seen_r: set[tuple[int, int]] = set()
        seen_q: set[tuple[int, int]] = set()
        for row in r:
            k = (int(row["key"]), int(row["model"]))
            if k in self.responses or k in seen_r:
                self.counts["repeated_responses"] += 1
                continue
            seen_r.add(k)
            if k in self.requests:
                met_r.append(_joined_row(self.requests.pop(k), row))
            else:
                self.responses[k] = row
        for row in q:
            k = (int(row["key"]), int(row["model"]))
            if k in self.requests or k in seen_q:
                self.counts["repeated_requests"] += 1
                continue
            seen_q.add(k)
            if k in self.responses:
                met_q.append(_joined_row(row, self.responses.pop(k)))
            else:
                self.requests[k] = row
        return [met_r, met_q]

    def waiting(self) -> tuple[list[Any], list[Any]]:
        return sorted(self.requests), sorted(self.responses)


def _joined_row(q: Any, r: Any) -> tuple[Any, ...]:
    return (
        int(q["key"]), float(q["ts"]), int(r["model"]), int(r["pred"]), float(r["score"]),
        q["groups"].tolist(),
    )  # fmt: skip


def _waiting(j: HalfJoin) -> tuple[list[Any], list[Any]]:
    salt = 0x9E3779B97F4A7C15  # halves.py's per-model remix, undone
    out = []
    for t in (j.requests, j.responses):
        rows = t.data
        keys = [
            int(k) ^ (int(m) * salt) % 2**64
            for k, m in zip(rows["key"], rows["model"], strict=True)
        ]
        out.append(sorted(zip(keys, rows["model"].tolist(), strict=True)))
    return out[0], out[1]


def _rows(joined: Any) -> list[tuple[Any, ...]]:
    return list(
        zip(
            joined.key.tolist(),
            joined.ts.tolist(),
            joined.model.tolist(),
            joined.pred.tolist(),
            joined.score.tolist(),
            joined.groups.tolist(),
            strict=True,
        )
    )


@pytest.mark.parametrize("seed", range(30))
def test_a_polls_halves_together_join_as_responses_then_requests_did(seed: int) -> None:
    """``add`` (the poll's requests and responses at once, from one sort of their keys) gives
    the decisions, in arrival order, the repeats and the waiting halves that the join's meaning
    gives half by half (``DictJoin``): repeats within a poll and of waiting halves, halves of
    two models with one id, calls split over polls, either half first."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 60, size=int(rng.integers(20, 200)))
    j, oracle = HalfJoin(SETS, max_size=10_000), DictJoin()
    met = 0
    for start in range(0, len(ids), int(rng.integers(5, 40))):
        chunk = ids[start : start + 40]
        q_ids = chunk[rng.random(len(chunk)) < 0.6].tolist()
        r_ids = chunk[rng.random(len(chunk)) < 0.6].tolist()
        q = requests(q_ids + q_ids[:1], float(start))  # a repeat in the poll
        r = responses(r_ids + r_ids[-1:], float(start))
        q["model"] = rng.integers(0, 2, len(q))
        r["model"] = rng.integers(0, 2, len(r))
        got = j.add(q, r)
        assert [_rows(x) for x in got] == oracle.add(q, r)
        assert _waiting(j) == oracle.waiting()
        assert {k: j.counts[k] for k in oracle.counts} == oracle.counts
        met += len(got[1])
    assert met > 0 and j.counts["repeated_requests"] > 0
    assert j.take_orphans().size == 0
