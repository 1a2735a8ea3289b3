"""Streams with known truth for the alert-quality benchmark, fed to the real engine and evaluator.

Each decision is drawn per 5-minute bucket from counts (Poisson arrivals per group; positives
~ Bin(n, prevalence); approvals ~ Bin(positives, TPR) + Bin(negatives, FPR)), expanded into
events with ``np.repeat`` and given to :class:`~monitor.state.engine.Engine` as one
``PredictionBatch`` / ``LabelBatch`` per bucket (labels arrive 1–6 h after their prediction,
uniformly). :class:`~monitor.alerts.evaluator.AlertEvaluator.advance` runs after every bucket,
as the service runs it after every poll. The truth (each group's prevalence, TPR and FPR per
bucket) is known, so a transition can be judged against it.

A change of the selection rate from 0.5 to ``r`` multiplies the group's TPR and FPR by
``r / 0.5`` (the model approves fewer of that group, qualified or not); a TPR change changes
only the TPR (so the selection rate falls too: 0.5·0.6 + 0.5·0.2 = 0.4).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine

T0 = 1_767_225_600.0  # 2026-01-01T00:00Z, a multiple of the bucket
BUCKET = 300
MODEL = "lending"
ATTRIBUTE = "group"
PREVALENCE, TPR, FPR = 0.5, 0.8, 0.2  # selection rate 0.5·0.8 + 0.5·0.2 = 0.5
LABEL_DELAY_H = (1.0, 6.0)

Kind = Literal["none", "rate", "tpr", "slide"]
# how labels arrive: each 1–6 h after its decision ("late"), or so for approvals while the
# denials' outcomes come in one batch a day at 02:00, for decisions made at least 6 h before
# (another source: a bureau's file) — label delay that depends on the predicted class
Labels = Literal["late", "denials-daily"]
DAY = 86_400.0


def bench_config(alerts: dict[str, Any] | None = None) -> Config:
    """The Compose stack's model (``deploy/compose/monitor.yaml``: 5-minute buckets, 3 h, 12 h
    and a 12 h window lagged 3 days, lateness 1 h, min_samples 30) with one attribute set, and
    the default alert rules and drift detection (``alerts`` overrides them, e.g. to turn a
    detector off)."""
    return parse_config(
        {
            "models": {
                MODEL: {
                    "favourable": 1,
                    "attributes": {ATTRIBUTE: {}},
                    "bucket": "5m",
                    "windows": [
                        {"name": "3h", "length": "3h"},
                        {"name": "12h", "length": "12h"},
                        {"name": "12h-labelled", "length": "12h", "lag": "3d"},
                    ],
                    "lateness": "1h",
                    "min_samples": 30,
                    # Compose keeps labelled predictions 4 days; labels here come within 6 h
                    # (the denials' daily file: 32 h), so 2 days change no count and keep the
                    # join table small
                    "join": {"ttl": "2d"},
                }
            },
            "max_future": "365d",
            "alerts": alerts or {},
        }
    )


@dataclass(frozen=True)
class Scenario:
    """Groups (label, decisions per hour) and one change to one group from ``start_h``.

    ``labels``: how outcomes arrive (:data:`Labels`). ``kind``: ``rate`` sets the selection rate to ``to`` for ``hold_h`` hours, then back;
    ``tpr`` sets the TPR to ``to`` for ``hold_h`` hours, then back; ``slide`` moves the
    selection rate linearly from 0.5 to ``to`` over ``hold_h`` hours and keeps it there.
    """

    name: str
    days: float
    groups: tuple[tuple[str, float], ...]
    kind: Kind = "none"
    changed: str = ""
    start_h: float = 72.0
    hold_h: float = 24.0
    to: float = 0.5
    about: str = ""
    labels: Labels = "late"

    @property
    def end_h(self) -> float:
        return self.days * 24

    def factors(self, hours: npt.NDArray[np.float64]) -> tuple[Any, Any]:
        """(selection factor, TPR override or NaN) of the changed group at each hour."""
        t = hours - self.start_h
        on = (t >= 0) & (t < self.hold_h)
        if self.kind == "rate":
            return np.where(on, self.to / 0.5, 1.0), np.full_like(hours, np.nan)
        if self.kind == "tpr":
            return np.ones_like(hours), np.where(on, self.to, np.nan)
        if self.kind == "slide":
            frac = np.clip(t / self.hold_h, 0.0, 1.0)
            return 1.0 - frac * (1.0 - self.to / 0.5), np.full_like(hours, np.nan)
        return np.ones_like(hours), np.full_like(hours, np.nan)

    def dir_crosses_h(self, bound: float = 0.8) -> float:
        """When the true selection-rate ratio (changed / 0.5) crosses ``bound`` (slides)."""
        return self.start_h + self.hold_h * (1.0 - bound) / (1.0 - self.to / 0.5)


LARGE, SMALL = 1200.0, 40.0
TWO = (("big", LARGE), ("small", SMALL))
# six groups of falling size, as an attribute with a few large and several small values has
SIX = (("a", LARGE), ("b", 400.0), ("c", 150.0), ("d", 80.0), ("e", SMALL), ("f", SMALL))
SCENARIOS = {
    s.name: s
    for s in (
        Scenario("fair", 30, TWO, about="fair 30-day streams"),
        Scenario(
            "fair-six", 30, SIX, about="fair 30-day streams of six groups, 1,200 to 40 an hour"
        ),
        Scenario(
            "fair-denials-daily",
            30,
            TWO,
            labels="denials-daily",
            about="fair 30-day streams, denials' outcomes in a daily batch",
        ),
        # changes end at 96 h; the 3-day-lagged window sees them until 180 h, and 10 days leave
        # it 60 h of recovered data to resolve on (8 days left 12 h: stop 49's seed 59)
        Scenario("small-drop", 10, TWO, "rate", "small", to=0.3, about="small group 0.5 → 0.3"),
        Scenario(
            "large-drop",
            10,
            (("big", LARGE), ("big2", LARGE), ("small", SMALL)),
            "rate",
            "big2",
            to=0.3,
            about="a large group 0.5 → 0.3 (reference: another large group)",
        ),
        Scenario(
            "tpr-drop",
            10,
            (("big", LARGE), ("big2", LARGE)),
            "tpr",
            "big2",
            to=0.6,
            about="a large group's TPR 0.8 → 0.6, labels 1–6 h late",
        ),
        Scenario(
            "tpr-drop-denials-daily",
            11,  # the 3-day-lagged window sees the change until 228 h: room to recover
            (("big", LARGE), ("big2", LARGE)),
            "tpr",
            "big2",
            hold_h=72.0,  # the misses' outcomes come in the next day's file: a day-long change
            to=0.6,  # would be over before its file came
            labels="denials-daily",
            about="a large group's TPR 0.8 → 0.6 for 3 days, denials' outcomes in a daily batch",
        ),
        Scenario(
            "dir-slide",
            5.25,
            (("big", LARGE), ("big2", LARGE)),
            "slide",
            "big2",
            hold_h=48.0,
            to=0.35,
            about="DIR sliding 1.0 → 0.7 over 48 h",
        ),
    )
}


@dataclass(frozen=True)
class Events:
    """One seed's decisions in time order, and their labels in label-time order."""

    key: npt.NDArray[np.uint64]
    ts: npt.NDArray[np.float64]
    group: npt.NDArray[np.int32]  # index into the scenario's groups
    pred: npt.NDArray[np.uint8]
    label_idx: npt.NDArray[np.int64]  # events, in label-time order
    label_ts: npt.NDArray[np.float64]
    label: npt.NDArray[np.uint8]
    buckets: int


