"""Operational metrics of the service (no broker needed: the collector reads published state)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.app.service import Monitor
from monitor.config.spec import parse_config
from tests.helpers import T0, label, pred, run


def test_label_delay_histogram_and_operational_families(tmp_path: Path) -> None:
    cfg = parse_config(
        {
            "models": {
                "m": {
                    "attributes": {"g": {}},
                    "windows": ["1d"],
                    "bucket": "1m",
                    "join": {"ttl": "30d"},
                    "lateness": "1d",
                }
            },
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)
    run(
        m.engine,
        [pred("a", T0, "g1", 1), pred("b", T0, "g1", 0), pred("c", T0, "g1", 1)],
        [label("a", T0 + 30, 1), label("b", T0 + 2 * 3600, 0), label("c", T0 + 3 * 86400, 1)],
    )
    m.publish(force=True)
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())
    }
    h = {
        s.labels.get("le"): s.value
        for s in families["fairness_label_delay_seconds"].samples
        if s.name.endswith("_bucket")
    }
    assert h["60.0"] == 1  # 30 s
    assert h["3600.0"] == 1 and h["21600.0"] == 2  # 2 h
    assert h["86400.0"] == 2 and h["604800.0"] == 3 and h["+Inf"] == 3  # 3 days
    sums = [
        s.value for s in families["fairness_label_delay_seconds"].samples if s.name.endswith("_sum")
    ]
    assert sums == [30 + 7200 + 3 * 86400]
    for name in (
        "fairness_events",
        "fairness_pending_labels",
        "fairness_join_labelled_kept",
        "fairness_consumer_lag",
        "fairness_processing_seconds",
        "fairness_alerts_active",
        "fairness_alert_delivery_failures",
        "fairness_checkpoint_age_seconds",
    ):
        assert name in families, name
    # all three are labelled: none awaits a label, three are kept until the TTL
    assert families["fairness_pending_labels"].samples[0].value == 0
    assert families["fairness_join_labelled_kept"].samples[0].value == 3
    m.store.close()


def test_transitions_reach_sinks_page_and_listeners_and_history_is_bounded(
    tmp_path: Path,
) -> None:
    from monitor.alerts.lifecycle import Alert, Transition
    from monitor.app.service import HISTORY_KEEP

    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}},
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)

    def alert(i: int, state: str) -> Transition:
        a = Alert(
            "FourFifthsRule", {"alertname": "FourFifthsRule", "n": str(i)}, state, T0, T0 + i, 0.5
        )  # type: ignore[arg-type]
        return Transition(a, None)

    old = [alert(i, "firing") for i in range(HISTORY_KEEP + 500)]
    m.evaluator.history = list(old)
    new = [alert(-1, "pending"), alert(-2, "firing")]

    def advance(labels_caught_up: object = None, limit: int | None = None) -> list[Transition]:
        m.evaluator.history += new
        return new

    m.evaluator.advance = advance  # type: ignore[method-assign]
    heard: list[Transition] = []
    m.listeners.append(heard.append)
    m._alerts()
    assert heard == new
    assert m.dispatcher.queued == 2  # both handed to the sinks
    # the page lists fired/resolved transitions, newest first; pending ones are not news
    assert [t["labels"]["n"] for t in m.recent_transitions] == ["-2"]
    # the newest HISTORY_KEEP transitions are kept, the oldest dropped
    assert len(m.evaluator.history) == HISTORY_KEEP
    assert m.evaluator.history[-2:] == new
    assert m.evaluator.history[0] is old[len(old) + 2 - HISTORY_KEEP]


def test_signal_handler_takes_no_lock(tmp_path: Path) -> None:
    """A second SIGINT/SIGTERM arriving inside the first handler must not deadlock: the
    handler may not wait for a lock (``Event.set`` does; that hung the demo on Ctrl-C)."""
    import signal
    import threading

    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}},
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)
    # as if interrupted while another call held the stop event's lock
    held = m.stop_requested._cond  # type: ignore[attr-defined]
    held.acquire()
    try:
        done = threading.Event()
        t = threading.Thread(target=lambda: (m.on_signal(signal.SIGINT, None), done.set()))
        t.start()
        assert done.wait(2), "the signal handler blocked on a lock"
    finally:
        held.release()
    assert m.stop_signalled


def test_alert_evaluation_behind_shows_boundaries_waiting_for_labels(tmp_path: Path) -> None:
    """Predictions reached minute 100, a partition's labels minute 70: the rules judged up to
    minute 70 and the gauge says 30 minutes; once the labels are drained it is 0."""
    cfg = parse_config(
        {
            "models": {
                "m": {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m", "lateness": "1h"}
            },
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)
    run(
        m.engine,
        [pred(f"p{i}", T0 + 60 * i, "ab"[i % 2], i % 2) for i in range(101)],
        [label("p0", T0 + 70 * 60, 1)],
    )

    def gauge() -> float:
        m.publish(force=True)
        text = generate_latest(m.registry).decode()
        fam = {f.name: f for f in text_string_to_metric_families(text)}
        (sample,) = fam["fairness_alert_evaluation_behind_seconds"].samples
        assert sample.labels == {"model": "m"}
        return float(sample.value)

    m.evaluator.advance(lambda p: False)
    assert gauge() == 30 * 60
    m.evaluator.advance(lambda p: True)
    assert gauge() == 0
    m.store.close()


def test_windows_the_rules_could_not_judge_are_counted_on_metrics(tmp_path: Path) -> None:
    """Evaluation fallen behind by more than lateness (a backlog judged at once): the windows
    whose counts left the ring are skipped, counted per model on /metrics (not only logged)."""
    cfg = parse_config(
        {
            "models": {
                "m": {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m", "lateness": "5m"}
            },
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)

    def skipped() -> float:
        m.publish(force=True)
        text = generate_latest(m.registry).decode()
        fam = {f.name: f for f in text_string_to_metric_families(text)}
        (sample,) = [
            s for s in fam["fairness_alert_windows_skipped"].samples if s.name.endswith("_total")
        ]
        assert sample.labels == {"model": "m"}
        return float(sample.value)

    # there from 0 before any skip: Prometheus' increase() misses the rise of a counter whose
    # first sample is already above 0, so the ticket would not see a single skip
    assert skipped() == 0
    run(m.engine, [pred(f"p{i}", T0 + 60 * i, "ab"[i % 2], i % 2) for i in range(200)], [])
    m.evaluator.advance()
    assert skipped() == m.evaluator.skipped["m"] > 0
    m.store.close()


def test_the_collector_reads_only_the_published_snapshot(tmp_path: Path) -> None:
    """A scrape sees the moment the loop last published, never the live state: records
    applied since do not show until the next publish, and the snapshot cannot be changed."""
    import dataclasses

    import pytest

    from monitor.outputs.ops import GroupBounds, OpsCollector, OpsSnapshot

    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}},
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)

    def pending() -> float:
        text = generate_latest(m.registry).decode()
        fam = {f.name: f for f in text_string_to_metric_families(text)}
        return fam["fairness_pending_labels"].samples[0].value

    run(m.engine, [pred("a", T0, "g1", 1), pred("b", T0, "g2", 0)])
    assert pending() == 0  # not published yet
    m.publish(force=True)
    assert pending() == 2
    run(m.engine, [pred("c", T0 + 1, "g1", 1)])
    assert pending() == 2  # the live engine moved on; the snapshot did not
    m.publish()  # within a second of the last one: not yet
    assert pending() == 2
    m.publish(force=True)
    assert pending() == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.ops.checkpoint_failures = 1  # type: ignore[misc]
    m.store.close()

    # the collector needs nothing but a snapshot (and the dispatcher's delivery counters)
    snap = OpsSnapshot(
        "p",
        "l",
        outcomes={("p", "ok"): 7, ("l", "invalid"): 2},
        counters={"late_labels": 4, "awaiting_label": 1, "labelled_kept_until_ttl": 6},
        labels_ahead=5,
        lag={("p", 0): 5},
        groups=(GroupBounds("m", "g", 3, 1, 4),),
        dead_letters={"sent": 2, "truncated": 1, "failed": 0},
        checkpoint_failures=2,
        checkpoint_failed_in_row=1,
    )
    registry = CollectorRegistry()
    registry.register(OpsCollector(lambda: snap, lambda: m.dispatcher))
    text = generate_latest(registry).decode()
    for line in (
        'fairness_events_total{outcome="ok",topic="p"} 7.0',
        'fairness_events_total{outcome="invalid",topic="l"} 2.0',
        'fairness_events_total{outcome="late",topic="l"} 4.0',
        "fairness_pending_labels 1.0",
        "fairness_join_labelled_kept 6.0",
        "fairness_label_ledger_entries 5.0",
        'fairness_consumer_lag{partition="0",topic="p"} 5.0',
        'fairness_group_values_shortened_total{attribute="g",model="m"} 3.0',
        'fairness_group_overflow_total{attribute="g",model="m"} 1.0',
        'fairness_group_values_undeclared_total{attribute="g",model="m"} 4.0',
        'fairness_dead_letters_total{outcome="truncated"} 1.0',
        "fairness_checkpoint_failures_total 2.0",
        "fairness_checkpoint_failing 1.0",
        "fairness_checkpoint_age_seconds NaN",
    ):
        assert line in text, line


def test_the_label_ledger_gauge_counts_labels_ahead_of_the_judged_boundary(
    tmp_path: Path,
) -> None:
    """Labels whose own time is after the last boundary the rules read are kept (to leave them
    out of windows read as of it): the gauge shows how many, so a partition holding the
    boundaries back shows as memory growing, not as silence."""
    cfg = parse_config(
        {
            "models": {
                "m": {"attributes": {"g": {}}, "windows": ["1h"], "bucket": "1m", "lateness": "1h"}
            },
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)
    label_times = [T0 + 60 * i + 300 + 7 for i in range(10)]  # 5 minutes after each
    run(
        m.engine,
        [pred(f"p{i}", T0 + 60 * i, "ab"[i % 2], i % 2) for i in range(20)],
        [label(f"p{i}", t, i % 2) for i, t in enumerate(label_times)],
    )

    def gauge() -> float:
        m.publish(force=True)
        fam = {
            f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())
        }
        return float(fam["fairness_label_ledger_entries"].samples[0].value)

    assert gauge() == 10  # nothing judged yet: every label is ahead
    seen = set()
    for _ in range(20):
        m.evaluator.advance(lambda p: True, limit=3)
        k = m.evaluator.last[0]  # the last boundary judged: labels at or after it are ahead
        expected = sum(1 for t in label_times if t // 60 >= k)
        assert gauge() == expected, (k, expected)
        seen.add(expected)
    assert 0 in seen and len(seen) >= 3  # it went down as the boundaries passed
    m.store.close()


def test_global_scope_exports_its_partials_by_outcome_and_local_scope_none(
    tmp_path: Path,
) -> None:
    """What the partials topic carried and what the view made of it (each counter to its own
    outcome), on /metrics only with ``alerts.scope: global``: a boundary judged without a
    partition's counts was only a log line before."""
    from types import SimpleNamespace

    from monitor.alerts.global_view import GlobalView
    from monitor.app.published import partials_counts
    from monitor.outputs.ops import OpsCollector, OpsSnapshot

    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}}},
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    local = Monitor(cfg)
    local.publish(force=True)
    assert "fairness_alert_partials" not in generate_latest(local.registry).decode()
    local.store.close()

    view = GlobalView(cfg)
    view.duplicates, view.missing, view.dropped, view.unknown_models = 2, 3, 5, 7
    out = SimpleNamespace(sent=11, failed=13, too_large=17)
    counts = partials_counts(SimpleNamespace(view=view, out=out, bad=19))
    registry = CollectorRegistry()
    snapshot = OpsSnapshot("p", "l", partials=counts)
    from collections import Counter

    none = SimpleNamespace(failures=Counter(), undelivered=lambda sink, reason: 0)
    registry.register(OpsCollector(lambda: snapshot, lambda: none))
    text = generate_latest(registry).decode()
    fam = next(
        f for f in text_string_to_metric_families(text) if f.name == "fairness_alert_partials"
    )
    got = {s.labels["outcome"]: s.value for s in fam.samples if s.name.endswith("_total")}
    assert got == {
        "sent": 11, "send_failed": 13, "too_large": 17, "duplicate": 2, "missing": 3,
        "let_go": 5, "unknown_model": 7, "not_partial": 19,
    }  # fmt: skip


