"""Fixed-window rules: no flapping. An alert resolves on evidence of recovery (the symmetric
test on the interval), never because a group fell silent or below ``min_samples``."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from statsmodels.stats.proportion import confint_proportions_2indep

from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.lifecycle import AlertBook
from monitor.alerts.window_rules import check_rule
from monitor.config.rules import AlertRule
from monitor.config.spec import ModelSpec, parse_config
from monitor.metrics.results import attribute_result
from monitor.state.engine import Engine
from tests.alerts.streams import T0, alert_config, four_fifths_rule, run_stream
from tests.helpers import cell_counts

NAN = math.nan


def judged(
    book: AlertBook, rule: AlertRule, spec: ModelSpec, at: float, *groups: dict[str, int]
) -> str | None:
    """One check of ``rule`` on groups a, b, … (their cell counts) in window 1h of attribute
    set g at ``at``: the state it moved to, if any."""
    labels = [chr(ord("a") + i) for i in range(len(groups))]
    r = attribute_result(cell_counts(*groups), labels, spec, "g", confidence=0.95)
    t = check_rule(book, rule, r, "m", "1h", "g", at, confidence=0.95)
    return None if t is None else t.alert.state


@pytest.mark.parametrize(
    ("significant", "value", "lower", "upper", "expected"),
    [
        (True, 0.95, 0.85, 1.05, True),  # point past 0.82, interval clear of 0.8
        (True, 0.95, 0.70, 1.25, False),  # point fine, interval still reaches below 0.8
        (True, 0.81, 0.80, 0.83, False),  # interval clear but point inside the hysteresis
        (True, NAN, NAN, NAN, False),  # no data is no evidence
        (True, 0.95, NAN, NAN, False),  # no interval: nothing to judge significance by
        (False, 0.82, 0.50, 1.10, True),  # plain rule: the point estimate decides
        (False, 0.819, 0.80, 0.83, False),
        (False, NAN, NAN, NAN, False),
    ],
)
def test_recovery_needs_evidence(
    significant: bool, value: float, lower: float, upper: float, expected: bool
) -> None:
    rule = AlertRule("R", "disparate_impact_ratio", "<", 0.8, significant=significant)
    assert rule.recovered(value, lower, upper) is expected


def test_gap_rule_recovers_on_its_upper_limit() -> None:
    rule = AlertRule("G", "tpr_gap", ">", 0.1, significant=True, hysteresis=0.02)
    assert rule.recovered(0.05, 0.01, 0.09)
    assert not rule.recovered(0.05, 0.01, 0.12)  # the gap may still exceed 0.1
    assert not rule.recovered(0.09, 0.05, 0.095)  # inside the hysteresis margin


WINDOW_3H = alert_config(windows=["3h"], rules=[four_fifths_rule()])
CFG = alert_config(rules=[four_fifths_rule()])


def four_fifths(ev: AlertEvaluator) -> list[tuple[str, float]]:
    return [
        (t.alert.state, (t.alert.at - T0) / 60)
        for t in ev.history
        if t.alert.name == "FourFifthsRule" and t.alert.state != "pending"
    ]


@pytest.mark.parametrize("seed", range(3))
def test_a_group_falling_silent_does_not_resolve_the_alert(seed: int) -> None:
    """Fires on a drop; the group then sends nothing for three hours (its DIR is undefined):
    the alert stays firing and says the data is insufficient; when the group comes back at a
    fair rate, the alert resolves with the numbers at resolution."""
    engine = Engine(CFG)
    ev = AlertEvaluator(CFG, engine)

    def run(first: int, minutes: int, rate_b: float, per_min_b: float) -> None:
        run_stream(
            engine, minutes, 0.5, lambda m: rate_b, per_min_b=per_min_b, seed=seed * 10 + first,
            first_minute=first, on_minute=lambda _: ev.advance(),
        )  # fmt: skip

    run(0, 120, 0.5, 20)
    run(120, 120, 0.2, 20)  # DIR 0.4
    assert [s for s, _ in four_fifths(ev)] == ["firing"]
    run(240, 180, 0.5, 0)  # the small group falls silent: 1h window empty for two hours
    assert [s for s, _ in four_fifths(ev)] == ["firing"], four_fifths(ev)
    (alert,) = [a for a in ev.book.firing() if a.name == "FourFifthsRule"]
    assert "insufficient data" in alert.annotations["data"]
    assert alert.value < 0.8  # the last judged value, not NaN
    run(420, 180, 0.5, 20)  # back, fair
    seen = four_fifths(ev)
    assert [s for s, _ in seen] == ["firing", "resolved"], seen
    assert seen[1][1] > 420
    resolved = next(
        t.alert
        for t in ev.history
        if t.alert.state == "resolved" and t.alert.name == "FourFifthsRule"
    )
    assert resolved.annotations["summary"].startswith("recovered:")
    assert float(resolved.annotations["ci_lower"]) >= 0.8
    assert "insufficient data" not in resolved.annotations.get("data", "")


def test_a_small_group_drop_pages_once_per_incident() -> None:
    """The flapping the issue measured: a 40-decisions-an-hour group drops 0.5 -> 0.3 (true
    DIR 0.6) for a day, judged in a 3-hour window. Noise took the point estimate over 0.82 every
    few hours and the alert resolved and re-fired. Now: at most one firing per incident, no
    resolution while the drop lasts, and a resolution after it ends — over five seeds."""
    drop, back, end = 6 * 60, 30 * 60, 48 * 60
    fired_runs, firings = 0, 0
    for seed in range(5):
        engine = Engine(WINDOW_3H)
        ev = AlertEvaluator(WINDOW_3H, engine)
        run_stream(
            engine, end, 0.5, lambda m: 0.3 if drop <= m < back else 0.5, per_min_b=40 / 60,
            seed=100 + seed, on_minute=lambda _, ev=ev: ev.advance(),
        )  # fmt: skip
        seen = four_fifths(ev)
        fires = [t for s, t in seen if s == "firing"]
        firings += len(fires)
        fired_runs += bool(fires)
        assert len(fires) <= 1, seen
        assert all(drop < t for t in fires), seen  # nothing before the drop
        assert not [t for s, t in seen if s == "resolved" and t < back], seen
        if fires:
            assert seen[-1][0] == "resolved", seen  # resolved after the recovery
    assert fired_runs >= 3, firings  # a 3-hour window of this group sees the drop most runs


# TPR 0.75 vs 0.40 (FPR 0.25 vs 0.20): a gap whose interval is past 0.1
GAP = ({"n": 400, "fav": 200, "tp": 150, "fn": 50, "fp": 50, "tn": 150},
       {"n": 400, "fav": 120, "tp": 80, "fn": 120, "fp": 40, "tn": 160})  # fmt: skip


def gap_judge(book: AlertBook, rule: AlertRule) -> Callable[..., str | None]:
    """``judge(a, b, at)``: ``rule`` on two groups' counts at ``at``; the new state, if any."""
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]

    def judge(a: dict[str, int], b: dict[str, int], at: float) -> str | None:
        return judged(book, rule, spec, at, a, b)

    return judge


