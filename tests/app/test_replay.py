"""replay over JSONL files gives exactly what the streaming path gives for the same events."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from monitor.app.backtest import replay_files
from monitor.cli import main
from monitor.config.spec import load_config
from monitor.outputs.report import build_report
from monitor.state.engine import Engine
from tests.helpers import T0

CONFIG = """
models:
  credit:
    attributes: {sex: {}, age: {bins: [30, 50]}}
    intersections: [[sex, age]]
    threshold: 0.5
    windows: [1h, 6h, {length: 1h, lag: 2h}]
    bucket: 1m
    lateness: 6h
    min_samples: 5
"""


def make_events(seed: int, n: int = 3000, span: float = 6 * 3600) -> tuple[list[dict], list[dict]]:
    """``n`` predictions at random times over ``span`` seconds, ~80 % labelled later."""
    rng = np.random.default_rng(seed)
    preds, labels = [], []
    for i in range(n):
        t = T0 + float(rng.uniform(0, span))
        sex = str(rng.choice(["F", "M", "X"], p=[0.45, 0.5, 0.05]))
        score = float(rng.beta(2, 2) * (0.8 if sex == "F" else 1.0))
        ev = {
            "prediction_id": f"id-{i}",
            "model_id": "credit",
            "timestamp": t,
            "attributes": {"sex": sex, "age": int(rng.integers(18, 80))},
            "score": score,
        }
        if rng.random() < 0.5:
            ev["prediction"] = int(score >= 0.5)
        preds.append(ev)
        if rng.random() < 0.8:
            labels.append(
                {
                    "prediction_id": f"id-{i}",
                    "label": int(rng.random() < score),
                    "timestamp": t + float(rng.exponential(1800)),
                }
            )
    return preds, labels


def test_replay_equals_streaming(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    preds, labels = make_events(1)
    with open(tmp_path / "p.jsonl", "w") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in preds)
    with open(tmp_path / "l.jsonl", "w") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in labels)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert (
            main(
                [
                    "replay",
                    "-c",
                    str(tmp_path / "c.yaml"),
                    "-p",
                    str(tmp_path / "p.jsonl"),
                    "-l",
                    str(tmp_path / "l.jsonl"),
                    "--format",
                    "json",
                ]
            )
            == 0
        )
    replayed = json.loads(buf.getvalue())

    # streaming: arrival order with disorder (labels arrive after their prediction), random
    # poll-batch sizes, predictions and labels from two "topics" interleaved
    rng = np.random.default_rng(2)
    arrivals = [(e["timestamp"] + rng.uniform(0, 600), "p", e) for e in preds]
    arrivals += [(e["timestamp"], "l", e) for e in labels]
    arrivals.sort(key=lambda a: a[0])
    engine = Engine(load_config(tmp_path / "c.yaml"))
    pos = 0
    while pos < len(arrivals):
        size = int(rng.integers(1, 500))
        chunk = arrivals[pos : pos + size]
        pos += size
        from monitor.ingest.events import RawRecord

        pb, _ = engine.decoder.decode_predictions(
            [RawRecord(json.dumps(e).encode()) for _, k, e in chunk if k == "p"]
        )
        lb, _ = engine.decoder.decode_labels(
            [RawRecord(json.dumps(e).encode()) for _, k, e in chunk if k == "l"]
        )
        engine.apply(0, pb, lb)
    streamed = build_report(engine.snapshot(), audit=True)  # what replay reports
    assert streamed["counters"]["late_predictions"] == 0
    assert replayed["counters"]["predictions"] == len(preds)
    assert replayed["counters"]["labels"] == len(labels)
    for w in ("1h", "6h", "1h_lag2h"):
        a = replayed["models"]["credit"]["windows"][w]
        b = streamed["models"]["credit"]["windows"][w]
        assert a == b, w


def test_replay_survives_hostile_lines(tmp_path: Path) -> None:
    """Lines that once crashed ``replay`` (JSON null among bad lines, 1,000-deep nesting, a
    400-digit timestamp) are dead-lettered with their reasons; the good lines count."""
    (tmp_path / "c.yaml").write_text(CONFIG)
    preds, _ = make_events(3, n=200)
    good = [json.dumps(e) for e in preds]
    hostile = {
        "not_object": "null",
        "not_json": "{oops",
        "too_deep": "[" * 1000 + "]" * 1000,
        "bad_timestamp": good[0].replace(str(preds[0]["timestamp"]), "1" + "0" * 400),
        "bad_score": good[1].replace(str(preds[1]["score"]), "9" * 400),
    }
    (tmp_path / "p.jsonl").write_text("\n".join(good[:100] + list(hostile.values()) + good[100:]))
    buf = io.StringIO()
    args = ["replay", "-c", str(tmp_path / "c.yaml"), "-p", str(tmp_path / "p.jsonl")]
    dead_file = tmp_path / "dead.jsonl"
    with contextlib.redirect_stdout(buf):
        assert main([*args, "--format", "json", "--dead-letters", str(dead_file)]) == 0
    report = json.loads(buf.getvalue())
    assert report["counters"]["predictions"] == 200
    assert report["invalid"] == dict.fromkeys(hostile, 1)
    dead = [json.loads(line) for line in dead_file.read_text().splitlines()]
    assert sorted(d["reason"] for d in dead) == sorted(hostile)


def test_a_byte_order_mark_and_a_batch_size_below_one_lose_no_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found in review: a JSONL file saved with a UTF-8 BOM lost its first event (not_json);
    ``--batch-size -5`` silently left the first batch unapplied (353 of 400 counted) and
    ``--batch-size 0`` ended in a traceback. The BOM is not part of the first line; a batch
    size below 1 is refused by argparse, naming it."""
    (tmp_path / "c.yaml").write_text(CONFIG)
    preds, _ = make_events(4, n=50)
    (tmp_path / "p.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(map(json.dumps, preds)).encode())
    args = ["replay", "-c", str(tmp_path / "c.yaml"), "-p", str(tmp_path / "p.jsonl")]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*args, "--format", "json"]) == 0
    report = json.loads(buf.getvalue())
    assert report["counters"]["predictions"] == 50 and report["invalid"] == {}
    for size in ("-5", "0"):
        with pytest.raises(SystemExit) as info:
            main([*args, "--batch-size", size])
        assert info.value.code == 2
        assert f"argument --batch-size: {size}: must be at least 1" in capsys.readouterr().err


