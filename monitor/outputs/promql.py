"""``fairness-monitor prometheus-rules``: the Prometheus recording and alerting rules, generated
from the metric registry and a configuration — the same numbers as the monitor, aggregated
across replicas.

Why generated: rules written by hand re-implemented Wilson and MOVER-R with z fixed at 1.96 and
always took the highest-rate group as the reference, so with ``reference_groups`` or another
``confidence`` Grafana and the monitor disagreed. Here every constant comes from the config (z of
its ``confidence``, each model's ``min_samples`` and reference groups, the alert rules' bounds,
significance, ``for`` and hysteresis) and every formula from :mod:`monitor.metrics.intervals`,
written once more in PromQL:

* counts are summed across replicas first (``sum by (…, group)``), then divided — never an
  average of ratios; a group takes part when it has ``min_samples`` predictions (the model's,
  or the default for a model the config does not name) and the rate is defined (in a gap, also
  ``min_samples`` in the rate's own denominator);
* per-group Wilson limits, z = Φ⁻¹(½ + confidence/2):
  ``(p + z²/2n ± z·√(p(1−p)/n + z²/4n²)) / (1 + z²/n)`` clamped to [0, 1] (Wilson 1927);
* the disparate impact ratio compares the lowest-rate group with the configured reference group
  (else the highest-rate one), with the MOVER-R interval from both groups' Wilson limits
  (Donner & Zou 2012); gaps are max − min with Newcombe's hybrid score interval (1998, method
  10); the equalized-odds difference is the larger gap with a maximum's interval (both gaps'
  at the level over both gaps' pairs); every compared pair's Wilson limits are at the level
  that holds over the pairs it was chosen from (``promql_levels.py``);
* selective labels as ``metrics/blindness.py`` decides them, per group from the summed cells
  and the model's favourable class: a label-based alert neither fires nor resolves while its
  metric is blind (``promql_disparities.blind_rules``);
* an alert fires like the monitor's rule (the interval's far limit past the bound with
  ``significant``, both compared groups with the rule's ``min_samples``; a significant rule on
  any compared pair wholly past it, ``promql_pairs.py``) and, once firing,
  resolves past the bound by the hysteresis margin (``significant``: its interval too; ALERTS).

Rules with one evaluation time share a group, so alerts read the recording rules of the same
evaluation (rules in a group run in order). Ties between groups' rates may pick a different
(equally extreme) group than the monitor: the value is the same, its interval may differ.
Score-distribution distances: ``promql_scores.py``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from monitor.config.durations import format_duration
from monitor.config.rules import RUNBOOK, AlertRule
from monitor.config.spec import Config, ModelSpec, load_config
from monitor.metrics.registry import GROUP_RATES, METRICS, z_for
from monitor.outputs.promql_disparities import (
    ATTR,
    COUNT,
    GROUP,
    SUM_NAME,
    blind_rules,
    disparate_impact_rules,
    equalized_odds_rules,
    gap_rules,
    rec,
    summed,
)
from monitor.outputs.promql_health import HEALTH_GROUP, SELECTIVE_LABELS
from monitor.outputs.promql_levels import pair_level_rules
from monitor.outputs.promql_pairs import any_pair_past, pair_search_rules, searched
from monitor.outputs.promql_scores import score_rules

# max − min of one rate (aliases such as equal_opportunity_difference read their gap's rules)
GAPS = tuple(
    m.name
    for m in METRICS.values()
    if m.interval == "newcombe" and m.rate and m.attribute == m.name
)
DEFAULT_MIN_SAMPLES = ModelSpec.min_samples


def _s(value: str) -> str:
    """A PromQL string literal."""
    return json.dumps(value, ensure_ascii=False)


def _label_replace(expr: str, labels: dict[str, str]) -> str:
    for k, v in labels.items():
        expr = f"label_replace({expr}, {_s(k)}, {_s(v.replace('$', '$$'))}, '', '')"
    return expr


def _parameters(config: Config) -> list[dict[str, Any]]:
    """The configuration as series: each model's min_samples, each configured reference."""
    ms = " or ".join(
        _label_replace(f"vector({m.min_samples})", {"model": name})
        for name, m in config.models.items()
    )
    refs = [
        _label_replace("vector(1)", {"model": name, "attribute": attr, "group": group})
        for name, m in config.models.items()
        for attr, group in m.reference_groups.items()
    ]
    favourable = " or ".join(
        _label_replace(f"vector({m.favourable})", {"model": name})
        for name, m in config.models.items()
    )
    judged = " or ".join(
        _label_replace("vector(1)", {"model": name, "window": w.name, "attribute": s})
        for name, m in config.models.items()
        for w in m.windows
        for s in m.set_names
    )
    return [
        rec("fairness:min_samples:value", ms),
        # every (model, window, attribute set) the configuration judges: a firing alert whose
        # window or model is no longer configured resolves (as the monitor retires it)
        rec("fairness:judged:info", judged or "vector(1) unless vector(1)"),
        rec("fairness:favourable_class:value", favourable),  # which prediction is favourable
        # no reference group configured: an empty vector (every ratio uses the highest rate)
        rec("fairness:reference_group:info", " or ".join(refs) or "vector(1) unless vector(1)"),
    ]


