"""The across-group disparities in PromQL (``fairness-monitor prometheus-rules``): the disparate
impact ratio with its MOVER-R interval, each gap with Newcombe's, the equalized-odds difference
with a maximum's interval — over counts summed across replicas, the pair of groups chosen as the
monitor chooses it (``monitor/metrics/batch.py``). The shared names of the rules live here too.
"""

from __future__ import annotations

from typing import Any

from monitor.metrics.blindness import CELL_CLASS
from monitor.metrics.registry import GROUP_COUNTS, GROUP_RATES, METRICS, RATE_FAMILY

ATTR = "model, window, attribute"
GROUP = "model, window, attribute, group"
COUNT = {c.field: c.name for c in GROUP_COUNTS}
# the denominators summed from two cells (one cell: its count family)
SUM_NAME: dict[tuple[str, ...], str] = {
    ("tp", "fn"): "positives",
    ("fp", "tn"): "negatives",
    ("tp", "fp"): "predicted_positives",
}


def summed(cells: tuple[str, ...]) -> str:
    return f"fairness:{COUNT[cells[0]] if len(cells) == 1 else SUM_NAME[cells]}:sum"


def rec(name: str, expr: str) -> dict[str, Any]:
    return {"record": name, "expr": expr}


def most(values: str, den: str, *, lowest: bool) -> str:
    """Per (model, window, attribute): the group with the highest (lowest) of ``values``, among
    equal ones the one with the most decisions in ``den`` (as the monitor: ``ties.py``; groups
    tied in both have the same interval, so which one topk takes changes no decision)."""
    agg = "min" if lowest else "max"
    return (
        f"topk by ({ATTR}) (1, {den}\n"
        f"  and on ({GROUP}) ({values} == on ({ATTR}) group_left {agg} by ({ATTR}) ({values})))\n"
    )


def wilson_limit(p: str, n: str, z: str, sign: str) -> str:
    """One Wilson limit of ``p`` over ``n`` decisions at the normal quantile series ``z`` (all
    three per (model, window, attribute)): (p + z²/2n ± z·√(p(1−p)/n + z²/4n²)) / (1 + z²/n)
    clamped to [0, 1]."""
    return (
        f"clamp(\n  (\n    {p} + {z} ^ 2 / 2 / {n}\n"
        f"    {sign} {z} * sqrt({p} * (1 - {p}) / {n} + {z} ^ 2 / 4 / {n} ^ 2)\n"
        f"  ) / (1 + {z} ^ 2 / {n}),\n  0, 1)\n"
    )


def pair_rules(metric: str, high: str, low: str, rate: str, cells: tuple[str, ...]) -> list[Any]:
    """Per (model, window, attribute): the two compared groups' rate, samples and Wilson limits
    at the pair's level (``fairness:<metric>_z:value``)."""
    fam = RATE_FAMILY[rate].name
    out = []
    for side, chosen in (("high", high), ("low", low)):
        out.append(rec(f"fairness:{metric}_{side}_group:ratio", chosen))
        for what, series in (("rate", f"fairness:{fam}:ratio"), ("samples", summed(cells))):
            out.append(
                rec(
                    f"fairness:{metric}_{side}_{what}:{'sum' if what == 'samples' else 'ratio'}",
                    f"max by ({ATTR}) ({series}\n"
                    f"  and on ({GROUP}) fairness:{metric}_{side}_group:ratio)\n",
                )
            )
        p, n = f"fairness:{metric}_{side}_rate:ratio", f"fairness:{metric}_{side}_samples:sum"
        z = f"fairness:{metric}_z:value"
        for what, sign in (("lower", "-"), ("upper", "+")):
            out.append(rec(f"fairness:{metric}_{side}_{what}:ratio", wilson_limit(p, n, z, sign)))
    out.append(
        rec(
            f"fairness:{metric}_samples:min",
            f"min by ({ATTR}) (\n"
            f'  label_replace(fairness:{metric}_high_samples:sum, "side", "high", "", "")\n'
            f'  or label_replace(fairness:{metric}_low_samples:sum, "side", "low", "", "")\n)\n',
        )
    )
    return out


