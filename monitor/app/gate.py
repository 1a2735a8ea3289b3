"""``fairness-monitor gate``: a CI fairness gate over recorded events (a validation set).

The events are replayed through the engine exactly as ``replay`` does, and each selected rule is
judged once, per model and attribute set, on the *whole data* (every accepted event: the
snapshot's totals, not a sliding window) with the alert rules' own test: both compared groups
reach the rule's ``min_samples``, the metric is not blind (selective labels), and the whole
confidence interval lies past the bound (significance is always required here: a CI gate must
not fail a build on noise). Exit 1 when a rule is breached, 0 otherwise; bad input exits 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, cast

import numpy as np

from monitor.alerts.window_rules import compared_enough
from monitor.app.backtest import read_inputs
from monitor.app.replay import replay
from monitor.config.rules import DEFAULT_RULES, AlertRule, Metric
from monitor.config.rules import METRICS as RULE_METRICS
from monitor.config.spec import Config, ConfigError, ModelSpec
from monitor.ingest.events import DeadLetter
from monitor.ingest.file import UnreadableInput
from monitor.metrics.blindness import blind_groups
from monitor.metrics.registry import METRICS
from monitor.metrics.results import I64, AttributeResult, attribute_result
from monitor.state.engine import Engine
from monitor.state.snapshot import ModelSnapshot
from monitor.state.windows import FN, FP, TN, TP, N

Status = Literal["fail", "pass", "insufficient", "blind"]
SHOWN_DEAD = 5  # dead letters named in the exit-2 message


@dataclass(frozen=True)
class GroupRow:
    """One group's numbers behind a check: ``rates`` per compared rate, (value, lower, upper,
    denominator); ``judged`` false for a group below ``min_samples`` (insufficient data)."""

    name: str
    n: int
    rates: dict[str, tuple[float, float, float, int]]
    judged: bool


@dataclass(frozen=True)
class Check:
    """One rule on one attribute set of one model, judged on the whole data."""

    model: str
    attribute: str
    rule: AlertRule
    status: Status
    value: float
    lower: float
    upper: float
    low_group: str | None
    high_group: str | None
    groups: tuple[GroupRow, ...]
    note: str
    basis: str = ""  # the registry metric the numbers are (the EOD: its larger gap)

    @property
    def insufficient_groups(self) -> list[GroupRow]:
        return [g for g in self.groups if not g.judged]


@dataclass(frozen=True)
class ModelData:
    """What a model's whole data holds: events, the span of their times, the windows that
    hold all of it."""

    predictions: int
    labelled: int
    start: float
    end: float
    whole_windows: tuple[str, ...]


@dataclass(frozen=True)
class GateResult:
    checks: list[Check]
    models: dict[str, ModelData]
    counters: dict[str, int]
    confidence: float
    dead: list[DeadLetter]

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def parse_fail_on(names: Sequence[str], configured: Sequence[AlertRule]) -> list[AlertRule]:
    """``--fail-on`` names: a configured rule, a shipped default rule (``FourFifthsRule``,
    ``EqualizedOddsGap``, …) or a registry metric (its registry bound and direction), each
    optionally ``=BOUND``. An unknown name is a :class:`ConfigError` naming what is known."""
    by_name = {r.name: r for r in DEFAULT_RULES} | {r.name: r for r in configured}
    out: dict[str, AlertRule] = {}
    for raw in names:
        name, eq, text = raw.partition("=")
        name = name.strip()
        if name in by_name:
            rule = by_name[name]
        elif name in METRICS:
            m = METRICS[name]
            if name not in RULE_METRICS:
                raise ConfigError("--fail-on", f"{name} has no interval to judge significance by")
            rule = AlertRule(name, cast(Metric, name), m.op, m.default_bound, significant=True)
        else:
            known = ", ".join(sorted(by_name))
            raise ConfigError(
                "--fail-on",
                f"unknown rule {name!r}: give a rule ({known}) or a metric "
                f"({', '.join(RULE_METRICS)}), optionally with =BOUND",
            )
        if eq:
            try:
                bound = float(text)
            except ValueError:
                bound = math.nan
            if not math.isfinite(bound):
                raise ConfigError("--fail-on", f"{raw!r}: the bound {text!r} is not a number")
            rule = replace(rule, name=raw.strip(), bound=bound)
        out[rule.name] = rule
    return list(out.values())


def run_gate(
    cfg: Config,
    *,
    predictions: Sequence[str] = (),
    labels: Sequence[str] = (),
    csv: Sequence[str] = (),
    csv_mapping: str | None = None,
    fail_on: Sequence[str] = (),
    models: Sequence[str] = (),
    allow_invalid: bool = False,
    batch_size: int = 10_000,
) -> GateResult:
    """Replay the files through the engine and judge the rules on each model's whole data."""
    for name in models:
        if name not in cfg.models:
            raise ConfigError("--model", f"unknown model {name!r} (configured: "
                              f"{', '.join(cfg.models)})")  # fmt: skip
    named = parse_fail_on(fail_on, cfg.alerts.rules) if fail_on else None
    preds, labs = read_inputs(
        cfg, predictions=predictions, labels=labels, csv=csv, csv_mapping=csv_mapping
    )
    engine = Engine(cfg)
    dead = replay(engine, preds, labs, batch_size=batch_size)
    if dead and not allow_invalid:
        raise UnreadableInput(_dead_message(dead))
    snap = engine.snapshot()
    checks: list[Check] = []
    data: dict[str, ModelData] = {}
    for m, (name, ms) in enumerate(snap.models.items()):
        if models and name not in models:
            continue
        info = _model_data(engine, m, ms)
        if info.predictions == 0:
            if models:
                raise UnreadableInput(f"no predictions of model {name!r} in the input")
            continue
        data[name] = info
        rules = named if named is not None else _whole_data_rules(cfg.alerts.rules, info)
        for s, set_name in enumerate(ms.set_names):
            gidx, group_labels = ms.groups[s]
            if not group_labels:
                continue
            counts = ms.totals[gidx]
            r = attribute_result(counts, group_labels, ms.spec, set_name, confidence=cfg.confidence)
            for rule in rules:
                if not rule.attributes or set_name in rule.attributes:
                    where = (name, set_name)
                    checks.append(judge(rule, r, counts, ms.spec, where, confidence=cfg.confidence))
    if not data:
        raise UnreadableInput("no predictions of a configured model in the input")
    if not checks:
        raise ConfigError(
            "alerts.rules",
            "no configured rule applies to a window holding the whole data (or to its "
            "attributes): name the rules to judge with --fail-on",
        )
    return GateResult(checks, data, engine.counters(), cfg.confidence, dead)


