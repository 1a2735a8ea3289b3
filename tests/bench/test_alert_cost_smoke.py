"""The alert-cost benchmark (``bench/alert_cost.py``) at a small size: the shipped evaluator and
the old window loop judge the same boundaries alike (it asserts that itself), and ``--parts``
accounts for the evaluation's time part by part and leaves the evaluator as it found it."""

from __future__ import annotations

import bench.alert_cost as ac
import monitor.alerts.evaluator as evaluator_module
from monitor.alerts.window_rules import RuleCheck


def test_both_evaluators_judge_alike_and_every_round_is_timed() -> None:
    r = ac.measure(hours=1.0, warm_hours=25.0, seed=1)
    assert r["rounds"] == 1
    assert r["transitions"] > 0  # alerts fired, so the comparison judged something
    assert r["alert_ms_per_boundary"] > 0 and r["reference_ms_per_boundary"] > 0
    assert r["engine_us_per_event"] > 0


def test_parts_add_up_and_the_wrappers_are_undone() -> None:
    before = (evaluator_module.attribute_results, RuleCheck.__call__,
              evaluator_module.check_drift)  # fmt: skip
    p = ac.parts(hours=1.0, warm_hours=25.0, seed=1)
    named = [k for k in p if k not in ("total", "the evaluator's own loop")]
    assert set(named) == set(ac.PARTS)
    # every part ran in the measured hour (the drift detectors judge once an hour)
    assert all(p[k] > 0 for k in named), p
    assert 0 <= p["the evaluator's own loop"] < p["total"]
    after = (evaluator_module.attribute_results, RuleCheck.__call__,
             evaluator_module.check_drift)  # fmt: skip
    assert after == before
