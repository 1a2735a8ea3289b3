"""Beyond the most extreme pair, in PromQL: may a significant rule fire on another pair?

Why: a disparity reports its most extreme pair with that pair's interval. With three or more
groups that pair is often the smallest, noisiest group, whose interval reaches back past the
bound while a larger group's pair is wholly beyond it (a 0.50 of 5,000, b 0.35 of 5,000, c 0.30
of 40: c vs a 0.60 [0.32, 0.98] is the lowest ratio, b vs a 0.70 [0.67, 0.73] is wholly below
0.8). The monitor's significant rules page on any compared pair wholly past the bound
(``monitor/metrics/pairs.py``); these rules give the Prometheus alerts the same search:

* the impact ratio compares each group with the reference, so every pair the monitor searches
  is here: per group, the MOVER-R upper limit of its ratio to the reference;
* a one-rate gap compares every two groups, and PromQL cannot join a vector with itself on two
  different groups; so each group is compared with the highest-rate group and with the
  lowest-rate one (2·G pairs of G(G−1)/2): Newcombe's lower limit as a spread, max(L, 0).

Every pair is at the level of the reported one (``fairness:<metric>_z:value``), which already
holds over all the pairs the disparity was chosen from, so paging on any of them keeps the
rule's guarantee. The pairs the gap search leaves out are documented (docs/metrics.md).
The series are recorded only for the disparities a configured significant rule searches: each
is a series per group, window and attribute set.
"""

from __future__ import annotations

from typing import Any

from monitor.config.rules import AlertRule
from monitor.metrics.registry import METRICS, RATE_FAMILY
from monitor.outputs.promql_disparities import ATTR, GROUP, rec, summed, wilson_limit

DIR = "disparate_impact"
JOIN = f"on ({ATTR}) group_left"  # a series per (model, window, attribute) onto each group


