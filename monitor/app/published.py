"""What the service loop publishes for the HTTP threads: the status page's state and the
operational snapshot, built on the loop's thread as immutable values (about once a second)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from monitor.alerts.evaluator import AlertEvaluator
from monitor.app.checkpointing import FAILURES_BEFORE_PAUSE
from monitor.outputs.ops import GroupBounds, OpsSnapshot
from monitor.outputs.status import StatusState
from monitor.state.served import attribute_coverage
from monitor.state.view import CountsView


def alerts_behind(engine: CountsView, evaluator: AlertEvaluator) -> dict[str, float]:
    """Per model, event time from the last boundary the rules judged to the newest partition's
    head: 0 normally; up to the model's lateness while boundaries wait for labels; more when
    one partition holds the others' boundaries back (measured from the oldest head, as it
    was, a partition stalled for good read 0: it held back the judging and the measure)."""
    out = {}
    for m, spec in enumerate(engine.models):
        head, last = engine.low_watermark(m, lambda p, m: True), evaluator.last.get(m)
        if head is not None and last is not None:
            out[spec.name] = float(max(0, head - last) * spec.bucket)
    return out


def status_state(m: Any) -> StatusState:
    """What the status page shows (built on the loop's thread, read by the HTTP threads)."""
    series = {k: list(v) for k, v in m.evaluator.series.items()}
    rows = tuple(m.evaluator.evidence.snapshot())  # also /metrics' evidence families
    return StatusState(
        m.snapshot, series, m.evaluator.book.firing(), list(m.recent_transitions), rows,
        published_at=time.time(),
    )  # fmt: skip


def partials_counts(alerting: Any) -> dict[str, int] | None:
    """``alerts.scope: global``: what this replica published and read on the partials topic,
    by outcome (None: local scope, no partials). ``missing`` and ``let_go`` mean judged
    windows lacked a partition's counts, or were skipped; ``too_large``, that a partition's
    counts were replaced by a silence (``app/partials_out.py``, ``alerts/global_view.py``)."""
    view, out = getattr(alerting, "view", None), getattr(alerting, "out", None)
    if view is None:
        return None
    return {
        "sent": out.sent if out is not None else 0,
        "send_failed": out.failed if out is not None else 0,
        "too_large": out.too_large if out is not None else 0,
        "duplicate": view.duplicates,
        "missing": view.missing,
        "let_go": view.dropped,
        "unknown_model": view.unknown_models,
        "not_partial": alerting.bad,
    }


def firing_counts(alerting: Any, evaluator: AlertEvaluator) -> dict[tuple[str, str], int]:
    """Alerts firing by (name, severity), for ``fairness_alerts_active``. With
    ``alerts.scope: global`` every replica judges the whole model and holds the same alerts:
    only the delivering one counts them, so a sum over replicas is the number firing (it was
    that times the replicas: found by a review)."""
    if not getattr(alerting, "leading", True):
        return {}
    return dict(Counter((a.name, a.labels.get("severity", "")) for a in evaluator.book.firing()))


def ops_snapshot(m: Any) -> OpsSnapshot:
    """The loop's operational state now, as an immutable value (built on the loop's thread)."""
    moved = m.engine.moved  # the counters of this process: they only grow (process_totals.py)
    counts, total = moved.label_delays(m.engine.label_delays())
    cp, dlq = m.checkpoints, m.intake.dlq
    return OpsSnapshot(
        m.k.predictions_topic,
        m.k.labels_topic,
        m.k.attributes_topic,
        outcomes=dict(m.intake.outcomes),
        counters=moved.counters(m.engine.counters()),
        labels_ahead=m.engine.labels_ahead(),
        attributes=moved.coverage(attribute_coverage(m.engine)),
        delays=(tuple(int(c) for c in counts), float(total)),
        lag=m.ownership.lag() if m.ownership.consumer is not None else {},
        seconds=dict(m.seconds),
        firing=firing_counts(m.alerting, m.evaluator),
        evaluation_behind=alerts_behind(m.evaluator.engine, m.evaluator),
        # every model from 0: a counter first seen at 3 hides its first rise from increase()
        windows_skipped={s.name: m.evaluator.skipped.get(s.name, 0) for s in m.engine.models},
        partials=partials_counts(m.alerting),
        groups=tuple(
            GroupBounds(spec.name, name, short, over, undeclared)
            for spec, reg in zip(m.engine.models, m.engine.registries, strict=True)
            for name, short, over, undeclared in zip(
                reg.set_names, reg.shortened, reg.overflow, reg.undeclared, strict=True
            )
        ),
        dead_letters=None
        if dlq is None
        else {"sent": dlq.sent, "truncated": dlq.truncated, "failed": dlq.failed},
        checkpoint_wall=cp.last_wall,
        checkpoint_failures=cp.failures,
        checkpoint_failed_in_row=cp.failed_in_row,
        pause_after=FAILURES_BEFORE_PAUSE,
    )
