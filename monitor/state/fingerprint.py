"""A checkpoint's fingerprint: what its arrays' shapes depend on and what its counts mean, so
that a checkpoint written under another configuration is refused, naming what changed, instead
of being mixed into counts of another meaning."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monitor.config.spec import ModelSpec
from monitor.state.windows import n_cells


def fingerprint(models: Sequence[ModelSpec], n_sets: int) -> list[dict[str, Any]]:
    """What a checkpoint's arrays depend on, and what its counts mean; a mismatch makes a
    checkpoint incompatible. The meaning (``MEANING``: which prediction is favourable, how
    scores, predictions and labels are read, the bins, the label time) came later: a
    checkpoint without it is compared on the rest (as JSON: lists, not tuples)."""
    return [
        {
            "model": m.name,
            "bucket": m.bucket,
            "ring_buckets": m.ring_buckets,
            "cells": n_cells(m.score_bins),
            "sets": list(m.set_names),
            "n_sets": n_sets,
            "favourable": m.favourable,
            "threshold": m.threshold,
            "prediction_values": dict(sorted(m.prediction_values.items())),
            "label_values": dict(sorted(m.label_values.items())),
            "bins": {a.name: list(a.bins) for a in m.attributes if a.bins is not None},
            "label_time": m.label_time,
        }
        for m in models
    ]


# what the counts mean (not their shape): compared when the checkpoint has it
MEANING = ("favourable", "threshold", "prediction_values", "label_values", "bins", "label_time")


def differences(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> str | None:
    """What differs between two fingerprints, for the operator (``cells 36 → 58``); None when
    they agree (a key of :data:`MEANING` that the old one lacks is not compared)."""
    if not isinstance(old, list) or not all(isinstance(m, dict) for m in old):
        return "the checkpoint's fingerprint is malformed"  # (was an AttributeError: a review)
    if len(old) != len(new):
        return f"{len(old)} models in the checkpoint, {len(new)} now"
    for a, b in zip(old, new, strict=True):
        diff = [
            f"{k} {a.get(k)!r} → {b.get(k)!r}"
            for k in b
            if a.get(k) != b.get(k) and (k in a or k not in MEANING)
        ]
        if diff:
            return f"model {b.get('model')}: " + ", ".join(diff)
    return None
