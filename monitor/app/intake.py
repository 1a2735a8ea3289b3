"""Intake: what happens to one poll's records once ownership has accepted them.

Per partition: decode predictions and labels, apply the valid ones to the engine, count the
invalid ones (per reason, in the engine's state, so they survive a restart) and send them to
the dead-letter topic, count outcomes per topic for ``fairness_events``, and let the
invalid-ratio guard judge the partition (it raises :class:`InvalidRatioExceeded`, after the
batch is applied but before any checkpoint, so a restart after the fix reads it again).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np

from monitor.app.ownership import Accepted
from monitor.config.kafka import KafkaSpec
from monitor.config.serving import topic_format
from monitor.ingest.attribute_events import AttributeDecoder
from monitor.ingest.events import DeadLetter, RawBatch, RawRecord, Reason
from monitor.ingest.invalid_guard import InvalidRatioGuard
from monitor.ingest.native import native
from monitor.ingest.serving_decode import ServingDecoder
from monitor.state.engine import Engine
from monitor.state.served import apply_served

log = logging.getLogger(__name__)
COMPILED = frozenset({"oip-json", "seldon"})  # the formats native/ decodes


class Intake:
    """Decode → apply → dead-letter → guard, for the records of accepted partitions."""

    def __init__(self, engine: Engine, kafka: KafkaSpec, guard: InvalidRatioGuard) -> None:
        self.engine = engine
        self.k = kafka
        self.guard = guard
        self.dlq: Any = None  # a DeadLetterSink once the service runs with a dead-letter topic
        # (topic, "ok" / "invalid"), every input topic's from 0: a series that appears only at
        # the first batch left `rate(...) == 0` empty, and a replica stuck since its start
        # never raised FairnessMonitorStalled (found by a review)
        self.outcomes: Counter[tuple[str, str]] = Counter(
            {(t, o): 0 for t in kafka.input_topics for o in ("ok", "invalid")}
        )
        fmt = topic_format(engine.config.models)  # a serving stack's traffic, or our events
        self.serving = (
            None
            if fmt == "monitor-json"
            else ServingDecoder(engine.decoder.plan, fmt, kafka.responses_topic)
        )
        if self.serving is not None:  # an operator asking why single-row calls are slow
            how = "compiled (native/)" if fmt in COMPILED and native() else "Python"
            log.info("%s records: %s decoder", fmt, how)
        self.attributes = AttributeDecoder(engine.decoder.plan) if kafka.attributes_topic else None

    def apply(self, accepted: Accepted) -> int:
        """Apply the accepted records; returns how many records were read (valid or not)."""
        decoder, empty, read = self.engine.decoder, RawBatch((), ()), 0
        for p, got in accepted.items():
            praw, lraw = got.predictions or empty, got.labels or empty
            rraw, araw = got.responses or empty, got.attributes or empty
            lb, d2 = decoder.decode_labels(lraw)
            d4: list[DeadLetter] = []
            if self.serving is None:
                pb, d1 = decoder.decode_predictions(praw)
                self.engine.apply(p, pb, lb)
                d3: list[DeadLetter] = []
            else:  # requests and responses: what met is applied, the rest waits
                asked, answered, d1 = self.serving.decode(praw)
                if len(rraw):  # responses on a topic of their own
                    asked2, answered2, d3 = self.serving.decode(rraw)
                    asked, answered = (
                        np.concatenate([asked, asked2]),
                        np.concatenate([answered, answered2]),
                    )
                else:
                    d3 = []
                attrs = None
                if self.attributes is not None and len(araw):
                    attrs, d4 = self.attributes.decode(araw)
                orphans = apply_served(self.engine, p, asked, answered, lb, attrs)
                if len(orphans) and self.dlq is not None:
                    self.dlq.send(self._orphans(p, orphans))
            dead = d1 + d3 + d2 + d4
            reasons = [d.reason.value for d in dead]
            if dead:
                self.engine.count_invalid(p, reasons)
                if self.dlq is not None:
                    self.dlq.send(dead)
            self.outcomes[(self.k.predictions_topic, "ok")] += len(praw) - len(d1)
            if self.k.responses_topic:
                self.outcomes[(self.k.responses_topic, "ok")] += len(rraw) - len(d3)
            if self.k.attributes_topic:
                self.outcomes[(self.k.attributes_topic, "ok")] += len(araw) - len(d4)
            self.outcomes[(self.k.labels_topic, "ok")] += len(lb)
            self.outcomes.update((d.record.topic, "invalid") for d in dead)
            n = len(praw) + len(rraw) + len(lraw) + len(araw)
            read += n
            self.guard.observe(p, n, reasons)
        return read

    def _orphans(self, p: int, rows: Any) -> list[DeadLetter]:
        """One dead letter per response record that never met its request (not counted as
        invalid: ``orphan_responses`` counts them, by decision)."""
        topics = (self.k.predictions_topic, self.k.responses_topic or self.k.predictions_topic)
        where, n = np.unique(rows[["on_responses", "offset"]], return_counts=True)
        ts = {(int(r), int(o)): t for r, o, t in rows[["on_responses", "offset", "ts"]].tolist()}
        wait = max(m.lateness + m.bucket for m in self.engine.models)
        return [
            DeadLetter(
                Reason.ORPHAN_RESPONSE,
                f"a response of {k} decision(s) whose request did not come within {wait} s "
                "(event time); the record stays at its source offset",
                RawRecord(b"", round(ts[(int(r), int(o))] * 1000), topics[int(r)], p, int(o)),
            )
            for (r, o), k in zip(where.tolist(), n.tolist(), strict=True)
        ]

    def flush(self) -> None:
        """Dead letters sent so far are durable (before the offsets past them are saved)."""
        if self.dlq is not None:
            self.dlq.flush()

    def close(self) -> None:
        if self.dlq is not None:
            self.dlq.close()