def test_every_input_topics_ok_and_invalid_counters_are_there_from_the_start(
    tmp_path: Path,
) -> None:
    """Found by a review: ``fairness_events_total{outcome=~"ok|invalid"}`` appeared only with
    the first batch, so FairnessMonitorStalled (``rate(...) == 0`` and lag) could never fire
    for a replica stuck since its start, and the first invalid burst after a restart was no
    increase to FairnessMonitorDeadLetters."""
    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}}},
            "kafka": {"predictions_topic": "preds", "labels_topic": "labs"},
            "checkpoint": {"path": str(tmp_path / "cp.sqlite")},
        }
    )
    m = Monitor(cfg)
    m.publish(force=True)
    text = generate_latest(m.registry).decode()
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "fairness_events")
    got = {
        (s.labels["topic"], s.labels["outcome"]): s.value
        for s in fam.samples
        if s.labels["outcome"] in ("ok", "invalid")
    }
    assert got == {(t, o): 0 for t in ("preds", "labs") for o in ("ok", "invalid")}
    m.store.close()


def test_exported_counters_only_grow_when_partitions_move(tmp_path: Path) -> None:
    """Found by a review: counters live in each partition's state, so a replica's
    ``fairness_events_total`` fell when a partition was revoked and the new owner's jumped by
    that partition's lifetime counts; Prometheus read both as increments (a rebalance raised
    FairnessPredictionIdsShared). Per process they only grow; the engine's own sums (reports,
    checkpoints) are unchanged."""
    from monitor.state.checkpoint import decode, encode

    def cfg(name: str) -> Any:
        return parse_config(
            {
                "models": {"m": {"attributes": {"g": {}}, "windows": ["1h"], "lateness": "1h"}},
                "checkpoint": {"path": str(tmp_path / f"{name}.sqlite")},
            }
        )

    def scrape(m: Monitor) -> tuple[float, float]:
        m.publish(force=True)
        text = generate_latest(m.registry).decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        dup = next(
            s.value
            for s in fams["fairness_events"].samples
            if s.labels["outcome"] == "duplicate" and s.labels["topic"] == "predictions"
        )
        delays = next(
            s.value
            for s in fams["fairness_label_delay_seconds"].samples
            if s.name.endswith("_count")
        )
        return dup, delays

    a, b = Monitor(cfg("a")), Monitor(cfg("b"))
    for p in (0, 1):  # each partition: a prediction twice (a duplicate) and its label
        run(a.engine, [pred(f"x{p}", T0, "g1", 1)] * 2, [label(f"x{p}", T0 + 60, 1)], partition=p)
    assert scrape(a) == (2, 2)
    blob = encode(*a.engine.export_partition(1))
    a.engine.drop_partition(1)  # revoked: what it counted here stays counted
    assert scrape(a) == (2, 2)
    assert a.engine.counters()["duplicate_predictions"] == 1  # the engine's own: partition 0
    b.engine.import_partition(1, *decode(blob))  # assigned: its past is not b's
    assert scrape(b) == (0, 0)
    assert b.engine.counters()["duplicate_predictions"] == 1
    run(b.engine, [pred("x1", T0 + 1, "g1", 1)], [], partition=1)  # a new duplicate, here
    assert scrape(b) == (1, 0)
    a.engine.import_partition(1, *decode(encode(*b.engine.export_partition(1))))  # and back
    run(a.engine, [pred("x1", T0 + 2, "g1", 1)], [], partition=1)
    assert scrape(a) == (3, 2)  # its 2, plus the new one; never b's
    a.store.close()
    b.store.close()


