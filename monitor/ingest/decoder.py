"""Decode a whole batch of raw records into columnar numpy arrays, dead-lettering bad ones.

This is the only place where per-event Python work happens: parse JSON, pick the configured
fields, validate them, and map attribute values to group indices. Everything downstream
(``state/``) works on the arrays produced here.

Two paths give identical results on valid input (``tests/ingest/test_events.py`` and the fuzz
test check this): the typed, column-wise fast path (``decode_fast.py``) for clean batches, and
the careful per-record path (``decode_careful.py``) for any batch the fast path gives up on.
Both read one :class:`~.decode_plan.DecodePlan`. Imports go one way: ``events`` (the types) ←
``fields`` ← ``decode_plan`` ← the two paths ← this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from monitor.config.spec import Config
from monitor.ingest.decode_careful import CarefulPath
from monitor.ingest.decode_fast import FastPath, try_fast
from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.events import (
    ConsumerBatch,
    DeadLetter,
    LabelBatch,
    PredictionBatch,
    RawBatch,
    RawRecord,
)
from monitor.ingest.groups import GroupRegistry


class Decoder:
    """Decodes batches for one configuration; reads and extends the group registries."""

    def __init__(
        self,
        config: Config,
        registries: Sequence[GroupRegistry],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plan = DecodePlan(config, registries, clock)
        self.fast = FastPath(self.plan)
        self.careful = CarefulPath(self.plan)

    def decode_predictions(
        self, records: Sequence[RawRecord] | RawBatch | ConsumerBatch
    ) -> tuple[PredictionBatch, list[DeadLetter]]:
        rb = RawBatch.of(records)
        if self.fast.enabled and (quick := try_fast(self.fast.predictions, rb)) is not None:
            return quick, []
        return self.careful.predictions(rb, self.fast.pred_decoder)

    def decode_labels(
        self, records: Sequence[RawRecord] | RawBatch | ConsumerBatch
    ) -> tuple[LabelBatch, list[DeadLetter]]:
        rb = RawBatch.of(records)
        if self.fast.enabled and (quick := try_fast(self.fast.labels, rb)) is not None:
            return quick, []
        return self.careful.labels(rb, self.fast.label_decoder)
