"""Prometheus exporter for the fairness metrics: text exposition rendered from a snapshot.

The consumer thread publishes a snapshot (a cheap copy of summed window counts) about once a
second; a scrape renders that snapshot in the HTTP thread — no lock, no work on the consumer
thread. The rendered text is cached per snapshot, so many scrapers cost one rendering.

Why render the text ourselves: a realistic deployment (5 models × 3 attributes × 20 groups × 3
windows) is ~20,000 series, and prometheus_client's generic exposition path spends ~10 µs per
sample validating and escaping label names that we know are valid. We write the standard text
format (0.0.4) directly from the vectorized metric arrays; the contract test parses it with
``prometheus_client.parser``. Operational metrics still go through prometheus_client.

Names follow Prometheus conventions: prefix ``fairness_``, ``_ratio`` for fractions, windowed
counts as gauges (they go down), bounds as ``…_lower_ratio`` / ``…_upper_ratio``. Raw counts are
exported so PromQL can aggregate replicas correctly (``sum(num) / sum(den)``). NaN means
"insufficient data"; a group that has left the window is not exported.

A metric that cannot be measured (:mod:`monitor.metrics.blindness`: TPR and FPR when only
approved applicants are labelled) is not exported as a number at all: its value gauges are
absent and ``fairness_metric_blind{…,metric,reason}`` (disparities) or
``fairness_group_metric_blind{…,group,metric,reason}`` (per-group rates) is 1 instead, so no
dashboard or rule reads a made-up 1.000 as good news.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from monitor.alerts.evidence_alerts import EvidenceRow
from monitor.metrics.blindness import RATE_CELLS, blind_groups
from monitor.metrics.estimates import Estimates
from monitor.metrics.registry import EXPORTED, GROUP_COUNTS, GROUP_RATES
from monitor.metrics.results import attribute_result
from monitor.outputs.score_report import calibration_window, model_estimates
from monitor.state.engine import Snapshot

ELIGIBLE_HELP = "1 if the group has min_samples predictions and takes part in disparities."
BLIND_HELP = (
    "1 while the metric cannot be measured (reason: selective_labels = labels arrive for one "
    "predicted class only); its value gauges are then absent."
)
GROUP_BLIND_HELP = "1 while the group's rate cannot be measured; its gauges are then absent."


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(x: float) -> str:
    if x != x:
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


class _Families:
    """Lines grouped by metric family, written out with one HELP/TYPE header each."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}
        self.help: dict[str, str] = {}

    def add(self, name: str, doc: str, labels: str, value: float) -> None:
        full = f"fairness_{name}"
        if full not in self.lines:
            self.lines[full] = []
            self.help[full] = doc
        self.lines[full].append(f"{full}{{{labels}}} {_num(value)}")

    def text(self) -> str:
        out = []
        for name, lines in self.lines.items():
            out.append(f"# HELP {name} {self.help[name]}")
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)
        return "\n".join(out) + "\n" if out else ""


