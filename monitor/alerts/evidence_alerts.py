"""The evidence detectors' alerts and gauges: one :class:`ModelEvidence` per model, fed by the
evaluator at every closed bucket; firing and resolving through the lifecycle book; the rows the
exporter and the status page show.

Alert names: a change of a group's rate is ``FairnessChange`` (label ``metric``:
``selection_rate``, ``tpr``, ``fpr``); the sequential tests of the bounds are
``FourFifthsEvidence`` and ``EqualizedOddsEvidence`` (distinct from the window rules
``FourFifthsRule`` / ``EqualizedOddsGap``: another identity, no ``window``, a lifecycle of its
own). All carry ``detector="sequential"`` and ``group``, and say in words what changed, by how
much, the evidence against its threshold and how long such a change takes to show here.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from monitor.alerts.evidence import DETECTORS, ModelEvidence
from monitor.alerts.lifecycle import AlertBook, Transition
from monitor.config.rules import AlertRule
from monitor.config.spec import Config, ModelSpec
from monitor.metrics import sequential as sq
from monitor.state.view import CountsView

ALERTS = ("FairnessChange",) * 3 + ("FourFifthsEvidence", "EqualizedOddsEvidence")
WHAT = ("selection rate", "true positive rate", "false positive rate")
RUNBOOK = "https://github.com/fairness-monitor/fairness-monitor/blob/main/docs/runbook.md"


class EvidenceRow(NamedTuple):
    """One detector's evidence now (``log_e``: log of the mixed Shiryaev–Roberts statistic)."""

    model: str
    attribute: str
    group: str
    detector: str
    log_e: float
    log_threshold: float
    expected_seconds: float  # until a drop of its rate to 0.8× would show (+inf: no data;
    # NaN: the detector cannot fire yet, so nothing would show)
    state: str  # watching | warming-up | firing | blind: selective labels


def bounds(rules: tuple[AlertRule, ...]) -> tuple[float, float]:
    """The four-fifths ratio and the equalized-odds gap of the configured rules (or the
    defaults 0.8, 0.1): the sequential tests judge the same bounds as the window rules."""
    ratio = [r.bound for r in rules if r.metric == "disparate_impact_ratio" and r.op == "<"]
    gap = [r.bound for r in rules if r.metric == "equalized_odds_difference" and r.op == ">"]
    return (ratio[0] if ratio else 0.8), (gap[0] if gap else 0.1)


class EvidenceTracker:
    """Every model's evidence detectors (``AlertEvaluator.evidence``)."""

    def __init__(self, config: Config, engine: CountsView) -> None:
        self.engine = engine
        self.spec = config.alerts.evidence
        self.budget = config.alerts.false_page_budget
        self.bounds = bounds(config.alerts.rules)
        self.models: dict[int, ModelEvidence] = {}
        self.last: dict[int, dict[str, Any]] = {}  # each model's last step (for the gauges)

    def model(self, m: int) -> ModelEvidence:
        me = self.models.get(m)
        if me is None:
            spec, reg = self.engine.models[m], self.engine.registries[m]
            me = self.models[m] = ModelEvidence(spec, list(reg.set_names), self.spec, self.bounds)
        return me

    def update(self, m: int, spec: ModelSpec, k: int, book: AlertBook) -> list[Transition]:
        """Feed boundary ``k`` of model ``m``; the transitions of its evidence alerts."""
        if not self.spec.enabled:
            return []
        me = self.model(m)
        out = self.last[m] = me.step(me.observe(m, self.engine, k), k, self.budget)
        at = float(k * spec.bucket)
        changed = out["fired"] | out["resolved"]
        hits = np.argwhere(changed).tolist() if changed.any() else []  # mostly none: ~10 µs
        hits.sort(key=lambda h: (h[0], me.labels[h[0]][h[1]], h[2]))  # not first-seen order
        transitions = []
        for s, g, det in hits:
            fire = bool(out["fired"][s, g, det])
            if fire:
                me.fire(s, g, det, at, out["p_base"])
            t = book.observe(
                name=ALERTS[det],
                labels=_labels(me, s, g, det),
                breached=fire,
                recovered=not fire,
                at=at,
                for_=0,
                # a resolve carries what resolved it, as its log_evidence does (a review)
                value=float((out["tot"] if fire else me.arrays["rec"])[s, g, det]),
                annotations=_annotations(me, s, g, det, fire, out, self.budget),
            )
            if not fire:
                me.restart(s, g, det)
            if t is not None:
                transitions.append(t)
        return transitions

    def snapshot(self) -> list[EvidenceRow]:
        """Every detector's evidence, threshold, expected time to detect and state."""
        rows = []
        for m, me in sorted(self.models.items()):
            out = self.last.get(m)
            if out is None:
                continue
            exp = expected(me, out)
            blind = out["blind"]
            firing = me.arrays["arm"] >= 0
            # a detector that cannot fire now (no baseline or reference group yet, or paused
            # while its reference's own rate fires) is warming up, and no time to detect is
            # claimed for it: "a drop shows in 30 min" would be false (found by a review)
            idle = ~out["alive"] & ~firing
            for s, labels in enumerate(me.labels):
                for g, label in enumerate(labels):
                    ref = me.refs[s] == g
                    for det in range(3 if ref else 5):
                        tot = float(out["tot"][s, g, det])
                        state = (
                            "firing"
                            if firing[s, g, det]
                            else "blind: selective labels"
                            if det in (1, 2, 4) and blind[s, g]
                            else "watching"
                            if math.isfinite(tot) and not idle[s, g, det]
                            else "warming-up"
                        )
                        eta = math.nan if idle[s, g, det] else float(exp[s, g, det])
                        rows.append(
                            EvidenceRow(
                                me.spec.name,
                                me.set_names[s],
                                label,
                                DETECTORS[det],
                                tot,
                                float(out["log_c"][det]),
                                eta,
                                state,
                            )
                        )
        return rows