def _sums() -> list[dict[str, Any]]:
    out = [rec(summed((f,)), f"sum by ({GROUP}) (fairness_{c})") for f, c in COUNT.items()]
    for cells in SUM_NAME:
        body = " + ".join(f"fairness_{COUNT[c]}" for c in cells)
        out.append(rec(summed(cells), f"sum by ({GROUP}) ({body})"))
    out.append(
        rec(
            "fairness:eligible_predictions:sum",
            "fairness:predictions:sum >= on (model) group_left fairness:min_samples:value\n"
            "or (fairness:predictions:sum unless on (model) fairness:min_samples:value)"
            f" >= {DEFAULT_MIN_SAMPLES}\n",
        )
    )
    out.append(
        rec(
            "fairness:label_coverage:ratio",
            "fairness:labelled_predictions:sum / fairness:predictions:sum",
        )
    )
    return out


def _rates(z: float) -> list[dict[str, Any]]:
    """Per eligible group: each bounded rate and its Wilson limits."""
    out = []
    for f in GROUP_RATES:
        if not f.bounded:
            continue
        p, n = f"fairness:{f.name}:ratio", summed(f.counts)
        out.append(
            rec(
                p,
                f"{summed(f.numerator)} / {n}\n"
                f"and on ({GROUP}) fairness:eligible_predictions:sum\n"
                f"and on ({GROUP}) {n} > 0\n",
            )
        )
        # a gap compares groups with min_samples in the rate's own denominator (as the monitor:
        # three labelled positives make a TPR of 0 or 1, no end of a gap)
        out.append(
            rec(
                f"fairness:{f.name}_judged:ratio",
                f"{p}\nand on ({GROUP}) (\n"
                f"  {n} >= on (model) group_left fairness:min_samples:value\n"
                f"  or ({n} unless on (model) fairness:min_samples:value) >= {DEFAULT_MIN_SAMPLES}\n"
                ")\n",
            )
        )
        for side, sign in (("lower", "-"), ("upper", "+")):
            out.append(
                rec(
                    f"fairness:{f.name}_{side}:ratio",
                    f"clamp(\n  (\n    {p} + {z * z / 2!r} / {n}\n"
                    f"    {sign} {z!r} * sqrt({p} * (1 - {p}) / {n} + {z * z / 4!r} / {n} ^ 2)\n"
                    f"  ) / (1 + {z * z!r} / {n}),\n  0, 1)\n",
                )
            )
    return out


