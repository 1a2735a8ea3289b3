"""The alert-quality benchmark's figures: judged against the known truth, printed with their
intervals and the issue's targets (see ``bench/alert_quality.py``)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable

import numpy as np

from bench.alert_stats import garwood, kl_bernoulli, median_interval, wilson_interval
from bench.alert_streams import BUCKET, FPR, PREVALENCE, TPR, RunResult, Scenario, bench_config
from monitor.config.rules import DEFAULT_RULES
from monitor.metrics.registry import METRICS

Tr = tuple[str, tuple[tuple[str, str], ...], str, float]
Ident = tuple[str, tuple[tuple[str, str], ...]]
FIXED = {r.name for r in DEFAULT_RULES}
LABEL_WORDS = ("tpr", "fpr", "odds", "positive")
# evidence detectors for one non-reference group when the evaluator does not say: rate changes
# of selection, TPR and FPR, the four-fifths bound, the TPR and FPR gap bounds
K_ASSUMED = 6


def _lags() -> dict[str, float]:
    """Hours each window lags behind "now" (a lagged window sees a change that much later)."""
    spec = next(iter(bench_config().models.values()))
    return {w.name: w.lag / 3600 for w in spec.windows}


LAGS = _lags()


def lag_of(labels: tuple[tuple[str, str], ...]) -> float:
    return LAGS.get(dict(labels).get("window", ""), 0.0)


def label_based(name: str, labels: tuple[tuple[str, str], ...]) -> bool:
    """Does this alert judge labels (TPR / FPR), rather than decisions alone?"""
    rule = next((r for r in DEFAULT_RULES if r.name == name), None)
    if rule is not None:
        return METRICS[rule.metric].needs_labels
    d = dict(labels)
    if "metric" in d and d["metric"] in METRICS:
        return METRICS[d["metric"]].needs_labels
    text = " ".join([name, d.get("metric", ""), d.get("detector", "")]).lower()
    return any(w in text for w in LABEL_WORDS)


def family(name: str) -> str:
    if name in FIXED:
        return f"{name} (fixed window)"
    if name == "FairnessDrift":
        return "FairnessDrift (river)"
    return f"{name} (evidence)"


def first_firing(
    r: RunResult, start: float, end: float, keep: Callable[[Tr], bool] = lambda t: True
) -> float:
    """Hours from ``start`` to the first firing transition in ``[start, end)``; inf if none."""
    hits = [t[3] for t in r.transitions if t[2] == "firing" and start <= t[3] < end and keep(t)]
    return min(hits) - start if hits else math.inf


def fmt_h(x: float) -> str:
    if x == math.inf:
        return "∞"
    if x == -math.inf:
        return "-∞"
    return f"{x:.2f} h" if x >= 1 else f"{x * 60:.0f} min"


def rate_line(label: str, k: int, n: int, target: str = "") -> str:
    lo, hi = wilson_interval(k, n)
    pct = 100 * k / n if n else math.nan
    return f"  {label:<52} {k}/{n} = {pct:5.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]   {target}"


def delay_line(label: str, delays: list[float], target: str = "") -> str:
    med, lo, hi = median_interval(delays)
    return f"  {label:<52} median {fmt_h(med)} [{fmt_h(lo)}, {fmt_h(hi)}]   {target}"


def header(sc: Scenario, results: list[RunResult], secs: float) -> None:
    bounds = sum(r.boundaries for r in results) or 1
    adv = sum(r.seconds_advance for r in results) / bounds * 1e3
    app = sum(r.seconds_apply for r in results) / bounds * 1e3
    print(
        f"\n== {sc.name}: {sc.about}; {len(results)} seeds × {sc.days:g} days; groups "
        + ", ".join(f"{g} {n:g}/h" for g, n in sc.groups)
        + f" ==\n  ({secs:.0f} s wall; per closed 5-minute bucket: evaluator {adv:.2f} ms, "
        f"engine apply {app:.2f} ms; 200 seeds would take ~{secs / len(results) * 200 / 60:.0f} "
        "min at this pace with the same --jobs)"
    )


def print_fair(
    sc: Scenario, results: list[RunResult], secs: float, pages: float, per: float
) -> None:
    header(sc, results, secs)
    days = len(results) * sc.days
    scale = per / 86400 / days
    budget = f"target: upper bound ≤ {pages:g} per {per / 86400:g} d"
    fired = [(t[0], r.seed) for r in results for t in r.transitions if t[2] == "firing"]
    k = len(fired)
    lo, hi = garwood(k)
    ok = (
        "meets it"
        if hi * scale <= pages
        else "exceeds it"
        if lo * scale > pages
        else "not established: more seeds"
    )
    print(
        f"  {'false pages, all rules together':<52} {k} in {days:g} days = "
        f"{k * scale:.2f} per {per / 86400:g} d [{lo * scale:.2f}, {hi * scale:.2f}]   "
        f"{budget} ({ok})"
    )
    by_rule = Counter(name for name, _ in fired)
    for name in sorted({*FIXED, "FairnessDrift", *by_rule}):
        n = by_rule.get(name, 0)
        lo, hi = garwood(n)
        print(
            f"    {family(name):<50} {n} = {n * scale:.2f} per {per / 86400:g} d "
            f"[{lo * scale:.2f}, {hi * scale:.2f}]"
        )
    sev = {k: v for r in results for k, v in r.severity.items()}
    paging = sum(1 for name, _ in fired if sev.get(name) == "page")
    lo, hi = garwood(paging)
    print(
        f"    {'of which severity=page':<50} {paging} = {paging * scale:.2f} per "
        f"{per / 86400:g} d [{lo * scale:.2f}, {hi * scale:.2f}]"
    )
    runs = len({seed for _, seed in fired})
    print(rate_line("runs with at least one false page", runs, len(results)))


def print_drop(
    sc: Scenario, results: list[RunResult], secs: float, pages: float, per: float
) -> None:
    header(sc, results, secs)
    t0, t1 = sc.start_h, sc.start_h + sc.hold_h
    n = len(results)
    rate = dict(sc.groups)[sc.changed]
    kl = kl_bernoulli(sc.to, 0.5)
    thr = [r.evidence_log_threshold.get(sc.changed) for r in results]
    known = [x for x in thr if x is not None and math.isfinite(x)]
    if known:
        log_c = max(known)
        c_note = f"log c = {log_c:.2f} read from the evaluator's evidence rows"
    else:
        c = K_ASSUMED * per / (pages * BUCKET)
        log_c = math.log(c)
        c_note = (
            f"c = K·per/(pages·bucket) = {c:,.0f} with K = {K_ASSUMED} assumed "
            "(no evidence detectors in this evaluator)"
        )
    limit = log_c / (kl * rate)
    target = min(1.5 * limit, 4.5) if rate < 100 else 0.5
    any_d = [first_firing(r, t0, t1) for r in results]
    print(rate_line("detected within the change (any alert)", _hits(any_d), n, "target ≥ 95 %"))
    print(delay_line("delay from the change, any alert", any_d, f"target ≤ {fmt_h(target)}"))
    print(
        f"  {'information limit log(c)/KL':<52} {fmt_h(limit)}   ({c_note}; KL({sc.to}‖0.5) = "
        f"{kl:.4f} nats × {rate:g}/h; 1.5 × limit = {fmt_h(1.5 * limit)})"
    )
    _by_family(results, t0, t1)
    print(
        f"  {'pages before the change (false)':<52} "
        f"{sum(1 for r in results for t in r.transitions if t[2] == 'firing' and t[3] < t0)}"
    )
    print_flapping(sc, results)


def _hits(delays: list[float]) -> int:
    return sum(1 for d in delays if d != math.inf)


def _by_family(results: list[RunResult], t0: float, t1: float) -> None:
    names = sorted({t[0] for r in results for t in r.transitions if t[2] == "firing"})
    for name in names:
        d = [first_firing(r, t0, t1, lambda t, name=name: t[0] == name) for r in results]  # type: ignore[misc]
        med, lo, hi = median_interval(d)
        print(
            f"    {family(name):<50} detected {_hits(d)}/{len(d)}, median {fmt_h(med)} "
            f"[{fmt_h(lo)}, {fmt_h(hi)}]"
        )


def true_values(sc: Scenario) -> dict[str, tuple[float, float]]:
    """While the change lasts (rate and TPR changes): each metric's (usual, changed) value for
    the changed group (rates) or between the groups (disparities)."""
    sel, tpr_over = sc.factors(np.array([sc.start_h + sc.hold_h / 2]))
    tpr = float(tpr_over[0]) if np.isfinite(tpr_over[0]) else TPR * float(sel[0])
    fpr = FPR * float(sel[0])
    rate = PREVALENCE * tpr + (1 - PREVALENCE) * fpr
    usual = PREVALENCE * TPR + (1 - PREVALENCE) * FPR
    return {
        "selection_rate": (usual, rate),
        "tpr": (TPR, tpr),
        "fpr": (FPR, fpr),
        "disparate_impact_ratio": (1.0, min(rate, usual) / max(rate, usual)),
        "tpr_gap": (0.0, abs(tpr - TPR)),
        "fpr_gap": (0.0, abs(fpr - FPR)),
        "equalized_odds_difference": (0.0, max(abs(tpr - TPR), abs(fpr - FPR))),
    }


def truly_breached(sc: Scenario, name: str, labels: tuple[tuple[str, str], ...]) -> bool:
    """Does what this alert claims hold while the change lasts? A bound rule's true value is
    beyond its bound (a true DIR of exactly 0.8 is not below 0.8); a change detector's metric
    changed, in the changed group; a drift detector's metric moved. An alert for which it does
    not is a false alarm that happens during the incident, and its resolution is right."""
    d, truth = dict(labels), true_values(sc)
    rule = next((r for r in DEFAULT_RULES if r.name == name), None)
    if name == "FourFifthsEvidence":
        rule = next(r for r in DEFAULT_RULES if r.metric == "disparate_impact_ratio")
    if name == "EqualizedOddsEvidence":
        rule = next(r for r in DEFAULT_RULES if r.metric == "equalized_odds_difference")
    if rule is not None and rule.metric in truth:
        v = truth[rule.metric][1]
        return v < rule.bound if rule.op == "<" else v > rule.bound
    metric = d.get("metric", "")
    if metric in truth and (name != "FairnessChange" or d.get("group") == sc.changed):
        usual, changed = truth[metric]
        return not math.isclose(usual, changed, abs_tol=1e-9)
    return False


def print_flapping(sc: Scenario, results: list[RunResult]) -> None:
    """Firing transitions per (incident, identity); resolutions while the change persists (in
    the identity's own window: a window lagged 3 days sees it 3 days later); every alert that
    fired for the change (a true claim, fired while its window saw the change) resolved by the
    end of the run (well after recovery), and every alert since the change began."""
    t0, hold = sc.start_h, sc.hold_h
    pairs: Counter[Ident] = Counter()
    per_rule: dict[str, list[int]] = defaultdict(list)
    early: Counter[str] = Counter()
    unresolved_runs = unresolved_any = 0
    firings = 0
    for r in results:
        count: Counter[Ident] = Counter()
        last: dict[Ident, str] = {}
        awaiting: set[Ident] = set()  # a true claim fired while its window saw the change, and
        # not resolved since
        for name, labels, state, at in r.transitions:
            ident = (name, labels)
            if at < t0:
                continue
            last[ident] = state
            lag = lag_of(labels)
            if state == "firing":
                count[ident] += 1
                if t0 + lag <= at < t0 + lag + hold and truly_breached(sc, name, labels):
                    awaiting.add(ident)
            else:
                awaiting.discard(ident)
            if state == "resolved" and t0 + lag <= at < t0 + lag + hold:
                early[name if truly_breached(sc, name, labels) else f"{name} (false)"] += 1
        for ident, c in count.items():
            pairs[ident] += 1
            per_rule[ident[0]].append(c)
            firings += c
        unresolved_runs += bool(awaiting)
        unresolved_any += any(last[i] == "firing" for i in count)
    n_pairs = sum(pairs.values())
    ratio = firings / n_pairs if n_pairs else math.nan
    print(
        f"  {'flapping: firing transitions per (incident, identity)':<52} {ratio:.2f} "
        f"({firings} for {n_pairs})   target ≤ 1.05"
    )
    for name, counts in sorted(per_rule.items()):
        print(
            f"    {family(name):<50} {sum(counts) / len(counts):.2f} ({sum(counts)}/{len(counts)})"
        )
    real = {k: v for k, v in early.items() if not k.endswith(" (false)")}
    print(
        f"  {'resolutions while the change persists':<52} {sum(real.values())} "
        f"{real if real else ''}   target 0"
    )
    false = {k.removesuffix(" (false)"): v for k, v in early.items() if k not in real}
    if false:  # e.g. the four-fifths rule where the true DIR is exactly 0.8
        print(f"    {'and of false alarms (their claim untrue)':<50} {sum(false.values())} {false}")
    resolved = len(results) - unresolved_runs
    print(
        rate_line(
            "runs whose alerts all resolved after recovery", resolved, len(results), "target: all"
        )
    )
    print(  # false alarms too: one that fires near the end of a run has no time to resolve
        f"    {'and whose every alert since the change did':<50} "
        f"{len(results) - unresolved_any}/{len(results)}"
    )


def print_tpr(sc: Scenario, results: list[RunResult], secs: float) -> None:
    header(sc, results, secs)
    t0, t1 = sc.start_h, sc.start_h + sc.hold_h
    n = len(results)
    lab = [first_firing(r, t0, t1, lambda t: label_based(t[0], t[1])) for r in results]
    any_d = [first_firing(r, t0, t1) for r in results]
    drift = [first_firing(r, t0, t1, lambda t: t[0] == "FairnessDrift") for r in results]
    drift_lab = [
        first_firing(r, t0, t1, lambda t: t[0] == "FairnessDrift" and label_based(*t[:2]))
        for r in results
    ]
    print(rate_line("detected by a label-based alert (TPR/FPR/EO)", _hits(lab), n, "target ≥ 95 %"))
    print(delay_line("delay, label-based alert", lab, "target ≤ 8 h"))
    print(rate_line("detected by any alert (the selection rate fell too)", _hits(any_d), n))
    print(delay_line("delay, any alert", any_d))
    print(rate_line("FairnessDrift fired (any metric)", _hits(drift), n, "target: fires too"))
    print(rate_line("FairnessDrift fired on tpr_gap / fpr_gap", _hits(drift_lab), n))
    _by_family(results, t0, t1)
    print_flapping(sc, results)


def print_slide(sc: Scenario, results: list[RunResult], secs: float) -> None:
    header(sc, results, secs)
    t0, cross = sc.start_h, sc.dir_crosses_h(0.8)
    n = len(results)
    before = [first_firing(r, t0, cross) for r in results]
    print(
        rate_line(
            f"alert before the true DIR crosses 0.8 (+{cross - t0:.0f} h)",
            _hits(before),
            n,
            "target ≥ 90 %",
        )
    )
    first = [first_firing(r, t0, sc.end_h) for r in results]
    med, lo, hi = median_interval(first)
    true_dir = (
        1 - min(med, sc.hold_h) / sc.hold_h * (1 - sc.to / 0.5) if med < math.inf else math.nan
    )
    print(
        f"  {'first alert after the slide began':<52} median {fmt_h(med)} [{fmt_h(lo)}, "
        f"{fmt_h(hi)}]; true DIR then {true_dir:.3f}"
    )
    _by_family(results, t0, sc.end_h)


def print_cost() -> None:
    """Alert evaluation per closed bucket (3 windows × 3 attribute sets × 20 groups) beside
    the engine's per-event cost, from ``bench/alert_cost.py`` when it is there."""
    print(
        "\n== cost: alert evaluation per closed bucket, 3 windows × 3 attribute sets × 20 groups =="
    )
    try:
        from bench.alert_cost import measure  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        from bench.alert_cost_case import measure_fallback as measure
    res = measure()
    for key, value in res.items():
        print(f"  {key:<52} {value:.4g}" if isinstance(value, float) else f"  {key:<52} {value}")
