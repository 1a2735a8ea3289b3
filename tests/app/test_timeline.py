"""``replay --timeline``: one JSON line per closed boundary × window × attribute, the numbers the
report gives for the same events up to that boundary, the same whatever the batch cut, written
as the replay goes, blind metrics marked, and the evidence detectors' state when there is one."""

from __future__ import annotations

import contextlib
import io
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from monitor.alerts.evaluator import AlertEvaluator
from monitor.app.replay import replay
from monitor.cli import main
from monitor.config.spec import load_config
from monitor.ingest.events import RawRecord
from monitor.metrics.registry import METRICS
from monitor.outputs.report import build_report
from monitor.outputs.timeline import BoundaryLine, EvidenceLine, TimelineWriter, read_timeline
from monitor.state.engine import Engine
from tests.app.test_replay import CONFIG, make_events
from tests.helpers import T0, config, label, pred

BUCKET = 60.0
WINDOWS = ("1h", "6h", "1h_lag2h")
ATTRIBUTES = ("sex", "age", "sex&age")


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict], list[dict]]:
    tmp = tmp_path_factory.mktemp("timeline")
    preds, labels = make_events(5, n=2500, span=4 * 3600)
    (tmp / "c.yaml").write_text(CONFIG)
    (tmp / "p.jsonl").write_text("".join(json.dumps(e) + "\n" for e in preds))
    (tmp / "l.jsonl").write_text("".join(json.dumps(e) + "\n" for e in labels))
    return tmp, preds, labels


def timeline_of(tmp: Path, batch_size: int) -> bytes:
    out = tmp / f"timeline-{batch_size}.jsonl"
    if out.exists():  # replayed once per module
        return out.read_bytes()
    args = ["replay", "-c", str(tmp / "c.yaml"), "-p", str(tmp / "p.jsonl"),
            "-l", str(tmp / "l.jsonl"), "--batch-size", str(batch_size), "--timeline", str(out)]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(args) == 0
    return out.read_bytes()


def test_one_line_per_boundary_window_and_attribute(stream: tuple[Path, list, list]) -> None:
    tmp, preds, _ = stream
    every = read_timeline(timeline_of(tmp, 500))
    lines = [x for x in every if isinstance(x, BoundaryLine)]
    evidence = [x for x in every if isinstance(x, EvidenceLine)]
    # the evidence detectors' rows: one line per model and boundary, after its boundary lines
    assert [e.at for e in evidence] == sorted({x.at for x in lines})
    assert all(r["model"] == "credit" for e in evidence for r in e.detectors)
    assert {r["detector"] for r in evidence[-1].detectors} >= {"selection_rate", "four_fifths"}
    # the boundaries: every bucket edge after the first prediction's bucket, up to the newest
    first = min(e["timestamp"] for e in preds) // BUCKET
    last = max(e["timestamp"] for e in preds) // BUCKET
    expected = [k * BUCKET for k in range(int(first) + 1, int(last) + 1)]
    ats = sorted({x.at for x in lines})
    assert ats == expected
    assert len(lines) == len(expected) * len(WINDOWS) * len(ATTRIBUTES)
    seen = {(x.at, x.window, x.attribute) for x in lines}
    assert len(seen) == len(lines)
    assert {x.window for x in lines} == set(WINDOWS) and {x.attribute for x in lines} == set(
        ATTRIBUTES
    )
    x = lines[-1]
    assert set(x.disparities) == set(METRICS)
    raw = json.loads(timeline_of(tmp, 500).splitlines()[-2])
    assert raw["kind"] == "boundary" and raw["time"].endswith("Z")
    raw = next(json.loads(t) for t in timeline_of(tmp, 500).splitlines() if b'"sex"' in t)
    assert set(raw["groups"]["F"]) >= {"n", "labelled", "eligible", "selection_rate", "tpr"}


def test_identical_for_two_batch_cuts(stream: tuple[Path, list, list]) -> None:
    tmp, _, _ = stream
    a, b = timeline_of(tmp, 97), timeline_of(tmp, 5000)
    assert a and a == b


def test_identical_for_two_batch_cuts_when_labels_come_before_their_predictions(
    tmp_path: Path,
) -> None:
    """Found by a review: a label stamped before its prediction is held until the prediction
    comes, then was counted as known at its own (earlier) time: in a boundary already judged
    when the batch cut fell between them, so the evidence lines differed with --batch-size.
    It is known once joined, at the later of the two times."""
    preds, labels = make_events(9, n=1500, span=4 * 3600)
    rng = np.random.default_rng(9)
    for e in labels:  # a third stamped up to half an hour before their prediction
        if rng.random() < 0.33:
            e["timestamp"] -= float(rng.uniform(1800, 3600))
    (tmp_path / "c.yaml").write_text(CONFIG)
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(e) + "\n" for e in preds))
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(e) + "\n" for e in labels))
    a, b = timeline_of(tmp_path, 7), timeline_of(tmp_path, 5000)
    assert b"evidence" in a and a == b


