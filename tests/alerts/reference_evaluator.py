"""The alert evaluator's window loop as it was before the speed-up of issue 14, kept as the
reference that the fast path must equal (``tests/alerts/test_fast_evaluation.py``) and as the
"before" side of ``bench/alert_cost.py``: every window summed afresh with
``Engine.counts_between`` and every result computed alone by the straightforward
``fairness.group_metrics`` + ``fairness.disparities`` (cross-checked against fairlearn, AIF360
and statsmodels in ``tests/metrics/test_fairness_reference.py``)."""

from __future__ import annotations

from typing import Any

from monitor.alerts.evaluator import AlertEvaluator
from monitor.config.spec import ModelSpec
from monitor.metrics.fairness import disparities, group_metrics
from monitor.metrics.results import AttributeResult


class ReferenceEvaluator(AlertEvaluator):
    def _window_results(
        self,
        m: int,
        spec: ModelSpec,
        k: int,
        sets: list[tuple[str, Any, list[str]]],
        windows: list[Any],
    ) -> list[tuple[str, str, AttributeResult, dict[int, AttributeResult]]]:
        out = []
        confidence = self.config.confidence
        # a rule above the model's min_samples judges the groups that reach its own
        floors = {r.min_samples for r in self.spec.rules if r.min_samples > spec.min_samples}
        for w in windows:
            end = k - w.lag // spec.bucket
            counts = self.engine.counts_between(m, end - w.length // spec.bucket, end, as_of=k)
            for set_name, gidx, labels in sets:
                if not labels:
                    continue
                gm = group_metrics(
                    counts[gidx],
                    score_bins=spec.score_bins,
                    confidence=confidence,
                    favourable=spec.favourable,
                )
                ref_label = spec.reference_groups.get(set_name)
                ref = labels.index(ref_label) if ref_label in labels else None
                by_floor = {
                    f: AttributeResult(tuple(labels), gm, disparities(
                        gm, min_samples=f, reference=ref, confidence=confidence, labels=labels))
                    for f in {spec.min_samples, *floors}
                }  # fmt: skip
                result = by_floor.pop(spec.min_samples)
                out.append((w.name, set_name, result, by_floor))
        return out
