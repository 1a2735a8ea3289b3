"""The Prometheus rules' search beyond the most extreme pair (``outputs/promql_pairs.py``)
against the monitor's (``metrics/pairs.py`` and the rule check that pages on it), through
promtool, on random attribute sets where a large group's pair is wholly past the bound behind
a small group's noisier extreme one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from monitor.alerts.lifecycle import AlertBook
from monitor.alerts.window_rules import check_rule
from monitor.config.spec import parse_config
from monitor.metrics.pairs import _every_pair
from monitor.metrics.results import AttributeResult, attribute_result
from monitor.outputs.promql import _alert, rules_yaml
from tests.helpers import cell_counts
from tests.outputs.test_prometheus_rules import promtool_tables, table_series

MIN = 30
RULES = [
    {"name": "Ratio", "metric": "disparate_impact_ratio", "op": "<", "bound": 0.8,
     "significant": True, "min_samples": MIN},
    {"name": "Tpr", "metric": "tpr_gap", "op": ">", "bound": 0.1, "significant": True,
     "min_samples": MIN},
]  # fmt: skip
CONFIG = parse_config(
    {"models": {"m": {"attributes": {"g": {}}, "min_samples": MIN}}, "alerts": {"rules": RULES}}
)
SPEC = CONFIG.models["m"]


def _group(
    rng: np.random.Generator,
    n: int,
    rate: float,
    tpr: float,
    share: tuple[float, float] = (0.3, 0.6),
) -> tuple[int, ...]:
    """(n, favourable, TP, FP, FN, TN): labelled positives a ``share`` of ``n``."""
    pos = round(n * float(rng.uniform(*share)))
    tp = round(pos * tpr)
    return (n, round(n * rate), tp, 0, pos - tp, 0)


def _table(rng: np.random.Generator) -> list[tuple[int, ...]]:
    """2–5 groups of random sizes and rates, or (half the sets) the review's shape: two large
    groups with a ratio of 0.6–0.78 (a TPR gap of 0.12–0.2) and a small one further out. No
    ties (the rules may pick another, equally extreme, group than the monitor)."""
    if rng.random() < 0.5:
        rate, tpr = rng.uniform(0.4, 0.6), rng.uniform(0.75, 0.9)
        rows = [
            _group(rng, int(rng.integers(3000, 6000)), rate, tpr),
            _group(rng, int(rng.integers(3000, 6000)), rate * rng.uniform(0.6, 0.78),
                   tpr - rng.uniform(0.12, 0.2)),
            _group(rng, int(rng.integers(40, 80)), rate * rng.uniform(0.4, 0.7),
                   tpr - rng.uniform(0.2, 0.3), (0.8, 1.0)),
        ]  # fmt: skip
    else:
        rows = [
            _group(rng, int(rng.choice([rng.integers(30, 120), rng.integers(1500, 6000)])),
                   rng.uniform(0.25, 0.55), rng.uniform(0.5, 0.85))
            for _ in range(int(rng.integers(2, 6)))
        ]  # fmt: skip
    rates = [(f / n, tp / (tp + fn)) for n, f, tp, _, fn, _ in rows]
    if len({r for r, _ in rates}) < len(rows) or len({t for _, t in rates}) < len(rows):
        return _table(rng)
    return rows


def _cells(rows: list[tuple[int, ...]]) -> Any:
    keys = ("n", "fav", "tp", "fp", "fn", "tn")
    return cell_counts(*(dict(zip(keys, row, strict=True)) for row in rows))


def _promtool_got(tmp_path: Path, series: list[dict[str, str]], exprs: list[str]) -> str:
    """promtool's report of every sample of ``exprs`` at 3m (each expected to be empty, so
    that promtool prints what it got)."""
    checks = [{"expr": e, "eval_time": "3m", "exp_samples": []} for e in exprs]
    r = promtool_tables(tmp_path, series, checks)
    return r.stdout + r.stderr


def _samples(out: str, name: str) -> dict[tuple[str, str], float]:
    """(attribute, group or "") -> value of one recorded series in promtool's report."""
    got = {}
    for m in re.finditer(r"\{([^{}]*)\} ([-+0-9.eEInfa]+)", out):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m[1]))
        if labels.get("__name__") == name:
            got[labels["attribute"], labels.get("group", "")] = float(m[2])
    return got


def _fires(rule_index: int, r: AttributeResult, attribute: str) -> bool:
    """Does the monitor's rule check find its condition on this result (pending or firing)?"""
    book = AlertBook()
    t = check_rule(book, CONFIG.alerts.rules[rule_index], r, "m", "1h", attribute, 0.0,
                   confidence=CONFIG.confidence)  # fmt: skip
    return t is not None and t.alert.state in ("pending", "firing")  # its condition holds


