"""The evidence detectors driven through the real engine and alert evaluator: a small group's
drop fires, stays firing while it lasts (also through a stretch without data) and resolves
after recovery; a TPR drop is seen from labels 1–6 h late; the state survives a checkpoint;
different poll batches give the same evidence."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from monitor.alerts import persist
from monitor.alerts.evaluator import AlertEvaluator
from monitor.alerts.lifecycle import Alert
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine
from tests.alerts.streams import T0

H = 60  # minutes per hour
Rate = Callable[[int], float]


def config(windows: tuple[str, ...] = ("1h",), **evidence: object) -> Config:
    return parse_config(
        {
            "models": {
                "credit": {
                    "attributes": {"group": {}},
                    "windows": list(windows),
                    "bucket": "5m",
                    "lateness": "5m",
                }
            },
            "alerts": {"rules": [], "drift": {"enabled": False}, "evidence": evidence},
        }
    )


def events(
    minutes: int,
    sel_b: Rate,
    *,
    per_min: tuple[float, float] = (20.0, 40 / 60),
    tpr_b: Rate = lambda m: 0.8,
    labels: bool = False,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Groups "a" and "b"; without labels, b's selection rate is ``sel_b``; with labels
    (prevalence 0.5, label 1–6 h after the prediction), predictions follow TPR ``tpr_b``
    (a: 0.8), FPR 0.2."""
    rng = np.random.default_rng(seed)
    ts, grp, pred = [], [], []
    for minute in range(minutes):
        n = rng.poisson(per_min)
        g = np.repeat([0, 1], n)
        t = T0 + minute * 60 + rng.uniform(0, 60, len(g))
        if labels:
            y = rng.random(len(g)) < 0.5
            tpr = np.where(g == 0, 0.8, tpr_b(minute))
            p = np.where(y, rng.random(len(g)) < tpr, rng.random(len(g)) < 0.2)
            pred.append(np.stack([p, y], axis=1))
        else:
            pred.append(
                np.stack([rng.random(len(g)) < np.where(g == 0, 0.5, sel_b(minute))] * 2, 1)
            )
        ts.append(t)
        grp.append(g)
    t, g, py = np.concatenate(ts), np.concatenate(grp), np.concatenate(pred)
    order = np.argsort(t, kind="stable")
    t, g, py = t[order], g[order], py[order]
    keys = np.arange(1, len(t) + 1, dtype=np.uint64)
    preds = {"key": keys, "ts": t, "group": g, "pred": py[:, 0].astype(np.uint8)}
    if not labels:
        return preds, {"key": keys[:0], "ts": t[:0], "label": py[:0, 1].astype(np.uint8)}
    lt = t + rng.uniform(3600, 6 * 3600, len(t))
    lo = np.argsort(lt, kind="stable")
    return preds, {"key": keys[lo], "ts": lt[lo], "label": py[lo, 1].astype(np.uint8)}


