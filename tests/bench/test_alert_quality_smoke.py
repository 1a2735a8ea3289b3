"""The alert-quality benchmark (``bench/alert_quality.py``) at a tiny size: its intervals against
scipy / statsmodels, its streams against their known truth, its judging of transitions on
hand-made runs, and the replay check (equal on the real path, failing on a tampered one)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

import bench.alert_quality as aq
from bench.alert_report import (
    label_based,
    print_drop,
    print_fair,
    print_slide,
    true_values,
    truly_breached,
)
from bench.alert_stats import garwood, kl_bernoulli, median_interval, wilson_interval
from bench.alert_streams import SCENARIOS, T0, Events, RunResult, Scenario, draw

WIN = (("alertname", "FourFifthsRule"), ("attribute", "group"), ("model", "lending"))


@pytest.mark.parametrize("k", [0, 1, 2, 7, 50, 400])
def test_garwood_is_the_exact_chi_square_interval(k: int) -> None:
    lo, hi = garwood(k)
    assert lo == pytest.approx(stats.chi2.ppf(0.025, 2 * k) / 2 if k else 0.0, rel=1e-9, abs=1e-12)
    assert hi == pytest.approx(stats.chi2.ppf(0.975, 2 * k + 2) / 2, rel=1e-9)


@pytest.mark.parametrize("n", [6, 9, 20, 57, 200])
def test_median_interval_has_the_smallest_ranks_that_cover(n: int) -> None:
    xs = [float(i) for i in range(n)]  # x_(i) = i - 1
    med, lo, hi = median_interval(xs)
    assert med == pytest.approx((n - 1) / 2)
    l_rank, u_rank = int(lo) + 1, int(hi) + 1
    assert u_rank == n + 1 - l_rank
    cover = stats.binom.cdf(u_rank - 1, n, 0.5) - stats.binom.cdf(l_rank - 1, n, 0.5)
    assert cover >= 0.95
    tighter = stats.binom.cdf(u_rank - 2, n, 0.5) - stats.binom.cdf(l_rank, n, 0.5)
    assert tighter < 0.95
    if n == 20:
        assert (lo, hi) == (5.0, 14.0)  # Conover's table: ranks 6 and 15


def test_median_counts_undetected_runs_as_infinite() -> None:
    med, _, hi = median_interval([1.0, 2.0, math.inf, math.inf, math.inf])
    assert med == math.inf and hi == math.inf
    assert median_interval([1.0, 2.0, 3.0, math.inf])[0] == 2.5
    assert median_interval([1.0, 2.0])[1:] == (-math.inf, math.inf)  # too few runs


@pytest.mark.parametrize(("k", "n"), [(0, 10), (19, 20), (37, 200)])
def test_wilson_matches_statsmodels(k: int, n: int) -> None:
    lo, hi = wilson_interval(k, n)
    ref = proportion_confint(k, n, alpha=0.05, method="wilson")
    assert (lo, hi) == pytest.approx(ref, abs=1e-9)


def test_information_limit_of_the_issue() -> None:
    kl = kl_bernoulli(0.3, 0.5)
    assert kl == pytest.approx(stats.entropy([0.3, 0.7], [0.5, 0.5]))
    assert kl == pytest.approx(0.0823, abs=5e-5)
    # "c = 30 days of 40 decisions/h gives ≈ 3.1 h"
    assert math.log(30 * 24 * 40) / (kl * 40) == pytest.approx(3.12, abs=0.01)


def _within(x: int, n: int, p: float) -> bool:
    """x ~ Bin(n, p) within 5 standard deviations."""
    return abs(x - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def _hours(ev: Events) -> np.ndarray:  # type: ignore[type-arg]
    return (ev.ts - T0) / 3600


def test_streams_follow_their_truth() -> None:
    sc = replace(SCENARIOS["small-drop"], days=4, start_h=24, hold_h=48)
    ev = draw(sc, 0)
    h = _hours(ev)
    assert np.all(np.diff(ev.ts) >= 0) and np.all(np.diff(ev.label_ts) >= 0)
    assert sorted(ev.label_idx.tolist()) == list(range(len(ev.ts)))  # each labelled once
    delay = ev.label_ts - ev.ts[ev.label_idx]
    assert delay.min() >= 3600 and delay.max() <= 6 * 3600
    big, small = ev.group == 0, ev.group == 1
    hours = sc.days * 24
    assert abs(big.sum() - 1200 * hours) <= 5 * math.sqrt(1200 * hours)
    assert abs(small.sum() - 40 * hours) <= 5 * math.sqrt(40 * hours)
    on = (h >= 24) & (h < 72)
    for mask, p in ((small & ~on, 0.5), (small & on, 0.3), (big & on, 0.5)):
        assert _within(int(ev.pred[mask].sum()), int(mask.sum()), p)
    y = np.zeros(len(ev.ts), np.uint8)
    y[ev.label_idx] = ev.label
    pos = big & (y == 1)
    assert _within(int(ev.pred[pos].sum()), int(pos.sum()), 0.8)  # TPR
    assert _within(int(y[big].sum()), int(big.sum()), 0.5)  # prevalence


def test_denials_come_in_a_daily_file_approvals_as_they_came() -> None:
    """``fair-denials-daily``: an approval's outcome 1–6 h after it; a denial's in the file
    of the next 02:00 that is at least 6 h after the decision (so 8–32 h late)."""
    sc = replace(SCENARIOS["fair-denials-daily"], days=3)
    ev = draw(sc, 0)
    made = ev.ts[ev.label_idx]
    delay = ev.label_ts - made
    approved = ev.pred[ev.label_idx] == 1
    assert delay[approved].min() >= 3600 and delay[approved].max() <= 6 * 3600
    files = ev.label_ts[~approved]
    # 02:00 each day (the last after the 3 days: the run never feeds it)
    assert set(((files - T0) / 3600).tolist()) == {26.0, 50.0, 74.0, 98.0}
    assert delay[~approved].min() >= 8 * 3600 and delay[~approved].max() <= 32 * 3600
    assert np.all(np.diff(ev.label_ts) >= 0)


def test_tpr_drop_changes_the_tpr_only() -> None:
    sc = replace(SCENARIOS["tpr-drop"], days=2, start_h=12, hold_h=24)
    ev = draw(sc, 0)
    h = _hours(ev)
    y = np.zeros(len(ev.ts), np.uint8)
    y[ev.label_idx] = ev.label
    on = (h >= 12) & (h < 36)
    g2 = ev.group == 1
    for mask, label, p in ((g2 & on, 1, 0.6), (g2 & ~on, 1, 0.8), (g2 & on, 0, 0.2)):
        sel = mask & (y == label)
        assert _within(int(ev.pred[sel].sum()), int(sel.sum()), p)


def test_what_each_alert_claims_is_judged_against_the_streams_truth() -> None:
    """The true values while a change lasts, measured on a drawn stream, and which alerts
    claim something true: in ``tpr-drop`` the selection rate falls to exactly 0.4 (DIR 0.8,
    not below 0.8) and the FPR does not move; in ``small-drop`` TPR and FPR fall with the
    selection rate (FPR 0.2 → 0.12: a gap of 0.08, inside the 0.1 bound)."""
    for name, changed in (("tpr-drop", 1), ("small-drop", 1)):
        sc = replace(SCENARIOS[name], days=3, start_h=12, hold_h=48)
        truth = true_values(sc)
        ev = draw(sc, 0)
        y = np.zeros(len(ev.ts), np.uint8)
        y[ev.label_idx] = ev.label
        h = _hours(ev)
        on = (ev.group == changed) & (h >= 12) & (h < 60)
        assert _within(int(ev.pred[on].sum()), int(on.sum()), truth["selection_rate"][1])
        for metric, label in (("tpr", 1), ("fpr", 0)):
            sel = on & (y == label)
            assert _within(int(ev.pred[sel].sum()), int(sel.sum()), truth[metric][1])
    tpr, small = SCENARIOS["tpr-drop"], SCENARIOS["small-drop"]
    assert true_values(tpr)["disparate_impact_ratio"][1] == pytest.approx(0.8)

    def claims(sc: Scenario, name: str, **labels: str) -> bool:
        return truly_breached(sc, name, tuple(sorted(labels.items())))

    assert not claims(tpr, "FourFifthsRule", window="3h")
    assert not claims(tpr, "FourFifthsEvidence", group="big2")
    assert claims(tpr, "TruePositiveRateGap", window="12h")
    assert claims(tpr, "EqualizedOddsEvidence", group="big")  # the pair, either way round
    assert not claims(tpr, "FalsePositiveRateGap", window="3h")
    assert claims(tpr, "FairnessChange", metric="selection_rate", group="big2")
    assert not claims(tpr, "FairnessChange", metric="selection_rate", group="big")
    assert not claims(tpr, "FairnessChange", metric="fpr", group="big2")
    assert claims(tpr, "FairnessDrift", metric="tpr_gap")
    assert not claims(tpr, "FairnessDrift", metric="fpr_gap")
    assert claims(small, "FourFifthsRule", window="3h")
    assert claims(small, "TruePositiveRateGap", window="3h")
    assert not claims(small, "FalsePositiveRateGap", window="3h")
    assert claims(small, "FairnessChange", metric="fpr", group="small")


def _result(seed: int, transitions: list[tuple[str, float, str]]) -> RunResult:
    """A run with these (window, hours, state) FourFifthsRule transitions."""
    out = [("FourFifthsRule", (*WIN, ("window", w)), s, at) for w, at, s in transitions]
    return RunResult("x", seed, out, severity={"FourFifthsRule": "page"})


def test_drop_judging_counts_flapping_early_resolutions_and_delays(capsys) -> None:  # type: ignore[no-untyped-def]
    sc = replace(SCENARIOS["small-drop"], start_h=10, hold_h=5, days=100)
    lagged = 10 + 72  # the 12h-labelled window sees the change 3 days later
    runs = [
        _result(
            0,
            [
                ("3h", 11, "firing"),
                ("3h", 12, "resolved"),  # while the change persists
                ("3h", 13, "firing"),
                ("3h", 16, "resolved"),
                ("12h-labelled", 11, "firing"),
                ("12h-labelled", 12, "resolved"),  # its window has not seen the change yet
                ("12h-labelled", lagged + 1, "firing"),
                ("12h-labelled", lagged + 2, "resolved"),  # it has now: early
            ],
        ),
        _result(1, [("3h", 9, "firing")]),  # before the change: false, and never resolved
        _result(2, [("3h", 12.5, "firing")]),  # never resolved: fails "resolved after recovery"
    ]
    print_drop(sc, runs, 1.0, 1, 90 * 86400)
    out = capsys.readouterr().out
    assert "detected within the change (any alert)" in out and " 2/3 = " in out
    assert "median 2.50 h" in out  # delays 1, 2.5 and ∞ hours
    # run 0: 3h twice, lagged twice (11 and 82); run 1 fired before the change; run 2 once
    assert "1.67 (5 for 3)" in out
    line = next(x for x in out.splitlines() if "resolutions while the change persists" in x)
    assert " 2 " in line  # 3h at 12 and 12h-labelled at 84, not 12h-labelled at 12
    line = next(x for x in out.splitlines() if "all resolved after recovery" in x)
    assert "2/3" in line
    line = next(x for x in out.splitlines() if "pages before the change" in x)
    assert line.rstrip().endswith("1")


def test_fair_and_slide_judging(capsys) -> None:  # type: ignore[no-untyped-def]
    fair = replace(SCENARIOS["fair"], days=45)
    runs = [_result(0, [("3h", 5, "firing"), ("3h", 6, "resolved")]), _result(1, [])]
    print_fair(fair, runs, 1.0, 1, 90 * 86400)
    out = capsys.readouterr().out
    lo, hi = garwood(1)
    assert f"1 in 90 days = 1.00 per 90 d [{lo:.2f}, {hi:.2f}]" in out
    assert "runs with at least one false page" in out and "1/2" in out
    slide = replace(SCENARIOS["dir-slide"], start_h=10, hold_h=30, days=3)  # 0.8 at +20 h
    runs = [_result(0, [("3h", 29, "firing")]), _result(1, [("3h", 31, "firing")])]
    print_slide(slide, runs, 1.0)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "before the true DIR crosses 0.8" in x)
    assert "(+20 h)" in line and "1/2" in line


def test_end_to_end_and_the_replay_check(monkeypatch, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A tiny run through the real engine and evaluator, then its replay through files: equal;
    a replay of tampered files (the small group never approved) must fail with exit status 1."""
    tiny = replace(SCENARIOS["small-drop"], name="tiny", days=0.5, start_h=2, hold_h=4, to=0.05)
    monkeypatch.setitem(SCENARIOS, "tiny", tiny)
    args = ["--scenario", "replay-check", "--replay-scenario", "tiny", "--replay-seeds", "1"]
    assert aq.main(args) == 0
    out = capsys.readouterr().out
    assert "identical" in out and "DIFFERENT" not in out
    seen = int(out.split("seed 0: ")[1].split(" transitions")[0])
    assert seen >= 3  # pending, firing, resolved at least: an equality of something

    real = aq.write_events

    def tampered(ev: Events, names: list[str], pf: Path, lf: Path) -> None:
        real(replace(ev, pred=np.where(ev.group == 1, 0, ev.pred).astype(np.uint8)), names, pf, lf)

    monkeypatch.setattr(aq, "write_events", tampered)
    assert aq.main(args) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT" in out and "first difference" in out


