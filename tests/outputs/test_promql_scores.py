"""The generated PromQL for score-distribution parity (``outputs/promql_scores.py``), evaluated by
Prometheus's own engine (``promtool test rules``) over the histograms two replicas export, gives
the monitor's numbers over both replicas' events: each group's KS and W1 distance, the worst
group's, their DKW bounds and samples — with and without a configured reference group."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from monitor.config.spec import parse_config
from monitor.ingest.events import RawRecord
from monitor.outputs.exporter import render
from monitor.outputs.promql import rules_yaml
from monitor.state.engine import Engine
from tests.conftest import require
from tests.helpers import T0, run

INPUTS = ("fairness_score_bucket_predictions", "fairness_scored_predictions")


def _events(seed: int) -> list[RawRecord]:
    """Four groups: a uniform scores, b crowded at the threshold, c skewed low, d too few."""
    rng = np.random.default_rng(seed)
    draw = {
        "a": lambda: rng.random(),
        "b": lambda: rng.uniform(0.4, 0.6),
        "c": lambda: rng.beta(2, 5),
        "d": lambda: rng.random(),
    }
    sizes = {"a": 700, "b": 300, "c": 450, "d": 12}
    out = []
    for g, k in sizes.items():
        for i in range(k):
            s = round(float(draw[g]()), 6)
            ev = {"prediction_id": f"{g}{i}", "model_id": "m", "timestamp": T0 + i,
                  "attributes": {"g": g}, "prediction": int(s >= 0.5), "score": s}  # fmt: skip
            out.append(RawRecord(json.dumps(ev).encode()))
    return out


def _samples(text: str, names: tuple[str, ...] | None = None) -> list[tuple[str, dict, float]]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if names is None or s.name in names:
                out.append((s.name, dict(s.labels), float(s.value)))
    return out


def _selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@pytest.mark.parametrize("reference", [None, "c"])
def test_prometheus_computes_the_monitors_score_distances(
    tmp_path: Path, reference: str | None
) -> None:
    exe = shutil.which("promtool")
    require(exe is not None, "promtool (Debian package prometheus)")
    model: dict[str, object] = {"attributes": {"g": {}}, "windows": ["1h"], "min_samples": 30,
                                "score_bins": 10}  # fmt: skip
    if reference:
        model["reference_groups"] = {"g": reference}
    cfg = parse_config({"confidence": 0.9, "models": {"m": model}})
    events = _events(5)
    whole, replicas = Engine(cfg), [Engine(cfg), Engine(cfg)]
    for p in (0, 1):
        part = events[p::2]
        run(whole, part, partition=p)
        run(replicas[p], part, partition=p)
    series = []
    for i, eng in enumerate(replicas):
        for name, labels, value in _samples(render(eng.snapshot(), confidence=0.9), INPUTS):
            series.append({"series": _selector(name, {**labels, "instance": f"r{i}"}),
                           "values": f"{value:.0f}x3"})  # fmt: skip
    monitor = _samples(render(whole.snapshot(), confidence=0.9))
    checks = []
    attr = {"model": "m", "window": "1h", "attribute": "g"}
    for name, labels, value in monitor:
        base = name.removeprefix("fairness_").removesuffix("_ratio")
        if base.startswith(("score_ks_distance", "score_wasserstein_distance")) or base in (
            "group_score_ks_distance",
            "group_score_wasserstein_distance",
        ):
            rec = "fairness:" + base + ":ratio"
        else:
            continue
        checks.append((rec, labels, value))
    assert len([c for c in checks if c[0].startswith("fairness:group_")]) == 4  # b, c/a, d out
    assert len(checks) == 10, checks
    tests = [
        {
            "expr": f"abs({_selector(rec, labels)} - {value!r}) < bool 1e-12",
            "eval_time": "2m",
            "exp_samples": [
                {
                    "labels": "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}",
                    "value": 1,
                }
            ],
        }
        for rec, labels, value in checks
    ]
    # the worst group's samples: the smaller scored count of it and the reference
    scored = {lab["group"]: v for n, lab, v in monitor if n == "fairness_scored_predictions"}
    ref = reference or max(scored, key=lambda g: scored[g])
    ks = {lab["group"]: v for n, lab, v in monitor if n == "fairness_group_score_ks_distance_ratio"}
    worst = max(ks, key=lambda g: ks[g])
    tests.append({"expr": _selector("fairness:score_ks_distance_samples:min", attr),
                  "eval_time": "2m",
                  "exp_samples": [{"labels": _selector("fairness:score_ks_distance_samples:min", attr),
                                   "value": min(scored[worst], scored[ref])}]})  # fmt: skip
    (tmp_path / "rules.yml").write_text(rules_yaml(cfg, source="x.yaml"))
    doc = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}  # fmt: skip
    (tmp_path / "test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert exe is not None
    r = subprocess.run([exe, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout
