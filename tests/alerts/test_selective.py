"""Labels that turn selective while the monitor runs: the evidence detectors call TPR and FPR
blind within the hour and never page on them (``monitor/alerts/selective.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.alerts import selective
from monitor.alerts.evaluator import AlertEvaluator
from tests.alerts.streams import T0
from tests.alerts.test_evidence import H, config, drive, events, hours


def outcomes(pos: int, neg: int) -> np.ndarray:
    """One group's detector counts with ``pos`` labelled outcomes predicted positive and
    ``neg`` predicted negative (half of each labelled positive), among decisions 3 approved
    to 1 denied (enough of them to hold the labelled ones): [1, 1, 3, 2]."""
    tp, fn = pos // 2, neg // 2
    fp, tn = pos - tp, neg - fn
    k = max(-(-pos // 3), neg)
    return np.array([[[[3 * k, 4 * k], [tp, tp + fn], [fp, fp + tn]]]], np.int64)


def labelled(out: np.ndarray) -> tuple[int, int]:
    """(predicted positive, predicted negative) labelled outcomes of one group's counts."""
    pos, neg = selective.classes(out)
    return int(pos.sum()), int(neg.sum())


def test_a_run_is_held_back_until_the_other_class_and_dropped_if_it_was_selective() -> None:
    """Held: 300 predicted positive, 100 negative (a negative's share f = 1/4). Outcomes of
    one class are held back; a run is blind at 80 positives (80 · 1/4 = 20 negatives missing),
    not at 79. Ended by one negative among 5 positives: a long run without the ~27 negatives
    its share expects (half: 13.3) was selective labelling: dropped, the bucket alone counts.
    Ended by 14 negatives: a file of the other class, released with them, the approvals
    weighted to the decisions' 3:1 (14 · 3 / 80 = × 0.525: 42 of them)."""
    held = outcomes(300, 100)
    withheld = np.zeros((1, 1, 3, 2), np.int64)

    def feed(obs: np.ndarray, held: np.ndarray = held) -> tuple[tuple[int, int], bool]:
        out, blind = selective.hold_runs(withheld, obs, held, favourable=1)
        assert np.array_equal(out[..., 0, :], obs[..., 0, :])  # decisions never wait
        return labelled(out), bool(blind.all())

    assert feed(outcomes(79, 0)) == ((0, 0), False)
    assert feed(outcomes(1, 0)) == ((0, 0), True)
    assert labelled(withheld) == (80, 0)
    assert feed(outcomes(5, 1)) == ((5, 1), False)  # the run dropped, this bucket counts
    assert labelled(withheld) == (0, 0)
    feed(outcomes(80, 0))
    assert feed(outcomes(0, 13)) == ((0, 0), False)  # 13 < 13.3: dropped; the 13 wait
    assert labelled(withheld) == (0, 13)
    feed(outcomes(80, 0))  # ends that run of negatives (short): released with it
    withheld[:] = 0
    feed(outcomes(80, 0))
    assert feed(outcomes(0, 14)) == ((42, 14), False)  # a file of the other class
    # a short run waits for the other class, then counts in full
    assert feed(outcomes(3, 0)) == ((0, 0), False)
    assert feed(outcomes(0, 1)) == ((3, 1), False)
    # runs of negatives: blind at 27 (27 · 3/4 = 20.25), not at 26
    assert feed(outcomes(0, 26)) == ((0, 0), False)
    assert feed(outcomes(0, 1)) == ((0, 0), True)
    # no labelled outcome held yet: the first ones, of one class, are all there is (blind, as
    # selective from the start) until the other class comes; then they count
    withheld[:] = 0
    decisions = np.zeros((1, 1, 3, 2), np.int64)
    decisions[..., 0, :] = (50, 200)
    assert feed(outcomes(3, 0), decisions) == ((0, 0), True)
    assert feed(outcomes(0, 1), decisions) == ((3, 1), False)
    # only positives held (selective from the start, a state saved before runs were held
    # back): blind
    withheld[:] = 0
    assert feed(outcomes(0, 0), outcomes(9, 0))[1]