def test_a_blind_gap_neither_fires_nor_resolves() -> None:
    """Selective labels (only approved decisions get an outcome) make TPR = 1 for everyone: the
    gap reads 0.000 — no news, not good news. A firing TPR-gap alert stays firing and says the
    metric is blind; a blind gap never starts one."""
    rule = AlertRule("Tpr", "tpr_gap", ">", 0.1, significant=True, min_samples=30, for_=0)
    book = AlertBook()
    judge = gap_judge(book, rule)
    assert judge(*GAP, T0) == "firing"  # TPR 0.75 vs 0.40
    # only decisions with prediction 1 labelled: FN = TN = 0, TPR = FPR = 1 in both groups
    blind = ({"n": 400, "fav": 200, "tp": 150, "fp": 50},
             {"n": 400, "fav": 120, "tp": 80, "fp": 40})  # fmt: skip
    assert judge(*blind, T0 + 60) is None  # no transition: not resolved by a 0.000 gap
    (alert,) = book.firing()
    assert alert.annotations["data"].startswith("blind: selective labels")
    assert (
        "are labelled (groups a, b; window 1h at 2026-01-01T00:01:00Z)" in alert.annotations["data"]
    )
    assert alert.value > 0.1  # the last measured gap, not the blind 0.000
    # one group's label feed selective: the note names it alone (where to look)
    measured = {"n": 400, "fav": 200, "tp": 150, "fn": 50, "fp": 50, "tn": 150}
    assert judge(measured, blind[1], T0 + 90) is None
    assert "are labelled (group b; window 1h" in book.firing()[0].annotations["data"]
    assert judge(*GAP, T0 + 120) is None  # measurable again, still breached: still firing
    fair = ({"n": 400, "fav": 200, "tp": 150, "fn": 50, "fp": 50, "tn": 150},) * 2
    assert judge(*fair, T0 + 180) == "resolved"
    fresh = AlertBook()
    assert gap_judge(fresh, rule)(*blind, T0) is None
    assert not fresh.active


