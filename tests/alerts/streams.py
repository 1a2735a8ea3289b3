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