def test_a_released_file_is_weighted_as_its_decisions_stand() -> None:
    """1,000 decisions, half denied; labelled: 600 approvals (PPV 0.8: TP 480, FP 120) and a
    file of 400 denials (FN 80, TN 320). As counted, TPR = 480/560 = 0.857 and FPR =
    120/440 = 0.273; the approvals scaled to the decisions' 1:1 (× 2/3): TP 320, FP 80, so
    TPR = 320/400 = 0.8 and FPR = 80/400 = 0.2, the rates of the 1,000 decisions (TP 400,
    FN 100, FP 100, TN 400). No count grows."""
    c = np.array([[[500, 1000], [480, 560], [120, 440]]], np.int64)
    w = selective.weighted(c, favourable=1)
    assert w[0].tolist() == [[500, 1000], [320, 400], [80, 400]]
    # more denials than the decisions say: the denials are scaled (× 1/2 here), not the others
    c = np.array([[[500, 1000], [400, 600], [100, 900]]], np.int64)  # 500 approvals, 1,000 denials
    assert selective.weighted(c, favourable=1)[0].tolist() == [[500, 1000], [400, 500], [100, 500]]
    # the selection row counts favourable decisions: 400 of 1,000 (with favourable 0 those
    # are the denials, 40 %: 600 approvals to 400 denials is as labelled; with favourable 1,
    # 60 % denials: the approvals × 4/9)
    c = np.array([[[400, 1000], [480, 560], [120, 440]]], np.int64)
    assert np.array_equal(selective.weighted(c, favourable=0), c)
    assert selective.weighted(c, favourable=1)[0, 1:].tolist() == [[213, 293], [53, 373]]