@pytest.mark.parametrize("metric", ["tpr_gap", "equalized_odds_difference"])
def test_a_pending_label_rule_fires_only_if_still_breached_when_for_has_passed(
    metric: str,
) -> None:
    """Found replaying a fair stream: a label-based rule (EOD, TPR/FPR gap) set ``breached``
    to "enough samples, not blind" once an alert was pending, so one boundary past the bound
    paged ``for`` later whatever came between (EqualizedOddsGap fired with CI [0.006, 0.331]
    against a bound of 0.1; one fair 48-h run in six paged)."""
    rule = AlertRule("Gap", metric, ">", 0.1, significant=True, min_samples=30, for_=600)
    book = AlertBook()
    judge = gap_judge(book, rule)
    near = ({"n": 400, "fav": 200, "tp": 150, "fn": 50, "fp": 50, "tn": 150},
            {"n": 400, "fav": 180, "tp": 125, "fn": 75, "fp": 50, "tn": 150})  # fmt: skip
    assert judge(*GAP, T0) == "pending"  # TPR 0.75 vs 0.40: the interval is past 0.1
    assert judge(*near, T0 + 300) is None  # TPR 0.75 vs 0.625: interval [~0.03, ~0.22]
    assert not book.active  # no longer breached: the pending alert is dropped
    assert judge(*near, T0 + 600) is None and not book.active  # and never fires
    assert judge(*GAP, T0 + 900) == "pending"  # breached again: a new pending period
    assert judge(*GAP, T0 + 1500) == "firing"  # breached throughout `for`


def test_a_group_with_few_labels_does_not_block_a_gap_rule() -> None:
    """Found by a review: a group of 100 decisions with 3 labelled positives (TPR 1.0) was one
    end of every TPR gap, and its pair never reached min_samples labelled positives: a real gap
    between two large groups was never paged, and a firing alert never resolved ("insufficient
    data") while that group was there. A gap compares the groups whose own denominator of the
    rate (labelled positives for TPR) reaches min_samples."""
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    rule = AlertRule("Tpr", "tpr_gap", ">", 0.1, significant=True, min_samples=30, for_=0)
    few = {"n": 100, "fav": 50, "tp": 3, "fn": 0, "fp": 2, "tn": 5}
    book = AlertBook()

    def judge(groups: tuple[dict[str, int], ...], at: float) -> str | None:
        r = attribute_result(cell_counts(*groups), ["a", "b", "c"], spec, "g", confidence=0.95)
        d = r.disparity("tpr_gap")
        assert "c" not in (r.labels[d.low_group], r.labels[d.high_group])
        t = check_rule(book, rule, r, "m", "1h", "g", at, confidence=0.95)
        return None if t is None else t.alert.state

    assert judge((*GAP, few), T0) == "firing"  # a: 0.75 vs b: 0.40, c beside them
    assert judge((GAP[0], GAP[0], few), T0 + 60) == "resolved"  # a and b equal again