def _alert(rule: AlertRule) -> dict[str, Any]:
    """One configured rule as a Prometheus alert, judged as the monitor judges it."""
    spec = METRICS[rule.metric]
    p = f"fairness:{spec.attribute}"
    sel = ",".join(
        f"{k}=~{_s('|'.join(re.escape(v) for v in vals))}"
        for k, vals in (("window", rule.windows), ("attribute", rule.attributes))
        if vals
    )
    name = f"Fairness{rule.name}"
    far, near = ("_upper", "_lower") if rule.op == "<" else ("_lower", "_upper")
    judged = p + far if rule.significant else p
    back = round(rule.bound + (rule.hysteresis if rule.op == "<" else -rule.hysteresis), 12)
    clears = " with its interval's near limit back past the bound" if rule.significant else ""
    rev = ">=" if rule.op == "<" else "<="
    near_back = f" and on ({ATTR}) {p}{near}:ratio {rev} {rule.bound!r}" if rule.significant else ""
    # selective labels: a blind metric is no news (blind_rules), written where it applies
    blind = f"unless on ({ATTR}) {p}_blind:info" if spec.needs_labels else ""
    same_line, next_line, deeper = ((f" {blind}", f"\n    {blind}", f"\n        {blind}")
                                    if blind else ("", "", ""))  # fmt: skip
    # a firing alert stays while its metric is not measured, as long as the configuration
    # still judges its window (a model it does not name: every window, as the rules read any
    # model) and the model's counts are still exported (an hour's grace for a restart): one
    # whose model, window or attribute set is gone for good resolves (a review)
    # a maximum recovers only when each of its metrics is measured (MetricSpec.max_of)
    parts = spec.max_of
    both = (
        f"\n        {' '.join(f'and on ({ATTR}) fairness:{g}:ratio' for g in parts)}"
        if parts
        else ""
    )
    # a significant rule fires on any compared pair wholly past the bound (promql_pairs.py)
    pair = any_pair_past(rule, sel)
    # (``or`` binds less tightly than ``unless``: both ways to fire in brackets before it)
    open_, other = ("(", f"\n    or on ({ATTR}) (\n      {pair}\n    ))") if pair else ("", "")
    alerts = f'ALERTS{{alertname="{name}", alertstate="firing"}}'
    firing = (
        f"(({alerts} and on ({ATTR}) fairness:judged:info{{{sel}}}\n"
        f"      or {alerts} unless on (model) fairness:judged:info)\n"
        f"    and on (model) group by (model) (present_over_time(fairness_predictions[1h])))"
    )
    # The value is the measured disparity, NaN while a firing alert's metric is not measured
    # (a compared group below min_samples, or gone; selective labels): as in the monitor, that
    # is no news and the alert stays firing until there is evidence of recovery (a review: the
    # series vanished and Prometheus resolved, then paged again after `for`).
    expr = (
        f"({p}:ratio{{{sel}}}{same_line}\n"
        f"  or on ({ATTR}) max by ({ATTR}) ({firing}) * NaN)\n"
        f"and on ({ATTR}) (\n"
        f"  ({open_}{judged}:ratio {rule.op} {rule.bound!r}\n"
        f"    and on ({ATTR}) {p}_samples:min >= {rule.min_samples}{other}{next_line})\n"
        f"  or on ({ATTR}) (\n"
        f"    {firing}\n"
        f"    unless on ({ATTR}) (\n"
        f"      {p}:ratio {rev} {back!r}{near_back}\n"
        f"        and on ({ATTR}) {p}_samples:min >= {rule.min_samples}"
        f"{both}{deeper})\n"
        "  )\n)\n"
    )
    limit = "its confidence interval's far limit" if rule.significant else "it"
    out: dict[str, Any] = {"alert": name, "expr": expr}
    if rule.for_:
        out["for"] = format_duration(rule.for_)
    out["labels"] = {"severity": rule.severity}
    measured = f'{rule.metric} {{{{ $value | printf "%.3f" }}}} {rule.op} {rule.bound}'
    # why a firing alert's metric may be unmeasured: the reasons that apply to it (a review:
    # a DIR whose reference rate is 0 read "a compared group below min_samples")
    why = ["a compared group below min_samples"]
    why += ["selective labels"] * spec.needs_labels + ["the reference rate at 0"] * spec.ratio
    unmeasured = f"{rule.metric} not measured now ({', or '.join(why)}): firing until it recovers"
    out["annotations"] = {
        "summary": f'{{{{ if eq (printf "%.3f" $value) "NaN" }}}}{unmeasured}{{{{ else }}}}'
        f"{measured}{{{{ end }}}}"
        " ({{ $labels.model }}, {{ $labels.attribute }}, window {{ $labels.window }})",
        "description": f"{spec.help} Fires when {limit} is {rule.op} {rule.bound} with at least"
        f" {rule.min_samples} samples in both compared groups (summed across replicas);"
        f" resolves at {back:g}{clears}."
        + (
            " It fires too on another compared pair wholly past the bound (its value stays the"
            " most extreme pair's; the per-group pair series say which)."
            if pair
            else ""
        ),
        "runbook_url": rule.runbook_url or f"{RUNBOOK}#{rule.name.lower()}",
    }
    return out