SHORT_LATENESS = CONFIG.replace("lateness: 6h", "lateness: 5m")


def _backtest(tmp_path: Path, batch_size: int) -> tuple[list, dict]:  # type: ignore[type-arg]
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.app.replay import replay
    from monitor.ingest.events import RawRecord

    (tmp_path / "c.yaml").write_text(SHORT_LATENESS)
    cfg = load_config(tmp_path / "c.yaml")
    preds, labels = make_events(3, n=6000)
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine)
    rec = [RawRecord(json.dumps(e).encode()) for e in preds]
    replay(engine, rec, [RawRecord(json.dumps(e).encode()) for e in labels], batch_size=batch_size,
           evaluator=ev)  # fmt: skip
    return [
        (t.alert.name, t.alert.labels, t.alert.state, t.alert.at) for t in ev.history
    ], ev.skipped


def test_a_backtest_judges_the_same_whatever_the_batch_size(tmp_path: Path) -> None:
    """A batch spanning more than ``lateness`` moved the ring past windows not yet judged:
    ``--batch-size 10000`` (the default) judged them on truncated counts and paged at other
    times than ``--batch-size 100`` on the same file."""
    small, skipped = _backtest(tmp_path, 50)
    assert len(small) >= 4 and not skipped, "the case must page"
    for size in (1000, 100_000):
        assert _backtest(tmp_path, size) == (small, {})


