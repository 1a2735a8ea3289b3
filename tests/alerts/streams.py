"""Simulated decision streams for alert-quality tests (decoded batches, fast)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.state.engine import Engine

T0 = 1_767_225_600.0


def alert_config(*, windows: list[str] | None = None, **alerts: object) -> Config:
    return parse_config(
        {
            "models": {
                "credit": {
                    "attributes": {"group": {}},
                    "windows": windows or ["1h"],
                    "bucket": "1m",
                    "lateness": "5m",
                    "min_samples": 30,
                }
            },
            "alerts": alerts,
        }
    )


def four_fifths_rule(**changes: object) -> dict[str, object]:
    """The four-fifths rule as a config entry (significant, 10 minutes), with ``changes``."""
    rule: dict[str, object] = {
        "name": "FourFifthsRule", "metric": "disparate_impact_ratio", "op": "<", "bound": 0.8,
        "significant": True, "for": "10m", "hysteresis": 0.02, "min_samples": 30,
    }  # fmt: skip
    return {**rule, **changes}


def run_stream(
    engine: Engine,
    minutes: int,
    rate_a: float,
    rate_b: Callable[[int], float],
    *,
    per_min_a: float = 20.0,
    per_min_b: float = 40 / 60,
    seed: int = 0,
    on_minute: Callable[[int], None] | None = None,
    first_minute: int = 0,
) -> None:
    """Group "a" (large) and "b" (small), Poisson arrivals, selection rates per minute."""
    rng = np.random.default_rng(seed)
    reg = engine.registries[0]
    ga, gb = reg.index(0, "a"), reg.index(0, "b")
    key = 1 + first_minute * 10_000  # ids stay unique across consecutive calls
    for minute in range(first_minute, first_minute + minutes):
        na, nb = rng.poisson(per_min_a), rng.poisson(per_min_b)
        n = na + nb
        ts = T0 + minute * 60 + np.sort(rng.uniform(0, 60, n))
        groups = np.array([ga] * na + [gb] * nb, dtype=np.int32)
        rng.shuffle(groups)
        rates = np.where(groups == ga, rate_a, rate_b(minute))
        pred = (rng.random(n) < rates).astype(np.uint8)
        keys = np.arange(key, key + n, dtype=np.uint64)
        key += n
        batch = PredictionBatch(
            key=keys,
            model=np.zeros(n, np.uint16),
            ts=ts,
            pred=pred,
            score=np.full(n, np.nan),
            groups=groups.reshape(-1, 1),
        )
        engine.apply(0, batch, LabelBatch())
        if on_minute is not None:
            on_minute(minute)


def evaluate_stream(
    minutes: int,
    rate_b: Callable[[int], float],
    *,
    cfg: Config | None = None,
    rate_a: float = 0.5,
    per_min_a: float = 20.0,
    per_min_b: float = 40 / 60,
    seed: int = 0,
) -> tuple[Engine, AlertEvaluator]:
    """:func:`run_stream` with an alert evaluator judging each closed minute, as the service
    does after every batch."""
    cfg = cfg if cfg is not None else alert_config()
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine)
    run_stream(
        engine,
        minutes,
        rate_a,
        rate_b,
        per_min_a=per_min_a,
        per_min_b=per_min_b,
        seed=seed,
        on_minute=lambda _: ev.advance(),
    )
    return engine, ev


def labelled_config(**alerts: object) -> Config:
    """Two groups whose outcomes arrive hours late: a window lagged 6 h says so (the ring keeps
    the hour that ended 6 h ago, so labels up to ~7 h late are counted; no rules: the drift
    detectors are what these streams test)."""
    return parse_config(
        {
            "models": {
                "credit": {
                    "attributes": {"group": {}},
                    "windows": [{"length": "1h", "lag": "6h", "name": "labelled"}],
                    "bucket": "1m",
                    "lateness": "10m",
                    "min_samples": 30,
                }
            },
            "alerts": {"rules": [], **alerts},
        }
    )


def labelled_stream(
    cfg: Config,
    minutes: int,
    tpr_b: Callable[[float], float],
    *,
    per_min: float = 20.0,
    positive: float = 0.5,
    tpr_a: float = 0.8,
    fpr: float = 0.2,
    delay: tuple[float, float] = (3600.0, 6 * 3600.0),
    seed: int = 0,
    every: int = 1,
    selective: bool = False,
) -> tuple[Engine, AlertEvaluator]:
    """Groups "a" and "b", ``per_min`` decisions a minute each (Poisson), half of them truly
    positive; predictions by the groups' TPR (``tpr_b`` of the hour since T0) and a common
    FPR. Every decision is labelled (``selective``: only those predicted 1, as when only
    approved applicants are ever observed), ``delay`` seconds (uniform) after it; each
    minute's predictions and the labels whose time falls in that minute go in one batch, and
    the evaluator is advanced every ``every`` minutes (closed boundaries do not depend on it).
    """
    rng = np.random.default_rng(seed)
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine)
    reg = engine.registries[0]
    ga, gb = reg.index(0, "a"), reg.index(0, "b")
    counts = rng.poisson(per_min, size=(minutes, 2))
    n = int(counts.sum())
    minute = np.repeat(np.arange(minutes), counts.sum(axis=1))
    groups = np.concatenate([np.repeat([ga, gb], c) for c in counts]).astype(np.int32)
    ts = T0 + minute * 60.0 + rng.uniform(0, 60, n)
    y = (rng.random(n) < positive).astype(np.uint8)
    hours = (ts - T0) / 3600.0
    tpr = np.where(groups == ga, tpr_a, np.vectorize(tpr_b, otypes=[float])(hours))
    pred = (rng.random(n) < np.where(y == 1, tpr, fpr)).astype(np.uint8)
    keys = np.arange(1, n + 1, dtype=np.uint64)
    lts = ts + rng.uniform(delay[0], delay[1], n)
    lorder = np.argsort(lts, kind="stable")
    if selective:
        lorder = lorder[pred[lorder] == 1]
    lminute = ((lts[lorder] - T0) // 60).astype(np.int64)
    p_at = np.searchsorted(minute, np.arange(minutes + 1))
    l_at = np.searchsorted(lminute, np.arange(minutes + 1))
    for m in range(minutes):
        p = slice(p_at[m], p_at[m + 1])
        li = lorder[l_at[m] : l_at[m + 1]]
        batch = PredictionBatch(
            key=keys[p],
            model=np.zeros(p.stop - p.start, np.uint16),
            ts=ts[p],
            pred=pred[p],
            score=np.full(p.stop - p.start, np.nan),
            groups=groups[p].reshape(-1, 1),
        )
        engine.apply(0, batch, LabelBatch(keys[li], lts[li], y[li]))
        if (m + 1) % every == 0:
            ev.advance()
    ev.advance()
    return engine, ev
