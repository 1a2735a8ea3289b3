"""The lending simulator: deterministic, its retraining is a real logistic regression, and each
scenario has the mechanism it claims (checked from the events it produces)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
import statsmodels.api as sm

from monitor.app.simulate import (
    HOUR,
    LendingSimulation,
    fit_logistic,
    iter_hours,
    run_simulation,
    scenario,
)

T0 = 1_767_225_600.0


def events(name: str, hours: float, seed: int = 7) -> tuple[list[dict], list[dict]]:
    sim = LendingSimulation(scenario(name), seed=seed, start=T0)
    preds, labels = [], []
    for b in iter_hours(sim, hours):
        preds += [json.loads(v) for _, v in b.predictions]
        labels += [json.loads(v) for _, v in b.labels]
    return preds, labels


def approval_by_block(preds: list[dict], block_hours: float) -> dict[int, dict[str, float]]:
    acc: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for e in preds:
        k = int((e["timestamp"] - T0) // (block_hours * HOUR))
        a = acc[k][e["attributes"]["group"]]
        a[0] += e["prediction"]
        a[1] += 1
    return {k: {g: a / n for g, (a, n) in v.items()} for k, v in sorted(acc.items())}


def test_same_seed_same_events_other_seed_other_events() -> None:
    a = events("feedback-loop", 6, seed=3)
    b = events("feedback-loop", 6, seed=3)
    c = events("feedback-loop", 6, seed=4)
    assert a == b
    assert a[0] != c[0]


def test_event_schema_and_keys() -> None:
    sim = LendingSimulation(scenario("fair"), seed=1, start=T0)
    batch = sim.step(HOUR)
    assert 450 < len(batch.predictions) < 750  # Poisson(600)
    for key, value in batch.predictions:
        e = json.loads(value)
        assert key == e["prediction_id"].encode()  # keyed by id: labels co-partition
        assert e["model_id"] == "lending"
        assert T0 <= e["timestamp"] < T0 + HOUR
        assert e["prediction"] in (0, 1)
        assert (e["score"] >= 0.5) == (e["prediction"] == 1)
        assert e["attributes"]["group"] in ("A", "B") and e["attributes"]["sex"] in ("F", "M")


def test_fit_logistic_matches_statsmodels() -> None:
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(5000), rng.normal(size=5000), rng.random(5000) < 0.3])
    y = (rng.random(5000) < 1 / (1 + np.exp(-(0.5 + 1.2 * x[:, 1] - 0.7 * x[:, 2])))).astype(float)
    ours = fit_logistic(x, y, ridge=0.0)
    ref = sm.Logit(y, x).fit(disp=0).params
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-8)


def test_labels_arrive_after_their_delay_and_only_for_approved_in_feedback_loop() -> None:
    preds, labels = events("feedback-loop", 10)
    by_id = {e["prediction_id"]: e for e in preds}
    assert labels
    delays = []
    for lab in labels:
        p = by_id[lab["prediction_id"]]
        assert p["prediction"] == 1  # denied applicants never produce a label
        delays.append(lab["timestamp"] - p["timestamp"])
    assert min(delays) >= 1 * HOUR and max(delays) <= 3 * HOUR
    # the fair scenario labels the denied too
    preds, labels = events("fair", 6)
    by_id = {e["prediction_id"]: e for e in preds}
    assert any(by_id[lab["prediction_id"]]["prediction"] == 0 for lab in labels)


def test_label_delay_scenario_labels_are_days_late() -> None:
    preds, labels = events("label-delay", 80)
    by_id = {e["prediction_id"]: e for e in preds}
    delays = np.array(
        [lab["timestamp"] - by_id[lab["prediction_id"]]["timestamp"] for lab in labels]
    )
    assert delays.min() >= 24 * HOUR and delays.max() <= 72 * HOUR
    assert not any(lab["timestamp"] < T0 + 24 * HOUR for lab in labels)


@pytest.mark.parametrize(
    ("name", "first_bad_block"),
    [("fair", None), ("abrupt", 14 // 2), ("feedback-loop", 24 // 2)],
)
def test_scenario_mechanisms(name: str, first_bad_block: int | None) -> None:
    """Approval ratio B/A per 2-hour block: fair stays near 0.93; abrupt drops at hour 14;
    the feedback loop ratchets down after the first refits."""
    blocks = approval_by_block(events(name, 36)[0], 2)
    ratio = {k: v["B"] / v["A"] for k, v in blocks.items()}
    early = [ratio[k] for k in range(0, 6)]
    assert 0.85 < np.mean(early) < 1.0
    if first_bad_block is None:
        assert min(ratio.values()) > 0.82
        return
    late = [ratio[k] for k in range(first_bad_block + 2, 18)]
    assert max(late) < 0.8
    if name == "feedback-loop":  # gradual: each later third is worse than the one before
        thirds = [np.mean([ratio[k] for k in range(a, a + 4)]) for a in (6, 10, 14)]
        assert thirds[0] > thirds[1] > thirds[2]


def test_run_simulation_paces_simulated_time_by_speed() -> None:
    sim = LendingSimulation(scenario("fair"), seed=2, start=T0)
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    sent: list[str] = []
    n = run_simulation(
        sim,
        lambda topic, _k, _v: sent.append(topic),
        predictions_topic="p",
        labels_topic="l",
        speed=3600.0,  # one simulated hour per second
        hours=4,
        sleep=sleep,
        clock=lambda: now[0],
    )
    assert n == len(sent) and sent.count("p") > 1500 and sent.count("l") > 1000
    assert now[0] == pytest.approx(4.0)  # four simulated hours took four (fake) seconds


def test_unknown_scenario_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown scenario 'nope'; choose one of fair"):
        scenario("nope")


@pytest.mark.parametrize("fmt", ["monitor-json", "oip-json", "kserve-cloudevents", "seldon"])
def test_the_demos_config_reads_each_format_from_its_topics(fmt: str) -> None:
    """``make demo FORMAT=...``: the monitor's config is valid for every format the simulator
    writes; Seldon's responses come on their own topic, which the demo creates."""
    from monitor.app.demo import PREDICTIONS, demo_config
    from monitor.app.demo_processes import RESPONSES

    c = demo_config("localhost:9092", checkpoint="/tmp/x.sqlite", fmt=fmt)
    serving = c.models["lending"].serving
    assert (serving.format if serving else "monitor-json") == fmt
    want = (PREDICTIONS, RESPONSES) if fmt == "seldon" else (PREDICTIONS,)
    assert c.kafka.prediction_topics == want