def test_a_boundary_whose_window_left_the_ring_is_skipped_and_counted_not_judged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Fed one batch spanning 12 h (a catch-up poll), the evaluator finds most boundaries'
    windows gone: it judges none of them on what is left, and says how many it skipped."""
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.ingest.events import RawRecord

    (tmp_path / "c.yaml").write_text(SHORT_LATENESS)
    cfg = load_config(tmp_path / "c.yaml")
    preds, _ = make_events(4, n=6000, span=12 * 3600)  # the ring holds 6 h and 6 min
    preds.sort(key=lambda e: e["timestamp"])  # a catch-up poll: in time order, all counted
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine, series_points=None)
    pb, _ = engine.decoder.decode_predictions([RawRecord(json.dumps(e).encode()) for e in preds])
    engine.apply(0, pb, engine.decoder.decode_labels([])[0])
    with caplog.at_level(logging.WARNING):
        ev.advance()
    ring = engine.partitions[0].rings[0]
    gone = ring.gone_through  # the newest bucket whose counts left the ring
    assert gone is not None and gone >= ring.head - ring.n_buckets - 5
    first, last = engine.first_bucket(0), ring.head
    skipped = 0
    for w, reach in (("1h", 60), ("6h", 360), ("1h_lag2h", 180)):
        judged = [int(p.at // 60) for p in ev.series[("credit", w, "sex")]]
        assert judged == list(range(gone + reach + 1, last + 1)), w  # every whole window only
        skipped += max(0, gone + reach + 1 - max(first + 1, last - ring.n_buckets + 1))
    # boundaries older than the ring are not even looked at; of the others, the windows that
    # reach back past ``gone`` are counted as skipped, and the evidence steps of a gone bucket
    looked_at = max(first + 1, last - ring.n_buckets + 1)
    skipped += max(0, gone + 2 - looked_at)
    assert ev.skipped["credit"] == skipped > 300
    assert "were not judged" in caplog.text


def test_a_silence_longer_than_the_ring_skips_nothing(tmp_path: Path) -> None:
    """The head jumping over a silence (a model quiet overnight) leaves nothing behind: the
    buckets it jumped over held no counts. The windows reaching into the silence are judged
    (on what they hold), none is reported as gone."""
    from monitor.alerts.evaluator import AlertEvaluator
    from monitor.app.replay import replay
    from monitor.ingest.events import RawRecord

    (tmp_path / "c.yaml").write_text(SHORT_LATENESS)
    cfg = load_config(tmp_path / "c.yaml")
    day, night = make_events(6, n=2000, span=3 * 3600)
    later, later_labels = make_events(7, n=2000, span=3 * 3600)
    for e in later + later_labels:
        e["timestamp"] += 3 * 86400  # three days later
        e["prediction_id"] = "x" + e["prediction_id"]
    engine = Engine(cfg)
    ev = AlertEvaluator(cfg, engine, series_points=None)
    enc = [RawRecord(json.dumps(e).encode()) for e in day + later]
    replay(engine, enc, [RawRecord(json.dumps(e).encode()) for e in night + later_labels],
           evaluator=ev)  # fmt: skip
    assert ev.skipped == {}
    start = int(min(e["timestamp"] for e in later) // 60)
    judged = {int(p.at // 60) for p in ev.series[("credit", "6h", "sex")]}
    assert set(range(start + 1, start + 3 * 60)) <= judged  # right after the silence too


def test_events_at_the_start_of_the_calendar_report_without_a_traceback(tmp_path: Path) -> None:
    """Found in review: with ``min_timestamp`` at year 1, events there crashed ``replay`` and
    ``report`` (``year 0 is out of range`` formatting the window's start)."""
    (tmp_path / "c.yaml").write_text(CONFIG + 'min_timestamp: "0001-01-01T00:00:00Z"\n')
    t0 = -62135596800.0 + 60  # 0001-01-01T00:01:00Z
    preds = [{"prediction_id": str(i), "model_id": "credit", "timestamp": t0 + i,
              "attributes": {"sex": "FM"[i % 2], "age": 40}, "score": 0.4 + 0.2 * (i % 2)}
             for i in range(20)]  # fmt: skip
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, preds)))
    buf = io.StringIO()
    args = ["replay", "-c", str(tmp_path / "c.yaml"), "-p", str(tmp_path / "p.jsonl")]
    with contextlib.redirect_stdout(buf):
        assert main([*args, "--format", "json"]) == 0
    assert json.loads(buf.getvalue())["counters"]["predictions"] == 20


