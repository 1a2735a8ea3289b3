"""The metric registry is the one definition every surface reads, and the typed results carry
what readers used to reconstruct (which gap is the equalized-odds maximum)."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from monitor.alerts.drift import DriftTracker
from monitor.alerts.drift_alerts import check_drift
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.lifecycle import AlertBook
from monitor.alerts.window_rules import check_rule
from monitor.config.rules import METRICS as CONFIG_METRICS
from monitor.config.rules import AlertRule, DriftSpec
from monitor.config.spec import parse_config
from monitor.metrics.fairness import GroupMetrics
from monitor.metrics.intervals import z_value
from monitor.metrics.registry import (
    ALERTABLE,
    EXPORTED,
    FOUR_FIFTHS,
    GROUP_RATES,
    METRICS,
    bounds,
    z_for,
)
from monitor.metrics.results import attribute_result
from monitor.outputs.exporter import render
from monitor.outputs.status import StatusState, status_json
from monitor.state.engine import Engine
from tests.helpers import T0, label, pred, run
from tests.helpers import cell_counts as counts

GM_FIELDS = set(GroupMetrics.__struct_fields__)


def model(**extra: object) -> dict[str, object]:
    return {"attributes": {"g": {}}, "windows": ["1h"], "min_samples": 1, **extra}


def test_the_registry_defines_every_configurable_metric() -> None:
    assert set(ALERTABLE) == set(CONFIG_METRICS)  # config validates names the registry defines
    for m in METRICS.values():
        assert m.rate == "" or m.rate in GM_FIELDS, m
        assert all(c in GM_FIELDS for c in m.counts), m
        assert (
            m.direction in ("lower", "higher")
            and m.op == {"lower": "<", "higher": ">"}[m.direction]
        )
    assert METRICS["disparate_impact_ratio"].default_bound == FOUR_FIFTHS == 0.8
    assert METRICS["disparate_impact_ratio"].worse(0.7, 0.8)
    assert METRICS["tpr_gap"].worse(0.2, 0.1) and not METRICS["tpr_gap"].worse(0.05, 0.1)
    assert all(f.field in GM_FIELDS for f in GROUP_RATES)
    # z comes from the normal quantile of the confidence, for any confidence
    assert z_for(0.9) == NormalDist().inv_cdf(0.95) == z_value(0.9)
    assert z_for() == pytest.approx(1.959963984540054)


def test_every_registry_family_is_exported_with_its_help() -> None:
    engine = Engine(parse_config({"models": {"m": model()}}))
    preds = [pred(f"a{i}", T0 + i, "a", int(i % 2 == 0)) for i in range(40)]
    preds += [pred(f"b{i}", T0 + i, "b", int(i % 4 == 0)) for i in range(20)]
    run(engine, preds, [label(f"a{i}", T0 + 100, int(i % 3 == 0)) for i in range(40)])
    text = render(engine.snapshot(), confidence=0.95)
    for m in EXPORTED:
        for suffix in ("", "_lower", "_upper"):
            assert f"\nfairness_{m.family}{suffix}_ratio{{" in text, m.family
        assert f"# HELP fairness_{m.family}_ratio {m.help}\n" in text


@pytest.mark.parametrize(
    ("tpr_gap", "fpr_gap", "basis"),
    [(0.4, 0.1, "tpr_gap"), (0.1, 0.4, "fpr_gap"), (0.2, 0.2, "tpr_gap")],
)
def test_the_equalized_odds_difference_knows_its_gap(
    tpr_gap: float, fpr_gap: float, basis: str
) -> None:
    """Group a: TPR 0.5, FPR 0.5 (100 positives, 100 negatives); group b shifted by the gaps."""
    a = {"n": 200, "fav": 100, "tp": 50, "fn": 50, "fp": 50, "tn": 50}
    tp, fp = int(100 * (0.5 - tpr_gap)), int(100 * (0.5 - fpr_gap))
    b = {"n": 200, "fav": tp + fp, "tp": tp, "fn": 100 - tp, "fp": fp, "tn": 100 - fp}
    spec = parse_config({"models": {"m": model()}}).models["m"]
    r = attribute_result(counts(a, b), ["a", "b"], spec, "g", confidence=0.95)
    eod = r.disparities.equalized_odds_difference
    assert eod.basis == basis
    gap = r.disparity(basis)  # the same value and groups as the gap it is
    assert (eod.value, eod.low_group, eod.high_group) == (gap.value, gap.low_group, gap.high_group)
    # its interval holds over both gaps' pairs: wider than the gap's own
    assert eod.pairs == 2 and eod.lower < gap.lower and eod.upper > gap.upper
    assert r.disparities.tpr_gap.basis == "tpr_gap" and r.disparities.fpr_gap.basis == "fpr_gap"
    assert r.disparity("disparate_impact_ratio").basis == "disparate_impact_ratio"


def test_a_page_quotes_the_counts_each_rate_rests_on() -> None:
    """A four-fifths page: each selection rate with its favourable decisions of all decisions
    (here also n), so the reader sees what the numbers rest on, as the evidence pages do."""
    cfg = parse_config({"models": {"m": model()}})
    a = {"n": 400, "fav": 320, "tp": 10, "fn": 10, "fp": 10, "tn": 10}
    b = {"n": 300, "fav": 120}
    r = attribute_result(counts(a, b), ["a", "b"], cfg.models["m"], "g", confidence=0.95)
    rule = AlertRule("Ff", "disparate_impact_ratio", "<", 0.8, min_samples=30, for_=0)
    t = check_rule(AlertBook(), rule, r, "m", "1h", "g", T0, confidence=0.95)
    assert t is not None and t.alert.state == "firing"
    assert t.alert.annotations["description"].startswith(
        "selection_rate b: 0.400 (120 of 300; n=300, labelled=0); "
        "a: 0.800 (320 of 400; n=400, labelled=40); disparate_impact_ratio 0.500, 95% CI ["
    ), t.alert.annotations["description"]


def test_an_equalized_odds_alert_judges_the_fpr_gap_on_its_own_denominators() -> None:
    """FPR is the larger gap; group b has few positives (10) but many negatives (200): the
    rule's min_samples (30) is met by the FPR's denominators, so it fires, and the evidence
    quotes the FPR. Judged on the TPR's denominators it would stay silent."""
    cfg = parse_config({"models": {"m": model()}})
    a = {"n": 400, "fav": 200, "tp": 100, "fn": 100, "fp": 60, "tn": 140}
    b = {"n": 210, "fav": 125, "tp": 5, "fn": 5, "fp": 120, "tn": 80}
    r = attribute_result(counts(a, b), ["a", "b"], cfg.models["m"], "g", confidence=0.95)
    assert r.disparities.equalized_odds_difference.basis == "fpr_gap"
    rule = AlertRule("Eod", "equalized_odds_difference", ">", 0.1, min_samples=30, for_=0)
    t = check_rule(AlertBook(), rule, r, "m", "1h", "g", T0, confidence=0.95)
    assert t is not None and t.alert.state == "firing"
    ann = t.alert.annotations
    assert ann["description"].startswith("fpr a: 0.300") and "fpr b" not in ann["description"]
    # the counts the FPRs rest on (their negatives), not the TPRs' (b: 5 of 10) nor n
    assert (
        "fpr a: 0.300 (60 of 200; n=400, labelled=400); b: 0.600 (120 of 200; n=210,"
        in (ann["description"])
    )
    assert (ann["group"], ann["reference_group"]) == ("a", "b")
    assert ann["group_rate"] == "0.300" and ann["reference_rate"] == "0.600"
    assert "base_rates" in ann


