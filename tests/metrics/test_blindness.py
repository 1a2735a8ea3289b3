"""Blind metrics under selective labels: per group and metric, from the counts alone.

Cross-checked against hand-made counts (which class is labelled is written out) and against the
feedback-loop simulation, where denied applicants never get a label: there the per-class label
coverage (computed independently in ``fairness.group_metrics``) is 0 for predicted negatives,
TPR and FPR are 1.000 by construction, and exactly those metrics are blind.
"""

from __future__ import annotations

import numpy as np
import pytest

from monitor.app.simulate import LendingSimulation, iter_hours, scenario
from monitor.metrics.blindness import (
    ONLY_NEGATIVE,
    ONLY_POSITIVE,
    blind_groups,
    blind_reasons,
    stacked_blindness,
)
from monitor.metrics.fairness import disparities, group_metrics
from monitor.metrics.registry import METRICS
from monitor.state.windows import FAV, FN, FP, TN, TP, N, n_cells

LABEL_BASED = {m for m, s in METRICS.items() if s.needs_labels}


def counts(rows: list[tuple[int, int, int, int, int, int]]) -> np.ndarray:
    """``counts[group, cell]`` from (N, FAV, TP, FP, FN, TN) rows."""
    c = np.zeros((len(rows), n_cells(1)), dtype=np.int64)
    for i, (n, fav, tp, fp, fn, tn) in enumerate(rows):
        c[i, [N, FAV, TP, FP, FN, TN]] = n, fav, tp, fp, fn, tn
    return c


# a: 10 decisions, 4 approved and all 4 labelled, none of the 6 denied labelled (selective)
# b: 10 decisions, 5 approved (2 labelled), 5 denied (1 labelled): measurable
# c: 10 decisions, 5 approved (none labelled), 5 denied (3 labelled): only class 0 labelled
# d: 10 decisions, nothing labelled yet: undefined, not blind
# e: 10 decisions, all approved, 6 labelled: no denial to miss, TPR = 1 is the truth
ROWS = [
    (10, 4, 3, 1, 0, 0),
    (10, 5, 1, 1, 1, 0),
    (10, 5, 0, 0, 2, 1),
    (10, 4, 0, 0, 0, 0),
    (10, 10, 4, 2, 0, 0),
]


def test_per_group_reasons_by_hand() -> None:
    r = blind_reasons(counts(ROWS))
    expected = {  # group -> {rate: reason}
        0: {"tpr": ONLY_POSITIVE, "fpr": ONLY_POSITIVE, "fnr": ONLY_POSITIVE,
            "tnr": ONLY_POSITIVE, "npv": ONLY_POSITIVE, "accuracy": ONLY_POSITIVE,
            "prevalence": ONLY_POSITIVE},
        2: {"tpr": ONLY_NEGATIVE, "fpr": ONLY_NEGATIVE, "ppv": ONLY_NEGATIVE,
            "fdr": ONLY_NEGATIVE, "fnr": ONLY_NEGATIVE, "tnr": ONLY_NEGATIVE,
            "accuracy": ONLY_NEGATIVE, "prevalence": ONLY_NEGATIVE},
    }  # fmt: skip
    for g in range(len(ROWS)):
        for rate in ("tpr", "fpr", "ppv", "npv", "fnr", "tnr", "fdr", "accuracy", "prevalence"):
            assert r.metric(rate, g) == expected.get(g, {}).get(rate), (g, rate)
        assert r.metric("selection_rate", g) is None
        # registry metrics read as their rate; the composites as their parts
        assert r.metric("tpr_gap", g) == expected.get(g, {}).get("tpr")
        assert r.metric("equal_opportunity_difference", g) == expected.get(g, {}).get("tpr")
        assert r.metric("predictive_parity_difference", g) == expected.get(g, {}).get("ppv")
        assert r.metric("equalized_odds_difference", g) == expected.get(g, {}).get("tpr")
        assert r.metric("disparate_impact_ratio", g) is None
    assert ONLY_POSITIVE.cell == "blind: selective labels"
    assert ONLY_POSITIVE.text == "selective labels: only decisions with prediction 1 are labelled"
    assert r.blind("tpr").tolist() == [True, False, True, False, False]
    assert r.blind("ppv").tolist() == [False, False, True, False, False]
    assert r.any and not blind_reasons(counts([ROWS[1], ROWS[3], ROWS[4]])).any


