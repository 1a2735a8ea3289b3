"""``fairness-monitor gate``: a CI fairness gate over recorded events (a validation set).

The events are decoded and applied by the engine exactly as ``replay`` does, and each selected
rule is judged once, per model and attribute set, on the *whole data* with the alert rules' own
test (``gate_rules.py``): significance is always required, since a CI gate must not fail a build
on noise. Exit 1 when a rule is breached, 0 otherwise; bad input exits 2.

The whole data: the engine runs with one window per model spanning every event time, and a join
that keeps every prediction until its label comes, so that no label is late and no prediction
expires however long the data spans (the configured windows and TTL are for a live stream; a
1-hour window would otherwise count only the last hour's labels). Buckets are coarsened to keep
the ring small: they decide nothing here, the judged counts are the engine's totals.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from monitor.app.backtest import read_inputs
from monitor.app.gate_rules import Check, judge, parse_fail_on
from monitor.app.replay import decode, replay
from monitor.config.model import WindowSpec
from monitor.config.rules import AlertRule
from monitor.config.spec import Config, ConfigError, ModelSpec
from monitor.ingest.events import DeadLetter, RawRecord
from monitor.ingest.file import UnreadableInput
from monitor.metrics.results import attribute_result
from monitor.state.engine import Engine
from monitor.state.snapshot import ModelSnapshot
from monitor.state.windows import FN, FP, I64, TN, TP, N

SHOWN_DEAD = 5  # dead letters named in the exit-2 message
MAX_BUCKETS = 512  # ring size of the whole-data window (coarser buckets past that)


@dataclass(frozen=True)
class ModelData:
    """A model's whole data: predictions, how many are labelled, the span of the prediction
    times (bucket-aligned, in the model's buckets), and the configured windows at least that
    long (those whose rules apply by default)."""

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
    no_data: tuple[str, ...] = ()  # configured models without a prediction in the input

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


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
    now: float | None = None,
) -> GateResult:
    """Replay the files through the engine and judge the rules on each model's whole data
    (``now``: the time the data is judged at, instead of the clock; see ``replay --now``)."""
    for name in models:
        if name not in cfg.models:
            raise ConfigError("--model", f"unknown model {name!r} (configured: "
                              f"{', '.join(cfg.models)})")  # fmt: skip
    named = parse_fail_on(fail_on, cfg.alerts.rules) if fail_on else None
    unread: list[DeadLetter] = []  # CSV rows that could not be read
    preds, labs = read_inputs(
        cfg,
        predictions=predictions,
        labels=labels,
        csv=csv,
        csv_mapping=csv_mapping,
        dead=unread,
        now=now,
    )
    clock = time.time if now is None else lambda: now
    whole, seen = whole_data_config(cfg, preds, labs, clock=clock)
    engine = Engine(whole, clock=clock)
    dead = unread + replay(engine, preds, labs, batch_size=batch_size)
    if dead and not allow_invalid:
        raise UnreadableInput(_dead_message(dead))
    snap = engine.snapshot()
    checks: list[Check] = []
    data: dict[str, ModelData] = {}
    no_data: list[str] = []
    for name, ms in snap.models.items():
        if models and name not in models:
            continue
        info = _model_data(ms, cfg.models[name], seen.get(name))
        if info.predictions == 0:
            if models:
                raise UnreadableInput(f"no predictions of model {name!r} in the input")
            no_data.append(name)
            continue
        data[name] = info
        rules = named if named is not None else _whole_data_rules(cfg.alerts.rules, info)
        for s, set_name in enumerate(ms.set_names):
            gidx, group_labels = ms.groups[s]
            if not group_labels:
                continue
            counts = ms.totals[gidx]
            _reference_seen(ms.spec, set_name, group_labels, counts)
            r = attribute_result(counts, group_labels, ms.spec, set_name, confidence=cfg.confidence)
            for rule in rules:
                if not rule.attributes or set_name in rule.attributes:
                    where = (name, set_name)
                    checks.append(judge(rule, r, counts, ms.spec, where, confidence=cfg.confidence))
    if not data:
        raise UnreadableInput("no predictions of a configured model in the input")
    if not checks:
        raise ConfigError(
            "--fail-on" if named is not None else "alerts.rules",
            "the rules named apply to none of the attribute sets (their attributes: lists)"
            if named is not None
            else "no configured rule applies to a window as long as the data (or to its "
            "attributes): name the rules to judge with --fail-on",
        )
    return GateResult(checks, data, engine.counters(), cfg.confidence, dead, tuple(no_data))


def _reference_seen(spec: ModelSpec, set_name: str, labels: Sequence[str], counts: I64) -> None:
    """A configured reference group must have decisions in the data the gate judges: one
    spelt otherwise (``a`` for ``A``, ``01`` for ``1``) left every ratio of the set undefined,
    each check skipped as "insufficient data", and the gate passed on biased data."""
    ref = spec.reference_groups.get(set_name)
    if ref is None:
        return
    n = dict(zip(labels, counts[:, N].tolist(), strict=True))
    if n.get(ref, 0) == 0:
        had = [lab for lab, k in n.items() if k]
        seen = ", ".join(repr(lab) for lab in had[:10]) + (", …" if len(had) > 10 else "")
        raise ConfigError(
            f"models.{spec.name}.reference_groups.{set_name}",
            f"{ref!r} has no decision in the input (its groups: {seen})",
        )


def whole_data_config(
    cfg: Config,
    predictions: Sequence[RawRecord],
    labels: Sequence[RawRecord],
    *,
    clock: Callable[[], float] = time.time,
) -> tuple[Config, dict[str, tuple[float, float]]]:
    """``cfg`` with, per model, one window over every event time of the input and a join that
    holds every prediction until its label (see the module docstring); and per model with
    predictions, the first and last prediction time. The records are decoded once here, with a
    throwaway engine, for their times."""
    preds, labs, _ = decode(Engine(cfg, clock=clock), predictions, labels)
    times = np.concatenate([preds.ts, labs.ts])
    if not len(times):
        return cfg, {}
    span = math.ceil(float(times.max() - times.min())) + 1
    seen: dict[str, tuple[float, float]] = {}
    models = {}
    for m, (name, spec) in enumerate(cfg.models.items()):
        ts = preds.ts[preds.model == m]
        if len(ts):
            seen[name] = (float(ts.min()), float(ts.max()))
        bucket = spec.bucket * max(1, math.ceil(span / (spec.bucket * MAX_BUCKETS)))
        length = bucket * (span // bucket + 2)  # whole buckets, wherever the span starts
        join = replace(
            spec.join,
            ttl=max(spec.join.ttl, length),
            max_pending=max(spec.join.max_pending, len(predictions)),
            max_early_labels=max(spec.join.max_early_labels, len(labels)),
        )
        models[name] = replace(
            spec,
            bucket=bucket,
            windows=(WindowSpec("whole-data", length),),
            lateness=spec.lateness - spec.lateness % bucket,
            join=join,
        )
    return replace(cfg, models=models), seen


def _model_data(ms: ModelSnapshot, spec: ModelSpec, seen: tuple[float, float] | None) -> ModelData:
    """Counts from the engine's totals; the span of the prediction times (``seen``) in the
    configured model's buckets, and its windows at least that long."""
    cells = ms.totals[ms.groups[0][0]] if ms.groups else ms.totals[:0]
    b = spec.bucket
    start, end = (seen[0] // b * b, (seen[1] // b + 1) * b) if seen else (math.nan, math.nan)
    return ModelData(
        predictions=int(cells[:, N].sum()),
        labelled=int(cells[:, [TP, FP, FN, TN]].sum()),
        start=start,
        end=end,
        whole_windows=tuple(w.name for w in spec.windows if seen and w.length >= end - start),
    )


def _whole_data_rules(rules: Sequence[AlertRule], info: ModelData) -> list[AlertRule]:
    """The configured rules that apply to a window as long as the data (no ``windows:``
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
