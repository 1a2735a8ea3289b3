"""A serving stack's records on the predictions topic → the two halves of each decision.

Each record is a request or a response of one inference call (``oip.py``), as it is
(``oip-json``: an ``inputs`` payload is a request, an ``outputs`` payload a response; the id in
the payload, else the ``x-request-id`` header) or wrapped in a CloudEvent (``kserve-cloudevents``:
KServe's logger, the kind from ``ce_type``, the id from ``ce_id`` when the payload has none).
Per row, a request gives its time and raw group values, a response its score and decision; both
are keyed by ``<request id>/<row>`` (one row: the id), as labels must be. The model is the
CloudEvent's ``inferenceservicename`` or the response's ``model_name``, else the only model.

The halves go to the partition's :class:`~monitor.state.halves.HalfJoin`; a bad record is a
dead letter with its reason, as for the monitor's own events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.serving import TensorMapping
from monitor.ingest import seldon
from monitor.ingest.cloudevents import from_kafka
from monitor.ingest.decode_careful import dead_letters
from monitor.ingest.decode_plan import DecodePlan
from monitor.ingest.events import DeadLetter, Invalid, Reason, unforeseen
from monitor.ingest.keys import RowIds
from monitor.ingest.oip import Table, decode_payload, decode_request, decode_response
from monitor.ingest.seldon_fast import SeldonFast
from monitor.ingest.serving import decisions, groups
from monitor.ingest.serving_checks import header
from monitor.ingest.serving_fast import ServingFast


def request_dtype(n_sets: int) -> np.dtype[Any]:
    """A request's row: when it was asked, for which model, the groups of each set."""
    return np.dtype(
        [
            ("key", np.uint64),
            ("ts", np.float64),
            ("model", np.uint16),
            ("groups", np.int32, (n_sets,)),
        ]
    )


RESPONSE_DTYPE = np.dtype(
    [
        ("key", np.uint64),
        ("ts", np.float64),
        ("model", np.uint16),
        ("score", np.float64),
        ("pred", np.uint8),
        # where its record is (an orphan response is dead-lettered by it): the offset, and
        # whether on the responses topic (1) or the predictions topic (0)
        ("offset", np.int64),
        ("on_responses", np.uint8),
    ]
)
NUMBER_TYPES = frozenset({int, float, type(None)})
Answered = tuple[RowIds, float, int, list[float], list[int], int]  # ..., record index


class _Requests:
    def __init__(self, n_attrs: int) -> None:
        self.ids: list[RowIds] = []
        self.ts: list[float] = []
        self.values: list[list[Any]] = [[] for _ in range(n_attrs)]