FF_SHOWN = 0.75  # the four-fifths test's time to detect: a ratio of 0.75 × the bound (0.6)
EO_SHOWN = 2.0  # the equalized-odds test's: a gap of twice the bound (0.2)


def expected(me: ModelEvidence, out: dict[str, Any]) -> Any:
    """Seconds until the change each detector looks for would show, at a size worth a page:
    [S, G, 5]. A change detector: its rate to 0.8× (``sq.expected_seconds``; the rate over
    the blocks held, the volume of the last hour). The four-fifths test: g's selection rate
    at ``FF_SHOWN`` × the bound × the reference's (a ratio of exactly the bound never
    shows: it is the null); the equalized-odds test: a TPR or FPR gap of ``EO_SHOWN`` × the
    bound, the sooner of the two; both at the pairs the smaller volume makes
    (``sq.pair_expected_seconds``; before, both quoted the 0.8× drop of a change detector),
    plus a block: they step hourly, and the blocks the change begins and ends in are waited
    out (measured: without it the quote was ~2 h short of a 4.4 h mean delay, a review)."""
    held, hour = out["held"], out["hour"]
    with np.errstate(divide="ignore", invalid="ignore"):
        p = held[..., 0] / held[..., 1]  # [S, G, 3]: the rate over the blocks held
    p = np.nan_to_num(p, nan=0.5)  # nothing held yet: a middling rate
    per_s = hour[..., 1] / (me.nr * me.spec.bucket)  # the volume of the last hour
    r = np.maximum(me.refs, 0)
    s_ = np.arange(len(r))
    pair = np.minimum(per_s, per_s[s_, r][:, None, :])
    p_ref = np.broadcast_to(p[s_, r][:, None, :], p.shape)
    log_c = out["log_c"]
    five = np.empty((*p.shape[:2], 5))
    five[..., :3] = sq.expected_seconds(log_c[:3], p, per_s)
    ratio, gap = me.bounds
    g_ff = p_ref[..., 0] * ratio * FF_SHOWN
    five[..., 3] = sq.pair_expected_seconds(log_c[3], g_ff, p_ref[..., 0], pair[..., 0], me.ff_arms)
    pr = p_ref[..., 1:]
    g_eo = np.where(pr >= EO_SHOWN * gap, pr - EO_SHOWN * gap, np.minimum(pr + EO_SHOWN * gap, 1))
    eo = sq.pair_expected_seconds(log_c[4], g_eo, pr, pair[..., 1:], me.eo_arms)
    five[..., 4] = eo.min(axis=-1)
    five[..., 3:] += me.block  # they step once a block: the change's first and last blocks
    return five


def shown(me: ModelEvidence, det: int) -> str:
    """The change whose time to detect a detector's page quotes (``expected``)."""
    if det < 3:
        return "A drop of this group's rate to 0.8×"
    if det == 3:
        return f"A selection rate of {me.bounds[0] * FF_SHOWN:.2f}× the reference's"
    return f"A TPR or FPR gap of {me.bounds[1] * EO_SHOWN:.2f}"


def _labels(me: ModelEvidence, s: int, g: int, det: int) -> dict[str, str]:
    labels = {
        "alertname": ALERTS[det],
        "model": me.spec.name,
        "attribute": me.set_names[s],
        "group": me.labels[s][g],
        "severity": me.ev.severity,
        "detector": "sequential",
    }
    return labels | ({"metric": DETECTORS[det]} if det < 3 else {})


def _rate(xn: Any) -> str:
    x, n = int(xn[0]), int(xn[1])
    return f"{x / n:.3f} ({x} of {n})" if n else "n/a (no data)"