class _Dumper(yaml.SafeDumper):
    """Block lists indented under their key, multi-line PromQL as literal blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else ('"' if "{{" in data or ": " in data else None)
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def rules_yaml(config: Config, *, source: str) -> str:
    """The whole rules file for ``config`` (``source``: the config path, for the header)."""
    z = z_for(config.confidence)
    recording = _parameters(config) + _sums() + _rates(z) + pair_level_rules(config.confidence)
    recording += disparate_impact_rules()
    for metric in GAPS:
        recording += gap_rules(metric)
    recording += equalized_odds_rules() + blind_rules(GAPS)
    recording += pair_search_rules(searched(config.alerts.rules))
    recording += score_rules(config.confidence, DEFAULT_MIN_SAMPLES)
    alerts = [_alert(r) for r in config.alerts.rules]
    doc = {"groups": [{"name": "fairness", "rules": recording + alerts}]}
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100_000, allow_unicode=True)
    selective = "".join(f"      {ln}\n" if ln else "\n" for ln in SELECTIVE_LABELS.splitlines())
    health = "".join(f"  {line}\n" for line in HEALTH_GROUP.splitlines())
    header = (
        f"# Generated by `fairness-monitor prometheus-rules -c {source}` from the metric registry\n"
        "# (monitor/metrics/registry.py) and that configuration: do not edit, regenerate (a test\n"
        "# compares). Recording rules aggregate the windowed counts across replicas first (sum of\n"
        "# numerators and denominators, then divide), never an average of ratios.\n"
        f"# confidence {config.confidence!r} (z = {z!r}); per model min_samples and reference groups\n"
        "# as configured; alerts: the configured rules (bounds, significance, for, hysteresis).\n"
    )
    return header + body + selective + health


def floor_warnings(config: Config) -> list[str]:
    """Rules whose ``min_samples`` is above a model's: the monitor judges such a rule on the
    groups that reach the rule's floor; these rules compare the pair the model's floor picks
    and read "insufficient data" when a smaller group between the two floors is the extreme
    one (no PromQL yet for a second set of eligible groups per floor)."""
    out = []
    for rule in config.alerts.rules:
        below = [n for n, m in config.models.items() if m.min_samples < rule.min_samples]
        if below:
            out.append(
                f"alert rule {rule.name}: its min_samples ({rule.min_samples}) is above that of "
                f"model(s) {', '.join(below)}; Prometheus compares the groups with the model's "
                "min_samples and may stay quiet (insufficient data) where the monitor pages "
                "on the groups with the rule's: set the model's min_samples to the rule's for "
                "the two to agree"
            )
    return out


def prometheus_rules_command(config_path: str, outs: Sequence[str]) -> int:
    """``prometheus-rules -c CONFIG [-o FILE]…``: write the rules (stdout without ``-o``), for
    the configuration the monitor runs with: the file and the ``FAIRNESS_MONITOR__*``
    environment overrides (a confidence set there was left out: found by a review)."""
    config = load_config(config_path)
    text = rules_yaml(config, source=config_path)
    for warning in floor_warnings(config):
        print(f"fairness-monitor: warning: {warning}", file=sys.stderr)
    if not outs:
        sys.stdout.write(text)
    for path in outs:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0
