"""Engine state export/import (the checkpoint payload) round-trips exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.outputs.report import build_report
from monitor.state.checkpoint import CheckpointStore, decode, encode
from monitor.state.engine import Engine
from monitor.state.fingerprint import MEANING
from tests.helpers import T0, config, label, pred, run


def test_round_trip_through_a_new_engine_with_other_group_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = config(windows=["1h"], score_bins=4)
    a = Engine(cfg)
    run(
        a,
        [pred(f"x{i}", T0 + i, "ab"[i % 2], i % 3 == 0, score=(i % 10) / 10) for i in range(40)],
        [label(f"x{i}", T0 + 100 + i, i % 2) for i in range(0, 40, 3)],
        partition=1,
    )
    run(a, [pred("y", T0, "c", 1)], partition=2)  # partition 2 has a group partition 1 lacks
    store = CheckpointStore(tmp_path / "cp.sqlite")
    store.save([(p, {"t": 5}, encode(*a.export_partition(p))) for p in (1, 2)])
    b = Engine(cfg)
    run(b, [pred("z", T0, "c", 0)], partition=7)  # b registered "c" first: indices differ
    b.drop_partition(7)
    for p in (1, 2):
        cp = store.load(p)
        assert cp is not None and cp.offsets == {"t": 5}
        b.import_partition(p, cp.meta, cp.arrays)
    assert build_report(b.snapshot()) == build_report(a.snapshot())
    # and the restored join still works: a late label for a restored prediction is counted
    run(a, [], [label("x1", T0 + 500, 1)], partition=1)
    run(b, [], [label("x1", T0 + 500, 1)], partition=1)
    assert build_report(b.snapshot()) == build_report(a.snapshot())


def test_empty_partition_exports() -> None:
    a = Engine(config())
    run(a, [pred("x", T0, "a", 1)], partition=0)
    meta, arrays = a.export_partition(3)  # never saw an event
    meta2, arrays2 = decode(encode(meta, arrays))
    assert meta2 == meta and set(arrays2) == set(arrays)
    b = Engine(config())
    b.import_partition(3, meta2, arrays2)
    assert np.all(b.partitions[3].rings[0].counts == 0)


def test_groups_that_fold_into_one_on_import_add_up() -> None:
    """A replica whose registry already holds ``max_groups`` groups takes over a partition with
    other groups: they all land in ``__other__``, and their counts add up (they overwrote each
    other before: 3 of 4 predictions were lost)."""

    def engine() -> Engine:
        return Engine(config(windows=["1h"], min_samples=1, attributes={"g": {"max_groups": 2}}))

    def totals(e: Engine) -> dict[str, int]:
        ms = e.snapshot().models["m"]
        idx, labels = ms.groups[0]
        return {lab: int(ms.windows["1h"].counts[i, 0]) for i, lab in zip(idx, labels, strict=True)}

    b = engine()
    run(b, [pred(f"b{i}", T0 + i, g, 1) for i, g in enumerate("zzzw")], partition=1)
    a = engine()
    run(a, [pred(f"a{i}", T0 + i, g, 1) for i, g in enumerate("xy")], partition=0)
    meta, arrays = decode(encode(*b.export_partition(1)))
    a.import_partition(1, meta, arrays)
    assert totals(a) == {"x": 1, "y": 1, "__other__": 4}


def test_state_of_another_model_configuration_is_refused_and_leaves_the_partition() -> None:
    """The fingerprint (bucket, ring, cells, attribute sets) guards the arrays' shape: a
    checkpoint written under another configuration is refused, and the partition keeps its
    state (nothing half-restored)."""
    import pytest

    a = Engine(config(bucket="5m"))
    run(a, [pred("x", T0, "a", 1)], partition=0)
    meta, arrays = decode(encode(*a.export_partition(0)))
    b = Engine(config())
    run(b, [pred("y", T0, "b", 1), pred("z", T0, "b", 0)], partition=0)
    before = build_report(b.snapshot())
    with pytest.raises(ValueError, match="different model configuration") as err:
        b.import_partition(0, meta, arrays)
    assert "model m: bucket 300 → 60" in str(err.value)  # what differs, for the operator
    # a checkpoint of an older layout (fewer count cells) names the cells
    old = dict(meta, fingerprint=[dict(f, cells=36) for f in meta["fingerprint"]])
    with pytest.raises(ValueError, match="cells 36 → "):
        a.import_partition(1, old, arrays)
    assert build_report(b.snapshot()) == before
    assert b.counters()["predictions"] == 2
    c = Engine(config(bucket="5m"))
    c.import_partition(0, meta, arrays)
    assert build_report(c.snapshot()) == build_report(a.snapshot())


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"favourable": 0}, "favourable 1 → 0"),
        ({"threshold": 0.7}, "threshold 0.5 → 0.7"),
        ({"prediction_values": {"approve": 1, "deny": 0}}, "prediction_values"),
        ({"label_values": {"repaid": 1, "default": 0}}, "label_values"),
        (
            {"attributes": {"g": {"bins": [30, 60]}}},
            "bins {'g': [25.0, 45.0]} → {'g': [30.0, 60.0]}",
        ),
        ({"label_time": "arrival"}, "label_time 'prediction' → 'arrival'"),
    ],
)
def test_a_checkpoint_whose_counts_mean_something_else_is_refused(
    change: dict[str, Any], says: str
) -> None:
    """Found by a review: the fingerprint guarded the arrays' shape only, so a checkpoint
    written with favourable 1 restored under favourable 0 mixed 9 favourable decisions of the
    old meaning into the new counts, and changed bins left the old bins beside the new ones.
    A checkpoint from before the meaning was recorded is still read (compared on its shape)."""
    base: dict[str, Any] = {"threshold": 0.5, "attributes": {"g": {"bins": [25, 45]}}}
    a = Engine(config(**base))
    run(a, [pred("x", T0, 30, 1, score=0.9)], partition=0)
    meta, arrays = decode(encode(*a.export_partition(0)))
    b = Engine(config(**{**base, **change}))
    with pytest.raises(ValueError, match="different model configuration") as err:
        b.import_partition(0, meta, arrays)
    assert says in str(err.value)
    older = [{k: v for k, v in f.items() if k not in MEANING} for f in meta["fingerprint"]]
    b.import_partition(0, dict(meta, fingerprint=older), arrays)  # no meaning recorded: read
    assert b.counters()["predictions"] == 1


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda meta, arrays: arrays.update(counts0=arrays["counts0"][:, :1]), "do not fit"),
        (lambda meta, arrays: meta.update(heads=["x"]), "is not an integer"),
    ],
)
def test_a_damaged_row_that_still_decodes_is_refused_not_broadcast(damage: Any, says: str) -> None:
    """Found by a review: a counts array of one group, restored into two, was broadcast: both
    groups got the first one's counts ({'a': 15, 'b': 15} from {'a': 15, 'b': 5})."""
    a = Engine(config())
    run(a, [pred(f"x{i}", T0 + i, "ab"[i % 2], 1) for i in range(20)], partition=0)
    meta, arrays = decode(encode(*a.export_partition(0)))
    damage(meta, arrays)
    b = Engine(config())
    with pytest.raises(ValueError, match=says):
        b.import_partition(0, meta, arrays)
    assert b.counters()["predictions"] == 0