def test_what_is_blind_is_what_the_rates_make_up() -> None:
    """The blind rates are exactly the ones that come out 0 or 1 whatever the outcomes: group
    a's TPR and FPR are 1, group c's TPR is 0 and its FPR 0 (computed by fairness.py)."""
    gm = group_metrics(counts(ROWS), score_bins=1)
    assert (gm.tpr[0], gm.fpr[0]) == (1.0, 1.0)
    assert (gm.tpr[2], gm.fpr[2]) == (0.0, 0.0)
    assert gm.label_coverage_predicted_negative[0] == 0.0
    assert gm.label_coverage_predicted_positive[2] == 0.0
    r = blind_groups(gm)
    assert r.blind("tpr").tolist() == blind_reasons(counts(ROWS)).blind("tpr").tolist()


def test_favourable_zero_swaps_which_count_is_the_predicted_positive() -> None:
    """With ``favourable: 0`` FAV counts prediction 0: group a's 4 favourable are denials."""
    rows = [(10, 6, 3, 1, 0, 0), (10, 5, 1, 1, 1, 0)]  # a: 4 predicted 1 (labelled), 6 not
    r = blind_reasons(counts(rows), favourable=0)
    assert r.metric("tpr", 0) == ONLY_POSITIVE and r.metric("tpr", 1) is None
    # read as if FAV counted prediction 1: a has 6 predicted-1 and 4 predicted-0 decisions,
    # still only class 1 labelled, so it stays blind; b too is unchanged
    assert blind_reasons(counts(rows)).metric("tpr", 0) == ONLY_POSITIVE
    # all 10 of group e predicted 1 under favourable 0 means FAV = 0
    r0 = blind_reasons(counts([(10, 0, 4, 2, 0, 0)]), favourable=0)
    assert r0.metric("tpr", 0) is None


def test_disparities_are_blind_when_a_compared_group_is() -> None:
    rows = [ROWS[0], ROWS[1], (10, 5, 2, 1, 1, 1)]  # a (blind), b, and another measurable one
    gm = group_metrics(counts(rows), score_bins=1)
    d = disparities(gm, min_samples=1, reference=1)
    r = blind_groups(gm)
    blind = r.disparities(d)
    assert set(blind) == {
        "tpr_gap",
        "fpr_gap",
        "equalized_odds_difference",
        "equal_opportunity_difference",
        "average_odds_difference",
    }
    assert set(blind.values()) == {ONLY_POSITIVE}
    assert d.tpr_gap.high_group == 0  # the made-up 1.000 is the maximum
    assert r.disparity("tpr_gap", d.tpr_gap.low_group, d.tpr_gap.high_group) == ONLY_POSITIVE
    assert r.disparity("tpr_gap", None, 1) is None
    # without the blind group nothing label-based is blind
    gm2 = group_metrics(counts(rows[1:]), score_bins=1)
    assert blind_groups(gm2).disparities(disparities(gm2, min_samples=1)) == {}


def test_equalized_odds_is_blind_when_either_gap_is() -> None:
    """The EOD is the larger gap; if the *other* gap is blind its maximum is unknown.

    Groups 0 and 1 are measurable (TPR 0.75 and 0.25, FPR 0.9 and 0.95); group 2 has only
    approvals labelled, all of them bad: its TPR is 0/0 (left out of the TPR gap) and its FPR
    6/6 = 1 by construction, so the FPR gap (0.1) is blind and the TPR gap (0.5) is not."""
    rows = [(80, 40, 15, 18, 5, 2), (80, 40, 5, 19, 15, 1), (80, 40, 0, 6, 0, 0)]
    gm = group_metrics(counts(rows), score_bins=1)
    d = disparities(gm, min_samples=1)
    assert np.isnan(gm.tpr[2]) and gm.fpr[2] == 1.0
    assert {d.tpr_gap.low_group, d.tpr_gap.high_group} == {0, 1}
    assert d.fpr_gap.high_group == 2
    blind = blind_groups(gm).disparities(d)
    assert "tpr_gap" not in blind and blind["fpr_gap"] == ONLY_POSITIVE
    assert d.equalized_odds_difference.basis == "tpr_gap"  # the larger gap is measurable...
    assert blind["equalized_odds_difference"] == ONLY_POSITIVE  # ...but the max is unknown


