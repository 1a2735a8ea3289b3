"""The generated Prometheus rules for score-distribution parity (``metrics/score_parity.py``):
the Kolmogorov–Smirnov and Wasserstein-1 distances of each group's binned score distribution
from the score reference group's, with their DKW intervals, over counts summed across replicas.

The monitor exports each group's score histogram as cumulative counts per bin edge
(``fairness_score_bucket_predictions{…, le}``, ``le`` = the bin's upper edge, the last "1"), so
the CDF is ``Σ replicas bucket / Σ replicas scored`` and everything after is elementwise:

* the score reference: the configured reference group when it has ``min_samples`` scored
  predictions (else none: no distances), or with none configured the eligible group with the
  most (on a tie, ``topk`` may pick another group
  than the monitor's first index: same distances to the others, maybe another reference);
* ``KS_g = max_le |F_g − F_ref|``, ``W1_g = Σ_{le < 1} |F_g − F_ref| / B``;
* ``ε_n = √(ln(4/α) / 2n)``; the worst group's interval is ``KS ± (ε_g + ε_ref)·s`` (W1:
  ``× (1 − 1/B)``), clipped to [0, 1], with ``s = √(ln(2(m+1)/α) / ln(4/α))`` for the m
  groups compared with the reference (the worst of m holds over all of them:
  ``score_parity.compared_scale``); ``_samples:min`` is the smaller scored count of the two.
"""

from __future__ import annotations

import math
from typing import Any

ATTR = "model, window, attribute"
GROUP = "model, window, attribute, group"
SCORED = "fairness:scored_predictions:sum"
ELIGIBLE = "fairness:eligible_scored:sum"
REF = "fairness:score_reference:info"
GAP = "fairness:score_cdf_gap:ratio"
MARGIN = "fairness:score_margin:ratio"
SCALE = "fairness:score_pairs_scale:ratio"


def _rec(name: str, expr: str) -> dict[str, Any]:
    return {"record": name, "expr": expr}


def score_rules(confidence: float, default_min_samples: int) -> list[dict[str, Any]]:
    """The recording rules of ``score_ks_distance`` and ``score_wasserstein_distance`` (and of
    each group's distances, the reference and the margins they rest on)."""
    log4 = math.log(4.0 / (1.0 - confidence))  # ln(4/α)
    half_log = log4 / 2.0
    cdf = "fairness:score_cdf:ratio"
    out = [
        _rec(
            "fairness:score_bucket:sum",
            f"sum by ({GROUP}, le) (fairness_score_bucket_predictions)",
        ),
        _rec(
            ELIGIBLE,
            f"{SCORED} >= on (model) group_left fairness:min_samples:value\n"
            f"or ({SCORED} unless on (model) fairness:min_samples:value) >= {default_min_samples}\n",
        ),
        _rec(
            REF,
            f"{ELIGIBLE} * 0 + 1 and on (model, attribute, group) fairness:reference_group:info\n"
            f"or on ({ATTR}) (\n  topk by ({ATTR}) (1, {ELIGIBLE}) * 0 + 1\n"
            "  unless on (model, attribute) fairness:reference_group:info\n)\n",
        ),
        _rec(cdf, f"fairness:score_bucket:sum / on ({GROUP}) group_left {SCORED}"),
        _rec("fairness:score_bins:count", f"count without (le) ({cdf})"),
        _rec(
            GAP,
            f"abs(\n  ({cdf} and on ({GROUP}) {ELIGIBLE} unless on ({GROUP}) {REF})\n"
            f"  - on ({ATTR}, le) group_left max without (group) ({cdf} and on ({GROUP}) {REF})\n)\n",
        ),
        _rec("fairness:group_score_ks_distance:ratio", f"max without (le) ({GAP})"),
        _rec(
            "fairness:group_score_wasserstein_distance:ratio",
            f'sum without (le) ({GAP}{{le!="1"}}) / on ({GROUP}) fairness:score_bins:count',
        ),
        _rec(
            MARGIN,
            f"sqrt({half_log!r} / {SCORED})\n"
            f"+ on ({ATTR}) group_left max without (group) "
            f"(sqrt({half_log!r} / {SCORED}) and on ({GROUP}) {REF})\n"
            f"and on ({GROUP}) fairness:group_score_ks_distance:ratio\n",
        ),
        _rec(
            SCALE,
            f"sqrt(({math.log(2.0 / (1.0 - confidence))!r} + ln(count by ({ATTR}) "
            f"(fairness:group_score_ks_distance:ratio) + 1)) / {log4!r})",
        ),
    ]
    for name, margin in (
        ("score_ks_distance", MARGIN),
        ("score_wasserstein_distance", f"{MARGIN} * (1 - 1 / fairness:score_bins:count)"),
    ):
        per_group = f"fairness:group_{name}:ratio"
        worst = f"topk by ({ATTR}) (1, {per_group})"
        factor = f"({margin}) * on ({ATTR}) group_left {SCALE}"
        out += [
            _rec(f"fairness:{name}:ratio", f"max by ({ATTR}) ({per_group})"),
            _rec(
                f"fairness:{name}_lower:ratio",
                f"clamp_min(max by ({ATTR}) ({worst} - on ({GROUP}) {factor}), 0)",
            ),
            _rec(
                f"fairness:{name}_upper:ratio",
                f"clamp_max(max by ({ATTR}) ({worst} + on ({GROUP}) {factor}), 1)",
            ),
            _rec(
                f"fairness:{name}_samples:min",
                f"min by ({ATTR}) (\n  {SCORED} and on ({GROUP}) {worst}\n"
                f"  or {SCORED} and on ({GROUP}) {REF}\n)\n",
            ),
        ]
    return out
