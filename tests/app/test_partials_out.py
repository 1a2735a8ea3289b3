"""Sending partials (``app/partials_out.py``): what the producer would refuse never stops the
replica."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pytest
from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from monitor.alerts.partials import BoundaryPartial
from monitor.alerts.partials_codec import decode
from monitor.app.partials_out import PartialsOut


class Done:
    is_done = True

    def succeeded(self) -> bool:
        return True


class Producer:
    """kafka-python's producer as far as PartialsOut uses it: refuses a record over 1 MiB at
    once (``MessageSizeTooLargeError``, as its ``send`` does), or fails ``fail`` sends."""

    def __init__(self, fail: int = 0) -> None:
        self.sent: list[tuple[bytes, bytes]] = []
        self.fail = fail

    def send(self, topic: str, *, key: bytes, value: bytes) -> Done:
        if len(value) > 1_048_576:
            raise MessageSizeTooLargeError(f"{len(value)} bytes")
        if self.fail:
            self.fail -= 1
            raise KafkaTimeoutError("no metadata")
        self.sent.append((key, value))
        return Done()

    def flush(self, timeout: float) -> None:
        pass


def out(producer: Producer) -> PartialsOut:
    o = PartialsOut.__new__(PartialsOut)  # no broker: the producer is the fake above
    o.topic, o.producer, o.unsent, o.futures = "partials", producer, [], []
    o.sent = o.failed = o.too_large = 0
    return o


def partial(groups: int) -> Any:
    rng = np.random.default_rng(0)
    arr = lambda *s: rng.integers(0, 10**6, s).astype(np.int64)  # noqa: E731
    return BoundaryPartial("m", 0, 10, 1, tuple([0] * groups), tuple(f"z{i}" for i in range(groups)),
                           windows=arr(2, groups, 58), bucket=arr(groups, 58),
                           arrivals=arr(groups, 58))  # fmt: skip


def test_a_partial_over_the_request_size_is_sent_without_groups_not_a_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by a review: at ~3,000 groups a boundary's partial is over 1 MiB; the producer
    refused it from ``send``, the replica died, and every replica after it at that boundary.
    It is sent without its groups (the boundary judged without its counts), not as a marker:
    a later review found a marker held the boundaries back for good."""
    producer = Producer()
    o = out(producer)
    with caplog.at_level(logging.ERROR):
        o.publish([partial(3000), partial(10)])
    assert o.too_large == 1 and "left out of the global judgement" in caplog.text
    big, small = (decode(v) for _, v in producer.sent)
    assert not big.marker and big.boundary == 10 and big.labels == ()
    assert big.windows is not None and big.windows.shape == (2, 0, 58)
    assert not small.marker and small.windows is not None


def test_a_send_refused_at_once_is_sent_again_at_the_flush() -> None:
    producer = Producer(fail=1)
    o = out(producer)
    o.publish([partial(10)])
    assert producer.sent == [] and o.failed == 1
    assert o.flush() and len(producer.sent) == 1


def test_each_owned_partition_is_said_once() -> None:
    from monitor.app.partials_out import HELLO_KEY

    producer = Producer()
    o = out(producer)
    o.said = set()
    firsts: dict[int, dict[str, int]] = {0: {}, 2: {}, 3: {"m": 12, "n": 10}}
    asked: list[int] = []

    def first(p: int) -> dict[str, int]:
        asked.append(p)
        return firsts[p]

    o.hello({0, 2}, first)
    o.hello({0, 2, 3}, first)
    assert asked == [0, 2, 3]  # once per partition said
    assert producer.sent[:2] == [(HELLO_KEY, b"0"), (HELLO_KEY, b"2")]
    # one with data says where each model starts in it (the view waits for it from there)
    assert producer.sent[2][0] == HELLO_KEY and len(producer.sent) == 3
    assert json.loads(producer.sent[2][1]) == {"partition": 3, "first": {"m": 12, "n": 10}}


def test_a_partition_is_said_idle_once_per_quiet_spell() -> None:
    from monitor.app.partials_out import IDLE_KEY

    producer = Producer()
    o = out(producer)
    o.idled = set()
    models = ["m", "n"]
    o.idle([(1, "m")], models)
    o.idle([(1, "m")], models)  # still idle: said already
    o.idle([], models)  # busy again
    o.idle([(1, "m"), (2, "m"), (1, "n")], models)  # a new quiet spell
    o.idle([(1, "m"), (2, "m"), (1, "n"), (2, "n")], models)  # 2 idle for n too
    said = [(k, json.loads(v)) for k, v in producer.sent]
    assert said == [
        (IDLE_KEY, {"partition": 1, "model": "m"}),
        # idle for every model: a bare number, as versions before per-model idleness read it
        (IDLE_KEY, 1),
        (IDLE_KEY, {"partition": 2, "model": "m"}),
        (IDLE_KEY, 2),
    ]


def test_a_partition_whose_partials_stay_too_large_holds_no_boundary_back() -> None:
    """Found by a review: once a partition's partials were over the size (groups only ever
    grow, so they stay over), its markers froze its place in the global view: the model was
    judged no further, other partitions' partials were let go, and no page came at all. Now
    the view judges on without its counts, to the last boundary published."""
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.alerts.global_view import GlobalView
    from monitor.alerts.partials_codec import encode
    from tests.alerts.test_fast_evaluation import stream
    from tests.alerts.test_global_view import config, published, single

    cfg = config()
    batches = stream(0, 12, 2)
    ref = single(cfg, batches)
    partials = published(cfg, batches, 2)
    first = min(p.boundary for p in partials if p.partition == 1 and not p.marker)
    o = out(Producer())
    view = GlobalView(cfg, partitions=2)
    ev = AlertEvaluator(cfg, view)
    for p in partials:
        if p.partition == 1 and not p.marker and p.boundary >= first + 20:
            before = o.too_large
            p = decode(o._too_large(p, 2 << 20))  # what publish sends instead
            assert o.too_large == before + 1
        else:
            p = decode(encode(p))
        view.add(p)
        ev.advance()
    assert ev.last[0] == ref.last[0]  # judged to the end, as one instance
    assert view.dropped == 0 and view.missing == 0