@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_drift_standard_error_follows_the_confidence(confidence: float) -> None:
    """The detector's noise floor is the interval's half-width over z of the configured
    confidence (a fixed 1.96 would misstate it at any other confidence)."""
    cfg = parse_config({"models": {"m": model()}, "confidence": confidence})
    a = {"n": 300, "fav": 150}
    b = {"n": 300, "fav": 120}
    r = attribute_result(counts(a, b), ["a", "b"], cfg.models["m"], "g", confidence=confidence)
    ev = AlertEvaluator(cfg, Engine(cfg))
    check_drift(
        ev.book, ev.trackers, ev.drift_quiet, ev.spec.drift, r, "m", "g", T0, confidence=confidence
    )
    tracker = ev.trackers[("m", "g", "disparate_impact_ratio")]
    d = r.disparities.disparate_impact
    assert tracker.warmup_se == [pytest.approx((d.upper - d.lower) / (2 * z_value(confidence)))]


def test_drift_direction_and_bound_come_from_the_registry() -> None:
    spec = DriftSpec(min_values=3)
    dir_, gap = DriftTracker(spec, "disparate_impact_ratio"), DriftTracker(spec, "tpr_gap")
    assert (dir_.sign, gap.sign) == (-1.0, 1.0)
    for i, v in enumerate((0.95, 0.9, 0.85, 0.84)):
        dir_.history.append((T0 + 3600 * i, v))
    slope, hours = dir_._trend(bound=FOUR_FIFTHS)
    assert slope < 0 and hours is not None
    assert hours == pytest.approx((FOUR_FIFTHS - 0.84) / slope)


