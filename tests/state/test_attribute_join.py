"""Decisions joined with attribute records by id (``state/attribute_join.py``): either order,
released without attributes on the attributes stream's clock (not the decisions'), never
lost, repeats counted, and checkpointed with the partition (groups remapped by label)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from monitor.config.spec import MISSING_GROUP, parse_config
from monitor.ingest.attribute_events import attribute_dtype
from monitor.ingest.events import LabelBatch
from monitor.ingest.keys import id_keys
from monitor.ingest.serving_decode import RESPONSE_DTYPE, request_dtype
from monitor.state.attribute_join import AttributeJoin
from monitor.state.checkpoint import decode, encode
from monitor.state.engine import Engine
from monitor.state.halves import Joined
from monitor.state.served import apply_served, attribute_coverage
from monitor.state.windows import N

DT = attribute_dtype(2, 1)  # two models, one attribute set


def decisions(ids: list[str], ts: list[float], model: int = 0) -> Joined:
    n = len(ids)
    return Joined(
        id_keys(ids),
        np.array(ts, dtype=np.float64),
        np.full(n, model, dtype=np.uint16),
        np.arange(n, dtype=np.uint8) % 2,
        np.linspace(0.1, 0.9, n),
        np.full((n, 1), -1, dtype=np.int32),
    )


def records(ids: list[str], ts: list[float], groups: list[tuple[int, int]]) -> npt.NDArray[Any]:
    rows = np.zeros(len(ids), dtype=DT)
    rows["key"] = id_keys(ids)
    rows["ts"] = ts
    rows["groups"][:, :, 0] = groups
    return rows


def join(ttl: float = 600, hold: float = 3600, max_size: int = 100) -> AttributeJoin:
    return AttributeJoin(DT, [ttl, ttl], [hold, hold], max_size=max_size)


def test_either_order_meets_and_each_decision_takes_its_models_groups() -> None:
    j = join()
    first = j.add_decisions(decisions(["a", "b"], [100, 110], model=1))
    assert len(first) == 0
    met = j.add_attributes(records(["b", "x", "a"], [105, 106, 107], [(3, 4), (5, 6), (7, 8)]))
    assert sorted(zip(met.key.tolist(), met.groups[:, 0].tolist(), strict=True)) == sorted(
        zip(id_keys(["a", "b"]).tolist(), [8, 4], strict=True)
    )  # model 1's column of each record
    later = j.add_decisions(decisions(["x"], [120], model=0))
    assert later.groups[:, 0].tolist() == [5] and later.score.tolist() == [0.1]
    assert len(j.decisions) == len(j.attributes) == 0
    assert j.counts["attributed_decisions"] == 3


def test_a_decision_is_released_by_the_attributes_clock_not_the_decisions() -> None:
    """The predictions topic read hours ahead of the attributes topic must not release the
    decisions whose attributes are merely further back in the other topic."""
    j = join(ttl=600, hold=3600)
    j.add_decisions(decisions(["a", "b"], [1000, 1100]))
    j.add_decisions(decisions(["far"], [1000 + 3000]))  # the decisions' clock moves on
    assert len(j.expire(j.newest, 3660)) == 0
    met = j.add_attributes(records(["a"], [1001], [(1, 1)]))
    assert len(met) == 1
    j.add_attributes(records(["other"], [1650], [(2, 2)]))  # the attributes clock at 1650
    gone = j.expire(j.newest, 3660)
    assert len(gone) == 0  # b at 1100 is not older than the attributes clock 1650 - 600
    j.add_attributes(records(["other2"], [1701], [(2, 2)]))
    gone = j.expire(j.newest, 3660)
    assert gone["key"].tolist() == id_keys(["b"]).tolist()
    assert j.counts["unattributed_decisions"] == 1 and j.counts["attributed_decisions"] == 1


def test_a_stalled_attributes_stream_releases_decisions_while_their_bucket_is_held() -> None:
    j = join(ttl=600, hold=3600)
    j.add_decisions(decisions(["a"], [1000]))
    j.add_decisions(decisions(["b"], [4600]))
    assert len(j.expire(j.newest, 3660)) == 0  # exactly the hold: still held
    j.add_decisions(decisions(["c"], [4601]))
    assert j.expire(j.newest, 3660)["key"].tolist() == id_keys(["a"]).tolist()


def test_evicted_decisions_are_released_not_lost_and_orphans_are_counted() -> None:
    j = join(max_size=3)
    j.add_decisions(decisions([f"d{i}" for i in range(5)], [10.0 * i for i in range(5)]))
    released = j.expire(-np.inf, 3660)
    assert sorted(released["key"].tolist()) == sorted(id_keys(["d0", "d1"]).tolist())
    j.add_attributes(records(["lost"], [5], [(1, 1)]))
    j.expire(5 + 3661, 3660)
    assert j.counts["orphan_attributes"] == 1
    assert j.counts["unattributed_decisions"] == 5  # the three waiting, past the hold


def test_repeats_are_counted_and_the_first_kept() -> None:
    j = join()
    j.add_attributes(records(["a", "a"], [1, 2], [(1, 1), (2, 2)]))
    j.add_attributes(records(["a"], [3], [(3, 3)]))
    assert j.counts["repeated_attributes"] == 2
    j.add_decisions(decisions(["b"], [4]))
    j.add_decisions(decisions(["b"], [5]))
    assert j.counts["duplicate_predictions"] == 1
    assert j.add_decisions(decisions(["a"], [6])).groups[:, 0].tolist() == [1]


CONFIG = {
    "models": {
        "credit": {
            "attributes": {"sex": {}},
            "threshold": 0.5,
            "windows": ["1h"],
            "bucket": "1m",
            "lateness": "1h",
            "input": {
                "format": "oip-json",
                "score": {"tensor": "p"},
                "attributes": "stream",
                "attributes_ttl": "10m",
            },
        }
    },
    "kafka": {"attributes_topic": "attrs"},
}


def test_waiting_decisions_and_records_survive_a_checkpoint_onto_other_group_numbers() -> None:
    cfg = parse_config(CONFIG)
    a = Engine(cfg, clock=lambda: 2e9)
    st = a.partition(0)
    assert st.attributes is not None
    reg = a.registries[0]
    rows = np.zeros(2, dtype=st.attributes.attributes.data.dtype)
    rows["key"] = id_keys(["r1", "r2"])
    rows["ts"] = [1e9, 1e9 + 1]
    rows["groups"][:, 0, 0] = [reg.index(0, "F"), reg.index(0, "M")]
    st.attributes.add_attributes(rows)
    st.attributes.add_decisions(decisions(["d1"], [1e9]))
    meta, arrays = decode(encode(*a.export_partition(0)))  # as the checkpoint stores them
    b = Engine(cfg, clock=lambda: 2e9)
    b.registries[0].index(0, "M")  # this engine numbers M first
    b.import_partition(0, meta, arrays)
    joined = b.partition(0).attributes
    assert joined is not None and joined.newest_attributes == 1e9 + 1
    met = joined.add_decisions(decisions(["r1", "r2"], [1e9, 1e9]))
    labels = [b.registries[0].labels[g] for g in met.groups[:, 0].tolist()]
    assert dict(zip(met.key.tolist(), labels, strict=True)) == dict(
        zip(id_keys(["r1", "r2"]).tolist(), ["F", "M"], strict=True)
    )
    assert joined.decisions.data["key"].tolist() == id_keys(["d1"]).tolist()


def test_decisions_waiting_for_attributes_their_model_no_longer_reads_are_counted_without(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``input.attributes`` switched from the stream to request tensors across a restart: the
    decisions the checkpoint holds waiting go on in ``__missing__``, counted; the records
    that waited for decisions are orphans (nothing silently dropped)."""
    a = Engine(parse_config(CONFIG), clock=lambda: 2e9)
    joined = a.partition(0).attributes
    assert joined is not None
    rows = np.zeros(1, dtype=joined.attributes.data.dtype)
    rows["key"], rows["ts"] = id_keys(["r9"]), [1e9]
    joined.add_attributes(rows)
    joined.add_decisions(decisions(["d1", "d2", "d3"], [1e9, 1e9 + 30, 1e9 + 90]))
    meta, arrays = decode(encode(*a.export_partition(0)))
    cfg = {**CONFIG, "kafka": {}}
    cfg["models"] = {"credit": {**CONFIG["models"]["credit"]}}
    cfg["models"]["credit"]["input"] = {
        "format": "oip-json",
        "score": {"tensor": "p"},
        "attributes": {"sex": {"tensor": "sex"}},
    }
    b = Engine(parse_config(cfg), clock=lambda: 2e9)
    b.import_partition(0, meta, arrays)
    assert b.partition(0).attributes is None
    c = b.counters()
    assert (c["unattributed_decisions"], c["orphan_attributes"], c["predictions"]) == (3, 1, 3)
    counts = b.counts_between(0, int(1e9 // 60), int(1e9 // 60) + 3)
    missing = b.registries[0].index(0, MISSING_GROUP)
    assert counts[:, N].tolist() == [3 if g == missing else 0 for g in range(len(counts))]
    assert "3 decisions waited for attributes" in caplog.text
    # a second restore of what was saved since: nothing is released twice
    again = Engine(parse_config(cfg), clock=lambda: 2e9)
    again.import_partition(0, *decode(encode(*b.export_partition(0))))
    assert again.counters()["unattributed_decisions"] == 3
    assert again.counts_between(0, int(1e9 // 60), int(1e9 // 60) + 3)[:, N].sum() == 3


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"kafka": {}}, "kafka.attributes_topic: required"),
        ({"input_ttl": "2h"}, "models.credit.input.attributes_ttl: 7200 s exceeds"),
        ({"input_attrs": {"sex": {"tensor": "sex"}}}, "models.credit.input.attributes_ttl: only"),
    ],
)
def test_the_attributes_stream_config_fails_fast_by_key(change: dict[str, Any], where: str) -> None:
    from monitor.config.decode import ConfigError

    cfg: dict[str, Any] = {
        "models": {"credit": {**CONFIG["models"]["credit"]}},  # type: ignore[index]
        "kafka": change.get("kafka", CONFIG["kafka"]),
    }
    inp = dict(cfg["models"]["credit"]["input"])
    if "input_ttl" in change:
        inp["attributes_ttl"] = change["input_ttl"]
    if "input_attrs" in change:
        inp["attributes"] = change["input_attrs"]
    cfg["models"]["credit"] = {**cfg["models"]["credit"], "input": inp}
    with pytest.raises(ConfigError, match=where.replace("(", r"\(")):
        parse_config(cfg)


