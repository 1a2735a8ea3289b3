"""What one configuration tells the decoder, prepared once: both decoding paths read it.

The field accessors, the models and their 0/1 spellings, the default model, the limits and
the clock; and the two checks that need them per record (:meth:`DecodePlan.event_time`,
:meth:`DecodePlan.model_of`). The fast path (``decode_fast.py``) and the careful path
(``decode_careful.py``) both read this plan, so they cannot disagree about the configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from monitor.config.spec import Config, ModelSpec
from monitor.ingest.events import Invalid, Reason
from monitor.ingest.fields import NUMBER, binary_map, getter, parse_timestamp
from monitor.ingest.groups import GroupRegistry


class DecodePlan:
    """One configuration's decoding settings; reads and extends the group registries."""

    def __init__(
        self, config: Config, registries: Sequence[GroupRegistry], clock: Callable[[], float]
    ) -> None:
        self.config = config
        self.models: list[ModelSpec] = list(config.models.values())
        self.model_index = {m.name: i for i, m in enumerate(self.models)}
        self.registries = registries
        self.clock = clock
        self.limits = config.limits
        self.max_sets = max(len(m.attribute_sets) for m in self.models)
        f = config.fields
        self.get_id = getter(f.prediction_id)
        self.get_ts = getter(f.timestamp)
        self.get_model = getter(f.model_id)
        self.get_pred = getter(f.prediction)
        self.get_score = getter(f.score)
        self.get_label = getter(f.label)
        self.attr_getters = [[getter(a.path) for a in m.attributes] for m in self.models]
        self.pred_maps = [binary_map(m.prediction_values) for m in self.models]
        label_values: dict[str, int] = {}
        for m in self.models:
            label_values.update(m.label_values)
        self.label_map = binary_map(label_values)
        if config.default_model is not None:
            self.default_model: int | None = self.model_index[config.default_model]
        else:
            self.default_model = 0 if len(self.models) == 1 else None

    def time_bounds(self) -> tuple[float, float]:
        """Accepted event times for a batch decoded now: ``min_timestamp`` to the clock plus
        ``max_future``."""
        return self.config.min_timestamp, self.clock() + self.config.max_future

    def event_time(
        self, raw: Any, record_ms: int | None, lo: float, hi: float, *, seconds: bool = False
    ) -> float:
        """Event time, checked: not before ``min_timestamp``, and at most ``max_future`` ahead
        of the wall clock (``hi``) *and* of the record's own Kafka time. One producer with a
        skewed clock must not move the event-time clock: a window ends at the newest bucket
        seen, so one event stamped a day ahead would empty every window and make the real
        events that follow "late". Kafka stamps each record when it is produced (brokers
        reject CreateTime far ahead of theirs), so an event time far past its record's time
        is a wrong clock, not a fast stream."""
        has_record_time = record_ms is not None and record_ms > 0  # Kafka's "none" is -1
        if raw is None:
            if not has_record_time:
                raise Invalid(Reason.MISSING_TIMESTAMP, "no timestamp field and no record time")
            t = record_ms / 1000.0  # type: ignore[operator]
            has_record_time = False  # it is the record's time: the clock alone bounds it
        elif type(raw) in NUMBER and raw == raw and (seconds or abs(raw) < 1e11):
            t = float(raw)  # epoch seconds (``seconds``: known to be, e.g. a parsed ce_time)
        else:
            t = parse_timestamp(raw)
        if t < lo:
            raise Invalid(Reason.TIMESTAMP_OUT_OF_RANGE, f"timestamp {t:.0f} is out of range")
        if has_record_time:
            hi = min(hi, record_ms / 1000.0 + self.config.max_future)  # type: ignore[operator]
        if t > hi:
            raise Invalid(
                Reason.TIMESTAMP_IN_FUTURE,
                f"timestamp {t:.0f} is {t - hi + self.config.max_future:.0f} s ahead of "
                f"{'its record time' if has_record_time else 'the clock'} "
                f"(max_future {self.config.max_future} s)",
            )
        return t

    def model_of(self, raw: Any) -> int:
        """The index of the event's model: its id, else the default model (when there is one,
        and for unknown ids with ``unknown_models: default``)."""
        if raw is None:
            if self.default_model is None:
                raise Invalid(Reason.MISSING_MODEL, "no model id and no default model")
            return self.default_model
        idx = self.model_index.get(raw) if type(raw) is str else None
        if idx is None:
            if self.config.unknown_models == "default" and self.default_model is not None:
                return self.default_model
            raise Invalid(Reason.UNKNOWN_MODEL, f"model {str(raw)[:60]!r} is not configured")
        return idx
