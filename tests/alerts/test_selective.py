"""Labels that turn selective while the monitor runs: the evidence detectors call TPR and FPR
blind within the hour and never page on them (``monitor/alerts/selective.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.alerts import selective
from monitor.alerts.evaluator import AlertEvaluator
from tests.alerts.streams import T0
from tests.alerts.test_evidence import H, config, drive, events


def outcomes(pos: int, neg: int) -> np.ndarray:
    """One group's detector counts with ``pos`` labelled outcomes predicted positive and
    ``neg`` predicted negative (half of each labelled positive): [1, 1, 3, 2]."""
    tp, fn = pos // 2, neg // 2
    fp, tn = pos - tp, neg - fn
    return np.array([[[[pos, pos + neg], [tp, tp + fn], [fp, fp + tn]]]], np.int64)


def test_a_run_too_long_for_chance_is_blind_and_the_other_class_ends_it() -> None:
    """Held: 300 predicted positive, 100 negative (a negative's share 1/4). A run of positives
    is blind at 80 (80 · 1/4 = 20 expected negatives missing), not at 79; one labelled
    negative ends it; a run of 26 negatives (share 3/4: 19.5) is not blind, 27 is."""
    held = outcomes(300, 100)
    streak = np.zeros((1, 1, 2), np.int64)

    def blind(obs: np.ndarray, held: np.ndarray = held) -> tuple[bool, bool]:
        now, run = selective.blind_now(streak, obs, held)
        return bool(now.all()), bool(run.all())

    assert blind(outcomes(79, 0)) == (False, False)
    assert blind(outcomes(1, 0)) == (True, True)
    assert blind(outcomes(5, 1)) == (False, False)  # a negative: over
    assert blind(outcomes(0, 26)) == (False, False)
    assert blind(outcomes(0, 1)) == (True, True)
    kept = selective.unmeasured(outcomes(7, 0), np.array([[True]]))
    assert kept[0, 0, 0].tolist() == [7, 7] and not kept[0, 0, 1:].any()  # selection stays
    # only positives held (selective from the start): blind, but its outcomes are kept, so
    # a labelled negative can end it
    streak[:] = 0
    assert blind(outcomes(3, 0), outcomes(9, 0)) == (True, False)


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


def test_a_state_saved_before_the_run_counts_keeps_its_evidence() -> None:
    """A checkpoint written before ``streak`` existed restores the detectors (the runs start
    at zero) rather than starting them afresh, which would blind them for their baseline."""
    import msgspec

    from monitor.alerts import persist

    preds, labs = events(6 * H, lambda m: 0.5, per_min=(20.0, 20.0), labels=True, seed=4)
    ev = drive(preds, labs, cfg=config(windows=("1h", "1d")))
    doc = persist.loads(persist.dumps(ev))
    (state,) = doc.evidence
    older = msgspec.structs.replace(
        state, arrays={k: v for k, v in state.arrays.items() if k != "streak"}
    )
    text = persist.encode(msgspec.structs.replace(doc, evidence=[older]))
    restored = AlertEvaluator(ev.config, ev.engine)
    persist.restore(restored, text)
    assert restored.evidence_afresh == set()
    me, before = restored.evidence.models[0], ev.evidence.models[0]
    assert not me.arrays["streak"].any()
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
