"""The pending-expiry benchmark (``bench/pending_expiry.py``) at a tiny size: both stores take
the same stream and must end with the same counters and checkpoints (it checks that itself)."""

from __future__ import annotations

import bench.pending_expiry as pe


def test_both_stores_agree_on_a_short_stream_with_expiry() -> None:
    r = pe.measure(days=0.5, ttl="2h", seed=3)
    assert r["buckets"] == 144
    # rows expired at the cut and labels came for some of them after it: both paths ran
    assert r["counters"]["expired_pending"] > 0
    assert r["counters"]["early_labels"] > 0
    assert r["lazy_ms_expiring"] > 0 and r["reference_ms_expiring"] > 0
