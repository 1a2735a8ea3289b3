"""A restart at any point is invisible: an engine and evaluator restored from their checkpoint
(partitions encoded and decoded, the alert state through ``persist``) count and judge exactly as
the run that never stopped. Random streams (late and duplicate predictions, early and orphan
labels, evictions at ``max_pending``) restarted at random points, and one test per state that a
review found missing from the checkpoint (helper-62): which prediction an eviction picks, the
serving join's clocks, the attributes join's decisions clock, what left each ring."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.ingest.keys import id_keys
from monitor.ingest.serving_decode import RESPONSE_DTYPE, request_dtype
from monitor.state.checkpoint import decode, encode
from monitor.state.engine import Engine
from monitor.state.served import apply_served
from tests.helpers import T0
from tests.helpers import config as one_model
from tests.state.test_attribute_join import CONFIG as ATTRIBUTES_APART


def small(**join: Any) -> Config:
    """Windows of 10 and 30 one-minute buckets, lateness 5 m (a ring of 36), two rules."""
    rules = [
        {"name": "DI", "metric": "disparate_impact_ratio", "op": "<", "bound": 0.8,
         "for": "2m", "min_samples": 5},
        {"name": "EO", "metric": "equalized_odds_difference", "op": ">", "bound": 0.1,
         "for": "0m", "min_samples": 5},
    ]  # fmt: skip
    model = {"attributes": {"g": {}}, "windows": ["10m", "30m"], "bucket": "1m",
             "lateness": "5m", "min_samples": 5, "join": join}  # fmt: skip
    return parse_config({"models": {"m": model}, "alerts": {"rules": rules}})


def restarted(cfg: Config, engine: Engine, ev: AlertEvaluator) -> tuple[Engine, AlertEvaluator]:
    """What a restart makes of them: every partition and the alert state through their codecs."""
    blobs = {p: encode(*engine.export_partition(p)) for p in list(engine.partitions)}
    text = persist.dumps(ev)
    again = Engine(cfg)
    ev2 = AlertEvaluator(cfg, again)
    for p, blob in blobs.items():
        again.import_partition(p, *decode(blob))
    persist.restore(ev2, text)
    return again, ev2


def batches(
    engine: Engine, seed: int, n: int = 80
) -> list[tuple[int, PredictionBatch, LabelBatch]]:
    """Two partitions' batches: late (up to 15 min) and repeated predictions, labels early,
    for ids never predicted, repeated; three groups at selection rates 0.3, 0.6, 0.6."""
    rng = np.random.default_rng(seed)
    reg = engine.registries[0]
    index = [reg.index(0, g) for g in "abc"]
    out, t, next_id, issued = [], T0, 1, []
    for _ in range(n):
        t += rng.uniform(5, 50)
        k = int(rng.integers(0, 12))
        fresh = rng.random(k) >= 0.05
        keys = [next_id + i if f or not issued else issued[int(rng.integers(len(issued)))]
                for i, f in enumerate(fresh)]  # fmt: skip
        next_id += k
        issued += keys
        late = rng.random(k) < 0.2
        ts = np.where(late, t - rng.uniform(0, 900, k), t - rng.exponential(30, k))
        g = rng.integers(0, 3, k)
        pred = (rng.random(k) < np.where(g == 0, 0.3, 0.6)).astype(np.uint8)
        pb = PredictionBatch(
            np.array(keys, np.uint64),
            np.zeros(k, np.uint16),
            ts,
            pred,
            np.full(k, np.nan),
            np.array([index[i] for i in g], np.int32).reshape(-1, 1),
        )
        m = int(rng.integers(0, 10))
        r = rng.random(m)
        known = np.array(issued or [1], np.uint64)
        lk = np.where(r < 0.15, next_id + rng.integers(0, 5, m),  # before their prediction
                      np.where(r < 0.2, 10**9 + rng.integers(0, 10**6, m),  # never predicted
                               known[rng.integers(0, len(known), m)]))  # fmt: skip
        lb = LabelBatch(lk.astype(np.uint64), t - rng.uniform(0, 60, m),
                        (rng.random(m) < 0.5).astype(np.uint8))  # fmt: skip
        out.append((int(rng.integers(2)), pb, lb))
    return out


def state(engine: Engine) -> Any:
    """Everything counted, by group label (a restore may number groups differently)."""
    labels = engine.registries[0].labels
    out: dict[str, Any] = {"counters": engine.counters()}
    for p, st in sorted(engine.partitions.items()):
        ring = st.rings[0]
        ring.grow(len(labels))
        out[f"p{p}"] = (
            ring.head,
            ring.first,
            {labels[g]: ring.counts[:, g].tolist() for g in range(len(labels))},
            {labels[g]: ring.expired[g].tolist() for g in range(len(labels))},
            sorted(map(tuple, st.pending.data[["key", "bucket", "state"]].tolist())),
            sorted(map(tuple, st.early.data[["key", "ts", "label"]].tolist())),
        )
    return out


def judged(transitions: list[Any]) -> list[tuple[Any, ...]]:
    return [(t.alert.name, sorted(t.alert.labels.items()), t.alert.state, t.alert.at)
            for t in transitions]  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_restarts_at_random_points_count_and_judge_as_the_run_that_never_stopped(
    seed: int,
) -> None:
    cfg = small(ttl="20m", max_pending=60, max_early_labels=8, early_label_grace="2m")
    a, b = Engine(cfg), Engine(cfg)
    ev_a, ev_b = AlertEvaluator(cfg, a), AlertEvaluator(cfg, b)
    rng = np.random.default_rng(1000 + seed)
    stream = batches(a, seed)  # registers groups a, b, c in a; the same in b:
    for g in "abc":
        b.registries[0].index(0, g)
    seen_a: list[tuple[Any, ...]] = []
    seen_b: list[tuple[Any, ...]] = []
    labels = a.registries[0].labels
    for i, (p, pb, lb) in enumerate(stream):
        reg = b.registries[0]  # the same groups by label, whatever b's numbering
        remap = np.array([reg.index(0, labels[g]) for g in pb.groups[:, 0]], np.int32)
        a.apply(p, pb, lb)
        b.apply(p, PredictionBatch(pb.key, pb.model, pb.ts, pb.pred, pb.score,
                                   remap.reshape(-1, 1)), lb)  # fmt: skip
        seen_a += judged(ev_a.advance())
        seen_b += judged(ev_b.advance())
        if rng.random() < 0.3:
            b, ev_b = restarted(cfg, b, ev_b)
        assert state(a) == state(b), f"batch {i}"
        assert seen_a == seen_b, f"batch {i}"
    assert a.counters()["evicted_pending"] > 0  # the cap was reached: evictions compared too


def predictions(e: Engine, keys: list[int], t: float, group: str) -> PredictionBatch:
    n, g = len(keys), e.registries[0].index(0, group)
    return PredictionBatch(np.array(keys, np.uint64), np.zeros(n, np.uint16), np.full(n, t),
                           np.ones(n, np.uint8), np.full(n, np.nan), np.full((n, 1), g, np.int32))  # fmt: skip


def positives(keys: list[int], t: float) -> LabelBatch:
    n = len(keys)
    return LabelBatch(np.array(keys, np.uint64), np.full(n, t), np.ones(n, np.uint8))


def again(cfg: Config, e: Engine, **kw: Any) -> Engine:
    out = Engine(cfg, **kw)
    out.import_partition(0, *decode(encode(*e.export_partition(0))))
    return out


def test_the_join_evicts_the_same_prediction_after_a_restore() -> None:
    """At ``max_pending`` the oldest bucket goes first; within it the pick depended on how rows
    sat in the store's runs, which a restore rebuilds: another prediction was evicted, so a
    later label joined in one run and not in the other (ties now go by key)."""
    cfg = one_model(join={"max_pending": 3})
    out = {}
    for restart in (False, True):
        e = Engine(cfg)
        e.apply(0, predictions(e, [5, 6, 7], T0, "a"), LabelBatch())
        if restart:
            e = again(cfg, e)
        e.apply(0, predictions(e, [1], T0 + 1, "b"), LabelBatch())  # same bucket: one goes
        e.apply(0, PredictionBatch(), positives([1, 5], T0 + 2))
        c = e.counters()
        labels, ring = e.registries[0].labels, e.partitions[0].rings[0]
        ring.grow(len(labels))
        tp = dict(zip(labels, ring.total()[:, 2].tolist(), strict=True))
        kept = sorted(e.partitions[0].pending.data["key"].tolist())
        out[restart] = (kept, c["evicted_pending"], c["early_labels"], tp)
    assert out[True] == out[False]
    assert out[False][1] == 1


def _request(e: Engine, ids: list[str], ts: float, group: int | None = None) -> Any:
    rows = np.zeros(len(ids), dtype=request_dtype(e.n_sets))
    rows["key"], rows["ts"] = id_keys(ids), ts
    rows["groups"] = -1 if group is None else group
    return rows


def _response(ids: list[str], ts: float) -> Any:
    rows = np.zeros(len(ids), dtype=RESPONSE_DTYPE)
    rows["key"], rows["ts"], rows["pred"], rows["score"] = id_keys(ids), ts, 1, 0.9
    return rows


def test_the_serving_joins_clocks_survive_a_restore() -> None:
    """A request 1,000 s behind the responses' clock is expired at once (wait 360 s); after a
    restore the clocks began again at -inf, so it waited, met its response and was counted."""
    cfg = one_model(windows=["1h"], bucket="1m", lateness="5m")
    out = {}
    for restart in (False, True):
        e = Engine(cfg)
        none_q, none_r = _request(e, [], 0), _response([], 0)
        apply_served(e, 0, none_q, _response(["r900"], T0 + 1000), LabelBatch())
        if restart:
            e = again(cfg, e)
        apply_served(e, 0, _request(e, ["r1"], T0, e.registries[0].index(0, "a")), none_r,
                     LabelBatch())  # fmt: skip
        apply_served(e, 0, none_q, _response(["r1"], T0 + 5), LabelBatch())
        c = e.counters()
        out[restart] = {k: c[k] for k in ("predictions", "unanswered_requests")}
    assert out[True] == out[False] == {"predictions": 0, "unanswered_requests": 1}


def test_the_attribute_joins_decision_clock_survives_a_restore() -> None:
    """An attribute record 5,000 s behind the decisions' clock is an orphan at once; after a
    restore that clock began again at -inf, so the record waited and its decision was counted
    with attributes."""
    cfg = parse_config(ATTRIBUTES_APART)
    t = 1e9
    out = {}
    for restart in (False, True):
        e = Engine(cfg, clock=lambda: 2e9)
        none_q, none_r = _request(e, [], 0), _response([], 0)
        apply_served(e, 0, _request(e, ["d1"], t + 5000), _response(["d1"], t + 5000),
                     LabelBatch())  # fmt: skip
        if restart:
            e = again(cfg, e, clock=lambda: 2e9)
        st = e.partition(0)
        assert st.attributes is not None
        rows = np.zeros(1, dtype=st.attributes.attributes.data.dtype)
        rows["key"], rows["ts"] = id_keys(["x"]), t
        rows["groups"][:, 0, 0] = e.registries[0].index(0, "F")
        apply_served(e, 0, none_q, none_r, LabelBatch(), rows)
        apply_served(e, 0, _request(e, ["x"], t + 1), _response(["x"], t + 1), LabelBatch())
        c = e.counters()
        out[restart] = {k: c[k] for k in ("attributed_decisions", "orphan_attributes")}
    assert out[True] == out[False] == {"attributed_decisions": 0, "orphan_attributes": 1}


def test_windows_are_judged_alike_after_a_restore_while_a_partition_is_far_ahead() -> None:
    """What left each ring is kept: restored as unknown, a partition whose head jumped over a
    silence (nothing lost) made the evaluator skip windows the run that never stopped judged,
    and a page came 21 event-minutes late."""
    cfg = small(ttl="20m", max_pending=100_000)
    runs = {}
    for restart in (False, True):
        e = Engine(cfg)
        ev = AlertEvaluator(cfg, e)
        key = 1

        def minute(e: Engine, m: int, fair: bool) -> PredictionBatch:
            nonlocal key
            reg = e.registries[0]
            groups = np.array([reg.index(0, "a")] * 10 + [reg.index(0, "b")] * 10, np.int32)
            pred = [1] * 8 + [0] * 2 + ([1] * 8 + [0] * 2 if fair else [1] * 2 + [0] * 8)
            batch = PredictionBatch(
                np.arange(key, key + 20, dtype=np.uint64), np.zeros(20, np.uint16),
                T0 + m * 60 + np.linspace(1, 50, 20), np.array(pred, np.uint8),
                np.full(20, np.nan), groups.reshape(-1, 1),
            )  # fmt: skip
            key += 100
            return batch

        for m in (0, 1, 2, 100):  # partition 1: a little data, then far ahead
            e.apply(1, minute(e, m, True), LabelBatch())
        for m in range(60, 70):  # partition 0 behind (a backlog)
            e.apply(0, minute(e, m, True), LabelBatch())
            ev.advance()
        if restart:
            e, ev = restarted(cfg, e, ev)
        got = []
        for m in range(70, 100):  # group b's rate drops
            e.apply(0, minute(e, m, False), LabelBatch())
            got += judged(ev.advance())
        runs[restart] = got
    assert runs[True] == runs[False]
    assert any(t[2] == "firing" for t in runs[False])


@pytest.mark.parametrize("odd", [["m"], "m", [1, 2], None])
def test_a_malformed_fingerprint_is_a_configuration_error_not_a_crash(odd: Any) -> None:
    """Found by a review: a checkpoint whose fingerprint decodes but is not a list of models
    raised AttributeError, which the service's restore did not turn into a CheckpointError
    (``on_corrupt`` could not handle it)."""
    cfg = one_model()
    e = Engine(cfg)
    e.apply(0, predictions(e, [1], T0, "a"), LabelBatch())
    meta, arrays = decode(encode(*e.export_partition(0)))
    meta["fingerprint"] = odd
    with pytest.raises(ValueError, match="fingerprint is malformed"):
        Engine(cfg).import_partition(0, meta, arrays)