def draw(sc: Scenario, seed: int) -> Events:
    """Draw the counts of every (bucket, group, confusion cell), then the events they make."""
    rng = np.random.default_rng(seed)
    nb = round(sc.end_h * 3600 / BUCKET)
    hours = (np.arange(nb) + 0.5) * BUCKET / 3600
    sel, tpr_over = sc.factors(hours)
    g = len(sc.groups)
    tpr = np.full((nb, g), TPR)
    fpr = np.full((nb, g), FPR)
    if sc.changed:
        c = [name for name, _ in sc.groups].index(sc.changed)
        tpr[:, c] = np.where(np.isnan(tpr_over), TPR * sel, tpr_over)
        fpr[:, c] = FPR * sel
    per_bucket = np.array([rate for _, rate in sc.groups]) * BUCKET / 3600
    n = rng.poisson(per_bucket, size=(nb, g))
    pos = rng.binomial(n, PREVALENCE)
    tp = rng.binomial(pos, tpr)
    fp = rng.binomial(n - pos, fpr)
    cells = np.stack([tp, pos - tp, fp, n - pos - fp], axis=2)  # TP, FN, FP, TN
    flat = cells.ravel()
    code = np.repeat(np.arange(flat.size), flat)
    bucket, rest = np.divmod(code, g * 4)
    grp, cell = np.divmod(rest, 4)
    ts = T0 + (bucket + rng.random(len(code))) * BUCKET
    order = np.argsort(ts, kind="stable")
    ts, grp, cell = ts[order], grp[order], cell[order]
    m = len(ts)
    lts = ts + rng.uniform(LABEL_DELAY_H[0] * 3600, LABEL_DELAY_H[1] * 3600, m)
    if sc.labels == "denials-daily":
        batch = T0 + (np.floor((ts + 6 * 3600 - T0) / DAY) + 1) * DAY + 2 * 3600
        lts = np.where(np.isin(cell, (0, 2)), lts, batch)
    lorder = np.argsort(lts, kind="stable")
    return Events(
        key=np.arange(1, m + 1, dtype=np.uint64),
        ts=ts,
        group=grp.astype(np.int32),
        pred=np.isin(cell, (0, 2)).astype(np.uint8),
        label_idx=lorder,
        label_ts=lts[lorder],
        label=(cell[lorder] <= 1).astype(np.uint8),
        buckets=nb,
    )