def disparate_impact_rules() -> list[dict[str, Any]]:
    """Lowest rate over the reference's (configured, else the highest), MOVER-R interval with
    1 = the lowest group, 2 = the reference:
    L = [p₁p₂ − √((p₁p₂)² − l₁(2p₁ − l₁)·u₂(2p₂ − u₂))] / [u₂(2p₂ − u₂)], lower limit ≥ 0
    U = [p₁p₂ + √((p₁p₂)² − u₁(2p₁ − u₁)·l₂(2p₂ − l₂))] / [l₂(2p₂ − l₂)]"""
    m, sr, n = "disparate_impact", "fairness:selection_rate:ratio", summed(("n",))
    ref = (
        f"{sr} and on (model, attribute, group) fairness:reference_group:info\n"
        f"or on ({ATTR}) ({most(sr, n, lowest=False)}"
        "  unless on (model, attribute) fairness:reference_group:info)\n"
    )
    worst = most(f"({sr} unless on ({GROUP}) fairness:{m}_high_group:ratio)", n, lowest=True)
    out = pair_rules(m, ref, worst, "selection_rate", ("n",))
    p1, l1, u1 = (f"fairness:{m}_low_{w}:ratio" for w in ("rate", "lower", "upper"))
    p2, l2, u2 = (f"fairness:{m}_high_{w}:ratio" for w in ("rate", "lower", "upper"))
    out.append(rec(f"fairness:{m}:ratio", f"{p1} / ({p2} > 0)"))
    pp, den_lo, den_hi = f"{p1} * {p2}", f"{u2} * (2 * {p2} - {u2})", f"{l2} * (2 * {p2} - {l2})"
    lower = (
        f"clamp_min(\n  (\n    {pp}\n    - sqrt(clamp_min(({pp}) ^ 2 - {l1} * (2 * {p1} - {l1})"
        f" * {den_lo}, 0))\n  ) / ({den_lo}),\n  0)\nand on ({ATTR}) fairness:{m}:ratio\n"
    )
    upper = (
        f"(\n  {pp}\n  + sqrt(clamp_min(({pp}) ^ 2 - {u1} * (2 * {p1} - {u1})"
        f" * {den_hi}, 0))\n) / ({den_hi})\nand on ({ATTR}) fairness:{m}:ratio\n"
    )
    out += [rec(f"fairness:{m}_lower:ratio", lower), rec(f"fairness:{m}_upper:ratio", upper)]
    return out


def gap_rules(metric: str) -> list[dict[str, Any]]:
    """max − min over eligible groups (two or more), Newcombe interval with 1 = highest:
    L = d − √((p₁ − l₁)² + (u₂ − p₂)²),  U = d + √((u₁ − p₁)² + (p₂ − l₂)²)."""
    spec = METRICS[metric]
    r = f"fairness:{RATE_FAMILY[spec.rate].name}_judged:ratio"
    two = f"and on ({ATTR}) count by ({ATTR}) ({r}) >= 2\n"
    den = summed(spec.counts)
    # the lowest is another group than the highest, even when all rates are equal (fairness._gap)
    low = f"({r} unless on ({GROUP}) fairness:{metric}_high_group:ratio)"
    out = pair_rules(
        metric,
        f"{most(r, den, lowest=False)}{two}",
        f"{most(low, den, lowest=True)}{two}",
        spec.rate,
        spec.counts,
    )
    p1, l1, u1 = (f"fairness:{metric}_high_{w}:ratio" for w in ("rate", "lower", "upper"))
    p2, l2, u2 = (f"fairness:{metric}_low_{w}:ratio" for w in ("rate", "lower", "upper"))
    d = f"fairness:{metric}:ratio"
    out.append(rec(d, f"{p1} - {p2}"))
    out += spread_rules(f"fairness:{metric}", d, (p1, l1, u1), (p2, l2, u2))
    return out


def spread_rules(
    name: str, d: str, high: tuple[str, str, str], low: tuple[str, str, str]
) -> list[dict[str, Any]]:
    """``<name>_lower``/``_upper``: Newcombe's interval of the pair's difference ``d`` (rate,
    lower and upper Wilson limit of each side) as a spread, [max(L, 0), max(U, −L)]
    (``intervals.spread_limits``: the truth may run the other way by −L)."""
    (p1, l1, u1), (p2, l2, u2) = high, low
    neg_lower = f"-(\n  {d}\n  - sqrt(({p1} - {l1}) ^ 2\n    + ({u2} - {p2}) ^ 2)\n)"
    upper = f"(\n  {d}\n  + sqrt(({u1} - {p1}) ^ 2\n    + ({p2} - {l2}) ^ 2)\n)"
    return [
        rec(f"{name}_lower:ratio", f"clamp_min(-{neg_lower}, 0)\n"),
        rec(f"{name}_upper:ratio", f"{upper} >= {neg_lower}\nor {neg_lower}\n"),
    ]


def equalized_odds_rules() -> list[dict[str, Any]]:
    """The larger of the TPR and FPR gaps (the TPR gap on a tie, as the monitor), with that
    gap's samples and the interval of a maximum: the larger of each limit of the two gaps'
    Newcombe intervals at the level over both gaps' pairs (``fairness.eod_interval``); with
    one gap defined, that gap's own interval."""
    m = "equalized_odds_difference"
    z = f"fairness:{m}_z:value"
    out = []
    for gap in ("tpr_gap", "fpr_gap"):
        lim = {}
        for side in ("high", "low"):
            p, n = f"fairness:{gap}_{side}_rate:ratio", f"fairness:{gap}_{side}_samples:sum"
            for what, sign in (("lower", "-"), ("upper", "+")):
                lim[side, what] = f"fairness:{m}_{gap}_{side}_{what}:ratio"
                out.append(rec(lim[side, what], wilson_limit(p, n, z, sign)))
        p1, p2 = f"fairness:{gap}_high_rate:ratio", f"fairness:{gap}_low_rate:ratio"
        d = f"fairness:{gap}:ratio"
        l1, u1, l2, u2 = (lim[s, w] for s in ("high", "low") for w in ("lower", "upper"))
        out += spread_rules(f"fairness:{m}_{gap}", d, (p1, l1, u1), (p2, l2, u2))
    out += [
        rec(
            f"fairness:{m}_tpr:selected",
            f"fairness:tpr_gap:ratio unless on ({ATTR})"
            f" (fairness:fpr_gap:ratio > on ({ATTR}) fairness:tpr_gap:ratio)",
        )
    ]
    for what, kind in (("", "ratio"), ("_samples", "min")):
        out.append(
            rec(
                f"fairness:{m}{what}:{kind}",
                f"fairness:tpr_gap{what}:{kind} and on ({ATTR}) fairness:{m}_tpr:selected\n"
                f"or on ({ATTR}) fairness:fpr_gap{what}:{kind}\n",
            )
        )
    for what in ("_lower", "_upper"):  # a maximum's interval (fairness.eod_interval)
        out.append(
            rec(
                f"fairness:{m}{what}:ratio",
                f"max by ({ATTR}) (\n"
                f'  label_replace(fairness:{m}_tpr_gap{what}:ratio, "gap", "tpr", "", "")\n'
                f'  or label_replace(fairness:{m}_fpr_gap{what}:ratio, "gap", "fpr", "", "")\n)\n'
                f"and on ({ATTR}) fairness:tpr_gap:ratio and on ({ATTR}) fairness:fpr_gap:ratio\n"
                f"or on ({ATTR}) fairness:tpr_gap{what}:ratio\n"
                f"or on ({ATTR}) fairness:fpr_gap{what}:ratio\n",
            )
        )
    return out


def blind_rules(gaps: tuple[str, ...]) -> list[dict[str, Any]]:
    """Selective labels as ``metrics/blindness.py`` decides them, on counts summed across
    replicas. Per group, predicted class c is unlabelled when the group has class-c decisions,
    none of them labelled, and some labelled decision; a rate is blind when its denominator
    spans an unlabelled class; a gap when the rate of any group it compares (``_judged``) is,
    whichever two groups topk/bottomk pick on a tie (comparing fewer than two: any eligible group
    with the rate defined); the equalized-odds difference when either gap is.
    Alerts neither fire nor resolve on a blind metric (found by a review: a group whose
    declined cases are never labelled has TPR = FPR = 1, and the EOD alert paged on that)."""
    n, fav = summed(("n",)), summed(("favourable",))
    lab1, lab0 = summed(("tp", "fp")), "fairness:predicted_negatives_labelled:sum"
    lab = f"({lab0} + on ({GROUP}) {lab1})"  # labelled: TP + FP + FN + TN
    one = "fairness:predicted_class_1:sum"  # decisions predicted 1 (the model's favourable)
    out = [
        rec(lab0, f"sum by ({GROUP}) (fairness_false_negatives + fairness_true_negatives)"),
        rec(
            one,
            f"{fav} and on (model) (fairness:favourable_class:value == 1)\n"
            f"or ({n} - {fav}) and on (model) (fairness:favourable_class:value == 0)\n"
            f"or {fav} unless on (model) fairness:favourable_class:value\n",
        ),
    ]
    for c, labelled, decided in ((0, lab0, f"{n} - {one}"), (1, lab1, one)):
        out.append(
            rec(
                f"fairness:class_{c}_unlabelled:info",
                f"{lab} > bool 0 == 1\nand on ({GROUP}) {labelled} == 0\n"
                f"and on ({GROUP}) ({decided}) > 0\n",
            )
        )
    for f in GROUP_RATES:
        if f.bounded and f.counts and all(c in CELL_CLASS for c in f.counts):
            classes = sorted({CELL_CLASS[c] for c in f.counts})
            body = " or ".join(f"fairness:class_{c}_unlabelled:info" for c in classes)
            out.append(rec(f"fairness:{f.name}_blind:info", body))
    for metric in gaps:
        spec = METRICS[metric]
        if not spec.needs_labels:
            continue
        rate = f"fairness:{RATE_FAMILY[spec.rate].name}"
        out.append(
            rec(
                f"fairness:{metric}_blind:info",
                f"clamp_max(count by ({ATTR}) (\n"
                f"  {rate}_judged:ratio and on ({GROUP}) {rate}_blind:info\n"
                f"  or ({rate}:ratio and on ({GROUP}) {rate}_blind:info)\n"
                f"    unless on ({ATTR}) (count by ({ATTR}) ({rate}_judged:ratio) >= 2)\n"
                "), 1)\n",
            )
        )
    eod = " or ".join(f"fairness:{g}_blind:info" for g in ("tpr_gap", "fpr_gap"))
    out.append(rec("fairness:equalized_odds_difference_blind:info", f"max by ({ATTR}) ({eod})"))
    return out