class ServingDecoder:
    """Decodes the predictions topic's records for one configuration and format."""

    def __init__(self, plan: DecodePlan, fmt: str, responses_topic: str | None = None) -> None:
        self.plan, self.fmt, self.responses_topic = plan, fmt, responses_topic
        self.mappings: list[TensorMapping | None] = [m.serving for m in plan.models]
        self.serving = [i for i, m in enumerate(self.mappings) if m is not None]
        self.binned = [frozenset(a.name for a in m.attributes if a.bins) for m in plan.models]
        # one model's traffic (the common case) is decoded whole batches at a time
        only = self.mappings[self.serving[0]] if len(self.serving) == 1 else None
        self.fast: ServingFast | SeldonFast | None = None
        if only is not None and fmt == "seldon":
            self.fast = SeldonFast(plan, self.serving[0], only, responses_topic)
        elif only is not None:
            self.fast = ServingFast(plan, fmt, self.serving[0], only)

    def _numbers(self, columns: Sequence[Sequence[Any]]) -> bool:
        """Are the fast path's binned attribute columns all numbers (or missing)? By type
        alone: the fast paths' numbers are finite already (typed structs bound ints to int64
        and JSON has no NaN; protobuf floats are checked finite), as ``is_number`` asks."""
        attrs = self.plan.models[self.serving[0]].attributes
        return all(
            set(map(type, col)) <= NUMBER_TYPES
            for a, col in zip(attrs, columns, strict=False)
            if a.bins
        )

    def decode(self, rb: Any) -> tuple[npt.NDArray[Any], npt.NDArray[Any], list[DeadLetter]]:
        """(request rows, response rows, dead letters) of one batch of records."""
        plan = self.plan
        fast = self.fast.decode(rb) if self.fast is not None else None
        if fast is not None and (
            not self._numbers(fast[0][2]) or fast[0][0].has_nul() or fast[1][0].has_nul()
        ):
            fast = None  # a binned attribute that is no number, a NUL: the careful path names it
        if fast is not None:
            (ids, ts, values), (r_ids, r_ts, scores, preds, where) = fast
            m = self.serving[0]
            asked_rows = request_rows(plan, m, ids, ts, values)
            answers = response_rows(r_ids, r_ts, m, scores, preds)
            return asked_rows, self._placed(answers, rb, where), []
        lo, hi = plan.time_bounds()
        records: Sequence[Any] | None = getattr(rb, "records", None)  # a Kafka poll's, headers
        asked = [_Requests(len(plan.models[m].attributes)) for m in range(len(plan.models))]
        answered: list[Answered] = []
        errors: list[Invalid | None] = [None] * len(rb)
        topic = getattr(rb, "topic", "")
        for i, value in enumerate(rb.values):
            try:
                headers = getattr(records[i], "headers", None) if records is not None else None
                ms = rb.timestamps_ms[i]
                self._one(value, headers, topic, ms, lo, hi, asked, answered, i)
            except Invalid as bad:
                errors[i] = bad
            except Exception as exc:
                errors[i] = unforeseen(exc)
        answers, where = _responses(answered)
        return self._requests(asked), self._placed(answers, rb, where), dead_letters(rb, errors)

    def _placed(self, rows: npt.NDArray[Any], rb: Any, where: Any) -> npt.NDArray[Any]:
        """Response rows with their record's offset (from the batch index ``where``)."""
        records = getattr(rb, "records", None)
        if len(rows) and records is not None:
            where = np.asarray(where, dtype=np.int64)
            first, last = records[0].offset, records[-1].offset
            if last - first == len(records) - 1:  # consecutive, as a poll's usually are
                rows["offset"] = first + where
            else:
                n = len(records)
                offsets = np.fromiter((r.offset for r in records), dtype=np.int64, count=n)
                rows["offset"] = offsets[where]
        else:
            rows["offset"] = -1
        topic = getattr(rb, "topic", "")
        rows["on_responses"] = bool(self.responses_topic) and topic == self.responses_topic
        return rows

    def _one(
        self,
        value: Any,
        headers: Sequence[tuple[str, bytes]] | None,
        topic: str,
        record_ms: int | None,
        lo: float,
        hi: float,
        asked: list[_Requests],
        answered: list[Answered],
        i: int,
    ) -> None:
        rid: str | None
        limit = self.plan.limits.max_record_bytes
        if isinstance(value, bytes) and len(value) > limit:
            raise Invalid(
                Reason.RECORD_TOO_LARGE, f"{len(value)} bytes > limits.max_record_bytes {limit}"
            )
        if self.fmt == "kserve-cloudevents":
            ev = from_kafka(headers, value)
            kind, data, rid, when = ev.kind, ev.data, ev.id, ev.time
            hint = ev.attributes.get("inferenceservicename")
        elif self.fmt == "seldon":  # the model by the topic's name (else the only one), never
            # by model_name (Seldon's servers see versioned names such as credit_1)
            kind, table = seldon.half(value, headers, topic == self.responses_topic)
            rid, when, data = header(headers, "x-request-id"), None, value
            hint = seldon.topic_model(topic)
            hint = hint if hint in self.plan.model_index else None
        else:
            if value is None:
                raise Invalid(Reason.TOMBSTONE, "a record without a value (a tombstone)")
            if not isinstance(value, bytes):
                raise Invalid(Reason.NOT_JSON, "not a JSON payload")
            data, when, hint = value, None, None
            rid = header(headers, "x-request-id")
            kind, table = decode_payload(data)
        if kind == "request":
            if self.fmt == "kserve-cloudevents":
                table = decode_request(data)
            m = self._model(hint, table)
            mapping = self.mappings[m]
            assert mapping is not None
            ids = self._checked(table.row_ids(rid))
            ts = self.plan.event_time(when, record_ms, lo, hi, seconds=True)
            cols = groups(table, mapping, self.binned[m])  # none with the attributes topic
            req = asked[m]
            req.ids.append(ids)
            req.ts += [ts] * len(ids)
            for j, attr in enumerate(self.plan.models[m].attributes):
                req.values[j] += cols.get(attr.name, ())
        elif kind == "response":
            if self.fmt == "kserve-cloudevents":
                table = decode_response(data)
            # the event's name even when empty (names no model, as for its request: a review)
            name = hint if self.fmt == "seldon" or hint is not None else table.model
            m = self._model(name, table)
            mapping = self.mappings[m]
            assert mapping is not None
            ids = self._checked(table.row_ids(rid))
            ts = self.plan.event_time(when, record_ms, lo, hi, seconds=True)
            scores, preds = decisions(table, mapping, self.plan.models[m].threshold)
            answered.append((ids, ts, m, scores, preds, i))
        else:
            raise Invalid(
                Reason.BAD_CLOUDEVENT, f"event type {kind[:80]!r} is no request or response"
            )

    def _checked(self, ids: RowIds) -> RowIds:
        """A call's decision ids, refused whole when it has more rows than a call may bring or
        one id is longer than labels may name (checked before any row exists)."""
        lim = self.plan.limits
        rows = len(ids)
        if rows > lim.max_rows_per_record:
            raise Invalid(
                Reason.TOO_MANY_ROWS,
                f"a call of {rows} rows > limits.max_rows_per_record {lim.max_rows_per_record}",
            )
        longest = ids.longest()
        if longest > lim.max_id_length:
            raise Invalid(
                Reason.ID_TOO_LONG,
                f"decision id of {longest} characters > limits.max_id_length {lim.max_id_length}",
            )
        if rows == 1 and ids.calls[0][-1:] == "\0":  # keys ignore trailing NULs: "a\0" is "a"
            raise Invalid(Reason.BAD_ID, "decision id ends in a NUL character")
        return ids

    def _model(self, name: str | None, table: Table) -> int:
        if name is not None:
            m = self.plan.model_index.get(name)
            if m is None or self.mappings[m] is None:
                raise Invalid(Reason.UNKNOWN_MODEL, f"model {name[:60]!r} maps no tensors here")
            return m
        if len(self.serving) == 1:
            return self.serving[0]
        raise Invalid(Reason.MISSING_MODEL, "no model name, and several models are configured")

    def _requests(self, asked: list[_Requests]) -> npt.NDArray[Any]:
        parts = [
            request_rows(self.plan, m, RowIds.join(req.ids), req.ts, req.values)
            for m, req in enumerate(asked)
            if req.ids
        ]
        empty = np.zeros(0, dtype=request_dtype(self.plan.max_sets))
        return np.concatenate(parts) if parts else empty