def test_a_significant_equalized_odds_rule_judges_both_gaps() -> None:
    """Found by a review: the equalized-odds difference took the interval of the gap with the
    larger point estimate, so a precise FPR gap of 0.25 [0.23, 0.27] beside a noisy TPR gap of
    0.30 [0.06, 0.49] never paged a significant rule at 0.1, and an alert resolved on a
    precise TPR gap while the FPR gap's interval still reached 0.23. The difference is a
    maximum: its interval is [max of the lower limits, max of the upper limits] of the two
    gaps' Newcombe intervals at the level over both gaps' pairs (two here: statsmodels')."""
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    rule = AlertRule(
        "Eod", "equalized_odds_difference", ">", 0.1, significant=True, min_samples=30, for_=0
    )

    def judge(book: AlertBook, a: dict[str, int], b: dict[str, int], at: float) -> str | None:
        r = attribute_result(cell_counts(a, b), ["a", "b"], spec, "g", confidence=0.95)
        tpr, fpr, eod = (
            r.disparity(m) for m in ("tpr_gap", "fpr_gap", "equalized_odds_difference")
        )
        assert eod.value == max(tpr.value, fpr.value)
        both = [
            confint_proportions_2indep(a[x], a[x] + a[y], b[x], b[x] + b[y], method="newcomb",
                                       compare="diff", alpha=0.05 / 2)
            for x, y in (("tp", "fn"), ("fp", "tn"))
        ]  # fmt: skip
        # each gap is high − low: statsmodels' interval of a − b, flipped when b is the higher
        signed = [
            (lo, hi) if a[x] / (a[x] + a[y]) >= b[x] / (b[x] + b[y]) else (-hi, -lo)
            for (lo, hi), (x, y) in zip(both, (("tp", "fn"), ("fp", "tn")), strict=True)
        ]
        signed = [(max(lo, 0.0), max(hi, -lo)) for lo, hi in signed]  # gaps are spreads
        expected = (max(lo for lo, _ in signed), max(hi for _, hi in signed))
        assert (eod.lower, eod.upper) == pytest.approx(expected, rel=1e-9)
        assert eod.lower <= max(tpr.lower, fpr.lower) and eod.pairs == 2
        t = check_rule(book, rule, r, "m", "1h", "g", at, confidence=0.95)
        return None if t is None else t.alert.state

    # TPR 0.6 vs 0.3 on 40 and 30 labelled positives; FPR 0.5 vs 0.25 on 4,000 negatives each
    noisy_tpr = ({"n": 4000, "tp": 24, "fn": 16, "fp": 2000, "tn": 2000},
                 {"n": 4000, "tp": 9, "fn": 21, "fp": 1000, "tn": 3000})  # fmt: skip
    paged = AlertBook()
    assert judge(paged, *noisy_tpr, T0) == "firing"
    # the page names the larger gap (TPR, 0.30) but its lower limit is the FPR gap's: both
    # gaps are written out, each with its interval, so the proof is on the page
    (alert,) = paged.firing()
    gaps = dict(part.split(" ", 1) for part in alert.annotations["gaps"].split("; "))
    assert set(gaps) == {"tpr_gap", "fpr_gap"}
    assert gaps["tpr_gap"].startswith("0.300 [") and gaps["tpr_gap"].endswith("] b vs a")
    fpr_lower = float(gaps["fpr_gap"].split("[")[1].split(",")[0])
    eod = alert.annotations["description"]
    eod_lower = float(eod.split("[")[1].split(",")[0])  # the FPR gap's, at the level over both
    assert 0.2 < eod_lower == fpr_lower  # the gaps shown at the page's level: the proof is there
    book = AlertBook()
    unfair = ({"n": 4000, "tp": 1500, "fn": 500, "fp": 1000, "tn": 1000},
              {"n": 4000, "tp": 1500, "fn": 500, "fp": 500, "tn": 1500})  # fmt: skip
    assert judge(book, *unfair, T0) == "firing"
    # TPR gap 0.07 [0.05, 0.09]; FPR gap 0.05 on 40 labelled negatives a group: up to ~0.23
    unsure = ({"n": 4000, "tp": 3000, "fn": 1000, "fp": 8, "tn": 32},
              {"n": 4000, "tp": 2720, "fn": 1280, "fp": 10, "tn": 30})  # fmt: skip
    assert judge(book, *unsure, T0 + 60) is None and book.firing()  # not resolved


def test_the_status_history_keeps_no_eod_while_it_is_blind() -> None:
    """Found by a review: the sparkline history stored the equalized-odds difference of
    selective labels (TPR = FPR = 1 for one group: 0.667 here), so once measurable again the
    status page drew the blind stretch as real history."""
    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}, "min_samples": 30}}})
    ev = AlertEvaluator(cfg, Engine(cfg))
    spec = cfg.models["m"]
    selective = ({"n": 200, "fav": 100, "tp": 70, "fp": 30},  # predicted 0: never labelled
                 {"n": 200, "fav": 100, "tp": 60, "fp": 40, "fn": 20, "tn": 80})  # fmt: skip
    measured = ({"n": 200, "fav": 100, "tp": 70, "fp": 30, "fn": 30, "tn": 70}, selective[1])
    for t, groups in ((T0, selective), (T0 + 60, measured)):
        r = attribute_result(cell_counts(*groups), ["a", "b"], spec, "g", confidence=0.95)
        ev._record("m", "1h", "g", t, r)
    blind, ok = ev.series[("m", "1h", "g")]
    assert math.isfinite(
        attribute_result(
            cell_counts(*selective), ["a", "b"], spec, "g", confidence=0.95
        ).disparities.equalized_odds_difference.value
    )  # a number the counts make up
    assert blind.eod is None and blind.dir is not None  # the DIR needs no label
    assert ok.eod is not None and ok.eod > 0