@pytest.mark.parametrize("hours", [1.5, 2.75, 4.0])
def test_values_equal_the_report_of_the_events_up_to_that_boundary(
    stream: tuple[Path, list, list], hours: float
) -> None:
    """At boundary B the timeline shows what a report of the events before B shows (a fresh
    replay of just those): every disparity's value and bounds, and each group's n and rates."""
    tmp, preds, labels = stream
    lines = [x for x in read_timeline(timeline_of(tmp, 500)) if isinstance(x, BoundaryLine)]
    at = max(x.at for x in lines if x.at <= T0 + hours * 3600)
    cfg = load_config(str(tmp / "c.yaml"))
    engine = Engine(cfg)
    before = [e for e in preds if e["timestamp"] < at], [e for e in labels if e["timestamp"] < at]
    p, lab = ([RawRecord(json.dumps(e).encode()) for e in evs] for evs in before)
    replay(engine, p, lab)
    report = build_report(engine.snapshot(), confidence=cfg.confidence)["models"]["credit"]
    compared = 0
    lag = {w.name: w.lag for w in cfg.models["credit"].windows}
    for x in (x for x in lines if x.at == at):
        w = report["windows"][x.window]
        end = datetime.fromtimestamp(at - lag[x.window], tz=UTC)
        assert w["end"] == end.isoformat().replace("+00:00", "Z")  # the same window
        a = w["attributes"][x.attribute]
        for metric in METRICS:
            got, want = x.disparities[metric], a[metric]
            for f in ("value", "lower", "upper", "low_group", "high_group", "blind"):
                assert getattr(got, f) == want[f], (x.window, x.attribute, metric, f)
            compared += 1
        for g, row in a["groups"].items():
            pt = x.groups[g]
            assert (pt.n, pt.labelled, pt.eligible) == (row["n"], row["labelled"], row["eligible"])
            for f in ("selection_rate", "tpr", "fpr", "ppv"):
                assert getattr(pt, f) == row[f], (x.window, x.attribute, g, f)
    dirs = [x.disparities["disparate_impact_ratio"].value for x in lines if x.at == at]
    assert sum(v is not None and math.isfinite(v) for v in dirs) >= 6  # DIRs were compared
    assert compared == len(WINDOWS) * len(ATTRIBUTES) * len(METRICS)


class Sink(io.BytesIO):
    """Counts writes (one per boundary: the timeline is streamed, not gathered)."""

    writes = 0

    def write(self, b: Any) -> int:
        self.writes += 1
        return super().write(b)


class Row(NamedTuple):
    model: str
    attribute: str
    group: str
    detector: str
    log_e: Any
    log_threshold: float
    expected_seconds: Any


class Evidence:
    """A stand-in for the evaluator's evidence detectors (their ``snapshot()`` rows)."""

    def __init__(self) -> None:
        self.calls = 0

    def update(self, *args: Any) -> list[Any]:
        return []  # no transitions: this stand-in only has rows to show

    def snapshot(self) -> list[Any]:
        self.calls += 1
        return [
            {"model": "m", "attribute": "g", "group": "b", "detector": "four_fifths",
             "log_e": 0.25 * self.calls, "log_threshold": 9.2, "expected_seconds": 5400.0},
            {"model": "other", "attribute": "g", "group": "b", "detector": "x", "log_e": 0.0,
             "log_threshold": 9.2, "expected_seconds": None},
            Row("m", "g", "a", "tpr_change", np.float64(-0.5), 9.2, np.int64(7200)),
        ]  # fmt: skip


def test_streamed_blind_marked_and_evidence_lines() -> None:
    """Selective labels (only approvals labelled): the TPR/FPR gaps and the equalized-odds
    difference are null and blind at every boundary; evidence rows of this model follow each
    boundary's lines; every boundary is written when it is evaluated."""
    cfg = config(windows=["1h"], min_samples=1, bucket="1m")
    engine = Engine(cfg)
    evaluator = AlertEvaluator(cfg, engine, series_points=0)
    out = Sink()
    writer = TimelineWriter(out, cfg, evaluator)
    evaluator.on_boundary = writer
    evaluator.evidence = Evidence()  # type: ignore[attr-defined]
    preds = [pred(f"{g}{i}", T0 + 30 * i, g, int(i % 3 > 0)) for i in range(40) for g in "ab"]
    labels = [label(f"{g}{i}", T0 + 30 * i + 1, i % 2) for i in range(40) for g in "ab" if i % 3]
    written: list[int] = []
    replay(engine, preds, labels, batch_size=16, evaluator=evaluator,
           progress=lambda done, total: written.append(out.writes))  # fmt: skip
    assert written[0] < written[-1]  # written while replaying, boundary by boundary
    lines = read_timeline(out.getvalue())
    boundaries = [x for x in lines if isinstance(x, BoundaryLine)]
    evidence = [x for x in lines if isinstance(x, EvidenceLine)]
    assert out.writes == len(boundaries) == len(evidence) == 19  # 20 minutes: 19 inner edges
    assert writer.lines == len(lines)
    for x, e in zip(boundaries, evidence, strict=True):
        assert e.at == x.at and e.model == "m"
        if x.at < T0 + 120:  # the first minute has no labelled negative: FPR is undefined
            assert x.disparities["fpr_gap"].value is None
            continue
        assert [r["model"] for r in e.detectors] == ["m", "m"]  # not the other model's
        assert e.detectors[1] == {"model": "m", "attribute": "g", "group": "a",
                                  "detector": "tpr_change", "log_e": -0.5, "log_threshold": 9.2,
                                  "expected_seconds": 7200}  # fmt: skip
        assert set(e.detectors[0]) == {"model", "attribute", "group", "detector", "log_e",
                                       "log_threshold", "expected_seconds"}  # fmt: skip
        for metric in ("tpr_gap", "fpr_gap", "equalized_odds_difference"):
            d = x.disparities[metric]
            assert d.value is None and d.blind is not None, (x.at, metric)
            assert d.low_group is None and d.high_group is None  # no pair compared
            assert d.blind.startswith("selective labels: only decisions with prediction 1")
        assert x.disparities["ppv_gap"].blind is None
        assert x.disparities["disparate_impact_ratio"].value is not None
        for g in "ab":
            assert x.groups[g].tpr is None and set(x.groups[g].blind) >= {"tpr", "fpr"}
    assert [e.detectors[0]["log_e"] for e in evidence] == [0.25 * (i + 1) for i in range(19)]