@pytest.mark.parametrize("outliers", [0, 1, 5])
def test_a_mistyped_year_is_named_in_the_report_not_silently_judged(
    tmp_path: Path, outliers: int
) -> None:
    """Found in review: one prediction stamped years after the rest (within the wall clock: a
    file has no Kafka time to bound it) moved "now" there, and the report's windows held it
    alone (COMPAS with one row dated 2025: every group n=0 but one). It is still counted (a
    pause in the data looks the same), and the report says so, with the dates and counts."""
    (tmp_path / "c.yaml").write_text(CONFIG)
    preds, labels = make_events(8, n=1000)
    typo = {e["prediction_id"] for e in preds[:outliers]}  # a mistyped year: 3 years later
    for e in preds + labels:  # (the rest moved back: the typo is not in the future)
        e["timestamp"] -= 0 if e["prediction_id"] in typo else 3 * 365 * 86400
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(e) for e in preds))
    (tmp_path / "l.jsonl").write_text("\n".join(json.dumps(e) for e in labels))
    args = ["replay", "-c", str(tmp_path / "c.yaml"), "-p", str(tmp_path / "p.jsonl"), "-l",
            str(tmp_path / "l.jsonl")]  # fmt: skip
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*args, "--format", "json"]) == 0
    report = json.loads(buf.getvalue())
    assert report["counters"]["predictions"] == 1000  # counted as they are
    warnings = [w for w in report["warnings"] if "no alert rule or detector judged" not in w]
    if not outliers:
        assert warnings == []
        return
    (warning,) = warnings
    assert f"the newest {outliers} of 1000 predictions" in warning
    assert "1,095 days after the others" in warning or "1,096 days" in warning
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(args) == 0
    assert f"warning: {warning}" in buf.getvalue()


def test_data_that_resumes_after_a_pause_is_not_called_a_mistake() -> None:
    """Half the data after a month's pause: the windows at the end hold plenty, no warning;
    a tail of fewer than 1 % of the predictions after the pause: a warning."""
    from monitor.app.replay import far_ahead
    from monitor.ingest.events import PredictionBatch

    engine = Engine(load_config_text(CONFIG))
    for tail, warned in ((500, False), (11, False), (9, True)):
        ts = np.concatenate([T0 + np.arange(1000 - tail) * 10.0, T0 + 30 * 86400 + np.arange(tail)])
        n = len(ts)
        batch = PredictionBatch(key=np.arange(n, dtype=np.uint64), model=np.zeros(n, np.uint16),
                                ts=ts, pred=np.zeros(n, np.uint8), score=np.zeros(n),
                                groups=np.zeros((n, 3), np.int32))  # fmt: skip
        assert bool(far_ahead(engine, batch)) is warned, tail


def load_config_text(text: str):  # type: ignore[no-untyped-def]
    import yaml

    from monitor.config.spec import parse_config

    return parse_config(yaml.safe_load(text))


def test_the_unjudged_labels_warning_counts_each_models_own_labels(tmp_path: Path) -> None:
    """Found by a review: every label was counted against every model, so a model whose data
    stopped early was told that another model's 288 labels (judged by that model's rules) came
    after its last boundary."""
    (tmp_path / "c.yaml").write_text(
        "models:\n  a: {attributes: {g: {}}, windows: [1h], min_samples: 1}\n"
        "  b: {attributes: {g: {}}, windows: [1h], min_samples: 1}\n"
    )
    preds, labels = [], []
    for model, n, step in (("a", 20, 60), ("b", 288, 600)):  # a: 20 minutes; b: two days
        for i in range(n):
            t = T0 + step * i
            preds.append({"prediction_id": f"{model}{i}", "model_id": model, "timestamp": t,
                          "attributes": {"g": "xy"[i % 2]}, "prediction": i % 2})  # fmt: skip
            labels.append({"prediction_id": f"{model}{i}", "timestamp": t + 60, "label": i % 3})
    for e in labels:
        e["label"] = int(e["label"] == 0)
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, preds)))
    (tmp_path / "l.jsonl").write_text("\n".join(map(json.dumps, labels)))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["replay", "-c", str(tmp_path / "c.yaml"), "-p", str(tmp_path / "p.jsonl"),
                     "-l", str(tmp_path / "l.jsonl"), "--format", "json"]) == 0  # fmt: skip
    for w in json.loads(buf.getvalue())["warnings"]:
        assert "labels" not in w or "of its 20 labels" in w or "of its 288 labels" in w, w
        assert not w.startswith("model a:") or "of its 20 labels" in w, w