@dataclass
class RunResult:
    """What one seed's run gives the statistics (plain data: it crosses processes)."""

    scenario: str
    seed: int
    # (alertname, identity labels without severity, state, event time in hours since T0)
    transitions: list[tuple[str, tuple[tuple[str, str], ...], str, float]]
    severity: dict[str, str] = field(default_factory=dict)  # alertname -> severity label
    evidence_log_threshold: dict[str, float] = field(default_factory=dict)  # per group
    evidence_detectors: int = 0
    boundaries: int = 0
    seconds_apply: float = 0.0
    seconds_advance: float = 0.0
    events: int = 0


def bucket_batches(
    sc: Scenario, ev: Events, engine: Engine, days: float | None = None
) -> Iterator[tuple[PredictionBatch, LabelBatch]]:
    """One seed's events as the engine takes them, a batch pair per 5-minute bucket (labels in
    label-time order), for the first ``days`` (all of them by default)."""
    reg = engine.registries[0]
    gidx = np.array([reg.index(0, name) for name, _ in sc.groups], dtype=np.int32)
    edges = T0 + np.arange(ev.buckets + 1) * float(BUCKET)
    pcut, lcut = np.searchsorted(ev.ts, edges), np.searchsorted(ev.label_ts, edges)
    buckets = ev.buckets if days is None else min(ev.buckets, int(days * 86400 // BUCKET))
    for b in range(buckets):
        p, n = slice(pcut[b], pcut[b + 1]), int(pcut[b + 1] - pcut[b])
        li = slice(lcut[b], lcut[b + 1])
        preds = PredictionBatch(
            key=ev.key[p],
            model=np.zeros(n, np.uint16),
            ts=ev.ts[p],
            pred=ev.pred[p],
            score=np.full(n, np.nan),
            groups=gidx[ev.group[p]].reshape(-1, 1),
        )
        yield (
            preds,
            LabelBatch(key=ev.key[ev.label_idx[li]], ts=ev.label_ts[li], label=ev.label[li]),
        )


def run(sc: Scenario, seed: int, cfg: Config | None = None) -> tuple[RunResult, AlertEvaluator]:
    """One seed through the engine and the evaluator, bucket by bucket."""
    cfg = cfg or bench_config()
    ev = draw(sc, seed)
    engine = Engine(cfg)
    evaluator = AlertEvaluator(cfg, engine, series_points=0)
    t_apply = t_adv = 0.0
    for preds, labels in bucket_batches(sc, ev, engine):
        t = time.perf_counter()
        engine.apply(0, preds, labels)
        t2 = time.perf_counter()
        evaluator.advance()
        t_apply += t2 - t
        t_adv += time.perf_counter() - t2
    res = RunResult(
        sc.name,
        seed,
        transitions_of(evaluator),
        boundaries=evaluator.last.get(0, 0) - (engine.first_bucket(0) or 0),
        seconds_apply=t_apply,
        seconds_advance=t_adv,
        events=len(ev.ts) + len(ev.label_ts),
        severity={t.alert.name: t.alert.labels.get("severity", "") for t in evaluator.history},
    )
    read_evidence(evaluator, res)
    return res, evaluator


def transitions_of(
    evaluator: AlertEvaluator,
) -> list[tuple[str, tuple[tuple[str, str], ...], str, float]]:
    """Firing and resolved transitions (pending ones never page) as plain tuples."""
    return [
        (
            t.alert.name,
            tuple((k, v) for k, v in sorted(t.alert.labels.items()) if k != "severity"),
            t.alert.state,
            (t.alert.at - T0) / 3600,
        )
        for t in evaluator.history
        if t.alert.state != "pending"
    ]


def read_evidence(evaluator: AlertEvaluator, res: RunResult) -> None:
    """The evidence detectors' thresholds (log c) per group, when the evaluator has them."""
    evidence = getattr(evaluator, "evidence", None)
    if evidence is None or not hasattr(evidence, "snapshot"):
        return
    rows = list(evidence.snapshot())
    res.evidence_detectors = len(rows)
    for row in rows:
        group = str(getattr(row, "group", ""))
        thr = float(getattr(row, "log_threshold", float("nan")))
        res.evidence_log_threshold[group] = max(res.evidence_log_threshold.get(group, thr), thr)