@pytest.mark.parametrize(("bound", "already_past"), [(None, False), (0.9, True)])
def test_the_drift_pages_time_to_bound_counts_to_the_configured_rules_bound(
    bound: float | None, already_past: bool
) -> None:
    """Found by a review: with FourFifthsRule at 0.9, a drift page at a DIR of 0.88 said the
    bound is crossed "in ~8 hours" (the registry's 0.8): the configured rule could already be
    paging. The trend counts to the rule's bound, and the page names it."""
    from types import SimpleNamespace as NS

    from tests.alerts.streams import alert_config, four_fifths_rule

    rules = [] if bound is None else [four_fifths_rule(bound=bound)]
    cfg = alert_config(rules=rules, drift={"metrics": ["disparate_impact_ratio"]})
    book: AlertBook = AlertBook()
    trackers: dict = {}  # type: ignore[type-arg]
    fired = []
    flat = [1.0, 0.98, 1.02, 0.99, 1.01, 1.0, 0.97, 1.03, 1.0, 0.99, 1.01, 1.0]
    for h, v in enumerate([*flat, 0.97, 0.94, 0.91, 0.88, 0.86, 0.85, 0.84]):
        r = NS(disparity=lambda m, v=v: NS(value=v, lower=v - 0.05, upper=v + 0.05, pairs=1,
                                             low_group=None, high_group=None))  # fmt: skip
        fired += check_drift(book, trackers, {}, cfg.alerts.drift, r, "credit", "g", 3600.0 * (h + 1),
                             confidence=0.95, rules=cfg.alerts.rules)  # fmt: skip
    assert fired, "the slide must page"
    ann, value = fired[0].alert.annotations, fired[0].alert.value
    want = FOUR_FIFTHS if bound is None else bound
    assert f"the bound ({want:g}) is crossed in" in ann["description"]
    assert (value <= want) == already_past
    if already_past:
        assert ann["hours_to_bound"] == "no time: it is already past it"
    else:
        assert ann["hours_to_bound"].startswith("~")


def test_status_bounds_are_the_registry_defaults_unless_a_rule_sets_one() -> None:
    state = StatusState(None, {}, [], [])
    rules = [
        AlertRule("X", "disparate_impact_ratio", "<", 0.9),
        AlertRule("Y", "tpr_gap", ">", 0.2),
    ]
    doc = status_json(state, confidence=0.95, rules=rules, now=0.0)
    assert doc["bounds"] == {**bounds(), "disparate_impact_ratio": 0.9, "tpr_gap": 0.2}
    assert doc["bounds"]["equalized_odds_difference"] == 0.1
    assert (
        status_json(state, confidence=0.95, rules=[], now=0.0)["bounds"]["disparate_impact_ratio"]
        == FOUR_FIFTHS
    )
    assert math.isclose(bounds()["fpr_gap"], 0.1)
