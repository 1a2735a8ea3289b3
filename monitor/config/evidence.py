"""The evidence detectors' configuration: the false-page budget and the detectors' knobs.

Users set how often they accept a false page (``alerts.false_page_budget``), not α, ``for``
and hysteresis: the detectors' thresholds follow from it (``metrics/sequential.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from msgspec import Meta

from monitor.config.decode import ConfigError, Doc, finite, sub
from monitor.config.durations import Duration, seconds


@dataclass(frozen=True)
class BudgetSpec:
    """How often a fair model may page: ``pages`` false pages per ``per`` seconds, per model
    (the evidence detectors' thresholds follow from it; see ``metrics/sequential.py``)."""

    pages: float = 1.0
    per: int = 90 * 86400


@dataclass(frozen=True)
class EvidenceSpec:
    """Anytime-valid evidence detectors per (model, attribute set, group)
    (``alerts/evidence.py``)."""

    enabled: bool = True
    baseline: int = 7 * 86400  # a group's baseline: its pooled counts over the last `baseline`
    guard: int = 86400  # ...ending `guard` before now (a fresh change stays out of it)
    min_baseline: int = 200  # decisions (labelled outcomes) in the baseline before detecting
    resolve_odds: float = 1000.0  # evidence of recovery (odds) that resolves an alert
    baseline_z: float = 1.5  # a change is judged from the far end of baseline ± z std. errors
    margin: float = 2.0  # nats above log(threshold) the statistic is capped at while firing
    severity: str = "page"


class BudgetDoc(Doc, frozen=True):
    """How many false pages per model a fair model may cause, over how long."""

    pages: Annotated[float, Meta(gt=0)] = BudgetSpec.pages
    per: Duration = BudgetSpec.per


class EvidenceDoc(Doc, frozen=True):
    """Anytime-valid evidence detectors (change of each group's rates, the four-fifths and
    equalized-odds bounds as sequential tests)."""

    enabled: bool = EvidenceSpec.enabled
    baseline: Duration = EvidenceSpec.baseline
    guard: Duration = EvidenceSpec.guard
    min_baseline: Annotated[int, Meta(ge=1)] = EvidenceSpec.min_baseline
    resolve_odds: Annotated[float, Meta(gt=1)] = EvidenceSpec.resolve_odds
    baseline_z: Annotated[float, Meta(ge=0)] = EvidenceSpec.baseline_z
    margin: Annotated[float, Meta(ge=0)] = EvidenceSpec.margin
    severity: str = EvidenceSpec.severity


def resolve_budget(doc: BudgetDoc | None, path: str) -> BudgetSpec:
    b = doc or BudgetDoc()
    return BudgetSpec(
        pages=finite(b.pages, sub(path, "pages")),
        per=seconds(b.per, sub(path, "per"), positive=True),
    )


def resolve_evidence(doc: EvidenceDoc | None, path: str) -> EvidenceSpec:
    e = doc or EvidenceDoc()
    evidence = EvidenceSpec(
        enabled=e.enabled,
        baseline=seconds(e.baseline, sub(path, "baseline"), positive=True),
        guard=seconds(e.guard, sub(path, "guard")),
        min_baseline=e.min_baseline,
        resolve_odds=finite(e.resolve_odds, sub(path, "resolve_odds")),
        baseline_z=finite(e.baseline_z, sub(path, "baseline_z")),
        margin=finite(e.margin, sub(path, "margin")),
        severity=e.severity,
    )
    if evidence.guard >= evidence.baseline:
        raise ConfigError(sub(path, "guard"), "must be shorter than the baseline")
    return evidence