def judge(
    rule: AlertRule,
    r: AttributeResult,
    counts: I64,
    spec: ModelSpec,
    where: tuple[str, str],
    *,
    confidence: float,
) -> Check:
    """One rule on one attribute set's whole data (``r``: its result over every group,
    ``counts`` its ``[group, cell]`` counts; ``where``: model and attribute set).

    Groups short of ``min_samples`` (the model's, in predictions; the rule's, in each compared
    rate's denominator) are left out and named, not judged; the rest are compared with the alert
    rules' test (``compared_enough``, blindness, ``AlertRule.breached``), significance required.
    Left-out groups never decide: where a live alert would say "insufficient data" because a
    small group has the extreme rate, the gate judges the groups that have the data."""
    rule = replace(rule, significant=True)
    rows = _rows(r, _bases(rule.metric), max(spec.min_samples, 1), rule.min_samples)
    keep = [i for i, row in rows if row.judged]
    jr = attribute_result(
        counts[keep], [r.labels[i] for i in keep], spec, where[1], confidence=confidence
    )
    d = jr.disparity(rule.metric)
    value, lower, upper = (x if math.isfinite(x) else math.nan for x in (d.value, d.lower, d.upper))
    status: Status
    if not compared_enough(rule, jr, d):
        status, note = "insufficient", _short(rule, len(keep))
    else:
        blind = None
        if METRICS[rule.metric].needs_labels:
            report = blind_groups(jr.groups, favourable=spec.favourable)
            blind = report.disparities(jr.disparities).get(rule.metric)
        if blind is not None:
            status, note = "blind", f"blind: {blind.text}"
        elif rule.breached(value, lower, upper):
            status, note = "fail", ""
        else:
            status, note = "pass", ""
            if replace(rule, significant=False).breached(value, lower, upper):
                note = "past the bound, but not significantly (the interval reaches it)"
    return Check(
        where[0], where[1], rule, status, value, lower, upper,
        jr.name(d.low_group), jr.name(d.high_group), tuple(row for _, row in rows), note,
        d.basis,
    )  # fmt: skip


def _bases(metric: str) -> list[str]:
    """The registry metrics whose rates a check compares (the EOD: its TPR and FPR gaps)."""
    return [metric] if METRICS[metric].rate else ["tpr_gap", "fpr_gap"]


def _rows(
    r: AttributeResult, bases: list[str], min_n: int, min_den: int
) -> list[tuple[int, GroupRow]]:
    """(index, row) of each group with predictions; ``judged``: enough data for every rate."""
    g = r.groups
    rows = []
    for i, name in enumerate(r.labels):
        n = int(g.n[i])
        if n == 0:
            continue
        rates: dict[str, tuple[float, float, float, int]] = {}
        for b in bases:
            rate = METRICS[b].rate
            lo, hi = g.bounds[rate]
            rates[rate] = (r.value(rate, i), float(lo[i]), float(hi[i]), r.denominator(i, b))
        judged = n >= min_n and all(v[3] >= min_den for v in rates.values())
        rows.append((i, GroupRow(name, n, rates, judged)))
    return rows


def _short(rule: AlertRule, judged: int) -> str:
    return (
        f"insufficient data: {judged} group(s) with at least {rule.min_samples} in each "
        "compared rate's denominator (and the model's min_samples predictions); two are needed"
    )


def _model_data(engine: Engine, m: int, ms: ModelSnapshot) -> ModelData:
    first, head = engine.first_bucket(m), engine.low_watermark(m)
    cells = ms.totals[ms.groups[0][0]] if ms.groups else ms.totals[:0]
    bucket = ms.spec.bucket
    return ModelData(
        predictions=int(cells[:, N].sum()),
        labelled=int(cells[:, [TP, FP, FN, TN]].sum()),
        start=float(first * bucket) if first is not None else math.nan,
        end=float((head + 1) * bucket) if head is not None else math.nan,
        # a window holds the whole data when its counts are every accepted event's
        whole_windows=tuple(
            name for name, wc in ms.windows.items() if np.array_equal(wc.counts, ms.totals)
        ),
    )


def _whole_data_rules(rules: Sequence[AlertRule], info: ModelData) -> list[AlertRule]:
    """The configured rules that apply to a window holding the whole data (no ``windows:``
    restriction, or one naming such a window)."""
    return [r for r in rules if not r.windows or set(r.windows) & set(info.whole_windows)]


def _dead_message(dead: list[DeadLetter]) -> str:
    lines = [f"{len(dead)} record(s) could not be read (--allow-invalid judges without them):"] + [
        f"  {d.record.topic} line {d.record.offset}: {d.reason.value}: {d.detail}"
        for d in dead[:SHOWN_DEAD]
    ]
    if len(dead) > SHOWN_DEAD:
        lines.append(f"  … and {len(dead) - SHOWN_DEAD} more")
    return "\n".join(lines)