def request_rows(
    plan: DecodePlan, m: int, ids: RowIds, ts: Any, values: list[list[Any]]
) -> npt.NDArray[Any]:
    """One model's request rows: keys, times, the groups of each set (encoded here, so the
    registry sees every value once)."""
    rows = np.zeros(len(ids), dtype=request_dtype(plan.max_sets))
    if not len(rows):
        return rows
    rows["key"] = ids.keys()
    rows["ts"] = ts
    rows["model"] = m
    rows["groups"] = -1
    serving = plan.models[m].serving
    if serving is None or not serving.stream:  # else the attributes topic gives the groups
        enc = plan.registries[m].encode(values)
        rows["groups"][:, : enc.shape[1]] = enc
    return rows


def response_rows(ids: RowIds, ts: Any, m: Any, scores: Any, preds: Any) -> npt.NDArray[Any]:
    """Response rows: keys, times, model, score (NaN without one), decision."""
    rows = np.zeros(len(ids), dtype=RESPONSE_DTYPE)
    if not len(rows):
        return rows
    rows["key"] = ids.keys()
    rows["ts"] = ts
    rows["model"] = m
    rows["score"] = scores
    rows["pred"] = preds
    return rows


def _responses(answered: list[Answered]) -> tuple[npt.NDArray[Any], list[int]]:
    """Response rows, and the batch index of each row's record."""
    ids: list[RowIds] = []
    ts: list[float] = []
    models: list[int] = []
    scores: list[float] = []
    preds: list[int] = []
    where: list[int] = []
    for row_ids, t, m, s, p, i in answered:
        n = len(row_ids)
        ids.append(row_ids)
        ts += [t] * n
        models += [m] * n
        scores += s
        preds += p
        where += [i] * n
    return response_rows(RowIds.join(ids), ts, models, scores, preds), where
