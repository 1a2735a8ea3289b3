"""The terminal table says which interval it shows: the configured confidence, not always 95 %."""

from __future__ import annotations

import json

import pytest

from monitor.config.spec import parse_config
from monitor.ingest.events import RawRecord
from monitor.outputs.report import build_report, format_table
from monitor.state.engine import Engine
from tests.helpers import T0


@pytest.mark.parametrize(("confidence", "header"), [(0.9, "90% CI"), (0.99, "99% CI")])
def test_table_header_names_the_configured_confidence(confidence: float, header: str) -> None:
    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}, "min_samples": 1}}})
    engine = Engine(cfg, clock=lambda: T0 + 3600)
    recs = [
        RawRecord(
            json.dumps(
                {
                    "prediction_id": str(i),
                    "model_id": "m",
                    "timestamp": T0,
                    "attributes": {"g": "ab"[i % 2]},
                    "prediction": i % 3 == 0,
                }
            ).encode()
        )
        for i in range(40)
    ]
    batch, dead = engine.decoder.decode_predictions(recs)
    assert not dead
    engine.apply(0, batch, engine.decoder.decode_labels([])[0])
    text = format_table(build_report(engine.snapshot(), confidence=confidence))
    assert header in text and "95% CI" not in text