def test_any_pair_search_in_promql_is_the_monitors_on_random_tables(tmp_path: Path) -> None:
    """60 random sets: each group's MOVER-R upper limit against the reference, and each
    group's Newcombe lower limit (as a spread) against the highest and the lowest TPR (the
    reported pair left out), equal the monitor's numbers for those pairs to 1e-9 (relative); the ratio alert fires on exactly
    the sets the monitor's rule fires on, the TPR-gap alert on those where a pair with the
    highest or the lowest group is wholly past the bound (all of them, here), and both fire on
    sets where only a pair other than the most extreme one is (so the old rules fail this)."""
    (tmp_path / "rules.yml").write_text(rules_yaml(CONFIG, source="x.yaml"))
    rng = np.random.default_rng(2026)
    series: list[dict[str, str]] = []
    results: dict[str, AttributeResult] = {}
    for t in range(60):
        rows = _table(rng)
        labels = [f"g{i}" for i in range(len(rows))]
        results[f"t{t}"] = attribute_result(_cells(rows), labels, SPEC, f"t{t}", confidence=0.95)
        series += table_series(f"t{t}", rows)
    alerts = [  # named, to be found in promtool's report
        f"label_replace(group by (model, window, attribute) ({_alert(rule)['expr']}), "
        f'"__name__", "fires_{rule.name}", "", "")'
        for rule in CONFIG.alerts.rules
    ]
    names = ["fairness:disparate_impact_pair_upper:ratio", "fairness:tpr_gap_below_high_lower:ratio",
             "fairness:tpr_gap_above_low_lower:ratio"]  # fmt: skip
    out = _promtool_got(tmp_path, series, names + alerts)
    want: dict[str, dict[tuple[str, str], float]] = {n: {} for n in names}
    fires: list[set[str]] = [set(), set()]
    behind = [0, 0]  # sets where the monitor fires on a pair other than the reported one
    for a, r in results.items():
        ratio = _every_pair(r, "disparate_impact_ratio", MIN, 0.95, None)
        reported = r.disparity("disparate_impact_ratio").low_group  # judged by its own rule
        for g, up in zip(ratio.low.tolist(), ratio.upper.tolist(), strict=True):
            if g != reported:
                want[names[0]][a, r.labels[g]] = up
        d = r.disparity("tpr_gap")
        tpr = _every_pair(r, "tpr_gap", MIN, 0.95, None)
        for hi, lo, low in zip(
            tpr.high.tolist(), tpr.low.tolist(), tpr.lower.tolist(), strict=True
        ):
            if (hi, lo) == (d.high_group, d.low_group) or lo == hi:
                continue  # the reported pair: judged by the gap's own interval
            if hi == d.high_group:
                want[names[1]][a, r.labels[lo]] = low
            if lo == d.low_group:
                want[names[2]][a, r.labels[hi]] = low
        for k, metric in enumerate(("disparate_impact_ratio", "tpr_gap")):
            if _fires(k, r, a):
                fires[k].add(a)
                reported = r.disparity(metric)
                behind[k] += not (reported.upper < 0.8 if k == 0 else reported.lower > 0.1)
    for name in names:
        got = _samples(out, name)
        assert set(got) == set(want[name]), (name, out[-2000:])
        for key, v in got.items():
            assert v == pytest.approx(want[name][key], rel=1e-9, abs=1e-12), (name, key)
    assert min(behind) >= 8, behind  # the search is what fires on these
    for k, rule in enumerate(CONFIG.alerts.rules):
        got_sets = {a for a, _ in _samples(out, f"fires_{rule.name}")}
        assert got_sets == fires[k], (rule.name, got_sets ^ fires[k])


def test_the_rules_that_need_no_search_do_not_get_it() -> None:
    """A rule judged on the reported pair alone in the monitor (not significant, the other
    way, the equalized-odds difference) has no second way to fire in PromQL, and the pair
    series are recorded for the disparities a configured rule searches only."""
    cfg: dict[str, Any] = {"models": {"m": {"attributes": {"g": {}}}}, "alerts": {"rules": [
        {"name": "A", "metric": "disparate_impact_ratio", "op": "<", "bound": 0.8},
        {"name": "B", "metric": "tpr_gap", "op": "<", "bound": 0.1, "significant": True},
        {"name": "C", "metric": "equalized_odds_difference", "op": ">", "bound": 0.1,
         "significant": True},
        {"name": "D", "metric": "equal_opportunity_difference", "op": ">", "bound": 0.1,
         "significant": True},
    ]}}  # fmt: skip
    config = parse_config(cfg)
    exprs = {r.name: _alert(r)["expr"] for r in config.alerts.rules}
    for name in "ABC":
        assert "_pair_upper" not in exprs[name] and "_low_lower" not in exprs[name], name
    assert "fairness:tpr_gap_above_low_lower:ratio" in exprs["D"]  # an alias reads its gap's
    # only what a rule reads is recorded (a series per group, window and attribute set)
    recorded = {
        r.get("record")
        for r in yaml.safe_load(rules_yaml(config, source="x"))["groups"][0]["rules"]
    }
    assert "fairness:tpr_gap_above_low_lower:ratio" in recorded
    assert (
        not {
            f"fairness:{m}_{w}:ratio"
            for m in ("fpr_gap", "ppv_gap", "statistical_parity_difference")
            for w in ("each_lower", "below_high_lower", "above_low_lower")
        }
        & recorded
    )
    assert "fairness:disparate_impact_pair_upper:ratio" not in recorded
