"""Group vocabulary of one model: which column of the count tensor belongs to which group.

Each attribute set (a single attribute such as ``race``, or an intersection such as
``race&sex``) has its own groups. All of a model's groups share one index space so that one
count tensor ``[bucket, group, cell]`` holds every attribute set; a new group is appended at
the end, so existing indices never move (state stays valid as groups appear).

Cardinality is bounded: once an attribute set holds ``max_groups`` groups, new values fall
into ``__other__`` and are counted in :attr:`GroupRegistry.overflow`. A missing value is the
group ``__missing__`` — missingness is itself a fairness signal.

Length is bounded too: a value longer than ``limits.max_value_length`` characters becomes the
group ``<first characters>~<hash>`` (:func:`shorten`), counted in
:attr:`GroupRegistry.shortened`. The event still counts; one hostile 5 MB value cannot become a
5 MB label on every ``/metrics`` series, status response and checkpoint.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.config.spec import MISSING_GROUP, OTHER_GROUP, AttributeSpec, ModelSpec

SEP = "&"


def bin_labels(edges: Sequence[float]) -> list[str]:
    """Labels for numeric bins: ``<25``, ``25-45``, ``>=45`` for edges ``[25, 45]``."""

    def fmt(x: float) -> str:  # short, but never two edges alike (1.0000001 is not 1)
        if float(x).is_integer():
            return str(int(x))
        short = f"{x:g}"
        return short if float(short) == x else repr(float(x))

    labels = [f"<{fmt(edges[0])}"]
    labels += [f"{fmt(a)}-{fmt(b)}" for a, b in itertools.pairwise(edges)]
    labels.append(f">={fmt(edges[-1])}")
    return labels


def shorten(label: str, limit: int) -> str:
    """``label`` if it has at most ``limit`` characters, else a stable short stand-in: its
    first characters, ``~``, and 16 hex digits of its BLAKE2b hash (stable across processes,
    so checkpoints and dashboards keep one group per distinct long value)."""
    if len(label) <= limit:
        return label
    digest = hashlib.blake2b(label.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{label[: max(limit - 17, 0)]}~{digest}"


def intersection_label(parts: Iterable[str]) -> str:
    """``A&F`` for the parts ``A`` and ``F``; a part's own ``&`` (and ``\\``) is escaped with
    ``\\``, so that ``("a&b", "c")`` and ``("a", "b&c")`` stay two groups."""
    return SEP.join(p.replace("\\", "\\\\").replace(SEP, "\\" + SEP) for p in parts)


def value_label(value: object) -> str | None:
    """Canonical text of a categorical value; ``None`` when missing."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, int):
        return str(value)
    return str(value)