@pytest.mark.parametrize("metric", ["tpr_gap", "equalized_odds_difference"])
def test_a_small_selective_group_the_gap_leaves_out_does_not_silence_it(metric: str) -> None:
    """Found by a review: group c has 100 decisions but only 5 labels, all of prediction 1 —
    too few positives or negatives to be compared in any gap. Counting it as blinding the gap
    stopped the TPR-gap and equalized-odds alerts of the whole attribute set (TPR 0.75 vs 0.40
    between a and b). Only the groups a gap compares decide its blindness."""
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    rule = AlertRule("R", metric, ">", 0.1, significant=True, min_samples=30, for_=0)  # type: ignore[arg-type]
    small = {"n": 100, "fav": 50, "tp": 3, "fp": 2}  # its predicted-0 decisions: no label
    r = attribute_result(cell_counts(*GAP, small), ["a", "b", "c"], spec, "g", confidence=0.95)
    assert r.blind(1).metric("tpr", 2) is not None  # c itself is blind...
    assert metric not in r.blind(1).disparities(r.disparities)  # ...the gap between a, b is not
    t = check_rule(AlertBook(), rule, r, "m", "1h", "g", T0, confidence=0.95)
    assert t is not None and t.alert.state == "firing"


@pytest.mark.parametrize("with_small_group", [False, True])
def test_a_rule_above_the_models_min_samples_judges_the_groups_that_reach_it(
    with_small_group: bool,
) -> None:
    """Found by a review: the model's min_samples (30) let a small group c (~180 an hour, rate
    0.1) be the compared one; the rule's (200) then read "insufficient data", and b's
    significant breach (~600 an hour at 0.2 vs a's 0.5) never paged. The rule judges the
    groups that reach its own floor (as ``gate`` does): b vs a pages, with or without c."""
    import numpy as np

    from monitor.ingest.events import LabelBatch, PredictionBatch

    rule = four_fifths_rule(min_samples=200, **{"for": "0s"})
    cfg = alert_config(rules=[rule], drift={"enabled": False}, evidence={"enabled": False})
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine)
    reg = engine.registries[0]
    groups = {"a": (20, 0.5), "b": (10, 0.2), **({"c": (3, 0.1)} if with_small_group else {})}
    rng, key = np.random.default_rng(0), 1
    for minute in range(120):
        for g, (per_minute, rate) in groups.items():
            ts = T0 + minute * 60 + np.sort(rng.uniform(0, 60, per_minute))
            batch = PredictionBatch(
                key=np.arange(key, key + per_minute, dtype=np.uint64),
                model=np.zeros(per_minute, np.uint16),
                ts=ts,
                pred=(rng.random(per_minute) < rate).astype(np.uint8),
                score=np.full(per_minute, np.nan),
                groups=np.full((per_minute, 1), reg.index(0, g), np.int32),
            )
            key += per_minute
            engine.apply(0, batch, LabelBatch())
        ev.advance()
    firing = [t.alert for t in ev.history if t.alert.state == "firing"]
    assert firing, "the breach of b vs a never paged"
    ann = firing[0].annotations
    assert (ann["group"], ann["reference_group"]) == ("b", "a")
    assert int(ann["group_n"]) >= 200 and int(ann["reference_n"]) >= 200


def test_the_paged_group_falling_quiet_does_not_resolve_on_other_groups() -> None:
    """Three groups; the alert pages for c (rate 0.2 against a's 0.5). Then c falls below
    ``min_samples``, still at its low rate: the disparity is taken over a and b, a fair pair,
    whose interval clears 0.8 — that said nothing about c, yet resolved the alert (a review).
    Now it stays firing with the last judged numbers and names the group that went quiet; it
    resolves when c is measured again at a fair rate."""
    rule = AlertRule(
        "FourFifthsRule",
        "disparate_impact_ratio",
        "<",
        0.8,
        significant=True,
        min_samples=30,
        for_=0,
    )
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    book = AlertBook()

    def judge(c: dict[str, int], at: float) -> str | None:
        a, b = {"n": 1000, "fav": 500}, {"n": 1000, "fav": 490}
        r = attribute_result(cell_counts(a, b, c), ["a", "b", "c"], spec, "g", confidence=0.95)
        t = check_rule(book, rule, r, "m", "1h", "g", at, confidence=0.95)
        return None if t is None else t.alert.state

    assert judge({"n": 400, "fav": 80}, T0) == "firing"
    assert judge({"n": 10, "fav": 2}, T0 + 60) is None  # c quiet: a vs b alone is no recovery
    (alert,) = book.firing()
    assert alert.annotations["group"] == "c"
    assert float(alert.annotations["value"]) < 0.8  # the last judged numbers, kept
    assert "group c" in alert.annotations["data"], alert.annotations
    assert "window 1h at 2026-01-01T00:01:00Z;" in alert.annotations["data"]  # T0 + 1 min
    assert judge({"n": 0}, T0 + 120) is None  # nothing at all from c: still firing
    # restored from a checkpoint (the book knows only the alert and its text): the same
    (kept,) = book.firing()
    book = AlertBook()
    book.active[kept.key] = kept
    assert judge({"n": 10, "fav": 2}, T0 + 150) is None
    assert "group c" in book.firing()[0].annotations["data"]
    resolved = judge({"n": 400, "fav": 196}, T0 + 180)
    assert resolved == "resolved"