@pytest.mark.parametrize(
    ("name", "labels", "expected"),
    [
        ("FourFifthsRule", (("window", "12h-labelled"),), False),  # a lagged window's name
        ("EqualizedOddsGap", (("window", "3h"),), True),
        ("FairnessDrift", (("metric", "tpr_gap"),), True),
        ("FairnessDrift", (("metric", "disparate_impact_ratio"),), False),
        ("FairnessChange", (("detector", "sequential"), ("metric", "tpr")), True),
        ("FairnessChange", (("detector", "sequential"), ("metric", "selection_rate")), False),
        ("FourFifthsEvidence", (("detector", "sequential"), ("group", "big2")), False),
        ("EqualizedOddsEvidence", (("detector", "sequential"), ("group", "big2")), True),
    ],
)
def test_label_based_alerts_are_told_apart(
    name: str, labels: tuple[tuple[str, str], ...], expected: bool
) -> None:
    """tpr-drop's headline counts alerts that judge labels, not the selection rate's fall."""
    assert label_based(name, labels) is expected


def test_results_file_keeps_each_seed_and_a_rerun_resumes(
    monkeypatch, capsys, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """``--results``: each seed's result is kept; a second run reads them instead of running
    them (so it prints the same figures) and runs only the seeds that are missing."""
    tiny = replace(SCENARIOS["small-drop"], name="tiny", days=0.5, start_h=2, hold_h=4, to=0.05)
    monkeypatch.setitem(SCENARIOS, "tiny", tiny)
    kept = tmp_path / "tiny.jsonl"
    ran: list[int] = []
    real_one = aq._one

    def counting(job: tuple[str, int]) -> RunResult:
        ran.append(job[1])
        return real_one(job)

    monkeypatch.setattr(aq, "_one", counting)
    first, _ = aq.run_seeds(tiny, range(2), 1, kept)
    assert ran == [0, 1] and len(kept.read_text().splitlines()) == 2
    again, _ = aq.run_seeds(tiny, range(3), 1, kept)
    assert ran == [0, 1, 2]  # only the missing seed ran
    assert again[:2] == first  # the kept results read back equal, transitions and all
    assert [r.seed for r in again] == [0, 1, 2]
    assert len(first[0].transitions) >= 2  # a change was seen: an equality of something


def test_resolution_after_recovery_is_judged_on_the_alerts_for_the_change(capsys) -> None:  # type: ignore[no-untyped-def]
    """A false alarm that fires long after the recovery, too late to resolve, is not an alert
    for the change: it is shown apart. In tpr-drop the four-fifths rule claims DIR < 0.8
    where the true DIR is exactly 0.8: its resolution while the TPR stays low is right."""
    sc = replace(SCENARIOS["small-drop"], start_h=10, hold_h=5, days=100)
    runs = [
        _result(0, [("3h", 11, "firing"), ("3h", 16, "resolved"), ("3h", 50, "firing")]),
        _result(1, [("3h", 11, "firing"), ("3h", 16, "resolved")]),
    ]
    print_drop(sc, runs, 1.0, 1, 90 * 86400)
    out = capsys.readouterr().out.splitlines()
    assert " 2/2 = " in next(x for x in out if "all resolved after recovery" in x)
    assert next(x for x in out if "every alert since the change" in x).rstrip().endswith("1/2")
    tpr = replace(SCENARIOS["tpr-drop"], start_h=10, hold_h=5, days=100)
    print_drop(tpr, [_result(0, [("3h", 11, "firing"), ("3h", 12, "resolved")])], 1.0, 1, 1e7)
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if "resolutions while the change persists" in x)
    assert line.split()[5] == "0", line
    assert "{'FourFifthsRule': 1}" in next(x for x in out if "their claim untrue" in x)