def drive(
    preds: dict[str, np.ndarray],
    labs: dict[str, np.ndarray],
    cut_minutes: float = 1.0,
    *,
    cfg: Config | None = None,
    at_minute: Callable[[AlertEvaluator, int], AlertEvaluator] | None = None,
) -> AlertEvaluator:
    """Feed the events in time order, in batches of ``cut_minutes``; advance after each."""
    cfg = cfg or config()
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine)
    reg = engine.registries[0]
    idx = np.array([reg.index(0, "a"), reg.index(0, "b")], np.int32)
    end = max(preds["ts"].max(), labs["ts"].max() if len(labs["ts"]) else 0)
    i = j = 0
    step = 0
    t = T0
    while t <= end:
        t += cut_minutes * 60
        i2 = int(np.searchsorted(preds["ts"], t))
        j2 = int(np.searchsorted(labs["ts"], t))
        s, n = slice(i, i2), i2 - i
        batch = PredictionBatch(
            key=preds["key"][s],
            model=np.zeros(n, np.uint16),
            ts=preds["ts"][s],
            pred=preds["pred"][s],
            score=np.full(n, np.nan),
            groups=idx[preds["group"][s]].reshape(-1, 1),
        )
        lb = LabelBatch(key=labs["key"][j:j2], ts=labs["ts"][j:j2], label=labs["label"][j:j2])
        engine.apply(0, batch, lb)
        ev.advance()
        i, j, step = i2, j2, step + 1
        if at_minute is not None:
            ev = at_minute(ev, int((t - T0) // 60))
    return ev


def hours(a: Alert) -> float:
    return (a.at - T0) / 3600


def pages(ev: AlertEvaluator, name: str, **labels: str) -> list[Alert]:
    return [
        t.alert
        for t in ev.history
        if t.alert.name == name and all(t.alert.labels.get(k) == v for k, v in labels.items())
    ]


@pytest.mark.parametrize("seed", [11, 12])
def test_small_group_drop_fires_stays_and_resolves_after_recovery(seed: int) -> None:
    """40 decisions/h at 0.5; 0.3 from hour 24 to 40; back to 0.5 until hour 64."""
    preds, labs = events(64 * H, lambda m: 0.3 if 24 * H <= m < 40 * H else 0.5, seed=seed)
    ev = drive(preds, labs, cut_minutes=7)
    got = pages(ev, "FairnessChange", group="b", metric="selection_rate")
    print([(a.state, round(hours(a), 2), a.annotations["summary"]) for a in got])
    assert [a.state for a in got] == ["firing", "resolved"]
    fired, resolved = got
    # the benchmark measures the median delay against its target; here: evidence works at all
    assert 24 < hours(fired) <= 24 + 12, "not within 12 h"
    assert hours(resolved) > 40, "resolved while the drop lasted"
    assert "fell" in fired.annotations["summary"] and "0." in fired.annotations["description"]
    assert "resolved" in resolved.annotations["summary"]
    before = [t.alert for t in ev.history if hours(t.alert) < 24]
    assert before == [], "a page on the fair part of the stream"


def test_no_data_is_no_evidence_of_recovery() -> None:
    """The small group goes silent for 12 hours while its alert fires: it stays firing."""

    def sel(m: int) -> float:
        return 0.3 if m >= 24 * H else 0.5

    preds, labs = events(60 * H, sel, seed=3)
    silent = (
        (preds["group"] == 1) & (preds["ts"] >= T0 + 34 * 3600) & (preds["ts"] < T0 + 46 * 3600)
    )
    preds = {k: v[~silent] for k, v in preds.items()}
    ev = drive(preds, labs, cut_minutes=5)
    got = pages(ev, "FairnessChange", group="b", metric="selection_rate")
    print([(a.state, round(hours(a), 2)) for a in got])
    assert [a.state for a in got] == ["firing"] and hours(got[0]) < 34
    rows = [r for r in ev.evidence.snapshot() if r.group == "b" and r.detector == "selection_rate"]
    assert rows[0].state == "firing" and rows[0].log_e >= rows[0].log_threshold - 2


def test_tpr_drop_is_seen_from_labels_hours_late_and_batching_does_not_matter() -> None:
    """Two large groups; b's TPR 0.8 → 0.6 at hour 24, labels 1–6 h after the prediction.
    The same events cut into 1- and 13-minute batches give the same evidence and pages."""
    preds, labs = events(
        40 * H,
        lambda m: 0.5,
        per_min=(20.0, 20.0),
        tpr_b=lambda m: 0.6 if m >= 24 * H else 0.8,
        labels=True,
        seed=5,
    )
    cfg = config(windows=("1h", "1d"))  # the ring holds predictions for their late labels
    one = drive(preds, labs, cut_minutes=1, cfg=cfg)
    other = drive(preds, labs, cut_minutes=13, cfg=cfg)
    got = pages(one, "FairnessChange", group="b", metric="tpr")
    print([(a.state, round(hours(a), 2), a.annotations["description"]) for a in got])
    assert got and got[0].state == "firing" and 24 < hours(got[0]) <= 24 + 8
    assert [t.alert for t in one.history] == [t.alert for t in other.history]
    assert one.evidence.snapshot() == other.evidence.snapshot()
    # the selection rate changed too (0.5 → 0.4: TPR 0.6 at prevalence 0.5): also flagged
    assert pages(one, "FairnessChange", group="b", metric="selection_rate")


def test_evidence_state_survives_a_checkpoint() -> None:
    """At hour 38 (the small group's alert firing) the state goes through JSON into a new
    evaluator; both then judge the same stream: the same transitions and evidence."""
    preds, labs = events(64 * H, lambda m: 0.3 if 24 * H <= m < 40 * H else 0.5, seed=11)
    twins: list[AlertEvaluator] = []

    def at(ev: AlertEvaluator, minute: int) -> AlertEvaluator:
        if minute >= 38 * H and not twins:
            assert ev.evidence.models and ev.book.firing()
            text = persist.dumps(ev)
            copy = AlertEvaluator(ev.config, ev.engine)
            persist.restore(copy, text)
            assert persist.dumps(copy) == text
            twins.append(ev)
            copy.history = list(ev.history)
            return copy  # the run goes on with the restored one
        return ev

    restored = drive(preds, labs, cut_minutes=5, at_minute=at)
    straight = drive(preds, labs, cut_minutes=5)
    assert twins and restored is not twins[0]
    assert [t.alert for t in restored.history] == [t.alert for t in straight.history]
    assert restored.evidence.snapshot() == straight.evidence.snapshot()
    assert [t.alert.state for t in straight.history] == ["firing", "resolved"]


def test_a_version_1_document_is_read_and_the_detectors_start_afresh() -> None:
    preds, labs = events(2 * H, lambda m: 0.5, seed=1)
    ev = drive(preds, labs)
    doc = persist.loads(persist.dumps(ev))
    text = persist.encode(doc)
    assert text.startswith(f'{{"version":{persist.VERSION},')
    old = text.replace(f'"version":{persist.VERSION}', '"version":1', 1)
    old = old[: old.index(',"evidence"')] + "}"  # no evidence, no owed: as version 1 wrote
    assert '"version":1' in old and '"owed"' not in old
    fresh = AlertEvaluator(ev.config, ev.engine)
    persist.restore(fresh, old)
    assert fresh.last == ev.last and fresh.evidence.models == {}


def test_evidence_gauges_parse_as_prometheus_text() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from monitor.outputs.exporter import render_evidence

    preds, labs = events(30 * H, lambda m: 0.5, seed=2)
    ev = drive(preds, labs, cut_minutes=30)
    rows = ev.evidence.snapshot()
    assert {r.detector for r in rows} == {
        "selection_rate",
        "tpr",
        "fpr",
        "four_fifths",
        "equalized_odds",
    }
    fams = {f.name: f for f in text_string_to_metric_families(render_evidence(rows))}
    assert set(fams) >= {
        "fairness_alert_evidence",
        "fairness_alert_evidence_threshold",
        "fairness_expected_time_to_detect_seconds",
        "fairness_alert_evidence_state",
    }
    ett = {
        (s.labels["group"], s.labels["detector"]): s.value
        for s in fams["fairness_expected_time_to_detect_seconds"].samples
    }
    # the small group needs far longer than the large one to show the same relative drop
    assert ett[("b", "selection_rate")] > 10 * ett[("a", "selection_rate")]
    print({k: round(v / 3600, 2) for k, v in ett.items() if k[1] == "selection_rate"}, "hours")


def test_an_equalized_odds_page_on_the_fpr_gap_shows_false_positive_rates() -> None:
    """Found by a review: the EqualizedOddsEvidence page always quoted true positive rates, so
    an FPR gap's page showed two equal TPRs and read as a false alarm. FPR 0.2 vs 0.45 with
    equal TPRs (0.8): the page names the FPR and quotes both groups' false positive rates."""
    rng = np.random.default_rng(5)
    ts, grp, pred, lab = [], [], [], []
    for minute in range(20 * H):
        g = np.repeat([0, 1], rng.poisson((20.0, 20.0)))
        y = rng.random(len(g)) < 0.5
        fpr = np.where(g == 0, 0.2, 0.45)
        ts.append(T0 + minute * 60 + rng.uniform(0, 60, len(g)))
        grp.append(g)
        pred.append(np.where(y, rng.random(len(g)) < 0.8, rng.random(len(g)) < fpr))
        lab.append(y)
    t, g, p, y = (np.concatenate(a) for a in (ts, grp, pred, lab))
    order = np.argsort(t, kind="stable")
    t, g, p, y = t[order], g[order], p[order].astype(np.uint8), y[order].astype(np.uint8)
    keys = np.arange(1, len(t) + 1, dtype=np.uint64)
    lt = t + rng.uniform(3600, 6 * 3600, len(t))
    lo = np.argsort(lt, kind="stable")
    preds = {"key": keys, "ts": t, "group": g, "pred": p}
    ev = drive(preds, {"key": keys[lo], "ts": lt[lo], "label": y[lo]}, cut_minutes=5,
               cfg=config(windows=("1h", "1d")))  # fmt: skip
    (page, *_) = pages(ev, "EqualizedOddsEvidence")
    notes = page.annotations
    assert notes["summary"].startswith("FPR of ")
    assert "false positive rate in the last hour" in notes["description"]
    rates = [
        float(notes[k].split()[0]) for k in ("group_rate_last_hour", "reference_rate_last_hour")
    ]
    assert sorted(rates)[0] < 0.3 < 0.4 < sorted(rates)[1]  # ~0.2 and ~0.45, not two ~0.8 TPRs
    # and it says which way (a review: "differ" left the on-call to work it out)
    way = "is higher than" if rates[0] > rates[1] else "is lower than"
    assert notes["summary"] == (
        f"FPR of {notes['group']} {way} {notes['reference_group']}'s by more than 0.10"
    )


def test_the_equalized_odds_time_to_detect_is_the_sooner_of_its_two_gaps() -> None:
    """Found in review: the equalized-odds detector's expected time to detect was computed
    from the TPR pair alone. It fires on either gap, so with few positives (prevalence 0.05:
    19 labelled negatives to each positive) the FPR pair shows a change first, and the status
    page said a group would take longer to judge than it does. Checked against the two times
    computed here from the formula (log c / (growth per pair · pair volume per second))."""
    import math

    from monitor.metrics import sequential as sq

    rng = np.random.default_rng(9)
    ts, grp, pred, lab = [], [], [], []
    for minute in range(30 * H):
        g = np.repeat([0, 1], rng.poisson((20.0, 20.0)))
        y = rng.random(len(g)) < 0.05
        ts.append(T0 + minute * 60 + rng.uniform(0, 60, len(g)))
        grp.append(g)
        pred.append(np.where(y, rng.random(len(g)) < 0.8, rng.random(len(g)) < 0.2))
        lab.append(y)
    t, g, p, y = (np.concatenate(a) for a in (ts, grp, pred, lab))
    order = np.argsort(t, kind="stable")
    t, g, p, y = t[order], g[order], p[order].astype(np.uint8), y[order].astype(np.uint8)
    keys = np.arange(1, len(t) + 1, dtype=np.uint64)
    lt = t + rng.uniform(60, 600, len(t))
    lo = np.argsort(lt, kind="stable")
    preds = {"key": keys, "ts": t, "group": g, "pred": p}
    ev = drive(preds, {"key": keys[lo], "ts": lt[lo], "label": y[lo]}, cut_minutes=5)
    rows = {(r.group, r.detector): r for r in ev.evidence.snapshot()}
    eo = rows[("b", "equalized_odds")]
    # the pair's volume per second: the smaller group's labelled positives / negatives in the
    # last hour, as the detector reads them; TPR 0.8 and FPR 0.2 as drawn
    hour = t >= t.max() - 3600
    pos = min(int(((g == k) & (y == 1) & hour).sum()) for k in (0, 1)) / 3600
    neg = min(int(((g == k) & (y == 0) & hour).sum()) for k in (0, 1)) / 3600
    # a gap of twice the bound (0.2) each way: TPR 0.8 → 0.6, FPR 0.2 → 0.0, on the test's
    # bets, plus the hourly block it steps in
    bets = sq.arms(sq.pair_z(0.8, 0.1)[1])
    via_tpr = float(sq.pair_expected_seconds(eo.log_threshold, 0.6, 0.8, pos, bets)) + 3600
    via_fpr = float(sq.pair_expected_seconds(eo.log_threshold, 0.0, 0.2, neg, bets)) + 3600
    assert via_fpr < 0.8 * via_tpr  # the FPR pair is the quicker here...
    # ...and the time shown is its time (before: the TPR pair's, 31 % longer here)
    assert math.isclose(eo.expected_seconds, via_fpr, rel_tol=0.1), (eo, via_tpr, via_fpr)


def test_a_blind_detector_exports_no_evidence_and_no_expected_time_anywhere() -> None:
    """Found by a review: /metrics (and the timeline) carried a blind detector's evidence and
    expected time to detect, while the status page rightly showed none: a number for what the
    counts cannot measure reads as good news. Its threshold and state stay."""
    from prometheus_client.parser import text_string_to_metric_families

    from monitor.alerts.evidence_alerts import EvidenceRow
    from monitor.outputs.exporter import render_evidence
    from monitor.outputs.timeline import _row

    rows = [
        EvidenceRow("m", "g", "a", "tpr", 3.2, 12.0, 5400.0, "blind: selective labels"),
        EvidenceRow("m", "g", "a", "selection_rate", 1.5, 12.0, 7200.0, "watching"),
    ]
    fams = {f.name: f for f in text_string_to_metric_families(render_evidence(rows))}

    def detectors(name: str) -> set[str]:
        return {s.labels["detector"] for s in fams[name].samples}

    assert detectors("fairness_alert_evidence") == {"selection_rate"}
    assert detectors("fairness_expected_time_to_detect_seconds") == {"selection_rate"}
    assert detectors("fairness_alert_evidence_threshold") == {"tpr", "selection_rate"}
    assert detectors("fairness_alert_evidence_state") == {"tpr", "selection_rate"}
    blind, watching = (_row(r) for r in rows)
    assert blind["log_e"] is None and blind["expected_seconds"] is None
    assert blind["state"].startswith("blind") and blind["log_threshold"] == 12.0
    assert (watching["log_e"], watching["expected_seconds"]) == (1.5, 7200.0)


def test_a_resolved_notice_quotes_and_sends_the_evidence_of_recovery_not_of_the_change() -> None:
    """Found by a review: the resolved notice said "evidence of recovery … log e = 3.2 vs
    threshold 12.2" — the change's statistic against the firing threshold, which reads as "far
    from recovered". It quotes the recovery's evidence against the resolve threshold
    (log resolve_odds), which the resolve needed to reach, and the change's beside it."""
    preds, labs = events(64 * H, lambda m: 0.3 if 24 * H <= m < 40 * H else 0.5, seed=11)
    ev = drive(preds, labs, cut_minutes=7)
    fired, resolved = pages(ev, "FairnessChange", group="b", metric="selection_rate")
    need = math.log(ev.evidence.spec.resolve_odds)
    rec, thr = (
        float(resolved.annotations["log_evidence"]),
        float(resolved.annotations["log_threshold"]),
    )
    assert thr == pytest.approx(need, abs=0.005) and rec >= thr - 0.005
    assert (
        f"Evidence of recovery log e = {rec:.1f} vs threshold {thr:.1f}"
        in (resolved.annotations["description"])
    )
    assert float(fired.annotations["log_evidence"]) >= float(fired.annotations["log_threshold"])
    assert "Evidence log e =" in fired.annotations["description"]
    # the value a receiver is sent is the same evidence as the annotation: the change's when it
    # fires, the recovery's when it resolves (before: the change's on both)
    assert fired.value == pytest.approx(float(fired.annotations["log_evidence"]), abs=0.005)
    assert resolved.value == pytest.approx(rec, abs=0.005)


def test_a_detector_that_cannot_fire_yet_claims_no_time_to_detect() -> None:
    """Found by a review: two hours into a stream, before any baseline or reference group,
    every detector was "warming-up" and still exported a finite expected time to detect ("a
    drop shows in ~30 min") for hours in which it could not fire. Until it can, no time is
    claimed anywhere; once baselines exist, the times are there."""
    from prometheus_client.parser import text_string_to_metric_families

    from monitor.outputs.exporter import render_evidence
    from monitor.outputs.timeline import _row

    def rows_after(h: int) -> list[Any]:
        preds, labs = events(h * H, lambda m: 0.5, seed=1)
        return drive(preds, labs, cut_minutes=7).evidence.snapshot()

    early = rows_after(2)
    assert early and all(r.state == "warming-up" for r in early)
    assert all(math.isnan(r.expected_seconds) for r in early)
    fams = {f.name for f in text_string_to_metric_families(render_evidence(early))}
    assert "fairness_expected_time_to_detect_seconds" not in fams
    assert all(_row(r)["expected_seconds"] is None for r in early)
    later = rows_after(30)
    watching = [r for r in later if r.state == "watching"]
    assert len(watching) >= 3 and all(math.isfinite(r.expected_seconds) for r in watching)


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_a_resolved_change_quotes_the_baseline_it_was_judged_against(seed: int) -> None:
    """Found by a review: the resolved notice quoted the rolling baseline of the moment, which
    by then held hours of the change itself, while the recovery was judged against the
    baseline frozen when the alert fired. The resolved notice quotes that frozen ratio: the
    fired notice's baseline counts, b's rate over a's."""
    preds, labs = events(64 * H, lambda m: 0.3 if 24 * H <= m < 40 * H else 0.5, seed=seed)
    at_resolve: list[np.ndarray] = []

    def watch(ev: AlertEvaluator, minute: int) -> AlertEvaluator:
        if not at_resolve and any(t.alert.state == "resolved" for t in ev.history):
            at_resolve.append(ev.evidence.last[0]["base"].copy())  # the step that resolved
        return ev

    ev = drive(preds, labs, cut_minutes=7, cfg=config(guard="2h"), at_minute=watch)
    fired, resolved = pages(ev, "FairnessChange", group="b", metric="selection_rate")
    got = re.search(r"baseline: b \S+ \((\d+) of (\d+)\), a \S+ \((\d+) of (\d+)\)",
                    fired.annotations["description"])  # fmt: skip
    assert got is not None, fired.annotations["description"]
    xb, nb, xa, na = (int(v) for v in got.groups())
    ratio = (xb / nb) / (xa / na)
    said = re.search(
        r"judged against the baseline frozen when it fired: b (\S+)× a's rate",
        resolved.annotations["description"],
    )
    assert said is not None, resolved.annotations["description"]
    assert float(said.group(1)) == pytest.approx(ratio, abs=0.0006)
    assert resolved.annotations["baseline_rate"].startswith(said.group(1))
    # the rolling baseline at the resolve held the drop: it is not what the notice quotes
    labels = ev.evidence.models[0].labels[0]
    b, a = (at_resolve[0][0, labels.index(x), 0] for x in "ba")
    assert abs((b[0] / b[1]) / (a[0] / a[1]) - ratio) > 0.02


def test_a_resolved_pair_test_quotes_no_baseline() -> None:
    """The four-fifths test judges the groups against each other in the last blocks; its
    resolved notice quoted a rolling baseline with different n per group (a review)."""
    sel: Rate = lambda m: 0.15 if 24 * H <= m < 40 * H else 0.5  # noqa: E731
    preds, labs = events(64 * H, sel, seed=11, per_min=(20.0, 4.0))
    ev = drive(preds, labs, cut_minutes=7, cfg=config(guard="2h"))
    fired, resolved = pages(ev, "FourFifthsEvidence", group="b")
    assert "baseline: b " in fired.annotations["description"]  # context when it fires
    summary = "selection rate of b is below 0.80× a's (the four-fifths bound)"
    assert fired.annotations["summary"] == summary
    assert resolved.annotations["summary"] == f"resolved: {summary}"
    assert "baseline" not in resolved.annotations["description"]
    assert resolved.annotations["baseline_rate"].startswith("n/a")  # its key too (a review)
    assert fired.annotations["baseline_rate"][0].isdigit()
    # the time to detect it quotes is a breach of the bound worth a page, not a 0.8× drop
    assert (
        "A selection rate of 0.60× the reference's shows in ~" in fired.annotations["description"]
    )


def test_a_four_fifths_page_says_which_group_is_below_the_bound() -> None:
    """Found by a review: when a small group's selection rate rose to 0.9 beside the
    reference's 0.5, the four-fifths test fired for that group and said "selection rate of b
    vs a left the four-fifths bound", which reads as b being the disadvantaged group; the
    window rule paged "for a vs b". The test bets both ways; the page says which way won:
    here the reference is below four fifths of b."""
    sel: Rate = lambda m: 0.9 if m >= 24 * H else 0.5  # noqa: E731
    preds, labs = events(34 * H, sel, seed=3, per_min=(20.0, 4.0))
    ev = drive(preds, labs, cut_minutes=7, cfg=config(guard="2h"))
    (fired, *_) = pages(ev, "FourFifthsEvidence", group="b")
    notes = fired.annotations
    assert notes["summary"] == (
        "selection rate of a (the reference) is below 0.80× b's (the four-fifths bound)"
    )
    b_rate, a_rate = (
        float(notes[k].split()[0]) for k in ("group_rate_last_hour", "reference_rate_last_hour")
    )
    assert a_rate < 0.8 * b_rate  # the quoted rates agree with the words


def test_a_pages_last_hour_is_the_hour_before_it() -> None:
    """The rates a page quotes "in the last hour" are counted from the events here: each
    group's decisions in [at − 1 h, at). They were one bucket old (the hour before the
    bucket just judged, which the detectors use as the reference's trailing rate)."""
    sel: Rate = lambda m: 0.3 if m >= 24 * H else 0.5  # noqa: E731
    preds, labs = events(40 * H, sel, seed=12)
    ev = drive(preds, labs, cut_minutes=5)
    (fired, *_) = pages(ev, "FairnessChange", group="b", metric="selection_rate")
    hour = (preds["ts"] >= fired.at - 3600) & (preds["ts"] < fired.at)
    for role, g in (("group_rate_last_hour", 1), ("reference_rate_last_hour", 0)):
        mine = hour & (preds["group"] == g)
        want = f"({int(preds['pred'][mine].sum())} of {int(mine.sum())})"
        assert fired.annotations[role].endswith(want), (role, fired.annotations[role], want)