def test_a_significant_breach_behind_a_noisier_extreme_pair_pages() -> None:
    """Found by a review: c (40 decisions) had the lowest ratio, 0.60 [0.32, 0.98]; b vs a
    0.70 [0.67, 0.73] is wholly below 0.8, and nothing paged. It pages now, for b vs a with b's
    own numbers; it resolves once no pair is below (b back at a fair rate)."""
    rule = AlertRule("FourFifthsRule", "disparate_impact_ratio", "<", 0.8, significant=True,
                     min_samples=30, for_=0)  # fmt: skip
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    book, a, c = AlertBook(), {"n": 5000, "fav": 2500}, {"n": 40, "fav": 12}
    assert judged(book, rule, spec, T0, a, {"n": 5000, "fav": 1750}, c) == "firing"
    (alert,) = book.firing()
    assert (alert.annotations["group"], alert.annotations["reference_group"]) == ("b", "a")
    assert alert.annotations["value"] == "0.700" and float(alert.annotations["ci_upper"]) < 0.8
    assert alert.annotations["extreme_pair"].startswith("c vs a 0.600 [")  # said, not judged
    assert "the most extreme pair, c vs a 0.600" in alert.annotations["description"]
    assert judged(book, rule, spec, T0 + 60, a, {"n": 5000, "fav": 1750}, c) is None  # stays
    fair = ({"n": 5000, "fav": 2480}, {"n": 400, "fav": 196})
    assert judged(book, rule, spec, T0 + 120, a, *fair) == "resolved"