@pytest.mark.parametrize("seed", range(3))
def test_labels_turning_selective_page_nothing_and_show_blind(seed: int) -> None:
    """A fair model; from hour 60 to 80 outcomes arrive only for approved decisions (a lender
    stops following up denials). Judged on the week held, that stayed unseen: every new bucket
    fed TPR = FPR = 1 to the detectors, and they paged "FPR of a rose" within minutes (found
    by a review, 3 seeds in 3). Now: no page; TPR and FPR blind for both groups (the small one,
    40 decisions an hour, too) while it lasts, and watched again once labels are whole."""
    preds, labs = events(100 * H, lambda m: 0.5, per_min=(20.0, 40 / 60), labels=True, seed=seed)
    approved = dict(zip(preds["key"].tolist(), preds["pred"].tolist(), strict=True))
    lt = labs["ts"]
    keep = (lt < T0 + 60 * 3600) | (lt >= T0 + 80 * 3600)
    keep |= np.array([approved[k] == 1 for k in labs["key"].tolist()], bool)
    labs = {k: v[keep] for k, v in labs.items()}
    states: dict[int, set[str]] = {}

    def look(ev: AlertEvaluator, minute: int) -> AlertEvaluator:
        if minute in (59 * H, 79 * H, 99 * H):
            rows = ev.evidence.snapshot()
            states[minute // H] = {r.state for r in rows if r.detector in ("tpr", "fpr")}
        return ev

    ev = drive(preds, labs, cfg=config(windows=("1h", "1d")), at_minute=look)
    pages = [
        (t.alert.name, t.alert.labels, round((t.alert.at - T0) / 3600, 1))
        for t in ev.history
        if t.alert.labels.get("metric") in ("tpr", "fpr") or t.alert.name.startswith("Equal")
    ]
    assert pages == []
    assert states == {59: {"watching"}, 79: {"blind: selective labels"}, 99: {"watching"}}


def test_a_state_saved_before_runs_were_held_back_keeps_its_evidence() -> None:
    """A checkpoint written before ``withheld`` existed (with ``streak``, the run lengths of
    the version before, or without either) restores the detectors with nothing held back,
    rather than starting them afresh, which would blind them for their baseline."""
    import msgspec

    from monitor.alerts import persist

    preds, labs = events(6 * H, lambda m: 0.5, per_min=(20.0, 20.0), labels=True, seed=4)
    ev = drive(preds, labs, cfg=config(windows=("1h", "1d")))
    doc = persist.loads(persist.dumps(ev))
    (state,) = doc.evidence
    arrays = {k: v for k, v in state.arrays.items() if k != "withheld"}
    streak = persist.ArrayState("int64", [1, 2, 2], [0.0] * 4)
    for version in (arrays, arrays | {"streak": streak}):
        older = msgspec.structs.replace(state, arrays=version)
        text = persist.encode(msgspec.structs.replace(doc, evidence=[older]))
        restored = AlertEvaluator(ev.config, ev.engine)
        persist.restore(restored, text)
        assert restored.evidence_afresh == set()
        me, before = restored.evidence.models[0], ev.evidence.models[0]
        assert not me.arrays["withheld"].any()
        assert np.array_equal(me.arrays["log_r"], before.arrays["log_r"])


@pytest.mark.parametrize("seed", range(2))
def test_labels_selective_from_the_start_then_whole_page_nothing(seed: int) -> None:
    """Found by a review: outcomes only for approved decisions from the start (the denials'
    outcome feed connected at hour 40). The held blocks said TPR = FPR = 1 — blind, rightly,
    but kept as the baseline: once labels were whole, "TPR of a fell" and "FPR of a fell"
    paged at hour 61 (2 seeds in 2). The blind outcomes are dropped when the other class
    arrives; the detectors build their baseline afresh and watch."""
    preds, labs = events(100 * H, lambda m: 0.5, per_min=(20.0, 5.0), labels=True, seed=seed)
    approved = dict(zip(preds["key"].tolist(), preds["pred"].tolist(), strict=True))
    keep = labs["ts"] >= T0 + 40 * 3600
    keep |= np.array([approved[k] == 1 for k in labs["key"].tolist()], bool)
    labs = {k: v[keep] for k, v in labs.items()}
    ev = drive(preds, labs, cut_minutes=5, cfg=config(windows=("1h", "1d")))
    label_pages = [
        (t.alert.name, t.alert.labels.get("group"), round((t.alert.at - T0) / 3600, 1))
        for t in ev.history
        if t.alert.labels.get("metric") in ("tpr", "fpr") or t.alert.name.startswith("Equal")
    ]
    assert label_pages == []
    rows = [r for r in ev.evidence.snapshot() if r.detector in ("tpr", "fpr")]
    assert {r.state for r in rows} == {"watching"}, rows


def denials_daily(
    preds: dict[str, np.ndarray], labs: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The labels with the denials' outcomes moved into one file a day at 02:00 (of the
    decisions made at least 6 h before it); the approvals' arrive as they came."""
    at = dict(zip(preds["key"].tolist(), preds["ts"].tolist(), strict=True))
    approved = dict(zip(preds["key"].tolist(), preds["pred"].tolist(), strict=True))
    keys = labs["key"].tolist()
    made = np.array([at[k] for k in keys])
    denied = np.array([approved[k] == 0 for k in keys], bool)
    day = 86_400.0
    file = T0 + (np.floor((made + 6 * 3600 - T0) / day) + 1) * day + 2 * 3600
    ts = np.where(denied, file, labs["ts"])
    order = np.argsort(ts, kind="stable")
    return {"key": labs["key"][order], "ts": ts[order], "label": labs["label"][order]}


@pytest.mark.parametrize("seed", range(2))
def test_denials_labelled_in_a_daily_file_page_nothing_and_are_measured(seed: int) -> None:
    """Approvals' outcomes within hours, denials' in a daily file (a label delay that depends
    on the decision). Counted as they came, the hours between files fed TPR = FPR = 1 and the
    file fed denials alone; on 30-day streams that paged (``bench/alert_quality.py --scenario
    fair-denials-daily``). Held back until the file comes, each run of approvals is judged
    with it: no page, and the outcomes reach the detectors' baselines (none dropped as
    selective: the approvals labelled from hour 30 on, ~600 per group and day)."""
    preds, labs = events(100 * H, lambda m: 0.5, per_min=(20.0, 40 / 60), labels=True, seed=seed)
    ev = drive(preds, denials_daily(preds, labs), cfg=config(windows=("1h", "1d")))
    label_pages = [
        (t.alert.name, t.alert.labels.get("metric"), t.alert.labels.get("group"))
        for t in ev.history
        if t.alert.labels.get("metric") in ("tpr", "fpr") or t.alert.name.startswith("Equal")
    ]
    assert label_pages == []
    me = ev.evidence.models[0]
    held = me.arrays["blocks"].sum(axis=0)[0]  # [group, (selection, TPR, FPR), (x, n)]
    pos, neg = selective.classes(held)
    decided = held[:, 0, 1]
    # the blocks reach back a week: all of it held, every labelled outcome of the files that
    # came (days 1-4) is there, of both classes, in their proportion of the decisions
    assert (neg > 0.3 * decided).all() and (pos > 0.3 * decided).all(), (pos, neg, decided)


def test_a_tpr_drop_shows_when_denials_come_in_a_daily_file() -> None:
    """Held back runs must not blind the detectors: with the denials' outcomes in a daily
    file, group b's TPR falling 0.8 → 0.5 at hour 30 pages on b's TPR once the files that
    hold its misses have come (the first at hour 50: decisions before hour 44)."""
    preds, labs = events(
        80 * H,
        lambda m: 0.5,
        per_min=(20.0, 20.0),
        tpr_b=lambda m: 0.5 if m >= 30 * H else 0.8,
        labels=True,
        seed=0,
    )
    ev = drive(preds, denials_daily(preds, labs), cfg=config(windows=("1h", "1d")))
    fired = [
        (t.alert.name, t.alert.labels.get("metric"), t.alert.labels.get("group"), hours(t.alert))
        for t in ev.history
        if t.alert.state == "firing"
    ]
    tpr = [h for _, metric, group, h in fired if metric == "tpr" and group == "b"]
    assert tpr and 30 < min(tpr) <= 51, fired
    # the pair test too (it names the group that is not the reference): it steps on the block
    # that holds the file, though a run of approvals (blind now) began again in that hour
    eo = [h for name, _, _, h in fired if name == "EqualizedOddsEvidence"]
    assert eo and 30 < min(eo) <= 52, fired


def test_a_resolved_tpr_alert_does_not_fire_again_at_the_next_file() -> None:
    """After a TPR alert resolves, its detector forgets its metric's recent blocks, so the
    labelled outcomes held were lopsided (the TPR's removed, the FPR's kept): judged on them,
    the next file looked too small for the run of approvals it ended, the run was dropped,
    and the file's misses alone read as "TPR fell" again (a review of tpr-drop-denials-daily:
    20 runs of 20). A file is judged on the decisions made during the run."""
    preds, labs = events(
        150 * H,
        lambda m: 0.5,
        per_min=(20.0, 20.0),
        tpr_b=lambda m: 0.5 if 30 * H <= m < 54 * H else 0.8,
        labels=True,
        seed=1,
    )
    ev = drive(preds, denials_daily(preds, labs), cfg=config(windows=("1h", "1d")))
    tpr = [
        (t.alert.state, round(hours(t.alert), 1))
        for t in ev.history
        if t.alert.labels.get("metric") == "tpr" and t.alert.labels.get("group") == "b"
    ]
    assert [s for s, _ in tpr] == ["firing", "resolved"], tpr
