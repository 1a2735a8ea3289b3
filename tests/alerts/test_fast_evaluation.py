"""The fast alert evaluation (window sums kept between boundaries, stacked results) judges
exactly as the straightforward one (``reference_evaluator.py``): the same results bit for bit at
every boundary, so the same transitions with the same evidence and the same status-page series.

Streams with three windows (one lagged), two attribute sets (one with a configured reference
group), a large and a small group, labels 0–3 hours late, and a selection rate that drops and
recovers, so alerts fire and resolve; on one and on two partitions.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import msgspec
import numpy as np
import pytest

from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.spec import parse_config
from monitor.ingest.events import LabelBatch, PredictionBatch
from monitor.metrics.disparities import NAN_DISPARITY
from monitor.metrics.results import AttributeResult
from monitor.state.engine import Engine
from tests.alerts.reference_evaluator import ReferenceEvaluator
from tests.metrics.test_batch import assert_same

T0 = 1_767_225_600.0


def config() -> Any:
    return parse_config(
        {
            "models": {
                "m": {
                    "attributes": {"g": {}, "h": {}},
                    "windows": ["30m", "2h", {"length": "3h", "lag": "30m"}],
                    "bucket": "5m",
                    "lateness": "30m",
                    "min_samples": 20,
                    "reference_groups": {"h": "h1"},
                }
            },
            "alerts": {"drift": {"bucket": "1h", "min_values": 4}},
        }
    )


def stream(seed: int, hours: int, parts: int) -> list[tuple[int, PredictionBatch, LabelBatch]]:
    """Poll batches (partition, predictions, labels) in time order, one per partition and bucket."""
    rng = np.random.default_rng(seed)
    n = int(rng.poisson(900 * hours))
    ts = np.sort(T0 + rng.uniform(0, hours * 3600, n))
    g = (rng.random(n) < 0.05).astype(np.int32)  # group 1 is small
    h = rng.integers(0, 3, n).astype(np.int32)
    hour = (ts - T0) / 3600
    rate = np.where((g == 1) & (hour > hours / 3) & (hour < 2 * hours / 3), 0.15, 0.5)
    pred = (rng.random(n) < rate).astype(np.uint8)
    y = (rng.random(n) < np.where(pred == 1, 0.7, 0.3)).astype(np.uint8)
    lt = ts + rng.uniform(0, 3 * 3600, n)
    part = rng.integers(0, parts, n)
    keys = np.arange(1, n + 1, dtype=np.uint64)
    out = []
    for b in range(hours * 12):
        lo, hi = T0 + b * 300, T0 + (b + 1) * 300
        for p in range(parts):
            sel = np.flatnonzero((ts >= lo) & (ts < hi) & (part == p))
            lab = np.flatnonzero((lt >= lo) & (lt < hi) & (part == p))
            lab = lab[np.argsort(lt[lab], kind="stable")]
            preds = PredictionBatch(
                key=keys[sel],
                model=np.zeros(len(sel), np.uint16),
                ts=ts[sel],
                pred=pred[sel],
                score=rng.random(len(sel)),
                groups=np.stack([g[sel], 2 + h[sel]], axis=1),
            )
            out.append((p, preds, LabelBatch(key=keys[lab], ts=lt[lab], label=y[lab])))
    return out


class Recording:
    """Keeps the results an evaluator judged, per boundary."""

    def __init__(self, ev: AlertEvaluator) -> None:
        self.results: list[tuple[int, str, str, Any, AttributeResult]] = []
        inner = ev._window_results

        def wrapped(m: int, spec: Any, k: int, sets: Any, windows: Any) -> Any:
            out = inner(m, spec, k, sets, windows)
            self.results += [(k, w, s, None, r) for w, s, r, _ in out]
            self.results += [(k, w, s, f, r) for w, s, _, fs in out for f, r in sorted(fs.items())]
            return out

        ev._window_results = wrapped  # type: ignore[method-assign]


@pytest.mark.parametrize(("seed", "parts", "scores"), [(0, 1, False), (1, 2, True)])
def test_fast_evaluation_equals_the_reference(seed: int, parts: int, scores: bool) -> None:
    """``scores``: a boundary hook is set (as ``replay --timeline`` does), so the fast
    evaluator computes the score distances too; without one (and no rule on them) it leaves
    them undefined and everything else is the same."""
    cfg = config()
    engines = [Engine(cfg), Engine(cfg)]
    for e in engines:  # the stream's codes 0-1 are g0, g1 and 2-4 are h0-h2
        reg = e.registries[0]
        names = [(s, f"{p}{i}") for s, p in enumerate("gh") for i in range(2 if s == 0 else 3)]
        lut = np.array([reg.index(s, name) for s, name in names], dtype=np.int32)
    fast, ref = AlertEvaluator(cfg, engines[0]), ReferenceEvaluator(cfg, engines[1])
    if scores:
        fast.on_boundary = lambda *_: None
    seen = [Recording(fast), Recording(ref)]
    for p, coded, labels in stream(seed, 12, parts):
        preds = replace(coded, groups=lut[coded.groups])  # the registry's own indices
        for e, ev in zip(engines, (fast, ref), strict=True):
            e.apply(p, preds, labels)
            ev.advance()
    assert len(seen[0].results) == len(seen[1].results) > 12 * 12 * 6 * 0.9
    # the model's min_samples is 20, the default rules' 30: they judge results at their floor
    assert {f for _, _, _, f, _ in seen[0].results} == {None, 30}
    for (k, w, s, f, r), (k2, w2, s2, f2, r2) in zip(seen[0].results, seen[1].results, strict=True):
        assert (k, w, s, f, r.labels) == (k2, w2, s2, f2, r2.labels)
        d2 = r2.disparities
        if not scores:
            assert not r.disparities.score_ks_distance.defined
            nan = np.full(len(r2.labels), np.nan)
            d2 = msgspec.structs.replace(d2, score_reference=None, score_ks=nan, score_wasserstein=nan,
                         score_margin=nan, score_ks_distance=NAN_DISPARITY,
                         score_wasserstein_distance=NAN_DISPARITY)  # fmt: skip
        assert_same(r.groups, r.disparities, r2.groups, d2)
    assert fast.history == ref.history
    assert any(t.alert.state == "firing" for t in fast.history)
    assert any(t.alert.state == "resolved" for t in fast.history)
    assert fast.series == ref.series


def test_rivers_import_is_paid_at_start_not_at_the_first_hourly_boundary() -> None:
    """Importing river takes over a second: done lazily by the first drift detector, it held
    the service's loop (polls, commits, scrapes) at the first hourly boundary. An evaluator
    with drift enabled has it imported when it is made; one without drift does not."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from monitor.alerts.evaluator import AlertEvaluator\n"
        "from monitor.config.spec import parse_config\n"
        "from monitor.state.engine import Engine\n"
        "doc = {'models': {'m': {'attributes': {'g': {}}}}, 'alerts': {'drift': {'enabled': %s}}}\n"
        "cfg = parse_config(doc)\n"
        "assert 'river' not in sys.modules\n"
        "AlertEvaluator(cfg, Engine(cfg))\n"
        "print('river.drift' in sys.modules)\n"
    )
    for enabled, want in ((True, "True"), (False, "False")):
        out = subprocess.run(
            [sys.executable, "-c", probe % enabled], capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == want, out.stderr
