"""The terminal table says which interval it shows: the configured confidence, not always 95 %."""

from __future__ import annotations

import json

import pytest

from monitor.config.spec import parse_config
from monitor.ingest.events import RawRecord
from monitor.outputs.report import build_report, format_table
from monitor.state.engine import Engine
from tests.helpers import T0


@pytest.mark.parametrize(("confidence", "header"), [(0.9, "90% CI"), (0.99, "99% CI")])
def test_table_header_names_the_configured_confidence(confidence: float, header: str) -> None:
    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}, "min_samples": 1}}})
    engine = Engine(cfg, clock=lambda: T0 + 3600)
    recs = [
        RawRecord(
            json.dumps(
                {
                    "prediction_id": str(i),
                    "model_id": "m",
                    "timestamp": T0,
                    "attributes": {"g": "ab"[i % 2]},
                    "prediction": i % 3 == 0,
                }
            ).encode()
        )
        for i in range(40)
    ]
    batch, dead = engine.decoder.decode_predictions(recs)
    assert not dead
    engine.apply(0, batch, engine.decoder.decode_labels([])[0])
    text = format_table(build_report(engine.snapshot(), confidence=confidence))
    assert header in text and "95% CI" not in text


def test_table_says_blind_instead_of_the_made_up_error_rates() -> None:
    """Only approvals are labelled: TPR = FPR = 1.000 by construction for both groups; the
    table prints "blind" in their columns and the reason instead of the gaps' 0.000."""
    from tests.helpers import config, label, pred, run

    engine = Engine(config(windows=["1h"], min_samples=1))
    preds = [pred(f"{g}{i}", T0 + i, g, int(i < 6)) for g in "ab" for i in range(10)]
    labels = [label(f"{g}{i}", T0 + 60, int(i % 2 == 0)) for g in "ab" for i in range(6)]
    run(engine, preds, labels)
    report = build_report(engine.snapshot())
    text = format_table(report)
    a = report["models"]["m"]["windows"]["1h"]["attributes"]["g"]
    assert a["equalized_odds_difference"]["value"] is None
    assert a["equalized_odds_difference"]["blind"].startswith("selective labels: only")
    assert "equalized-odds diff blind: selective labels" in text
    assert "TPR gap blind: selective labels · FPR gap blind: selective labels" in text
    # SPD is measured: 0 [0.000, …] (a gap's interval is a spread's, never below 0)
    gaps = text.split("stat. parity diff 0.000 [0.000, ")[1].split("]", 1)[1].split("DF")[0]
    assert "0.000" not in gaps
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("a ", "b "))]
    assert len(rows) == 2
    for row in rows:  # group n sel.rate [lo, hi] TPR FPR PPV labelled DI
        assert row[5:7] == ["blind", "blind"] and row[7] == "0.500", row
    assert "blind: selective labels: only decisions with prediction 1 are labelled" in text


def test_a_dir_that_compares_no_pair_says_so_not_none_vs_none() -> None:
    """Found by a review: with one group the table printed ``DIR – [–, –] None vs None``."""
    from tests.helpers import pred, run

    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}, "min_samples": 1}}})
    engine = Engine(cfg, clock=lambda: T0 + 3600)
    run(engine, [pred(str(i), T0, "only", i % 2) for i in range(10)])
    text = format_table(build_report(engine.snapshot(), confidence=0.95))
    assert "None" not in text and "DIR – [–, –] (fewer than two groups compared)" in text


def test_a_dir_undefined_between_eligible_groups_says_why() -> None:
    """Found by a review: two eligible groups, nobody selected (the reference's rate is 0):
    the table said "fewer than two groups compared"."""
    from tests.helpers import pred, run

    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}, "min_samples": 1}}})
    engine = Engine(cfg, clock=lambda: T0 + 3600)
    run(engine, [pred(str(i), T0, "ab"[i % 2], 0) for i in range(40)])
    text = format_table(build_report(engine.snapshot(), confidence=0.95))
    assert "DIR – [–, –] (undefined: the reference group selects nobody" in text, text


def test_each_gap_is_printed_with_its_interval_as_the_dir_is() -> None:
    """Found in review: the table printed the gaps bare (``TPR gap 0.377``), so an on-call
    reader could not tell a significant gap from noise; each now carries the interval of the
    report's JSON (a Newcombe interval of the compared pair), and the DIR line is unchanged."""
    from tests.helpers import config, label, pred, run

    engine = Engine(config(windows=["1h"], min_samples=1))
    preds = [pred(f"{g}{i}", T0 + i, g, int(i < (12 if g == "a" else 5))) for g in "ab"
             for i in range(20)]  # fmt: skip
    labels = [label(f"{g}{i}", T0 + 60, int(i % 3 == 0)) for g in "ab" for i in range(20)]
    run(engine, preds, labels)
    report = build_report(engine.snapshot())
    text = format_table(report)
    a = report["models"]["m"]["windows"]["1h"]["attributes"]["g"]
    for name, key in (("stat. parity diff", "statistical_parity_difference"),
                      ("equalized-odds diff", "equalized_odds_difference"),
                      ("TPR gap", "tpr_gap"), ("FPR gap", "fpr_gap")):  # fmt: skip
        d = a[key]
        assert d["lower"] is not None and d["lower"] < d["value"] < d["upper"], key
        assert f"{name} {d['value']:.3f} [{d['lower']:.3f}, {d['upper']:.3f}]" in text, name


def test_the_report_calls_the_dir_significant_when_another_pair_is_wholly_below() -> None:
    """As the FourFifthsRule and the gate judge it (``metrics/pairs.py``): c (40 decisions)
    has the lowest ratio, not significant; b vs a is wholly below 0.8. The report said "not
    significant" while the alert paged."""
    from monitor.outputs.report import attribute_report
    from tests.helpers import cell_counts

    spec = parse_config({"models": {"m": {"attributes": {"g": {}}}}}).models["m"]
    counts = cell_counts({"n": 5000, "fav": 2500}, {"n": 5000, "fav": 1750}, {"n": 40, "fav": 12})
    a = attribute_report(counts, ["a", "b", "c"], spec, "g", confidence=0.95)
    assert a["disparate_impact_ratio"]["low_group"] == "c"
    assert a["disparate_impact_ratio"]["upper"] > 0.8  # the extreme pair alone: not significant
    assert a["four_fifths_significant"] is True
    alt = a["four_fifths_significant_pair"]
    assert (alt["low_group"], alt["high_group"]) == ("b", "a") and alt["upper"] < 0.8
    assert alt["value"] == pytest.approx(0.7, abs=1e-12)
    fair = cell_counts({"n": 5000, "fav": 2500}, {"n": 5000, "fav": 2450}, {"n": 40, "fav": 12})
    a = attribute_report(fair, ["a", "b", "c"], spec, "g", confidence=0.95)
    assert a["four_fifths_significant"] is False and "four_fifths_significant_pair" not in a