def test_an_attributes_topic_no_model_reads_is_refused() -> None:
    from monitor.config.decode import ConfigError

    model = {k: v for k, v in CONFIG["models"]["credit"].items() if k != "input"}  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"kafka\.attributes_topic: no model reads it"):
        parse_config({"models": {"credit": model}, "kafka": {"attributes_topic": "attrs"}})


def test_coverage_is_counted_per_model_and_survives_a_checkpoint() -> None:
    """Two models read the attributes topic; only ``credit``'s attributes arrive. Per model the
    coverage is 1 and 0 (one number for the instance, 0.5, would hide which producer failed),
    decisions still waiting are shown per model, and a restore keeps the counts."""
    both = {**CONFIG["models"]["credit"]}
    both["input"] = {**both["input"], "format": "kserve-cloudevents"}  # names the model
    cfg = {**CONFIG, "models": {"credit": both, "hiring": both}}
    engine = Engine(parse_config(cfg), clock=lambda: 2e9)
    t = 1e9
    ids = [f"c{i}" for i in range(6)] + [f"h{i}" for i in range(4)]
    model = [0] * 6 + [1] * 4
    asked = np.zeros(10, dtype=request_dtype(engine.n_sets))
    asked["key"], asked["ts"], asked["model"], asked["groups"] = id_keys(ids), t, model, -1
    answered = np.zeros(10, dtype=RESPONSE_DTYPE)
    answered["key"], answered["ts"], answered["model"] = id_keys(ids), t + 0.1, model
    answered["score"], answered["offset"] = 0.7, -1
    st = engine.partition(0)
    assert st.attributes is not None
    attrs = np.zeros(6, dtype=st.attributes.attributes.data.dtype)
    attrs["key"], attrs["ts"] = id_keys(ids[:6]), t
    attrs["groups"][:, 0, 0] = engine.registries[0].index(0, "F")
    apply_served(engine, 0, asked, answered, LabelBatch(), attrs)
    assert attribute_coverage(engine) == {"credit": (6, 0, 0), "hiring": (0, 0, 4)}
    later_asked = np.zeros(0, dtype=asked.dtype)
    ticks = np.zeros(1, dtype=attrs.dtype)  # the attributes stream's clock passes the TTL
    ticks["key"], ticks["ts"] = id_keys(["tick"]), t + 3600
    apply_served(engine, 0, later_asked, answered[:0], LabelBatch(), ticks)
    assert attribute_coverage(engine) == {"credit": (6, 0, 0), "hiring": (0, 4, 0)}
    assert engine.counters()["attributed_decisions"] == 6  # the instance's totals as before
    again = Engine(parse_config(cfg), clock=lambda: 2e9)
    again.import_partition(0, *decode(encode(*engine.export_partition(0))))
    assert attribute_coverage(again) == {"credit": (6, 0, 0), "hiring": (0, 4, 0)}