def test_now_judges_the_data_as_of_a_given_time_whatever_the_clock(tmp_path: Path) -> None:
    """``--now`` (replay, report, gate): an audit rerun later reads the same. The events ahead
    of ``--now`` by more than ``max_future`` (300 s) are dead-lettered as in the future, the
    others counted; without it the clock decides (today: all counted)."""
    (tmp_path / "c.yaml").write_text(CONFIG)
    preds, labels = make_events(3, n=400, span=3600)
    (tmp_path / "p.jsonl").write_text("\n".join(map(json.dumps, preds)))
    (tmp_path / "l.jsonl").write_text("\n".join(map(json.dumps, labels)))
    args = ["replay", "-c", str(tmp_path / "c.yaml"), "-p", str(tmp_path / "p.jsonl"), "-l",
            str(tmp_path / "l.jsonl"), "--format", "json"]  # fmt: skip
    cut = T0 + 1800.0
    ahead = sum(e["timestamp"] > cut + 300 for e in preds)
    labels_ahead = sum(e["timestamp"] > cut + 300 for e in labels)
    assert 100 < ahead < 300  # the half hour past the cut (a check of the test's data)

    def counters(*extra: str) -> dict[str, int]:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([*args, *extra]) == 0
        report = json.loads(buf.getvalue())
        return {**report["counters"], **report["invalid"]}

    assert counters()["predictions"] == 400
    for now in ("2026-01-01T00:30:00Z", str(cut), "2026-01-01T01:30:00+01:00"):
        got = counters("--now", now)
        assert got["predictions"] == 400 - ahead
        assert got["timestamp_in_future"] == ahead + labels_ahead
    with pytest.raises(SystemExit):
        main([*args, "--now", "yesterday"])
    gate = ["gate", *args[1:7]]  # the gate reads as of --now too: unreadable input, exit 2
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(gate) in (0, 1)  # judged (this data may breach a rule)
        assert main([*gate, "--now", str(cut)]) == 2


def test_now_caps_csv_label_times_so_a_rerun_reads_the_same(tmp_path: Path) -> None:
    """A label time made from ``label_delay`` is capped at the latest time accepted: with
    ``--now`` that is ``--now`` plus ``max_future``, not the clock's, so the label delays (and
    every as-of count) of recent data no longer depend on when the audit ran."""
    (tmp_path / "c.yaml").write_text(CONFIG)
    (tmp_path / "m.yaml").write_text(
        "id: id\ntimestamp: t\nscore: s\nlabel: y\nlabel_delay: 1d\nmodel: credit\n"
        "attributes: {sex: sex, age: age}\n"
    )
    rows = [f"{i},{T0 + 60 * i},0.{i % 9 + 1},{'FM'[i % 2]},{20 + i},{i % 2}" for i in range(40)]
    (tmp_path / "d.csv").write_text("id,t,s,sex,age,y\n" + "\n".join(rows) + "\n")
    args = ["replay", "-c", str(tmp_path / "c.yaml"), "--csv", str(tmp_path / "d.csv"),
            "--csv-mapping", str(tmp_path / "m.yaml"), "--format", "json"]  # fmt: skip

    def delay_sum(now: float) -> float:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main([*args, "--now", str(now)]) == 0
        report = json.loads(buf.getvalue())
        assert report["counters"]["labels"] == 40 and not report["invalid"]
        _, dead, evaluator = replay_files(
            load_config(tmp_path / "c.yaml"),
            predictions=[],
            csv=[str(tmp_path / "d.csv")],
            csv_mapping=str(tmp_path / "m.yaml"),
            now=now,
        )
        assert not dead
        return evaluator.engine.label_delays()[1]

    now = T0 + 3600.0  # every label's day is past now + 300 s: each capped there
    expected = sum(now + 300 - (T0 + 60 * i) // 60 * 60 for i in range(40))
    assert delay_sum(now) == pytest.approx(expected)
    assert delay_sum(now + 86_400 * 2) == pytest.approx(40 * 86_400)  # none capped
