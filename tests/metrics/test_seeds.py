"""The worked examples of ../shared/seeds/, reproduced through the whole engine."""

from __future__ import annotations

import pytest

from monitor.outputs.report import build_report
from monitor.state.engine import Engine
from tests.helpers import T0, config, confusion_events, pred, run


def _attr(engine: Engine) -> dict:
    return build_report(engine.snapshot())["models"]["m"]["windows"]["1h"]["attributes"]["g"]


def test_two_confusion_matrices_credit_example() -> None:
    """Seed 000: A = TP 180 FP 120 FN 20 TN 680; B = TP 270 FP 130 FN 30 TN 570.

    TPR 0.90 / 0.90, FPR 0.15 / 0.186, precision 0.60 / 0.675, flag rate 0.30 / 0.40.
    """
    engine = Engine(config())
    pa, la = confusion_events("A", 180, 120, 20, 680)
    pb, lb = confusion_events("B", 270, 130, 30, 570)
    run(engine, pa + pb, la + lb)
    a = _attr(engine)
    A, B = a["groups"]["A"], a["groups"]["B"]
    assert (A["tpr"], B["tpr"]) == (pytest.approx(0.90), pytest.approx(0.90))
    assert A["fpr"] == pytest.approx(0.15)
    assert round(B["fpr"], 3) == 0.186 and B["fpr"] == pytest.approx(130 / 700)
    assert (A["ppv"], B["ppv"]) == (pytest.approx(0.60), pytest.approx(0.675))
    # "prediction 1 = predicted default" is what the seed flags: favourable here is 1 (config
    # default), so the selection rate is the flag rate 300/1000 and 400/1000
    assert (A["selection_rate"], B["selection_rate"]) == (pytest.approx(0.3), pytest.approx(0.4))
    assert a["tpr_gap"]["value"] == pytest.approx(0.0, abs=1e-12)
    assert a["fpr_gap"]["value"] == pytest.approx(130 / 700 - 0.15)
    assert a["equalized_odds_difference"]["value"] == pytest.approx(130 / 700 - 0.15)
    assert a["ppv_gap"]["value"] == pytest.approx(0.075)


def test_favourable_zero_inverts_selection_rate() -> None:
    """With 1 = 'predicted default' unfavourable, the selection rate is the approval rate."""
    engine = Engine(config(favourable=0))
    pa, la = confusion_events("A", 180, 120, 20, 680)
    pb, lb = confusion_events("B", 270, 130, 30, 570)
    run(engine, pa + pb, la + lb)
    a = _attr(engine)
    assert a["groups"]["A"]["selection_rate"] == pytest.approx(0.7)
    assert a["groups"]["B"]["selection_rate"] == pytest.approx(0.6)
    assert a["disparate_impact_ratio"]["value"] == pytest.approx(0.6 / 0.7)
    assert a["disparate_impact_ratio"]["low_group"] == "B"
    # the confusion cells do not depend on which value is favourable
    assert a["groups"]["A"]["tpr"] == pytest.approx(0.90)


def test_hiring_example_dir_0667() -> None:
    """Seed 002: 1000 men, 420 invited; 1000 women, 280 invited -> DIR 0.28/0.42 = 0.667."""
    engine = Engine(config())
    events = [pred(f"M{i}", T0, "M", int(i < 420)) for i in range(1000)]
    events += [pred(f"F{i}", T0, "F", int(i < 280)) for i in range(1000)]
    run(engine, events)
    a = _attr(engine)
    assert a["groups"]["F"]["selection_rate"] == pytest.approx(0.28)
    assert a["groups"]["M"]["selection_rate"] == pytest.approx(0.42)
    assert round(a["disparate_impact_ratio"]["value"], 3) == 0.667
    assert a["disparate_impact_ratio"]["low_group"] == "F"
    assert a["reference_group"] == "M"
    assert a["four_fifths_violation"] is True
    # with n = 1000 per group the whole interval is below 0.8: the violation is significant
    assert a["disparate_impact_ratio"]["upper"] < 0.8
    assert a["four_fifths_significant"] is True


def test_ten_prediction_example() -> None:
    """Seed 002: predictions [1,1,0,1,0,0,0,0,1,0], groups [M,M,F,M,F,F,M,F,M,F].

    Rates F 0.0, M 0.8, ratio 0.0.
    """
    preds = [1, 1, 0, 1, 0, 0, 0, 0, 1, 0]
    groups = ["M", "M", "F", "M", "F", "F", "M", "F", "M", "F"]
    engine = Engine(config())
    run(
        engine, [pred(i, T0 + i, g, p) for i, (p, g) in enumerate(zip(preds, groups, strict=False))]
    )
    a = _attr(engine)
    assert a["groups"]["F"]["selection_rate"] == 0.0
    assert a["groups"]["M"]["selection_rate"] == pytest.approx(0.8)
    assert a["disparate_impact_ratio"]["value"] == 0.0
    # five people per group: the ratio is far below 0.8 and still significant (MOVER-R keeps a
    # finite upper limit where Katz's log interval is undefined)
    assert a["disparate_impact_ratio"]["upper"] < 0.8