def test_with_global_alerts_only_the_delivering_replica_counts_the_firing_ones() -> None:
    """Found by a review: with ``alerts.scope: global`` every replica judges the whole model
    and holds the same firing alerts, so ``sum(fairness_alerts_active)`` (the dashboard's
    "Fairness alerts firing") read the number times the replicas."""
    from types import SimpleNamespace

    from monitor.app.published import firing_counts

    alert = SimpleNamespace(name="FourFifthsRule", labels={"severity": "page"})
    ev = SimpleNamespace(book=SimpleNamespace(firing=lambda: [alert, alert]))
    local, leader, follower = (SimpleNamespace(), SimpleNamespace(leading=True),
                               SimpleNamespace(leading=False))  # fmt: skip
    assert firing_counts(local, ev) == {("FourFifthsRule", "page"): 2}  # type: ignore[arg-type]
    assert firing_counts(leader, ev) == {("FourFifthsRule", "page"): 2}  # type: ignore[arg-type]
    assert firing_counts(follower, ev) == {}  # type: ignore[arg-type]


def test_exported_counters_only_grow_when_a_partition_is_replaced_or_sums_round() -> None:
    """Found by a review: importing a partition over one present lost the old one's counts
    (counters went backwards, some below 0), and the label-delay sum, a float, could come out
    just below the last one after ``(x + y) − y``."""
    from monitor.state.checkpoint import decode, encode
    from monitor.state.engine import Engine

    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}, "windows": ["1h"]}}})
    a, b = Engine(cfg), Engine(cfg)
    run(a, [pred("x", T0, "g1", 1)] * 3, [label("x", T0 + 60, 1)], partition=1)
    run(b, [pred("y", T0, "g1", 1)], [], partition=1)
    before = a.moved.counters(a.counters())
    a.import_partition(1, *decode(encode(*b.export_partition(1))))  # over the present one
    after = a.moved.counters(a.counters())
    assert all(after[k] >= before[k] for k in ("predictions", "duplicate_predictions", "labels"))
    assert after["duplicate_predictions"] == 2 and after["labels"] == 1

    a.partitions[1].delay_sum = 3456789012.3456789
    b.partitions[1].delay_sum = 4567890123.4567891
    seen = a.moved.label_delays(a.label_delays())[1]
    a.import_partition(1, *decode(encode(*b.export_partition(1))))
    assert a.moved.label_delays(a.label_delays())[1] >= seen