def _annotations(
    me: ModelEvidence, s: int, g: int, det: int, fire: bool, out: dict[str, Any], budget: Any
) -> dict[str, str]:
    """What changed, by how much, the evidence against the threshold, the time to detect."""
    group, r = me.labels[s][g], int(me.refs[s])
    ref = me.labels[s][r]
    base, hour = out["base"], out["hour"]
    arm = int(me.arrays["arm"][s, g, det])
    # equalized odds: arms 0–7 bet on the TPR gap, 8–15 on the FPR gap; the page shows the
    # rate whose gap fired (before: always TPR, equal rates beside an FPR page)
    metric = det if det < 3 else (0 if det == 3 else (1 if arm < 8 else 2))
    tot, log_c = float(out["tot"][s, g, det]), float(out["log_c"][det])
    days = budget.per / 86400
    secs = float(expected(me, out)[s, g, det])
    volume = hour[s, g, metric, 1] if det < 3 else min(hour[s, g, metric, 1], hour[s, r, metric, 1])
    eta = (
        f"~{secs / 3600:.1f} h"
        if math.isfinite(secs)
        else "never (no data in the last hour)"
        if not volume
        else "never (a rate of 0 cannot drop)"
    )
    if det < 3:
        way = "fell" if arm < 4 else "rose"
        what = f"{WHAT[det]} of {group} ({me.set_names[s]}) {way}"
        if r != g:
            what += f" relative to {ref}"
    elif det == 3:  # which way: arms 0–3 bet on g below the bound, 4–7 on the reference
        # (sequential.pair_z); "b vs a left the bound" hid that b was the favoured one (a review)
        low, high = (group, ref) if arm < 4 else (ref, group)
        tail = " (the reference)" if arm >= 4 else ""
        what = (
            f"selection rate of {low}{tail} is below {me.bounds[0]:.2f}× {high}'s "
            "(the four-fifths bound)"
        )
    else:  # arms 0–3 (TPR) and 8–11 (FPR) bet on g's rate below the reference's, the rest above
        rate = "TPR/FPR" if arm < 0 else ("TPR" if arm < 8 else "FPR")
        way = "differs from" if arm < 0 else ("is lower than" if arm % 8 < 4 else "is higher than")
        what = f"{rate} of {group} {way} {ref}'s by more than {me.bounds[1]:.2f}"
    state = "evidence of this"
    evidence = f"Evidence log e = {tot:.1f} vs threshold {log_c:.1f}"
    if not fire:  # a resolve quotes what resolved it: the recovery's evidence (a review)
        tot, log_c = float(me.arrays["rec"][s, g, det]), math.log(me.ev.resolve_odds)
        state = "recovered; evidence of recovery"
        evidence = (
            f"Evidence of recovery log e = {tot:.1f} vs threshold {log_c:.1f} (of the change: "
            f"{float(out['tot'][s, g, det]):.1f})"
        )
    vs = (
        f", {ref} {_rate(hour[s, r, metric])}"
        if r != g
        else " (the reference group: against its own baseline)"
    )
    base_vs = f", {ref} {_rate(base[s, r, metric])}" if r != g else ""
    baseline = f"baseline: {group} {_rate(base[s, g, metric])}{base_vs}. "
    base_rate = _rate(base[s, g, metric])
    if not fire and det < 3:  # what recovery was judged against, not today's rolling baseline
        frozen = float(me.arrays["frozen"][s, g, det])  # (which may hold the change: a review)
        base_rate = f"{frozen:.3f}" + (f"× {ref}'s rate" if r != g else "")
        baseline = f"judged against the baseline frozen when it fired: {group} {base_rate}. "
        base_rate += " (frozen when it fired)"
    elif not fire:  # a pair test compares the groups now; a baseline is not what it judged
        baseline, base_rate = "", "n/a (a pair test compares the groups)"
    description = (
        f"{state}. {WHAT[metric]} in the last hour: {group} {_rate(hour[s, g, metric])}{vs}; "
        f"{baseline}{evidence} (at most "
        f"{budget.pages:g} false page(s) per {days:g} days for this model). {shown(me, det)} "
        f"shows in {eta}."
    )
    return {
        "summary": ("" if fire else "resolved: ") + what,
        "description": description,
        "group": group,
        "reference_group": ref,
        "group_rate_last_hour": _rate(hour[s, g, metric]),
        "reference_rate_last_hour": _rate(hour[s, r, metric]),
        "baseline_rate": base_rate,
        "log_evidence": f"{tot:.2f}",
        "log_threshold": f"{log_c:.2f}",
        "expected_time_to_detect": eta,
        "runbook_url": f"{RUNBOOK}#{ALERTS[det].lower()}",
    }