def test_a_rule_below_the_models_min_samples_still_keeps_the_quiet_paged_group() -> None:
    """Found by a review: with the rule's ``min_samples`` (10) below the model's (50), c at 20
    decisions is no longer compared (the model's floor), yet it reached the rule's, so the fair
    a-vs-b ratio resolved c's alert. The floor is the larger one, and the page says so."""
    rule = AlertRule("FourFifthsRule", "disparate_impact_ratio", "<", 0.8, significant=True,
                     min_samples=10, for_=0)  # fmt: skip
    doc = {"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "min_samples": 50}}}
    spec, book = parse_config(doc).models["m"], AlertBook()
    a, b = {"n": 1000, "fav": 500}, {"n": 1000, "fav": 490}
    assert judged(book, rule, spec, T0, a, b, {"n": 400, "fav": 80}) == "firing"
    assert judged(book, rule, spec, T0 + 60, a, b, {"n": 20, "fav": 4}) is None
    (alert,) = book.firing()
    assert "group c of the page has fewer than 50 samples" in alert.annotations["data"]
    assert judged(book, rule, spec, T0 + 120, a, b, {"n": 400, "fav": 196}) == "resolved"


def _eod_group(pos: int, tpr: float, neg: int, fpr: float) -> dict[str, int]:
    tp, fp = round(pos * tpr), round(neg * fpr)
    return {"n": pos + neg, "fav": tp + fp, "tp": tp, "fn": pos - tp, "fp": fp, "tn": neg - fp}


def test_an_equalized_odds_alert_judges_its_paged_group_on_the_rate_it_paged() -> None:
    """Found by a review: the paged group's sample size was read in the gap that is larger
    *now*. c paged on its TPR gap (c has few labelled negatives by nature): once its TPR is
    back and the larger gap is a's and b's FPR, c's 10 negatives kept the alert firing for
    good; the other way round, c's positives falling to 10 with its TPR still low resolved it
    on its 500 negatives."""
    rule = AlertRule("EqualizedOddsGap", "equalized_odds_difference", ">", 0.1,
                     significant=True, min_samples=30, for_=0)  # fmt: skip
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    a, b = _eod_group(2000, 0.90, 2000, 0.10), _eod_group(2000, 0.89, 2000, 0.13)

    def judge(book: AlertBook, c: dict[str, int], at: float) -> str | None:
        r = attribute_result(cell_counts(a, b, c), ["a", "b", "c"], spec, "g", confidence=0.95)
        t = check_rule(book, rule, r, "m", "1h", "g", at, confidence=0.95)
        return None if t is None else t.alert.state

    book = AlertBook()
    assert judge(book, _eod_group(400, 0.50, 10, 0.1), T0) == "firing"
    assert book.firing()[0].annotations["group"] == "c"
    assert judge(book, _eod_group(400, 0.90, 10, 0.1), T0 + 3600) == "resolved"
    book = AlertBook()
    assert judge(book, _eod_group(400, 0.50, 500, 0.1), T0) == "firing"
    assert judge(book, _eod_group(10, 0.20, 500, 0.1), T0 + 3600) is None
    (alert,) = book.firing()
    assert "group c" in alert.annotations["data"], alert.annotations


def test_a_gap_of_equal_rates_is_judged_between_two_groups() -> None:
    """Found by a review: with every rate equal, the gap's highest and lowest were the same
    group, and its interval that group's width against itself (±0.001 for 0/3000), with the
    page naming "a vs a". Now the lowest is another group (the next on the tie-break), and the
    interval is the pair's as a spread: the truth may run either way."""
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    big, small = {"n": 3000, "fp": 0, "tn": 3000}, {"n": 32, "fp": 0, "tn": 32}
    for labels, order in ((["a", "b"], (big, small)), (["b", "a"], (small, big))):
        r = attribute_result(cell_counts(*order), labels, spec, "g", confidence=0.95)
        gap = r.disparity("fpr_gap")
        assert gap.value == 0.0 and gap.high_group is not None and gap.low_group is not None
        assert (labels[gap.high_group], labels[gap.low_group]) == ("a", "b")  # never a vs a
        lo, hi = confint_proportions_2indep(0, 3000, 0, 32, method="newcomb", compare="diff")
        # as a spread: the gap may run the other way by -lo (0.107), so the upper limit is that
        assert lo < -0.1 < hi < 0.01
        assert (gap.lower, gap.upper) == pytest.approx((0.0, -lo), rel=1e-9)
    # the FPR gap rule fired on a real gap does not "recover" on 0/3000 vs 0/32
    rule = AlertRule("Fpr", "fpr_gap", ">", 0.1, significant=True, min_samples=30, for_=0)
    book = AlertBook()

    def judge(a: dict[str, int], b: dict[str, int], at: float) -> str | None:
        return judged(book, rule, spec, at, a, b)

    unfair = ({"n": 2000, "fp": 1000, "tn": 1000}, {"n": 2000, "fp": 300, "tn": 1700})
    assert judge(*unfair, T0) == "firing"
    assert judge(big, small, T0 + 60) is None and book.firing()  # up to 0.107: not recovered
    assert judge(big, {"n": 3000, "fp": 0, "tn": 3000}, T0 + 120) == "resolved"


def test_an_equalized_odds_alert_does_not_recover_on_one_gap_alone() -> None:
    """Found by a review: the FPR gap that carried the page's lower limit became unmeasurable
    (b's labelled negatives fell to 29) and the difference, now the TPR gap alone, resolved:
    a maximum is back under its bound only when both gaps are measured and are."""
    rule = AlertRule("EqualizedOddsGap", "equalized_odds_difference", ">", 0.1,
                     significant=True, min_samples=30, for_=0)  # fmt: skip
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    book = AlertBook()

    def judge(a: dict[str, int], b: dict[str, int], at: float) -> str | None:
        return judged(book, rule, spec, at, a, b)

    first = ({"n": 4040, "tp": 24, "fn": 16, "fp": 2000, "tn": 2000},
             {"n": 4030, "tp": 9, "fn": 21, "fp": 1000, "tn": 3000})  # fmt: skip
    assert judge(*first, T0) == "firing"
    tpr_back = ({"n": 4000, "tp": 1560, "fn": 1440, "fp": 500, "tn": 500},
                {"n": 3029, "tp": 1500, "fn": 1500, "fp": 10, "tn": 19})  # fmt: skip
    assert judge(*tpr_back, T0 + 60) is None
    (alert,) = book.firing()
    assert "insufficient data: a second group for fpr_gap" in alert.annotations["data"]
    both_back = (tpr_back[0], {"n": 4000, "tp": 1500, "fn": 1500, "fp": 500, "tn": 500})
    assert judge(*both_back, T0 + 120) == "resolved"


def test_a_firing_alert_inside_the_hysteresis_does_not_claim_a_breach() -> None:
    """Found by a review: an alert kept firing on a DIR of 0.820 [0.744, 0.903] read
    "disparate_impact_ratio 0.820 < 0.8", which is false. It says it has not yet recovered and
    what resolving takes; the numbers beside it are the window's."""
    spec = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}}).models["m"]
    rule = AlertRule("Ff", "disparate_impact_ratio", "<", 0.8, significant=True, for_=0)
    book = AlertBook()

    def judge(a: dict[str, int], b: dict[str, int], at: float) -> str | None:
        return judged(book, rule, spec, at, a, b)

    assert judge({"n": 1000, "fav": 500}, {"n": 1000, "fav": 300}, T0) == "firing"
    assert book.firing()[0].annotations["summary"].startswith("disparate_impact_ratio 0.600 < 0.8")
    assert judge({"n": 1000, "fav": 500}, {"n": 1000, "fav": 410}, T0 + 60) is None
    (alert,) = book.firing()
    summary = alert.annotations["summary"]
    assert summary.startswith("not yet recovered: disparate_impact_ratio 0.820 [0.7"), summary
    assert "< 0.8" not in summary and summary.endswith(
        "for b vs a; resolves at 0.82 with the interval's near limit past the bound"
    )
    assert judge({"n": 1000, "fav": 500}, {"n": 1000, "fav": 500}, T0 + 120) == "resolved"


