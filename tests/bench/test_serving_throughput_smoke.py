"""The serving-throughput benchmark (``bench/serving_throughput.py``) at a tiny size: every
path it times must count the same decisions into the same groups and cells, or its ratios
would compare different work (the compiled decoders and the Python paths alike)."""

from __future__ import annotations

from typing import Any

import pytest

import bench.serving_throughput as sv
from monitor.state.engine import Engine


def counts(e: Engine) -> dict[str, list[int]]:
    """Counts per group label over everything the engine counted."""
    ring = e.partition(0).rings[0]
    assert ring.head is not None and ring.first is not None
    c = e.counts_between(0, ring.first, ring.head + 1)
    labels: Any = e.registries[0].labels
    return {labels[g]: c[g].tolist() for g in range(len(labels)) if c[g].any()}


@pytest.mark.parametrize("rows", [1, 5])
def test_every_path_counts_the_same_decisions(rows: int) -> None:
    n, runs = sv.cases(3_000, rows)
    got = {name: counts(run()) for name, run in runs.items()}
    want = got["monitor-json"]
    assert want["F"][0] + want["M"][0] == n  # cell 0: the decisions of each group
    for name, c in got.items():
        assert c == want, name
    assert len(runs) >= 4
