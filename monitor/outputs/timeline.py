"""``replay --timeline FILE``: every closed bucket boundary as JSON lines, for plots and audits.

One line per (model, window, attribute) and boundary, in evaluation order, with every registry
disparity (value, bounds, compared groups; ``null`` when undefined, ``blind`` with the reason
when the counts cannot measure it) and each group's n and rates; and, when the evaluator has
anytime-valid evidence detectors (``evaluator.evidence``), one ``"kind": "evidence"`` line per
model and boundary with their state. The lines are written as the evaluator produces them
(its ``on_boundary`` hook), so a replay of months keeps no timeline in memory.

The numbers are the ones the alert rules judged: the window ending at the boundary, with labels
as known at that moment of event time — identical however the replay cuts its batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any, Literal

import msgspec

from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.durations import iso_utc
from monitor.config.spec import Config
from monitor.metrics.blindness import blind_groups
from monitor.metrics.disparities import Disparity
from monitor.metrics.registry import METRICS
from monitor.metrics.results import AttributeResult, finite_or_none

RATES = ("selection_rate", "tpr", "fpr", "ppv")


class DisparityPoint(msgspec.Struct, omit_defaults=True):
    """One disparity at one boundary (``null``: undefined; ``blind``: cannot be measured)."""

    value: float | None
    lower: float | None
    upper: float | None
    low_group: str | None = None
    high_group: str | None = None
    blind: str | None = None


class GroupPoint(msgspec.Struct, omit_defaults=True):
    n: int
    labelled: int
    eligible: bool
    selection_rate: float | None
    tpr: float | None
    fpr: float | None
    ppv: float | None
    blind: dict[str, str] = {}


class BoundaryLine(msgspec.Struct, tag_field="kind", tag="boundary"):
    at: float  # event time of the boundary (epoch seconds): the windows' end
    time: str  # the same, ISO 8601 UTC
    model: str
    window: str
    attribute: str
    disparities: dict[str, DisparityPoint]
    groups: dict[str, GroupPoint]


class EvidenceLine(msgspec.Struct, tag_field="kind", tag="evidence"):
    at: float
    time: str
    model: str
    detectors: list[Any]  # the evaluator's evidence rows (model, attribute, group, detector…)


Line = BoundaryLine | EvidenceLine
Kind = Literal["boundary", "evidence"]


def _point(d: Disparity, r: AttributeResult, blind: str | None) -> DisparityPoint:
    if blind is not None:
        return DisparityPoint(None, None, None, None, None, blind=blind)  # compares nothing
    return DisparityPoint(
        finite_or_none(d.value),
        finite_or_none(d.lower),
        finite_or_none(d.upper),
        r.name(d.low_group),
        r.name(d.high_group),
    )


def boundary_line(
    model: str, window: str, attribute: str, at: float, r: AttributeResult, *, favourable: int
) -> BoundaryLine:
    """The timeline line of one attribute set's result at one boundary."""
    gm, d = r.groups, r.disparities
    blind = blind_groups(gm, favourable=favourable)
    blind_metrics = blind.disparities(d)
    disparities = {}
    for name in METRICS:
        why = blind_metrics.get(name)
        disparities[name] = _point(d.metric(name), r, None if why is None else why.text)
    per_rate = {rate: blind.reasons(rate) for rate in RATES[1:]}
    rates = {rate: getattr(gm, rate).tolist() for rate in RATES}
    n, labelled, eligible = gm.n.tolist(), gm.labelled.tolist(), d.eligible.tolist()
    groups = {}
    for i, lab in enumerate(r.labels):
        why_i = {k: w.text for k, ws in per_rate.items() if (w := ws[i]) is not None}
        vals = {k: None if k in why_i else finite_or_none(v[i]) for k, v in rates.items()}
        groups[lab] = GroupPoint(n[i], labelled[i], eligible[i], **vals, blind=why_i)
    return BoundaryLine(at, iso_utc(at), model, window, attribute, disparities, groups)


def _scalar(x: Any) -> Any:
    """numpy scalars (an ``np.int64`` is no ``int``) as Python numbers."""
    if hasattr(x, "item"):
        return x.item()
    raise NotImplementedError(f"cannot encode {type(x).__name__}")


def _row(row: Any) -> Any:
    """An evidence row as plain JSON values (a NamedTuple keeps its field names)."""
    if hasattr(row, "_asdict"):
        row = row._asdict()
    if str(row.get("state", "")).startswith("blind"):  # no evidence, no expected time: a blind
        row = {**row, "log_e": None, "expected_seconds": None}  # detector measures nothing
    if row.get("expected_seconds") != row.get("expected_seconds"):  # NaN: it cannot fire yet
        row = {**row, "expected_seconds": None}
    return msgspec.to_builtins(row, enc_hook=_scalar)


def _model_of(row: Any) -> Any:
    return row.get("model") if isinstance(row, Mapping) else getattr(row, "model", None)


class TimelineWriter:
    """The evaluator's ``on_boundary`` hook: writes each boundary's lines to ``out`` at once."""

    def __init__(self, out: IO[bytes], config: Config, evaluator: AlertEvaluator) -> None:
        self.out = out
        self.evaluator = evaluator
        self.favourable = {name: m.favourable for name, m in config.models.items()}
        self.encoder = msgspec.json.Encoder()
        self.lines = 0

    def __call__(
        self, model: str, at: float, results: list[tuple[str, str, AttributeResult]]
    ) -> None:
        buf = bytearray()
        fav = self.favourable[model]
        for window, attribute, r in results:
            line = boundary_line(model, window, attribute, at, r, favourable=fav)
            self.encoder.encode_into(line, buf, len(buf))
            buf += b"\n"
        evidence = getattr(self.evaluator, "evidence", None)
        if evidence is not None:
            rows = [_row(r) for r in evidence.snapshot() if _model_of(r) in (model, None)]
            self.encoder.encode_into(EvidenceLine(at, iso_utc(at), model, rows), buf, len(buf))
            buf += b"\n"
        self.out.write(buf)
        self.lines += buf.count(b"\n")


def attach(evaluator: AlertEvaluator, out: IO[bytes], config: Config) -> TimelineWriter:
    """Stream ``evaluator``'s boundaries to ``out`` as JSON lines; returns the writer."""
    writer = TimelineWriter(out, config, evaluator)
    evaluator.on_boundary = writer
    return writer


def read_timeline(data: bytes) -> list[Line]:
    """Parse a timeline file back into its typed lines (tests, notebooks)."""
    decoder = msgspec.json.Decoder(Line)
    return [decoder.decode(line) for line in data.splitlines() if line.strip()]
