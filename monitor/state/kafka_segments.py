"""The state topic's segments: the settings ``kafka_topic.ensure_topic`` creates it with, and
the check of an existing topic's (a warning naming what to set, never a refusal).

Compaction (``cleanup.policy=compact``) cleans rolled segments only, never the active one. With
the broker's defaults (``segment.bytes`` 1 GiB, ``segment.ms`` 7 days) the active segment of a
state topic holds every generation written since it was created or last rolled, and a restore,
which reads the whole topic, reads all of them: 10 saves of a 10 MB state took a restore from
0.43 s (two generations) to 1.2-1.5 s, growing with every save until the roll. With bounded
segments a restore reads the live state (two generations of each partition's) plus at most one
segment of superseded records plus what waits for the cleaner:

* ``segment.bytes`` = ``checkpoint.state_segment_bytes``: 16 MiB by default (Kafka's least is
  1 MiB; it must hold a chunk's record, so at least twice ``state_chunk_bytes`` when not set).
  That is what a restore may read beyond the live state, about one and a half generations of a
  10 MB partition; a busy topic rolls every few checkpoints, each segment a few files.
* ``segment.ms`` = 10 min: a topic written slowly (small states) rolls too, so its superseded
  generations are cleaned within minutes, not after 7 days.
* ``min.cleanable.dirty.ratio`` = 0.1 (default 0.5): rolled segments are cleaned once a tenth of
  the log is superseded rather than half, so a restore reads about a tenth more than the live
  state, not twice it. Every save supersedes the state it replaces, so on a busy topic the
  cleaner's own pace (``log.cleaner.backoff.ms``, 15 s) decides how often it runs either way:
  the lower ratio costs the broker little.
* ``delete.retention.ms`` = 10 min (default 1 day): how long the tombstones of stale chunks (a
  slot's chunks past a shorter generation's count) outlive the cleaning. Only a read under way
  needs them (60 s at most, ``READ_TIMEOUT_S``), and no reader needs a stale chunk at all, so
  they are not re-read by every restore for a day.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from monitor.config.settings import CheckpointSpec

log = logging.getLogger("monitor.state.kafka_segments")

SEGMENT_MS = 10 * 60_000
DIRTY_RATIO = 0.1
DELETE_RETENTION_MS = 10 * 60_000
# what the check reads of an existing topic (max.compaction.lag.ms rolls a compacted topic's
# segment too, so it bounds segment.ms)
CHECKED = ("segment.bytes", "segment.ms", "max.compaction.lag.ms", "min.cleanable.dirty.ratio")


def topic_configs(cp: CheckpointSpec) -> dict[str, str]:
    """The settings a state topic is created with."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(cp.state_segment_bytes),
        "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": str(DIRTY_RATIO),
        "delete.retention.ms": str(DELETE_RETENTION_MS),
    }


def _number(raw: str | None) -> float | None:
    try:
        return None if raw is None else float(raw)
    except ValueError:
        return None


def to_set(found: Mapping[str, str | None], cp: CheckpointSpec) -> dict[str, str]:
    """What an existing topic should be set to when its segments are unbounded (its
    ``segment.bytes`` above ``checkpoint.state_segment_bytes``): that, and its roll time and
    dirty ratio if they are above this module's. Empty when bounded, or when the broker did not
    say (nothing is claimed then)."""
    size = _number(found.get("segment.bytes"))
    if size is None or size <= cp.state_segment_bytes:
        return {}
    want = {"segment.bytes": str(cp.state_segment_bytes)}
    rolls = [_number(found.get(k)) for k in ("segment.ms", "max.compaction.lag.ms")]
    if min((r for r in rolls if r is not None and r > 0), default=float("inf")) > SEGMENT_MS:
        want["segment.ms"] = str(SEGMENT_MS)
    ratio = _number(found.get("min.cleanable.dirty.ratio"))
    if ratio is None or ratio > DIRTY_RATIO:
        want["min.cleanable.dirty.ratio"] = str(DIRTY_RATIO)
    return want


def warn_unbounded(
    topic: str, servers: str, found: Mapping[str, str | None], cp: CheckpointSpec
) -> dict[str, str]:
    """Log a warning naming each setting to change, its value and the command, when the
    topic's segments are unbounded; returns the settings (empty: nothing to say)."""
    want = to_set(found, cp)
    if want:
        log.warning(
            "state topic %s has segment.bytes=%s, more than checkpoint.state_segment_bytes %d: "
            "compaction cleans only rolled segments, so every restore reads every generation "
            "written since the last roll (slower with each save). Set %s: kafka-configs "
            "--bootstrap-server %s --alter --entity-type topics --entity-name %s --add-config %s",
            topic,
            found.get("segment.bytes"),
            cp.state_segment_bytes,
            ", ".join(f"{k}={v} (now {found.get(k)})" for k, v in want.items()),
            servers,
            topic,
            ",".join(f"{k}={v}" for k, v in want.items()),
        )
    return want
