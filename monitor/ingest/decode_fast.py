"""Fast path of decoding for clean batches: typed JSON decoding and column-wise validation.

Almost every poll batch in production is entirely valid. For those, msgspec decodes the whole
batch into typed structs in one C call (rejecting wrong types itself), and every check after
that is a list comprehension or a numpy operation over a column. If *anything* is unusual —
one malformed record, an unknown model, an ISO timestamp that does not parse, a nested
attribute — the fast path gives up and the careful per-record path (``decode_careful.py``)
decodes the batch, producing the dead letters. Both paths give identical results on valid input
(``tests/ingest/test_events.py`` checks this).

Only field layouts that msgspec structs can express are accelerated: single-segment field
names and attributes one level below their prefix (the default layout).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.events import Invalid, LabelBatch, PredictionBatch, Records
from monitor.ingest.fields import parse_timestamp
from monitor.ingest.keys import id_keys

_Scalar = str | int | float | bool | None


class _GiveUp(Exception):
    """Something in the batch needs the careful path."""


class FastPath:
    """Whole-batch decoding of one configuration's layout (``enabled``: the layout allows it)."""

    def __init__(self, plan: DecodePlan) -> None:
        self.plan = plan
        f = plan.config.fields
        paths = [
            f.prediction_id,
            f.timestamp,
            f.model_id,
            f.prediction,
            f.score,
            f.label,
            f.attributes,
        ]
        attrs_ok = all(
            a.path[:-1] == f.attributes and len(a.path) == 2
            for m in plan.models
            for a in m.attributes
        )
        self.enabled = all(len(p) == 1 for p in paths) and attrs_ok
        # typed decoders of the layout (the careful path also salvages records with them)
        self.pred_decoder: msgspec.json.Decoder[Any] | None = None
        self.label_decoder: msgspec.json.Decoder[Any] | None = None
        if not self.enabled:
            return
        # Attributes decode into a struct too (no dict per event; msgspec rejects nested
        # values itself). A name binned by every model that uses it is typed as a number, so a
        # string or boolean there sends the batch to the careful path without a column check.
        uses: dict[str, list[bool]] = {}
        for m in plan.models:
            for a in m.attributes:
                uses.setdefault(a.path[-1], []).append(a.bins is not None)
        names = sorted(uses)
        self.numeric_attrs = {n for n in names if all(uses[n])}
        attrs_struct = msgspec.defstruct(
            "Attributes",
            [
                (
                    f"a{i}",
                    (int | float | None) if n in self.numeric_attrs else _Scalar,
                    msgspec.field(default=None, name=n),
                )
                for i, n in enumerate(names)
            ],
            gc=False,
        )
        slot = {n: f"a{i}" for i, n in enumerate(names)}
        self.attr_getters = [
            [(attrgetter(f"attrs.{slot[a.path[-1]]}"), a.path[-1]) for a in m.attributes]
            for m in plan.models
        ]
        # 0/1 spellings with "absent" (None) as -2, so one lookup per event tells both apart
        self.pred_tables = [{**t, None: -2} for t in plan.pred_maps]
        pred_struct = msgspec.defstruct(
            "Prediction",
            [
                ("pid", str | int, msgspec.field(name=f.prediction_id[0])),
                ("ts", str | int | float | None, msgspec.field(default=None, name=f.timestamp[0])),
                ("model", str | None, msgspec.field(default=None, name=f.model_id[0])),
                ("pred", _Scalar, msgspec.field(default=None, name=f.prediction[0])),
                ("score", float | None, msgspec.field(default=None, name=f.score[0])),
                (
                    "attrs",
                    attrs_struct,
                    msgspec.field(default_factory=attrs_struct, name=f.attributes[0]),
                ),
            ],
            gc=False,  # no cycles possible: untracked structs spare the cyclic GC
        )
        label_struct = msgspec.defstruct(
            "Label",
            [
                ("pid", str | int, msgspec.field(name=f.prediction_id[0])),
                ("ts", str | int | float | None, msgspec.field(default=None, name=f.timestamp[0])),
                ("model", str | None, msgspec.field(default=None, name=f.model_id[0])),
                ("label", _Scalar, msgspec.field(default=None, name=f.label[0])),
            ],
            gc=False,
        )
        self.pred_decoder = msgspec.json.Decoder(pred_struct)
        self.label_decoder = msgspec.json.Decoder(label_struct)

    # -- shared columns ------------------------------------------------------------------------
    def _decode(self, rb: Records, decoder: msgspec.json.Decoder[Any] | None) -> list[Any]:
        """One decoder call per record. Not one call on the records joined with commas: that
        is no faster (the join copies every byte), and records that are not JSON on their own
        can join into valid JSON (one ending inside a string, the next closing it)."""
        values = rb.values
        if decoder is None:
            raise _GiveUp
        try:  # a value that is not bytes (a tombstone's None) fails here
            if max(map(len, values), default=0) > self.plan.limits.max_record_bytes:
                raise _GiveUp
            return list(map(decoder.decode, values))  # type: ignore[arg-type]
        except (msgspec.DecodeError, TypeError, RecursionError):
            raise _GiveUp from None

    def _ids(self, events: list[Any]) -> list[str]:
        ids = [e.pid for e in events]
        if "" in ids:
            raise _GiveUp
        if set(map(type, ids)) != {str}:
            ids = [x if type(x) is str else str(x) for x in ids]
        if max(map(len, ids), default=0) > self.plan.limits.max_id_length:
            raise _GiveUp
        if "\0" in "".join(ids):  # rare: the careful path refuses a trailing one
            raise _GiveUp
        return ids

    def _times(self, events: list[Any], rb: Records) -> np.ndarray[Any, Any]:
        raw = [e.ts for e in events]
        kinds = set(map(type, raw))
        # in seconds already: the record's time standing in for a missing one, parsed text
        # (the ms rule below is for the event's own numbers only, as DecodePlan.event_time)
        seconds = np.zeros(len(raw), dtype=bool)
        if type(None) in kinds:  # the record's time, when it has one (Kafka's "none" is -1)
            stamps = rb.timestamps_ms
            seconds |= [r is None for r in raw]
            raw = [
                s / 1000.0 if r is None and (s := stamps[i]) is not None and s > 0 else r
                for i, r in enumerate(raw)
            ]
            if None in raw:
                raise _GiveUp
            kinds = set(map(type, raw))
        if not kinds <= {float, int}:
            seconds |= [type(x) is str for x in raw]
            try:
                raw = [parse_timestamp(x) if type(x) is str else x for x in raw]
            except Invalid:
                raise _GiveUp from None
        t = np.array(raw, dtype=np.float64)
        t = np.where((np.abs(t) > 1e11) & ~seconds, t / 1000.0, t)
        cfg = self.plan.config
        if not len(t):
            return t
        if t.min() < cfg.min_timestamp or t.max() > self.plan.clock() + cfg.max_future:
            raise _GiveUp
        # ahead of the record's own Kafka time (DecodePlan.event_time says why)
        # one C conversion; a missing time (None) becomes NaN, which is never > 0
        record_ms = np.asarray(rb.timestamps_ms, dtype=np.float64)
        ahead = t > record_ms / 1000.0 + cfg.max_future
        if (ahead & (record_ms > 0)).any():
            raise _GiveUp
        return t

    def _models(self, events: list[Any]) -> np.ndarray[Any, Any]:
        d = self.plan
        names = [e.model for e in events]
        lut: dict[str | None, int] = {}
        for name in set(names):  # a handful of distinct names per batch
            if name is None:
                idx = d.default_model
            else:
                idx = d.model_index.get(name)
                if idx is None and d.config.unknown_models == "default":
                    idx = d.default_model
            if idx is None:
                raise _GiveUp
            lut[name] = idx
        if len(lut) == 1:
            return np.full(len(names), next(iter(lut.values())), dtype=np.int64)
        return np.array([lut[n] for n in names], dtype=np.int64)

    # -- predictions ---------------------------------------------------------------------------
    def predictions(self, rb: Records) -> PredictionBatch:
        d = self.plan
        events = self._decode(rb, self.pred_decoder)
        ids = self._ids(events)
        ts = self._times(events, rb)
        model = self._models(events)
        score = np.array([e.score for e in events], dtype=np.float64)  # None becomes NaN
        if ((score < 0) | (score > 1)).any():  # NaN compares False: absent scores pass
            raise _GiveUp  # the careful path names the event
        n = len(events)
        pred = np.empty(n, dtype=np.int64)
        groups = np.full((n, d.max_sets), -1, dtype=np.int32)
        single = n > 0 and model[0] == model[-1] and (model == model[0]).all()
        todo = []  # every model's checks pass before any registry changes (no half-done batch)
        for m in (model[:1] if single else np.unique(model)) if n else ():
            rows = np.arange(n) if single else np.flatnonzero(model == m)
            spec = d.models[m]
            evs = events if single else [events[i] for i in rows]
            get = self.pred_tables[m].get
            arr = np.array([get(e.pred, -1) for e in evs], dtype=np.int64)
            if (arr == -1).any():
                raise _GiveUp
            missing = arr == -2
            if missing.any():
                s = score[rows]
                if spec.threshold is None or np.isnan(s[missing]).any():
                    raise _GiveUp
                arr[missing] = (s[missing] >= spec.threshold).astype(np.int64)
            pred[rows] = arr
            columns = []
            for attr, (getter, name) in zip(spec.attributes, self.attr_getters[m], strict=True):
                col = list(map(getter, evs))
                if attr.bins is not None:
                    if name not in self.numeric_attrs and set(map(type, col)) & {str, bool}:
                        raise _GiveUp
                    try:  # an integer too large for a float is no number to bin
                        np.array(col, dtype=np.float64)
                    except (OverflowError, TypeError, ValueError):
                        raise _GiveUp from None
                columns.append(col)
            todo.append((m, rows, columns))
        for m, rows, columns in todo:
            enc = d.registries[m].encode(columns)
            groups[rows, : enc.shape[1]] = enc
        return PredictionBatch(
            key=id_keys(ids),
            model=model.astype(np.uint16),
            ts=ts,
            pred=pred.astype(np.uint8),
            score=score,
            groups=groups,
        )

    # -- labels --------------------------------------------------------------------------------
    def labels(self, rb: Records) -> LabelBatch:
        d = self.plan
        events = self._decode(rb, self.label_decoder)
        ids = self._ids(events)
        ts = self._times(events, rb)
        if [e.model for e in events].count(None) != len(events):
            self._models(events)  # unknown model ids are rejected (by the careful path)
        get = d.label_map.get  # holds no None: an absent label is -1
        y = [get(e.label, -1) for e in events]
        if -1 in y:
            raise _GiveUp
        return LabelBatch(key=id_keys(ids), ts=ts, label=np.array(y, dtype=np.uint8))


def try_fast(fn: Any, rb: Records) -> Any:
    """``fn(rb)``, or ``None`` when the batch needs the careful path."""
    try:
        return fn(rb)
    except _GiveUp:
        return None
    except Exception:  # whatever the bytes: the careful path dead-letters what it must
        return None