def render(snap: Snapshot, *, confidence: float) -> str:
    """The fairness families of ``snap`` in the Prometheus text format."""
    fam = _Families()
    for model, ms in snap.models.items():
        spec = ms.spec
        cal_window = calibration_window(ms) if ms.windows else ""
        for wname, wc in ms.windows.items():
            for set_name, (gidx, labels) in zip(ms.set_names, ms.groups, strict=True):
                counts = wc.counts[gidx]
                keep = np.flatnonzero(counts[:, 0] > 0)  # groups with predictions in the window
                if not len(keep):
                    continue
                counts = counts[keep]
                names = [labels[i] for i in keep]
                r = attribute_result(counts, names, spec, set_name, confidence=confidence)
                gm, d = r.groups, r.disparities
                base = f'model="{_esc(model)}",window="{_esc(wname)}",attribute="{_esc(set_name)}"'
                group_labels = [f'{base},group="{_esc(n)}"' for n in names]
                for c in GROUP_COUNTS:
                    values = getattr(gm, c.field)
                    for lab, v in zip(group_labels, values.tolist(), strict=True):
                        fam.add(c.name, c.help, lab, v)
                blind = blind_groups(gm, favourable=spec.favourable)
                for f in GROUP_RATES:
                    whys = blind.reasons(f.field) if f.field in RATE_CELLS else [None] * len(names)
                    for lab, why in zip(group_labels, whys, strict=True):
                        if why is not None:
                            where = f'{lab},metric="{f.name}",reason="{why.code}"'
                            fam.add("group_metric_blind", GROUP_BLIND_HELP, where, 1.0)
                    series = [("", f.help, getattr(gm, f.field))]
                    if f.bounded:
                        lo, hi = gm.bounds[f.field]
                        series.append(("_lower", f"Wilson lower bound: {f.help}", lo))
                        series.append(("_upper", f"Wilson upper bound: {f.help}", hi))
                    for suffix, doc, arr in series:
                        for lab, v, why in zip(group_labels, arr.tolist(), whys, strict=True):
                            if why is None:
                                fam.add(f"{f.name}{suffix}_ratio", doc, lab, v)
                for lab, ok in zip(group_labels, d.eligible.tolist(), strict=True):
                    fam.add("group_eligible", ELIGIBLE_HELP, lab, 1.0 if ok else 0.0)
                blind_metrics = blind.disparities(d)
                for m in EXPORTED:
                    disp = d.metric(m.name)
                    why = blind_metrics.get(m.name)
                    if why is not None:
                        reason = f'{base},metric="{m.name}",reason="{why.code}"'
                        fam.add("metric_blind", BLIND_HELP, reason, 1.0)
                        continue
                    fam.add(f"{m.family}_ratio", m.help, base, disp.value)
                    # the pair is the most extreme of several: its interval holds over all
                    level = "confidence bound over every pair compared (Bonferroni)"
                    doc = f"Lower {level}: {m.help}"
                    fam.add(f"{m.family}_lower_ratio", doc, base, disp.lower)
                    doc = f"Upper {level}: {m.help}"
                    fam.add(f"{m.family}_upper_ratio", doc, base, disp.upper)
                if gm.scored.any():
                    cal = ms.windows[cal_window].counts[gidx][keep]
                    est = model_estimates(counts, cal, spec, confidence=confidence)
                    _score_families(fam, group_labels, gm.score_histogram, d, est)
                di = d.disparate_impact
                worst = "" if di.low_group is None else names[di.low_group]
                refn = "" if di.high_group is None else names[di.high_group]
                fam.add(
                    "disparate_impact_info",
                    "Which groups the disparate impact ratio compares.",
                    f'{base},worst_group="{_esc(worst)}",reference_group="{_esc(refn)}"',
                    1.0,
                )
    return fam.text()


SCORE_HELP = {
    "ks": "Kolmogorov-Smirnov distance of the group's binned score distribution from the "
    "score reference group's (absent for the reference and groups short of min_samples).",
    "w1": "Wasserstein-1 distance of the group's binned score distribution from the score "
    "reference group's.",
}
BUCKET_HELP = (
    "Scored predictions in the window with a score in a bin at or below le (cumulative; bins "
    "of equal width): the score distribution, summed across replicas by the PromQL rules."
)
ESTIMATE_HELP = (
    "Label-free estimate from calibrated scores (CBPE): labelled predictions as counted, those "
    "awaiting a label in expectation; absent when the group's calibration check fails."
)
CHECK_HELP = (
    "1 for the group's calibration check on the longest window's labels (Hosmer-Lemeshow): "
    "calibrated, miscalibrated (estimates withheld) or unchecked (too few labels)."
)