@pytest.mark.parametrize("reference", [None, "a"])
def test_a_ratio_undefined_by_a_zero_reference_rate_is_not_called_insufficient_data(
    reference: str | None,
) -> None:
    """Found by a review: a firing four-fifths alert whose DIR became undefined because its
    reference rate fell to 0 (the model selects nobody, or nobody of the configured reference
    group), with 400 decisions in each group, said "insufficient data: fewer than 30 samples",
    which sends the on-call engineer after traffic. It says the ratio is undefined and why,
    and stays firing; a window with too few samples still says so."""
    refs = {"g": reference} if reference else {}
    spec = parse_config(
        {"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "reference_groups": refs}}}
    ).models["m"]
    rule = AlertRule("Ff", "disparate_impact_ratio", "<", 0.8, significant=True, for_=0)
    book = AlertBook()

    def judge(a: dict[str, int], b: dict[str, int], at: float) -> str | None:
        return judged(book, rule, spec, at, a, b)

    assert judge({"n": 400, "fav": 200}, {"n": 400, "fav": 40}, T0) == "firing"
    # the reference a selects nobody: with a configured reference b's 120 of 400 is beside it;
    # without one, the highest rate is the reference, so every group is at 0
    b_now = 120 if reference else 0
    assert judge({"n": 400, "fav": 0}, {"n": 400, "fav": b_now}, T0 + 60) is None
    (alert,) = book.firing()
    data = alert.annotations["data"]
    zeros = "a 0 of 400" + ("" if reference else ", b 0 of 400")
    assert data.startswith(
        f"undefined: disparate_impact_ratio divides by the reference group's selection rate, "
        f"and it is 0 ({zeros})"
    ), data
    assert "insufficient" not in data
    assert judge({"n": 400, "fav": 0}, {"n": 20, "fav": 0}, T0 + 120) is None  # b too small
    assert book.firing()[0].annotations["data"].startswith("insufficient data: group b of the page")


def test_a_group_below_the_models_floor_is_not_called_a_zero_reference_rate() -> None:
    """Found by a review: with the model's min_samples (100) above the rule's (30), a group of
    50 with no favourable decision is left out of the ratio, which is undefined for want of a
    second group; the note said "the reference group's selection rate … is 0 (b 0 of 50)"
    while the reference a was at 0.5. Only the groups the ratio compares count."""
    spec = parse_config(
        {"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "min_samples": 100}}}
    ).models["m"]
    rule = AlertRule("Ff", "disparate_impact_ratio", "<", 0.8, significant=True, for_=0)
    book = AlertBook()
    assert judged(book, rule, spec, T0, {"n": 400, "fav": 200}, {"n": 400, "fav": 40}) == "firing"
    assert judged(book, rule, spec, T0 + 60, {"n": 400, "fav": 200}, {"n": 50, "fav": 0}) is None
    data = book.firing()[0].annotations["data"]
    assert data.startswith("insufficient data") and "undefined" not in data, data