class GroupRegistry:
    """Maps (attribute set, group label) to a dense index, with per-set cardinality caps."""

    def __init__(self, spec: ModelSpec, *, max_label_length: int = 128) -> None:
        self.spec = spec
        self.max_label_length = max_label_length
        self.sets: tuple[tuple[str, ...], ...] = spec.attribute_sets
        self.set_names: list[str] = [SEP.join(s) for s in self.sets]
        self.labels: list[str] = []
        self.set_of: list[int] = []
        self._index: list[dict[str, int]] = [{} for _ in self.sets]
        self.caps = [a.max_groups for a in spec.attributes] + [
            spec.max_intersection_groups for _ in spec.intersections
        ]
        self.overflow = [0] * len(self.sets)  # new values past the cap: groups unseen
        self.undeclared = [0] * len(self.sets)  # values outside a declared set (as configured)
        self.shortened = [0] * len(self.sets)  # values replaced by their shortened stand-in
        self._bins: dict[str, list[str]] = {
            a.name: bin_labels(a.bins) for a in spec.attributes if a.bins is not None
        }
        # an attribute's declared values, and else its reference group, take their places
        # first: a stream of odd values cannot fill the set and fold them into __other__
        self.closed = [False] * len(self.sets)
        for j, a in enumerate(spec.attributes):
            ref = spec.reference_groups.get(a.name)
            for label in a.values or ([ref] if ref is not None and a.bins is None else []):
                self.index(j, label)
            self.closed[j] = a.values is not None

    def __len__(self) -> int:
        return len(self.labels)

    def index(self, set_idx: int, label: str) -> int:
        """Dense index of ``label`` in attribute set ``set_idx``, creating it if allowed."""
        table = self._index[set_idx]
        idx = table.get(label)
        if idx is not None:
            return idx
        full = self.closed[set_idx] or len(table) >= self.caps[set_idx]
        if full and label not in (MISSING_GROUP, OTHER_GROUP):
            if self.closed[set_idx]:
                self.undeclared[set_idx] += 1
            else:
                self.overflow[set_idx] += 1
            return self.index(set_idx, OTHER_GROUP)
        idx = len(self.labels)
        table[label] = idx
        self.labels.append(label)
        self.set_of.append(set_idx)
        return idx

    def groups_of_set(self, set_idx: int) -> tuple[npt.NDArray[np.int64], list[str]]:
        """Indices and labels of the groups of one attribute set, sorted by label.

        Sorting (rather than first-seen order) makes every report independent of arrival
        order, including which group wins a tie.
        """
        items = sorted(self._index[set_idx].items())
        return np.array([i for _, i in items], dtype=np.int64), [lab for lab, _ in items]

    def encode(self, raw_values: Sequence[Sequence[object]]) -> npt.NDArray[np.int32]:
        """Group indices ``[n, n_sets]`` for ``n`` events.

        ``raw_values[j]`` holds the raw values of attribute ``j`` (configuration order) for
        every event. Numeric attributes are binned with one vectorized ``searchsorted``; an
        intersection's group comes from the distinct combinations of its parts' indices, so only
        a handful of lookups happen per batch, not one per event.
        """
        n = len(raw_values[0]) if raw_values else 0
        out = np.empty((n, len(self.sets)), dtype=np.int32)
        for j, (attr, column) in enumerate(zip(self.spec.attributes, raw_values, strict=True)):
            if attr.bins is not None:
                out[:, j] = self._binned(j, attr, column)
                continue
            # Registry labels are non-blank strings, so a value found as it is *is* its own
            # label: only the rest (new groups, numbers, blanks) take the slower path.
            known: Callable[[object, int], int] = self._index[j].get  # type: ignore[assignment]
            found = np.fromiter(map(known, column, itertools.repeat(-1)), dtype=np.int32, count=n)
            new = np.flatnonzero(found < 0)
            for i in new.tolist():
                label = self._categorical_label(column[i])
                if len(label) > self.max_label_length:
                    self.shortened[j] += 1
                    label = shorten(label, self.max_label_length)
                found[i] = self.index(j, label)
            out[:, j] = found
        pos = {a.name: j for j, a in enumerate(self.spec.attributes)}
        base = len(self.spec.attributes)
        for k, combo in enumerate(self.spec.intersections):
            parts = out[:, [pos[a] for a in combo]]
            uniq, inverse = _combinations(parts)
            first = np.zeros(len(uniq), dtype=np.int64)
            first[inverse[::-1]] = np.arange(n - 1, -1, -1)  # first event of each combination
            mapped = np.array(
                [
                    self.index(base + k, intersection_label(self.labels[g] for g in parts[i]))
                    for i in first
                ],
                dtype=np.int32,
            )
            out[:, base + k] = mapped[inverse] if n else mapped[:0]
        return out

    @classmethod
    def _categorical_label(cls, v: object) -> str:
        return v if type(v) is str and v and not v.isspace() else cls._label(v)

    @staticmethod
    def _label(value: object) -> str:
        lab = value_label(value)
        return MISSING_GROUP if lab is None else lab

    def _binned(
        self, j: int, attr: AttributeSpec, column: Sequence[object]
    ) -> npt.NDArray[np.int64]:
        """Bin numbers with one ``searchsorted``; only the distinct bins touch the registry."""
        try:
            values = np.array(column, dtype=np.float64)  # None becomes NaN
        except (TypeError, ValueError, OverflowError):
            values = np.array([_as_float(v) for v in column], dtype=np.float64)
        names = [*self._bins[attr.name], MISSING_GROUP]
        which = np.searchsorted(np.asarray(attr.bins), values, side="right")
        which[np.isnan(values)] = len(names) - 1
        lut = np.zeros(len(names), dtype=np.int64)
        for w in np.flatnonzero(np.bincount(which, minlength=len(names))).tolist():
            lut[w] = self.index(j, names[w])
        out: npt.NDArray[np.int64] = lut[which]
        return out


def _combinations(parts: npt.NDArray[np.int32]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """The distinct rows of ``parts`` (an intersection's group indices per event) and each
    event's row. One int64 per event identifies its combination, in a mixed radix of the
    indices present, when their product fits (always, but for wide intersections of large
    sets: in base groups + 1 a five-way code wrapped around past ~6,200 groups and merged two
    combinations); else the rows are compared whole."""
    sizes = [int(col.max()) + 1 for col in parts.T] if len(parts) else []
    if math.prod(sizes) >= 1 << 62:
        uniq, inverse = np.unique(parts, axis=0, return_inverse=True)
        return uniq, inverse.reshape(-1)
    combined = np.zeros(len(parts), dtype=np.int64)
    for col, size in zip(parts.T, sizes, strict=True):
        combined = combined * size + col
    return _distinct(combined)


def _distinct(values: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """``np.unique(values, return_inverse=True)`` for small non-negative codes without a sort
    (an intersection's combined group indices: a few hundred at most)."""
    if len(values) == 0 or int(values.max()) >= 1 << 20:
        return np.unique(values, return_inverse=True)
    present = np.zeros(int(values.max()) + 1, dtype=bool)
    present[values] = True
    uniq = np.flatnonzero(present)
    lut = np.zeros(len(present), dtype=np.int64)
    lut[uniq] = np.arange(len(uniq))
    return uniq, lut[values]


def _as_float(value: object) -> float:
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        return float(value) if isinstance(value, int | float | str) else math.nan
    except (ValueError, OverflowError):
        return math.nan
