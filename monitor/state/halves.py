"""The two halves of a served decision, joined: the request (when, who: the groups) and the
response (what: the score and decision). Serving stacks log them as separate records, in either
order (issue 16: KServe's logger, Seldon's inputs/outputs topics, OIP request/response pairs).

The same machinery as the delayed-label join (``join.py``): two bounded :class:`SortedTable`
tables keyed by the 64-bit key of the decision's id (``<request id>/<row>``), one for each half
still waiting for the other. A poll's halves are sorted by key once: a call whose two halves
are both in the poll meets there, the others are found in the other table with one
``searchsorted``; what matches leaves as a joined decision, stamped with the *request's* time
(the moment the decision was asked for); the rest waits. Repeats of a half of the poll or of a
waiting one are counted and dropped (the first is kept, as the prediction join keeps the first
prediction).

The halves are keyed by id *and model* (the id's key mixed with the model's index; model 0's
keys are the ids' keys unchanged): a request id passed on from one served model to another
(``X-Request-Id``) must not pair one model's request with another model's response, whose
group numbers belong to another registry. Halves of two models never meet; they wait out their
time and are counted (unanswered, orphan) as any half without its partner.

Bounded twice: past ``max_size`` the oldest halves are evicted, and :meth:`HalfJoin.expire`
drops a half once the *other* kind's clock (the newest time seen of that kind) is ``wait`` past
it: requests and responses may come on two topics read at their own pace (a backlog whose
responses are smaller records is read hours ahead in event time), so a half expires only when
its partner would have come; its own kind's clock bounds the wait at ``hold`` (the other topic
stalled). Both are counted by kind, never silently lost: a request without its response
(KServe logs a response only when the model answered), and a response without its request.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.ingest.serving_decode import RESPONSE_DTYPE, request_dtype
from monitor.state.join import SortedTable, blobs, take_rows

U64 = npt.NDArray[np.uint64]
_SALT = np.uint64(0x9E3779B97F4A7C15)  # 2⁶⁴/φ, odd: each model's keys an invertible remix


@dataclass(frozen=True)
class Joined:
    """Decisions whose halves met, as the prediction batch needs them (request time)."""

    key: U64
    ts: npt.NDArray[np.float64]
    model: npt.NDArray[np.uint16]
    pred: npt.NDArray[np.uint8]
    score: npt.NDArray[np.float64]
    groups: npt.NDArray[np.int32]

    def __len__(self) -> int:
        return len(self.key)


# what did not join, by why (kept with the partition's other counters): repeated_requests,
# repeated_responses, unanswered_requests (expired or evicted waiting for a response),
# orphan_responses (expired or evicted waiting for a request)
COUNTS = ("repeated_requests", "repeated_responses", "unanswered_requests", "orphan_responses")
WAITED = {"requests": "unanswered_requests", "responses": "orphan_responses"}  # never met


class HalfJoin:
    """Requests and responses waiting for each other, per input partition."""

    def __init__(self, n_sets: int, *, max_size: int) -> None:
        self.n_sets = n_sets
        self.requests = SortedTable(request_dtype(n_sets), max_size=max_size, age_field="ts")
        self.responses = SortedTable(RESPONSE_DTYPE, max_size=max_size, age_field="ts")
        self.counts: Counter[str] = Counter()
        self.orphans: list[npt.NDArray[Any]] = []  # responses that never met their request
        self.clocks = {
            "requests": -np.inf,
            "responses": -np.inf,
        }  # newest time of each kind  # the latest time of a half seen (expiry is measured from it)

    def add_requests(self, rows: npt.NDArray[Any]) -> Joined:
        """Requests (``request_dtype`` rows) alone: those whose response waits are joined."""
        return self.add(rows, np.zeros(0, RESPONSE_DTYPE))[1]

    def add_responses(self, rows: npt.NDArray[Any]) -> Joined:
        """Responses (``RESPONSE_DTYPE`` rows) alone: those whose request waits are joined."""
        return self.add(np.zeros(0, request_dtype(self.n_sets)), rows)[0]

    def add(self, requests: npt.NDArray[Any], responses: npt.NDArray[Any]) -> list[Joined]:
        """A poll's halves, the responses' first: ``[responses whose request waited, joined;
        requests whose response waited or came in the poll, joined]``, each in arrival order.
        One sort of the poll's keys tells repeats (of the poll, or of a waiting half: the first
        is kept), the halves that meet, and those that wait; a call whose two halves are both
        in the poll (the common case) meets without passing through a table, so at
        ``max_size`` it evicts no waiting half."""
        r, q = _salted(responses), _salted(requests)
        for kind, rows in (("responses", r), ("requests", q)):
            if len(rows):
                self.clocks[kind] = max(self.clocks[kind], float(rows["ts"].max()))
        nr, n = len(r), len(r) + len(q)
        keys = np.concatenate([r["key"], q["key"]])
        order = np.argsort(keys, kind="stable")  # a key's responses first, each kind in order
        sk, resp = keys[order], order < nr
        new_key = np.ones(n, dtype=bool)
        new_key[1:] = sk[1:] != sk[:-1]
        first = new_key.copy()  # the first of a key's responses, and of its requests
        first[1:] |= resp[1:] != resp[:-1]
        run = np.cumsum(new_key) - 1  # each sorted position's key
        at = np.arange(n)
        qi, ri = self.requests.find(sk, at), self.responses.find(sk, at)
        fresh_r = first & resp & (ri < 0)
        met_a = fresh_r & (qi >= 0)  # a response whose request waits
        taken = np.zeros(n, dtype=bool)
        taken[run[met_a]] = True  # that request leaves the table: a new one is no repeat
        fresh_q = first & ~resp & ~((qi >= 0) & ~taken[run])
        met_b = fresh_q & (ri >= 0)  # a request whose response waits
        mine = np.full(n, -1)  # each key's fresh response of the poll still unmet
        left = fresh_r & ~met_a
        mine[run[left]] = order[left]
        met_c = fresh_q & (mine[run] >= 0)  # both halves in the poll
        used = np.zeros(n, dtype=bool)
        used[run[met_c]] = True
        self.counts["repeated_responses"] += nr - int(fresh_r.sum())
        self.counts["repeated_requests"] += n - nr - int(fresh_q.sum())
        back = np.empty(n, dtype=np.int64)  # sorted position of each arrival
        back[order] = at
        a = np.flatnonzero(met_a[back[:nr]])  # responses in arrival order
        asked = take_rows(self.requests, qi[back[a]])
        hit = np.flatnonzero((met_b | met_c)[back[nr:]])  # requests in arrival order
        b = met_b[back[nr + hit]]
        partners = np.empty(len(hit), dtype=RESPONSE_DTYPE)
        blobs(partners)[b] = blobs(take_rows(self.responses, ri[back[nr + hit[b]]]))
        blobs(partners)[~b] = blobs(r)[mine[run[back[nr + hit[~b]]]]]
        wait_r, wait_q = left & ~used[run], fresh_q & ~met_b & ~met_c  # in key order
        waiting_r = blobs(r)[order[wait_r]].view(r.dtype)
        waiting_q = blobs(q)[order[wait_q] - nr].view(q.dtype)
        self._gone("responses", self.responses.insert(waiting_r, presorted=True))
        self._gone("requests", self.requests.insert(waiting_q, presorted=True))
        return [
            _joined(asked, blobs(r)[a].view(r.dtype)),
            _joined(blobs(q)[hit].view(q.dtype), partners),
        ]

    @property
    def newest(self) -> float:
        """The latest time of a half seen, of either kind."""
        return max(self.clocks.values())

    def expire(self, wait: float, hold: float) -> None:
        """Drop the halves the other kind's clock is ``wait`` past, or their own kind's clock
        ``hold`` past (event time), counted by kind."""
        for kind, other in (("requests", "responses"), ("responses", "requests")):
            table = self.requests if kind == "requests" else self.responses
            if len(table):
                ts = table.data["ts"]
                old = (ts < self.clocks[other] - wait) | (ts < self.clocks[kind] - hold)
                self._gone(kind, table.remove_mask(old))

    def _gone(self, kind: str, rows: npt.NDArray[Any]) -> None:
        """Halves that will never meet (expired or evicted): counted, and the responses kept
        for :meth:`take_orphans` (they are dead-lettered)."""
        self.counts[WAITED[kind]] += len(rows)
        if kind == "responses" and len(rows):
            self.orphans.append(rows)

    def take_orphans(self) -> npt.NDArray[Any]:
        """The responses that never met their request since the last call (their ids' keys)."""
        out = np.concatenate(self.orphans) if self.orphans else np.zeros(0, RESPONSE_DTYPE)
        self.orphans = []
        return _salted(out)  # the mix undone: XOR twice

    def export(self) -> dict[str, npt.NDArray[Any]]:
        return {"requests": self.requests.data, "responses": self.responses.data}

    def load(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        self.requests.load(arrays["requests"])
        self.responses.load(arrays["responses"])


def _salted(rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``rows`` (a copy) keyed by id and model: the key XOR the model's multiple of
    ``_SALT`` (wrapping, as uint64 does); applied twice, the id's key again. Model 0's keys
    are unchanged: a one-model monitor's rows are not copied."""
    if not rows["model"].any():
        return rows
    out = rows.copy()
    out["key"] ^= out["model"].astype(np.uint64) * _SALT
    return out


def _joined(asked: npt.NDArray[Any], answers: npt.NDArray[Any]) -> Joined:
    """The two halves of each decision, row for row (of one model: their keys are equal)."""
    assert np.array_equal(asked["key"], answers["key"])
    return Joined(
        (asked["key"] ^ asked["model"].astype(np.uint64) * _SALT),
        asked["ts"].copy(),
        answers["model"].copy(),
        answers["pred"].copy(),
        answers["score"].copy(),
        np.ascontiguousarray(asked["groups"]),
    )
