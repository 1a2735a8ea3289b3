"""A stand-in production model for the demo and for tests: a lending model with a feedback loop.

Applicants belong to a ``group`` (A, B) and a ``sex`` (F, M). Their creditworthiness ``z`` is
drawn per group; the model sees a noisy credit score ``x1 = z + noise`` and a postcode proxy
``x2`` (mostly 1 for group B), scores ``sigmoid(w · [1, x1, x2])`` and approves at a threshold.
Whether the applicant repays is ``Bernoulli(sigmoid(1 + 1.5 z))`` — the same function for
every group, so any gap the model opens is the model's doing.

Scenarios (:data:`SCENARIOS`):

- ``fair``: nothing changes; labels for every applicant (e.g. from a credit bureau).
- ``abrupt``: at hour 14 the proxy's weight jumps (a data-pipeline change): group B's approval
  rate falls at once.
- ``feedback-loop``: denied applicants produce no label, and every ``retrain_every`` hours the
  model is refit by logistic regression on the *approved* applicants' outcomes only. Denial also
  hurts the next applicants of the denied group (no credit, no credit history: their ``z``
  drifts down with the group's denial rate — Liu et al. 2018, "Delayed impact of fair machine
  learning"). The refit then reads the postcode as risk and the disadvantaged group's approval
  rate ratchets down.
- ``label-delay``: fair, but outcomes arrive one to three days after the decision.
- ``calibrated``: fair, and whether an applicant repays is drawn from the model's own score,
  so the scores are calibrated in every group; ``miscalibrated``: the same, but group B repays
  less often than its scores say (its logit shifted by −1).

Simulated time runs ``speed`` times faster than wall time. Everything is drawn from one seeded
generator, so a scenario with a seed always produces the same events.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
HOUR = 3600.0


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    labels_for_denied: bool = True
    label_delay: tuple[float, float] = (1 * HOUR, 3 * HOUR)  # uniform, seconds
    shift_at: float | None = None  # abrupt: hours after start
    shift_weight: float = -1.2  # abrupt: the proxy's weight from then on
    retrain_every: float | None = None  # feedback loop: hours between refits
    retrain_from: float = 8.0  # feedback loop: first refit after this many hours
    impact: float = 0.0  # feedback loop: z drift per hour per unit denial-rate gap
    # outcomes drawn from the model's own score (calibrated scores: label-free estimates hold),
    # group B's shifted by this much on the logit scale (its calibration broken)
    outcome_from_score: bool = False
    miscalibration_b: float = 0.0


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("fair", "a model that stays fair"),
        Scenario(
            "abrupt",
            "a proxy feature suddenly shifts group B's scores at hour 14",
            shift_at=14.0,
        ),
        Scenario(
            "feedback-loop",
            "denied applicants give no labels; the model is retrained on approved-only "
            "outcomes and group B's approval rate ratchets down",
            labels_for_denied=False,
            retrain_every=2.0,
            impact=0.25,
        ),
        Scenario(
            "label-delay",
            "a fair model whose outcomes arrive one to three days late",
            label_delay=(24 * HOUR, 72 * HOUR),
        ),
        Scenario(
            "calibrated",
            "the model's scores are each applicant's repayment probability (label-free "
            "estimates of TPR/FPR hold)",
            outcome_from_score=True,
        ),
        Scenario(
            "miscalibrated",
            "calibrated for group A; group B repays less often than its scores say",
            outcome_from_score=True,
            miscalibration_b=-1.0,
        ),
    )
}

GROUP_B_SHARE = 0.35
Z_MEAN = {"A": 0.15, "B": 0.0}
PROXY_RATE = {"A": 0.2, "B": 0.8}
INITIAL_WEIGHTS = (0.9, 1.15, 0.0)  # intercept, credit score, postcode proxy
THRESHOLD = 0.5
TRAIN_HOURS = 12.0  # the refit sees this much history


def _sigmoid(x: F64) -> F64:
    return 1.0 / (1.0 + np.exp(-x))


def fit_logistic(x: F64, y: F64, *, ridge: float = 1.0, steps: int = 25) -> F64:
    """Newton–Raphson for L2-regularised logistic regression (the "retraining")."""
    w = np.zeros(x.shape[1])
    reg = ridge * np.eye(x.shape[1])
    reg[0, 0] = 0.0  # the intercept is not shrunk
    for _ in range(steps):
        p = _sigmoid(x @ w)
        grad = x.T @ (p - y) + reg @ w
        hess = (x * (p * (1 - p))[:, None]).T @ x + reg
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-8:
            break
    return w


@dataclass
class Batch:
    """Events of one simulated step, already encoded (key, value)."""

    predictions: list[tuple[bytes, bytes]]
    labels: list[tuple[bytes, bytes]]
    approved: dict[str, tuple[int, int]]  # group -> (approved, applicants), for the console


class LendingSimulation:
    """Generates applicants step by step in simulated time; pure (no I/O)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int = 7,
        start: float,
        rate_per_hour: float = 600.0,
        model: str = "lending",
    ) -> None:
        self.s = scenario
        self.rng = np.random.default_rng(seed)
        self.start = start
        self.now = start
        self.rate = rate_per_hour
        self.model = model
        self.weights = np.array(INITIAL_WEIGHTS, dtype=np.float64)
        self.z_mean = dict(Z_MEAN)
        self.next_id = 0
        self.next_retrain = start + scenario.retrain_from * HOUR
        # labels not yet due: due time, id, outcome
        self.due = np.empty(0)
        self.due_ids = np.empty(0, dtype=np.int64)
        self.due_y = np.empty(0, dtype=np.int64)
        # training data since the last refit (approved applicants whose outcome is known)
        self.train_x: list[F64] = []  # one array per retrain period, the last TRAIN_HOURS
        self.train_y: list[F64] = []
        self.cur_x: list[F64] = []
        self.cur_y: list[F64] = []
        self.window_stats: dict[str, list[int]] = {"A": [0, 0], "B": [0, 0]}

    @property
    def hours(self) -> float:
        return (self.now - self.start) / HOUR

    def step(self, seconds: float) -> Batch:
        """Advance simulated time by ``seconds``; return the events that happened."""
        t0, t1 = self.now, self.now + seconds
        self.now = t1
        if self.s.shift_at is not None and t0 - self.start >= self.s.shift_at * HOUR:
            self.weights[2] = self.s.shift_weight
        n = int(self.rng.poisson(self.rate * seconds / HOUR))
        preds: list[tuple[bytes, bytes]] = []
        approved_by: dict[str, tuple[int, int]] = {}
        if n:
            ts = np.sort(self.rng.uniform(t0, t1, n))
            is_b = self.rng.random(n) < GROUP_B_SHARE
            female = self.rng.random(n) < 0.5
            z = self.rng.normal(0.0, 1.0, n) + np.where(is_b, self.z_mean["B"], self.z_mean["A"])
            x1 = z + self.rng.normal(0.0, 0.5, n)
            x2 = (self.rng.random(n) < np.where(is_b, PROXY_RATE["B"], PROXY_RATE["A"])).astype(
                np.float64
            )
            x = np.column_stack([np.ones(n), x1, x2])
            score = _sigmoid(x @ self.weights)
            approve = score >= THRESHOLD
            if self.s.outcome_from_score:
                logit = np.log(score) - np.log1p(-score)
                p_repay = _sigmoid(logit + np.where(is_b, self.s.miscalibration_b, 0.0))
            else:
                p_repay = _sigmoid(1.0 + 1.5 * z)
            repaid = self.rng.random(n) < p_repay
            ids = np.arange(self.next_id, self.next_id + n)
            self.next_id += n
            for i in range(n):
                pid = f"{self.model}-{ids[i]}"
                ev = {
                    "prediction_id": pid,
                    "model_id": self.model,
                    "timestamp": round(float(ts[i]), 3),
                    "prediction": int(approve[i]),
                    "score": round(float(score[i]), 4),
                    "attributes": {
                        "group": "B" if is_b[i] else "A",
                        "sex": "F" if female[i] else "M",
                    },
                }
                preds.append((pid.encode(), json.dumps(ev).encode()))
            for g, mask in (("A", ~is_b), ("B", is_b)):
                k, a = int(mask.sum()), int((approve & mask).sum())
                approved_by[g] = (a, k)
                self.window_stats[g][0] += a
                self.window_stats[g][1] += k
            labelled = approve | self.s.labels_for_denied
            lo, hi = self.s.label_delay
            delay = self.rng.uniform(lo, hi, n)
            self.due = np.concatenate([self.due, (ts + delay)[labelled]])
            self.due_ids = np.concatenate([self.due_ids, ids[labelled]])
            self.due_y = np.concatenate([self.due_y, repaid[labelled].astype(np.int64)])
            if self.s.retrain_every is not None:
                self.cur_x.append(x[approve])
                self.cur_y.append(repaid[approve].astype(np.float64))
        labels = self._due_labels(t1)
        if self.s.retrain_every is not None and t1 >= self.next_retrain:
            self._retrain()
        return Batch(preds, labels, approved_by)

    def _due_labels(self, until: float) -> list[tuple[bytes, bytes]]:
        ready = self.due < until
        if not ready.any():
            return []
        order = np.argsort(self.due[ready], kind="stable")
        ts, ids, ys = self.due[ready][order], self.due_ids[ready][order], self.due_y[ready][order]
        self.due, self.due_ids, self.due_y = (
            self.due[~ready],
            self.due_ids[~ready],
            self.due_y[~ready],
        )
        out = []
        for t, i, y in zip(ts.tolist(), ids.tolist(), ys.tolist(), strict=True):
            pid = f"{self.model}-{i}"
            ev = {"prediction_id": pid, "timestamp": round(t, 3), "label": y}
            out.append((pid.encode(), json.dumps(ev).encode()))
        return out

    def _retrain(self) -> None:
        """Refit on approved-only outcomes, then let denial feed back into the population."""
        self.next_retrain += (self.s.retrain_every or 1.0) * HOUR
        rates = {g: a / k if k else math.nan for g, (a, k) in self.window_stats.items()}
        overall = sum(a for a, _ in self.window_stats.values()) / max(
            1, sum(k for _, k in self.window_stats.values())
        )
        hours = self.s.retrain_every or 1.0
        for g, r in rates.items():
            if r == r:  # a group approved less than average loses creditworthiness
                self.z_mean[g] += self.s.impact * hours * (r - overall) / max(overall, 1e-9)
        self.window_stats = {g: [0, 0] for g in self.window_stats}
        self.train_x.append(np.concatenate(self.cur_x) if self.cur_x else np.empty((0, 3)))
        self.train_y.append(np.concatenate(self.cur_y) if self.cur_y else np.empty(0))
        self.cur_x, self.cur_y = [], []
        if self.train_x:
            x, y = np.concatenate(self.train_x), np.concatenate(self.train_y)
            if len(y) >= 50 and 0 < y.sum() < len(y):
                self.weights = fit_logistic(x, y)
        keep = int(TRAIN_HOURS / (self.s.retrain_every or 1.0))
        self.train_x, self.train_y = self.train_x[-keep:], self.train_y[-keep:]