def _score_families(
    fam: _Families, group_labels: list[str], hist: Any, d: Any, est: Estimates
) -> None:
    """Per group: the cumulative score histogram (PromQL sums it across replicas), distances
    from the score reference, the estimated TPR/FPR, the calibration check."""
    bins = hist.shape[1]
    edges = [f"{(b + 1) / bins:.6g}" for b in range(bins)]
    for lab, row in zip(group_labels, np.cumsum(hist, axis=1).tolist(), strict=True):
        if row[-1]:
            for le, v in zip(edges, row, strict=True):
                fam.add("score_bucket_predictions", BUCKET_HELP, f'{lab},le="{le}"', v)
    rows = zip(
        group_labels,
        d.score_ks.tolist(),
        d.score_wasserstein.tolist(),
        est.check,
        strict=True,
    )
    for i, (lab, ks, w1, check) in enumerate(rows):
        if ks == ks:
            fam.add("group_score_ks_distance_ratio", SCORE_HELP["ks"], lab, ks)
            fam.add("group_score_wasserstein_distance_ratio", SCORE_HELP["w1"], lab, w1)
        fam.add("calibration_check", CHECK_HELP, f'{lab},state="{check}"', 1.0)
        if est.estimated[i] == 0 or check == "miscalibrated":
            continue
        for rate, name in (("tpr", "true_positive_rate"), ("fpr", "false_positive_rate")):
            for suffix in ("", "_lower", "_upper"):
                value = float(getattr(est, f"{rate}{suffix}")[i])
                fam.add(f"estimated_{name}{suffix}_ratio", ESTIMATE_HELP, lab, value)


EVIDENCE_HELP = (
    "Evidence of a change or a breached bound: log of the detector's e-value statistic "
    "(Shiryaev-Roberts mixture); it pages at fairness_alert_evidence_threshold."
)
THRESHOLD_HELP = (
    "log(c) of the evidence detectors: c = K * per / (pages * bucket) from the false-page "
    "budget shared by the model's K detectors."
)
EXPECTED_HELP = (
    "Expected seconds until a change worth a page would reach the threshold at the current "
    "volume (a change detector: the rate to 0.8x; four_fifths: a ratio of 0.75x the bound; "
    "equalized_odds: a gap of twice the bound; +Inf: no data or a rate of 0): a small "
    "group's silence is not fairness."
)
STATE_HELP = "1 for the evidence detector's state: watching, warming-up, firing, blind."


def render_evidence(rows: Sequence[EvidenceRow]) -> str:
    """The evidence detectors' families (``EvidenceTracker.snapshot`` rows)."""
    fam = _Families()
    for r in rows:
        lab = (
            f'model="{_esc(r.model)}",attribute="{_esc(r.attribute)}",'
            f'group="{_esc(r.group)}",detector="{_esc(r.detector)}"'
        )
        if not r.state.startswith("blind"):  # a blind detector measures nothing: no number
            fam.add("alert_evidence", EVIDENCE_HELP, lab, r.log_e)  # (as on the status page)
        fam.add("alert_evidence_threshold", THRESHOLD_HELP, lab, r.log_threshold)
        if not r.state.startswith("blind") and not math.isnan(r.expected_seconds):
            fam.add("expected_time_to_detect_seconds", EXPECTED_HELP, lab, r.expected_seconds)
        fam.add("alert_evidence_state", STATE_HELP, f'{lab},state="{_esc(r.state)}"', 1.0)
    return fam.text()


class FairnessExposition:
    """Renders the published snapshot (and evidence rows) for ``/metrics``, once per pair."""

    def __init__(
        self,
        source: Callable[[], Snapshot | None],
        *,
        confidence: float,
        evidence: Callable[[], Sequence[EvidenceRow]] | None = None,
    ) -> None:
        self.source = source
        self.evidence = evidence
        self.confidence = confidence
        self._cache: tuple[Any, Any, bytes] = (None, None, b"")

    def __call__(self) -> bytes:
        snap = self.source()
        if snap is None:
            return b""
        rows = self.evidence() if self.evidence is not None else ()
        cached_snap, cached_rows, text = self._cache
        if cached_snap is snap and cached_rows is rows:
            return text
        text = (render(snap, confidence=self.confidence) + render_evidence(rows)).encode()
        self._cache = (snap, rows, text)
        return text
