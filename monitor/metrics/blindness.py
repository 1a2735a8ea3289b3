"""Blind metrics: label-based rates that the counts cannot measure (selective labels).

When outcomes arrive for one predicted class only (a loan never granted is never repaid), a
rate whose denominator spans both predicted classes is 1 or 0 *by construction*: with no
labelled prediction-0 decision, FN = TN = 0, so TPR = TP / (TP + FN) = 1 and
FPR = FP / (FP + TN) = 1 for every group, and their gaps read a reassuring 0.000. Such a number
is not good news, it is no news; every surface shows it as "blind: selective labels" and alert
rules treat it as no data.

The rule, per group and predicted class c ∈ {0, 1}: class c is *unlabelled* when the group has
decisions of class c but none of them labelled, while some of its decisions are labelled
(with no label at all the rate is simply undefined: insufficient data). A rate is blind when its
denominator's cells (the registry's ``counts``: TP, FN for TPR; FP, TN for FPR; TP, FP for PPV)
include a class that is unlabelled:

* TPR, FPR (and FNR, TNR, accuracy, prevalence): blind when either class is unlabelled;
* PPV (and FDR): blind when class 1 is unlabelled; NPV (and FOR): when class 0 is.

A gap (max − min over groups) is blind when the rate of any group it compares is: every group
with ``min_samples`` in the rate's own denominator, not only the two it names, which ties at the
extreme would pick arbitrarily (found by a review: a blind group tied with a measurable one at
TPR 1 gave a measured 0.000); a small group the gap leaves out does not blind it. With fewer
than two such groups (no gap), any eligible group blind in the rate makes it blind: selective
labels leave few labelled decisions of the other class, and "insufficient data" would hide why.
The equalized-odds difference is blind when either of its gaps is; the average-odds difference
when the group or the reference is blind in TPR or FPR. Pure numpy on the counts: cheap enough
for every bucket boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from monitor.metrics.disparities import AttributeDisparities
from monitor.metrics.fairness import GroupMetrics
from monitor.metrics.registry import METRICS, RATE_FAMILY
from monitor.state.windows import FAV, FN, FP, TN, TP, N

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
Code = Literal["selective_labels"]

# which predicted class each confusion cell belongs to
CELL_CLASS = {"tp": 1, "fp": 1, "fn": 0, "tn": 0}
# per-group rates beyond the registry's bounded ones, with their denominators' cells
_OTHER_RATES: dict[str, tuple[str, ...]] = {
    "fnr": ("tp", "fn"),
    "tnr": ("fp", "tn"),
    "fdr": ("tp", "fp"),
    "npv": ("tn", "fn"),
    "false_omission_rate": ("tn", "fn"),
    "accuracy": ("tp", "fp", "fn", "tn"),
    "prevalence": ("tp", "fp", "fn", "tn"),
}
RATE_CELLS: dict[str, tuple[str, ...]] = {
    **{f.field: f.counts for f in RATE_FAMILY.values() if f.field != "selection_rate"},
    **_OTHER_RATES,
}
# registry metrics without a single rate: the rates they combine (docs/metrics.md)
COMPOSITE = {
    **{m.name: m.max_of for m in METRICS.values() if m.max_of},
    "average_odds_difference": ("tpr", "fpr"),
}


@dataclass(frozen=True)
class BlindReason:
    """Why a number cannot be measured: ``code`` for machines (the Prometheus ``reason``
    label), ``short`` for a table cell ("blind: <short>"), ``text`` for a sentence."""

    code: Code
    short: str
    text: str

    @property
    def cell(self) -> str:
        return f"blind: {self.short}"


ONLY_POSITIVE = BlindReason(
    "selective_labels",
    "selective labels",
    "selective labels: only decisions with prediction 1 are labelled",
)
ONLY_NEGATIVE = BlindReason(
    "selective_labels",
    "selective labels",
    "selective labels: only decisions with prediction 0 are labelled",
)
# reason codes: 0 measurable, 1 class 0 unlabelled, 2 class 1 unlabelled
_REASONS: tuple[BlindReason | None, ...] = (None, ONLY_POSITIVE, ONLY_NEGATIVE)


def _kind(cells: tuple[str, ...]) -> str:
    classes = {CELL_CLASS[c] for c in cells}
    return "both" if len(classes) == 2 else f"class{classes.pop()}"


_KIND = {rate: _kind(cells) for rate, cells in RATE_CELLS.items()}
_LABEL_BASED = tuple(name for name, spec in METRICS.items() if spec.needs_labels)


@dataclass(frozen=True)
class BlindReport:
    """Per group, which predicted class is unlabelled: ``unlabelled[c]`` (bool over groups).

    Read with :meth:`metric` (a per-group rate or a registry metric, for one group),
    :meth:`disparity` (a registry metric comparing two groups), :meth:`disparities` (every
    blind registry metric of an attribute set's computed disparities). When nothing is blind
    (``any`` false, the common case) every reader answers at once."""

    unlabelled: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]  # class 0, class 1
    any: bool
    # per denominator kind (both classes, class 0 only, class 1 only): per-group reason codes
    _codes: dict[str, tuple[int, ...]]
    # the confusion cells (tp, fp, fn, tn) per group, kept only when something is blind
    _cells: dict[str, I64] | None = None

    def codes(self, rate: str) -> I8:
        """Per group: 0 measurable, 1 only prediction-1 decisions labelled, 2 only prediction 0."""
        return np.array(self._codes[_KIND[_rate_of(rate)]], dtype=np.int8)

    def reasons(self, rate: str) -> list[BlindReason | None]:
        """Per group: why ``rate`` is blind, or ``None``."""
        return [_REASONS[c] for c in self._codes[_KIND[_rate_of(rate)]]]

    def blind(self, rate: str) -> npt.NDArray[np.bool_]:
        """Per group: is ``rate`` blind?"""
        return self.codes(rate) > 0

    def metric(self, metric: str, group: int) -> BlindReason | None:
        """Why ``metric`` (a ``GroupMetrics`` rate such as ``tpr``, or a registry metric,
        read as its rate) cannot be measured for ``group``; ``None``: it can."""
        if not self.any:
            return None
        if metric in COMPOSITE:
            for part in COMPOSITE[metric]:
                why = self.metric(part, group)
                if why is not None:
                    return why
            return None
        kind = _KIND.get(_rate_of(metric))
        if kind is None:  # not label-based (the selection rate, the DIR…)
            return None
        return _REASONS[self._codes[kind][group]]

    def _gap(self, metric: str, d: AttributeDisparities) -> BlindReason | None:
        """A gap is blind when a group it compares (``floor`` in the rate's own denominator) is
        blind in its rate; comparing fewer than two, when an eligible group with the rate
        defined is (one that selective labels left with too few in the denominator)."""
        assert self._cells is not None
        den = sum(self._cells[c] for c in RATE_CELLS[_rate_of(metric)])
        eligible = np.asarray(d.eligible)
        compared = eligible & (den >= d.floor)
        pool = compared if compared.sum() >= 2 else eligible & (den > 0)
        blind = np.flatnonzero(pool & self.blind(metric))
        return self.metric(metric, int(blind[0])) if len(blind) else None

    def disparity(self, metric: str, lo: int | None, hi: int | None) -> BlindReason | None:
        """Why registry ``metric`` comparing groups ``lo`` and ``hi`` is blind (``None``: it is
        not, or compares nothing). For the equalized-odds difference prefer
        :meth:`disparities`: its two gaps compare different pairs."""
        if not self.any or lo is None or hi is None:
            return None
        return self.metric(metric, lo) or self.metric(metric, hi)

    def disparities(self, d: AttributeDisparities) -> dict[str, BlindReason]:
        """Every registry metric of ``d`` that is blind, with its reason."""
        if not self.any:
            return {}
        out: dict[str, BlindReason] = {}
        for name in _LABEL_BASED:
            if name == "average_odds_difference":
                aod = d.average_odds_difference
                why = self.disparity(name, aod.low_group, aod.high_group)
            elif name in COMPOSITE:
                why = None
                for gap in COMPOSITE[name]:
                    why = why or self._gap(gap, d)
            else:
                why = self._gap(name, d)
            if why is not None:
                out[name] = why
        return out


def _rate_of(metric: str) -> str:
    """A registry metric's per-group rate (``tpr_gap`` → ``tpr``); a rate is its own."""
    spec = METRICS.get(metric)
    return spec.rate if spec is not None and spec.rate else metric


def blindness(
    n: I64, favourable: I64, tp: I64, fp: I64, fn: I64, tn: I64, *, favourable_class: int = 1
) -> BlindReport:
    """The :class:`BlindReport` of per-group cell arrays (``favourable_class``: which
    prediction ``favourable`` counts, the model's ``favourable``)."""
    u0, u1 = _unlabelled(n, favourable, tp, fp, fn, tn, favourable_class)
    if not (u0.any() or u1.any()):
        return BlindReport((u0, u1), False, _NOTHING.get(len(n)) or _nothing(len(n)))
    c0, c1 = u0.astype(np.int8), u1.astype(np.int8) * 2  # exclusive: some class is labelled
    codes = {"both": tuple((c0 + c1).tolist()), "class0": tuple(c0.tolist()),
             "class1": tuple(c1.tolist())}  # fmt: skip
    return BlindReport((u0, u1), True, codes, {"tp": tp, "fp": fp, "fn": fn, "tn": tn})


def _unlabelled(
    n: I64, favourable: I64, tp: I64, fp: I64, fn: I64, tn: I64, favourable_class: int
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Elementwise (any shape): is predicted class 0 / class 1 without a labelled outcome
    while the other class has some?"""
    predicted_1 = favourable if favourable_class == 1 else n - favourable
    lab0, lab1 = fn + tn, tp + fp
    some = (lab0 + lab1) > 0
    return some & (lab0 == 0) & (n > predicted_1), some & (lab1 == 0) & (predicted_1 > 0)


def stacked_blindness(
    counts: I64, sizes: Sequence[int], *, favourable: int = 1
) -> list[BlindReport]:
    """:func:`blind_reasons` of every row of ``counts[result, group, cell]`` (row ``r`` has
    ``sizes[r]`` groups): one elementwise pass, and the per-group codes only for the rows with
    something blind (rare), so the alert evaluator's nine results per boundary cost one check."""
    c = counts
    u0, u1 = _unlabelled(c[..., N], c[..., FAV], c[..., TP], c[..., FP], c[..., FN], c[..., TN],
                         favourable)  # fmt: skip
    some_blind: list[bool] = np.logical_or.reduce(u0 | u1, axis=-1).tolist()
    out = []
    for i, (size, some) in enumerate(zip(sizes, some_blind, strict=True)):
        if some:
            out.append(blind_reasons(counts[i, :size], favourable=favourable))
        else:
            codes = _NOTHING.get(size) or _nothing(size)
            out.append(BlindReport((u0[i, :size], u1[i, :size]), False, codes))
    return out


_NOTHING: dict[int, dict[str, tuple[int, ...]]] = {}


def _nothing(groups: int) -> dict[str, tuple[int, ...]]:
    zeros = (0,) * groups
    _NOTHING[groups] = out = {"both": zeros, "class0": zeros, "class1": zeros}
    return out


def blind_reasons(counts: I64, *, favourable: int = 1) -> BlindReport:
    """The :class:`BlindReport` of one attribute set's ``counts[group, cell]`` (cells of
    ``state/windows.py``; ``favourable``: the model's favourable prediction class)."""
    c = counts
    return blindness(
        c[:, N], c[:, FAV], c[:, TP], c[:, FP], c[:, FN], c[:, TN], favourable_class=favourable
    )


def blind_groups(gm: GroupMetrics, *, favourable: int = 1) -> BlindReport:
    """The same from computed :class:`GroupMetrics` (which keep the cells)."""
    return blindness(gm.n, gm.favourable, gm.tp, gm.fp, gm.fn, gm.tn, favourable_class=favourable)
