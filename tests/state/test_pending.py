"""The pending store's lazy TTL expiry (``monitor/state/pending.py``) against the store that
removed expired rows at once (``reference_join.py``): the same events through two engines must
leave the same live rows in each run, the same counts, the same checkpoints."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from monitor.config.spec import Config, parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine
from monitor.state.partition import PartitionState
from monitor.state.pending import PendingStore
from tests.helpers import T0
from tests.state.reference_join import ReferencePendingStore


def two_models(max_pending: int) -> Config:
    def model(ttl: str) -> dict[str, Any]:
        return {
            "attributes": {"g": {}},
            "windows": ["30m"],
            "bucket": "1m",
            "lateness": "10m",
            "min_samples": 1,
            "join": {"ttl": ttl, "max_pending": max_pending, "early_label_grace": "5m"},
        }

    return parse_config({"models": {"a": model("20m"), "b": model("45m")}})


def with_reference(st: PartitionState) -> ReferencePendingStore:
    """Put the reference store in ``st`` (holding what ``st.pending`` holds)."""
    ref = ReferencePendingStore(st.pending.n_sets, max_size=st.pending.max_size)
    ref.load(st.pending.data)
    st.pending = ref  # type: ignore[assignment]
    return ref


def live_runs(store: PendingStore) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """The rows of each run that were not expired, read without dropping the dead ones."""
    cut = store._cut  # what the lazy store treats as expired
    out = []
    for rows in (store.main, store.delta):
        if sum(store._dead) and len(rows):
            rows = rows[rows["bucket"] >= cut[rows["model"]]]
        out.append(rows)
    return out[0], out[1]


def stream(seed: int, n_batches: int) -> list[tuple[PredictionBatch, LabelBatch]]:
    """Batches ~1 minute apart: predictions with repeated and reused ids (some after their TTL),
    out of order and late ones; labels for known ids (some after the TTL, some twice) and for
    unknown ones."""
    rng = np.random.default_rng(seed)
    out, seen = [], np.zeros(0, np.uint64)
    for i in range(n_batches):
        now = T0 + 60.0 * i + rng.uniform(0, 60)
        n = int(rng.integers(0, 40))
        key = rng.integers(1, 2500, n).astype(np.uint64)  # the pool is small: ids come back
        ts = now - rng.exponential(600, n) * (rng.random(n) < 0.3)  # some late, some very
        groups = rng.integers(0, 2, (n, 1)).astype(np.int32)
        preds = PredictionBatch(
            key=key,
            model=rng.integers(0, 2, n).astype(np.uint16),
            ts=ts,
            pred=rng.integers(0, 2, n).astype(np.uint8),
            score=np.where(rng.random(n) < 0.5, rng.random(n), np.nan),
            groups=groups,
        )
        seen = np.concatenate([seen, key])[-3000:]
        m = int(rng.integers(0, 40))
        lk = np.where(rng.random(m) < 0.85, rng.choice(seen, m), rng.integers(1, 2500, m))
        labels = LabelBatch(
            key=lk.astype(np.uint64),
            ts=now + rng.uniform(0, 30, m),
            label=rng.integers(0, 2, m).astype(np.uint8),
        )
        out.append((preds, labels))
    return out


def same_state(new: Engine, ref: Engine) -> None:
    a, b = new.partitions[0], ref.partitions[0]
    assert new.counters() == ref.counters()
    assert isinstance(a.pending, PendingStore)
    main, delta = live_runs(a.pending)
    assert main.tobytes() == b.pending.main.tobytes()
    assert delta.tobytes() == b.pending.delta.tobytes()
    assert len(a.pending.main) + len(a.pending.delta) <= a.pending.max_size  # memory cap
    assert a.early.data.tobytes() == b.early.data.tobytes()
    for ra, rb in zip(a.rings, b.rings, strict=True):
        assert np.array_equal(ra.counts, rb.counts) and np.array_equal(ra.expired, rb.expired)
    assert np.array_equal(a.delay_counts, b.delay_counts)


@pytest.mark.parametrize(("seed", "max_pending"), [(1, 10**6), (2, 10**6), (3, 250), (4, 40)])
def test_lazy_expiry_keeps_the_rows_counts_and_checkpoints_of_the_reference(
    seed: int, max_pending: int
) -> None:
    cfg = two_models(max_pending)
    new, ref = Engine(cfg), Engine(cfg)
    for e in (new, ref):
        e.track_label_times = True
        for name in ("x", "y"):
            e.registries[0].index(0, name)
            e.registries[1].index(0, name)
    with_reference(ref.partition(0))
    stores = [new.partition(0).pending, ref.partition(0).pending]
    for s in stores:
        s.DELTA_MIN = 16  # merges happen often
    dead_seen = 0
    for i, (preds, labels) in enumerate(stream(seed, 400)):
        for e in (new, ref):
            e.apply(0, preds, labels)
        store = new.partitions[0].pending
        dead_seen += sum(store._dead) > 0
        same_state(new, ref)
        if i % 97 == 96:  # a checkpoint, restored into both engines
            meta, arrays = new.export_partition(0)
            meta_ref, arrays_ref = ref.export_partition(0)
            assert meta == meta_ref
            assert arrays.keys() == arrays_ref.keys()
            for k, v in arrays.items():
                assert v.tobytes() == arrays_ref[k].tobytes(), k
            new.import_partition(0, meta, arrays)
            ref.import_partition(0, meta_ref, arrays_ref)
            with_reference(ref.partitions[0])
            for e in (new, ref):
                e.partitions[0].pending.DELTA_MIN = 16
            same_state(new, ref)
    c = new.counters()
    # the stream exercised what it is meant to: expiry (rows left dead for a while), and with
    # a small cap, eviction
    if max_pending > 100:
        assert c["expired_pending"] > 0 and dead_seen > 50
    assert (c["evicted_pending"] > 0) == (max_pending < 1000)
    assert c["duplicate_predictions"] > 0 and c["orphan_labels"] > 0
    assert c["late_predictions"] > 0 and c["duplicate_labels"] > 0


def test_rows_expire_while_another_model_has_no_events() -> None:
    """Regression: a model without events in the partition (its cut far in the past) kept the
    other models' rows from ever expiring."""
    cfg = two_models(10**6)  # model a: TTL 20 one-minute buckets
    engine = Engine(cfg)
    engine.registries[0].index(0, "x")
    for i in range(60):  # one prediction of model a a minute; model b silent
        one = PredictionBatch(
            key=np.array([i + 1], np.uint64),
            model=np.zeros(1, np.uint16),
            ts=np.array([T0 + 60.0 * i]),
            pred=np.ones(1, np.uint8),
            score=np.array([np.nan]),
            groups=np.zeros((1, 1), np.int32),
        )
        engine.apply(0, one, LabelBatch())
    c = engine.counters()
    # the head is minute 59: minutes 0..38 are past the TTL, 39..59 are held
    assert (c["expired_pending"], c["awaiting_label"]) == (39, 21)