def run_simulation(
    sim: LendingSimulation,
    send: Callable[[str, bytes, bytes], None],
    *,
    predictions_topic: str,
    labels_topic: str,
    speed: float,
    step: float = 60.0,
    hours: float | None = None,
    stop: Callable[[], bool] = lambda: False,
    on_step: Callable[[LendingSimulation, Batch], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Produce the simulation's events, pacing simulated time at ``speed`` × wall time."""
    sent = 0
    wall0 = clock()
    while not stop() and (hours is None or sim.hours < hours):
        batch = sim.step(step)
        for key, value in batch.predictions:
            send(predictions_topic, key, value)
        for key, value in batch.labels:
            send(labels_topic, key, value)
        sent += len(batch.predictions) + len(batch.labels)
        if on_step is not None:
            on_step(sim, batch)
        ahead = (sim.now - sim.start) / speed - (clock() - wall0)
        if ahead > 0:
            sleep(ahead)
    return sent


def iter_hours(sim: LendingSimulation, hours: float, step: float = 60.0) -> Iterator[Batch]:
    """Step the simulation for ``hours`` of simulated time (tests, offline tuning)."""
    while sim.hours < hours:
        yield sim.step(step)


def scenario(name: str, **overrides: Any) -> Scenario:
    try:
        base = SCENARIOS[name]
    except KeyError:
        raise ValueError(
            f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}"
        ) from None
    return replace(base, **overrides) if overrides else base