@pytest.mark.parametrize("seed", [3, 11])
def test_feedback_loop_simulation_is_blind_for_error_rates(seed: int) -> None:
    """Denied applicants never get a label: in every group with denials and labels, TPR and
    FPR (and their gaps, the equalized-odds difference) are blind; PPV and the DIR are not."""
    from monitor.config.spec import parse_config
    from monitor.ingest.events import RawRecord
    from monitor.state.engine import Engine
    from tests.helpers import T0, run

    cfg = parse_config(
        {"models": {"lending": {"attributes": {"group": {}, "sex": {}}, "windows": ["12h"],
                                "bucket": "5m", "lateness": "1h", "min_samples": 30}},
         "max_future": "365d"}
    )  # fmt: skip
    sim = LendingSimulation(scenario("feedback-loop"), seed=seed, start=T0)
    preds, labels = [], []
    for b in iter_hours(sim, 14):
        preds += [RawRecord(v) for _, v in b.predictions]
        labels += [RawRecord(v) for _, v in b.labels]
    engine = Engine(cfg)
    run(engine, preds, labels)
    ms = engine.snapshot().models["lending"]
    wc = ms.windows["12h"]
    for gidx, names in ms.groups:
        c = wc.counts[gidx]
        gm = group_metrics(c, score_bins=ms.spec.score_bins)
        r = blind_reasons(c)
        has = (gm.labelled > 0) & (gm.n > gm.favourable)
        assert has.all(), names  # every group has denials and labels after 14 hours
        assert (gm.label_coverage_predicted_negative == 0).all()
        assert (gm.tpr == 1.0).all() and (gm.fpr == 1.0).all()
        assert r.blind("tpr").all() and r.blind("fpr").all() and not r.blind("ppv").any()
        blind = r.disparities(disparities(gm, min_samples=30))
        assert set(blind) == LABEL_BASED - {"ppv_gap", "predictive_parity_difference"}


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_a_blind_group_tied_at_the_extreme_makes_the_gap_blind_in_either_order(
    order: tuple[int, int],
) -> None:
    """Found by a review: group a has no predicted-0 decision (TPR = FPR = 1, measured), group b
    one unlabelled predicted-0 decision (TPR = FPR = 1 by construction). Tied, the gap compared
    whichever came first: a against itself, a measured 0.000 — and Prometheus, picking either,
    flipped between blind and not. Any blind group the gap spans makes it blind."""
    rows = [(12, 12, 4, 8, 0, 0), (9, 8, 3, 5, 0, 0)]
    gm = group_metrics(counts([rows[i] for i in order]), score_bins=1)
    d = disparities(gm, min_samples=1)
    assert d.tpr_gap.value == 0.0  # the made-up number
    blind = blind_groups(gm).disparities(d)
    assert {"tpr_gap", "fpr_gap", "equalized_odds_difference"} <= set(blind)
    assert "ppv_gap" not in blind  # predicted 1: labelled in both


def test_a_blind_group_whose_rate_is_undefined_leaves_the_gap_measured() -> None:
    """A group blind in TPR with no labelled positive at all (TP + FN = 0) is in no TPR gap:
    the gap between the others is measured (its FPR gap is blind)."""
    rows = [(80, 40, 15, 18, 5, 2), (80, 40, 5, 19, 15, 1), (80, 40, 0, 6, 0, 0)]
    gm = group_metrics(counts(rows), score_bins=1)
    blind = blind_groups(gm).disparities(disparities(gm, min_samples=1))
    assert "tpr_gap" not in blind and "fpr_gap" in blind


@pytest.mark.parametrize("favourable", [0, 1])
def test_stacked_rows_read_as_each_set_alone(favourable: int) -> None:
    """The evaluator's stacked check (nine results at once, zero-padded) reports every row as
    ``blind_reasons`` of that row alone: which classes are unlabelled, the per-group codes and
    every blind disparity, on random counts where some groups have a class without labels."""
    rng = np.random.default_rng(7)
    for _ in range(60):
        sizes = rng.integers(0, 6, size=rng.integers(1, 6)).tolist()
        stacked = np.zeros((len(sizes), max([1, *sizes]), n_cells(1)), dtype=np.int64)
        for i, size in enumerate(sizes):
            for g in range(size):
                n = int(rng.integers(0, 12))
                fav = int(rng.integers(0, n + 1))
                pos, neg = (fav, n - fav) if favourable == 1 else (n - fav, fav)
                lab1 = int(rng.integers(0, pos + 1)) * int(rng.random() < 0.7)  # class 1 labelled
                lab0 = int(rng.integers(0, neg + 1)) * int(rng.random() < 0.7)
                tp = int(rng.integers(0, lab1 + 1))
                tn = int(rng.integers(0, lab0 + 1))
                stacked[i, g, [N, FAV, TP, FP, FN, TN]] = n, fav, tp, lab1 - tp, lab0 - tn, tn
        got = stacked_blindness(stacked, sizes, favourable=favourable)
        for i, size in enumerate(sizes):
            want = blind_reasons(stacked[i, :size], favourable=favourable)
            assert got[i].any == want.any
            for u, v in zip(got[i].unlabelled, want.unlabelled, strict=True):
                assert u.tolist() == v.tolist()
            for rate in ("tpr", "fpr", "ppv", "npv", "accuracy"):
                assert got[i].codes(rate).tolist() == want.codes(rate).tolist()
                assert got[i].reasons(rate) == want.reasons(rate)
