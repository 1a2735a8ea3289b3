"""The change detectors of a set after its reference group's own change: every group's
baseline ratio to the reference is taken over the same hours again.

Found by a review: groups A and B, sex F/M drawn independently of them (F and M alike at every
moment); B's selection rate 0.8 → 0.5 for 18 hours. In the sex set M (the reference) fell with
it and paged, F paused meanwhile; when M resolved, M's baseline forgot the hours of the change
and F's kept them, so the ratio F/M of the baselines read 0.89 for groups equal throughout,
and "selection rate of F (sex) rose relative to M" paged (3 runs in 4)."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.spec import parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine
from tests.alerts.streams import T0

HOURS, CHANGE = 96, (12, 30)


def run(seed: int) -> AlertEvaluator:
    cfg = parse_config(
        {
            "models": {
                "credit": {
                    "attributes": {"grp": {}, "sex": {}},
                    "windows": ["1h"],
                    "bucket": "5m",
                    "lateness": "5m",
                }
            },
            "alerts": {"rules": [], "drift": {"enabled": False}},
        }
    )
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine)
    reg = engine.registries[0]
    grp = np.array([reg.index(0, "A"), reg.index(0, "B")], np.int32)
    sex = np.array([reg.index(1, "F"), reg.index(1, "M")], np.int32)
    rng = np.random.default_rng(seed)
    n = HOURS * 360  # one decision of each of A and B every 20 s
    t = T0 + np.repeat(np.arange(n // 2) * 20.0, 2) + rng.uniform(0, 1, n)
    g = np.tile([0, 1], n // 2)
    hour = (t - T0) / 3600
    rate = np.where((g == 1) & (hour >= CHANGE[0]) & (hour < CHANGE[1]), 0.5, 0.8)
    pred = (rng.random(n) < rate).astype(np.uint8)
    groups = np.stack([grp[g], sex[rng.integers(0, 2, n)]], axis=1)
    order = np.argsort(t, kind="stable")
    t, pred, groups = t[order], pred[order], groups[order]
    keys = np.arange(1, n + 1, dtype=np.uint64)
    edges = np.searchsorted(t, T0 + 300 * np.arange(1, HOURS * 12 + 2))
    i = 0
    none = LabelBatch(key=keys[:0], ts=t[:0], label=pred[:0])
    for j in edges:
        s = slice(i, int(j))
        batch = PredictionBatch(
            key=keys[s],
            model=np.zeros(j - i, np.uint16),
            ts=t[s],
            pred=pred[s],
            score=np.full(j - i, np.nan),
            groups=groups[s],
        )
        engine.apply(0, batch, none)
        ev.advance()
        i = int(j)
    return ev


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_after_the_references_change_resolves_no_equal_group_pages(seed: int) -> None:
    ev = run(seed)
    got = [(t.alert.name, t.alert.labels, t.alert.state) for t in ev.history]
    b = [x for x in got if x[1].get("attribute") == "grp" and x[1].get("group") == "B"]
    assert any(name == "FairnessChange" and st == "firing" for name, _, st in b), got  # seen
    sex = [
        (name, lab["group"], lab.get("metric"), st)
        for name, lab, st in got
        if lab.get("attribute") == "sex" and name == "FairnessChange"
    ]
    ref = ev.evidence.models[0].refs[1]
    ref_label = ev.evidence.models[0].labels[1][ref]
    assert [x for x in sex if x[1] != ref_label] == [], "an equal group paged"
