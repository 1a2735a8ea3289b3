"""Each compared pair's level in PromQL: ``fairness:<metric>_z:value`` per (model, window,
attribute), the normal quantile of the pair's interval (``metrics/intervals.py``: ``adjusted``).

Why: a disparity reports the most extreme pair of G groups (max − min; the lowest rate against
the highest), so its interval is taken at the level that holds over every pair it was chosen
from, 1 − (1 − confidence)/m (Bonferroni), m = G(G − 1)/2, or G − 1 against a configured
reference group. G is known only once the counts are summed across replicas, so z is computed
in PromQL, with Wichura's algorithm AS241 (Applied Statistics 37, 1988: the rational
approximations, accurate to ~1e−16, that Python's ``statistics.NormalDist.inv_cdf`` and so the
monitor use), written here as PromQL arithmetic on the level p = ½ + level/2.
"""

from __future__ import annotations

from typing import Any

from monitor.metrics.registry import METRICS, RATE_FAMILY
from monitor.outputs.promql_disparities import ATTR, rec

# AS241's coefficients (Wichura 1988, PPND16), highest power first: numerator, denominator
_CENTRAL = (
    (2509.0809287301226727, 33430.575583588128105, 67265.770927008700853,
     45921.953931549871457, 13731.693765509461125, 1971.5909503065514427,
     133.14166789178437745, 3.387132872796366608),
    (5226.495278852854561, 28729.085735721942674, 39307.89580009271061,
     21213.794301586595867, 5394.1960214247511077, 687.1870074920579083,
     42.313330701600911252, 1.0),
)  # fmt: skip
_TAIL = (
    (7.7454501427834140764e-4, 0.0227238449892691845833, 0.24178072517745061177,
     1.27045825245236838258, 3.64784832476320460504, 5.7694972214606914055,
     4.6303378461565452959, 1.42343711074968357734),
    (1.05075007164441684324e-9, 5.475938084995344946e-4, 0.0151986665636164571966,
     0.14810397642748007459, 0.68976733498510000455, 1.6763848301838038494,
     2.05319162663775882187, 1.0),
)  # fmt: skip
_FAR = (
    (2.01033439929228813265e-7, 2.71155556874348757815e-5, 0.0012426609473880784386,
     0.026532189526576123093, 0.29656057182850489123, 1.7848265399172913358,
     5.4637849111641143699, 6.6579046435011037772),
    (2.04426310338993978564e-15, 1.4215117583164458887e-7, 1.8463183175100546818e-5,
     7.868691311456132591e-4, 0.0148753612908506148525, 0.13692988092273580531,
     0.59983220655588793769, 1.0),
)  # fmt: skip

LEVEL, TAIL, Z = "fairness:pair_level:value", "fairness:pair_tail:value", "fairness:pair_z:value"


def _horner(coefficients: tuple[float, ...], r: str) -> str:
    """((c₇·r + c₆)·r + … )·r + c₀, in AS241's order of operations."""
    out = repr(coefficients[0])
    for c in coefficients[1:]:
        out = f"({out} * {r} + {c!r})"
    return out


def _ratio(pair: tuple[tuple[float, ...], tuple[float, ...]], r: str, q: str = "") -> str:
    """numerator(r)·q / denominator(r) (AS241's order: the numerator times q, then divided)."""
    num = _horner(pair[0], r)
    return f"{num}{f' * {q}' if q else ''}\n  / {_horner(pair[1], r)}"


def pair_counts() -> dict[str, str]:
    """Per PromQL disparity: the number of pairs its pair was chosen from, from the groups it
    compares (as ``intervals.comparisons``: a gap's judged groups, the DIR's eligible ones)."""
    sr = f"count by ({ATTR}) (fairness:selection_rate:ratio)"
    pairs = {
        "disparate_impact": f"({sr} - 1 and on (model, attribute) fairness:reference_group:info)"
        f"\n  or {sr} * ({sr} - 1) / 2"
    }
    for name, m in METRICS.items():
        if m.interval == "newcombe" and m.rate and m.attribute == name:
            c = f"count by ({ATTR}) (fairness:{RATE_FAMILY[m.rate].name}_judged:ratio)"
            pairs[name] = f"{c} * ({c} - 1) / 2"
    # the larger of the TPR and FPR gaps: both gaps' intervals at the level over both's pairs
    pairs["equalized_odds_difference"] = f"({pairs['tpr_gap']})\n  + ({pairs['fpr_gap']})"
    return pairs


def pair_level_rules(confidence: float) -> list[dict[str, Any]]:
    """The level p = ½ + level/2 of every disparity's pair (a ``metric`` label), its normal
    quantile by AS241 (three regions: |p − ½| ≤ 0.425; r = √(−ln(1 − p)) ≤ 5; beyond), and one
    ``fairness:<metric>_z:value`` per disparity (read by its pair's Wilson limits)."""
    alpha = 1.0 - confidence
    counts = pair_counts()
    level = " or ".join(
        f'label_replace(\n  ({pairs}) > 0,\n  "metric", "{name}", "", "")\n'
        for name, pairs in counts.items()
    )
    p, t = LEVEL, TAIL
    # one pair: the configured level itself (Python returns it as is: no 1 − (1 − c) rounding)
    m = "fairness:pairs:value"
    adjusted = f"(({confidence!r} + 0 * {m}) and ({m} == 1) or (1 - {alpha!r} / {m}))"
    q = f"({p} - 0.5)"
    central = f"({_ratio(_CENTRAL, f'(0.180625 - {q} * {q})', q)})"
    z = (
        f"{central}\n  and ({p} - 0.5 <= 0.425)\n"
        f"or ({_ratio(_TAIL, f'({t} - 1.6)')})\n  and ({t} <= 5)\n"
        f"or ({_ratio(_FAR, f'({t} - 5.0)')})\n"
    )
    out = [
        rec(m, level),
        rec(p, f"0.5 + {adjusted} / 2"),
        rec(t, f"sqrt(-ln(1 - {p}))"),
        rec(Z, z),
    ]
    out += [
        rec(f"fairness:{name}_z:value", f'max without (metric) ({Z}{{metric="{name}"}})')
        for name in counts
    ]
    return out