def _each(metric: str, p: str, n: str, sides: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each group's Wilson limits at the pair level of ``metric``: ``<metric>_each_<side>``."""
    z = f"({p} * 0 + on ({ATTR}) group_left fairness:{metric}_z:value)"  # z on each group
    sign = {"lower": "-", "upper": "+"}
    return [rec(f"fairness:{metric}_each_{s}:ratio", wilson_limit(p, n, z, sign[s])) for s in sides]


def searched(rules: tuple[AlertRule, ...]) -> list[str]:
    """The disparities (``MetricSpec.attribute``) some configured rule searches past the
    reported pair, in the registry's order: only these get the per-group pair series (each a
    series per group, window and attribute set in Prometheus)."""
    wanted = {METRICS[r.metric].attribute for r in rules if any_pair_past(r, "") is not None}
    return [m for m in dict.fromkeys(s.attribute for s in METRICS.values()) if m in wanted]


def pair_search_rules(metrics: list[str]) -> list[dict[str, Any]]:
    """Per group: the limit of its pair(s) that a significant rule compares with the bound,
    the reported pair left out (the disparity's own interval judges it, as in the monitor),
    for ``metrics`` (:func:`searched`)."""
    out: list[dict[str, Any]] = []
    for metric in metrics:
        out += _ratio_pairs() if metric == DIR else _gap_pairs(metric)
    return out


def _gap_pairs(metric: str) -> list[dict[str, Any]]:
    """Each group's Newcombe lower limit (as a spread) against the highest and the lowest."""
    spec = METRICS[metric]
    p = f"fairness:{RATE_FAMILY[spec.rate].name}_judged:ratio"
    out = _each(metric, p, summed(spec.counts), ("lower", "upper"))
    lo, hi = (f"fairness:{metric}_each_{s}:ratio" for s in ("lower", "upper"))
    h_rate, h_lo, l_rate, l_hi = (
        f"fairness:{metric}_{w}:ratio" for w in ("high_rate", "high_lower", "low_rate", "low_upper")
    )
    # max(L, 0), L = d − √((p₁ − l₁)² + (u₂ − p₂)²), 1 the higher rate (Newcombe 1998,
    # method 10; a spread's lower limit, intervals.spread_limits)
    below_high = (
        f"clamp_min(\n  -({p} - {JOIN} {h_rate})\n"
        f"  - sqrt(({hi} - {p}) ^ 2 + {JOIN} () ({h_rate} - {h_lo}) ^ 2),\n  0)\n"
        f"unless on ({GROUP}) fairness:{metric}_high_group:ratio\n"
        f"unless on ({GROUP}) fairness:{metric}_low_group:ratio\n"
    )
    above_low = (
        f"clamp_min(\n  {p} - {JOIN} {l_rate}\n"
        f"  - sqrt(({p} - {lo}) ^ 2 + {JOIN} () ({l_hi} - {l_rate}) ^ 2),\n  0)\n"
        f"unless on ({GROUP}) fairness:{metric}_low_group:ratio\n"
        f"unless on ({GROUP}) fairness:{metric}_high_group:ratio\n"
    )
    out += [
        rec(f"fairness:{metric}_below_high_lower:ratio", below_high),
        rec(f"fairness:{metric}_above_low_lower:ratio", above_low),
    ]
    return out


def _ratio_pairs() -> list[dict[str, Any]]:
    """Each group's MOVER-R upper limit of its ratio to the reference."""
    sr = "fairness:selection_rate:ratio"
    out = _each(DIR, sr, summed(("n",)), ("upper",))
    u1 = f"fairness:{DIR}_each_upper:ratio"
    p2, l2 = (f"fairness:{DIR}_high_{w}:ratio" for w in ("rate", "lower"))
    pp, den = f"({sr} * {JOIN} {p2})", f"({l2} * (2 * {p2} - {l2}))"
    # U = [p₁p₂ + √((p₁p₂)² − u₁(2p₁ − u₁)·l₂(2p₂ − l₂))] / [l₂(2p₂ − l₂)], 1 = the group,
    # 2 = the reference (as fairness:disparate_impact_upper:ratio; the reference left out)
    upper = (
        f"(\n  {pp}\n  + sqrt(clamp_min({pp} ^ 2\n"
        f"    - {u1} * (2 * {sr} - {u1}) * {JOIN} () {den}, 0))\n"
        f") / {JOIN} () ({den} > 0)\n"
        f"unless on ({GROUP}) fairness:{DIR}_high_group:ratio\n"
        f"unless on ({GROUP}) fairness:{DIR}_low_group:ratio\n"
        f"and on ({ATTR}) fairness:{DIR}:ratio\n"
    )
    return [*out, rec(f"fairness:{DIR}_pair_upper:ratio", upper)]


def any_pair_past(rule: AlertRule, sel: str) -> str | None:
    """The alert's second way to fire: another compared pair wholly past the bound, both of its
    groups with the rule's ``min_samples`` in the rate's denominator; ``None`` for a rule the
    monitor judges on the reported pair alone (not significant, an ``op`` the other way, the
    equalized-odds difference, score distances)."""
    spec = METRICS[rule.metric]
    if not rule.significant or spec.max_of or spec.rate not in RATE_FAMILY:
        return None
    if spec.interval not in ("mover-wilson", "newcombe") or rule.op != ("<" if spec.ratio else ">"):
        return None
    m, least = spec.attribute, rule.min_samples
    den = summed(spec.counts)
    if spec.ratio:
        return (
            f"fairness:{DIR}_pair_upper:ratio{{{sel}}} < {rule.bound!r}\n"
            f"      and on ({GROUP}) {den} >= {least}\n"
            f"      and on ({ATTR}) fairness:{DIR}_high_samples:sum >= {least}"
        )
    return (
        f"(\n        fairness:{m}_below_high_lower:ratio{{{sel}}} > {rule.bound!r}\n"
        f"          and on ({ATTR}) fairness:{m}_high_samples:sum >= {least}\n"
        f"        or fairness:{m}_above_low_lower:ratio{{{sel}}} > {rule.bound!r}\n"
        f"          and on ({ATTR}) fairness:{m}_low_samples:sum >= {least}\n"
        f"      )\n      and on ({GROUP}) {den} >= {least}"
    )
