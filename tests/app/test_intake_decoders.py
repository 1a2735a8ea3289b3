"""Which decoder reads a serving stack's records is said once at start, so an operator asking
why single-row calls are slow sees whether the compiled decoders (``native/``) are in use."""

from __future__ import annotations

import logging

import pytest
import yaml

from monitor.app.intake import Intake
from monitor.config.spec import parse_config
from monitor.ingest.invalid_guard import InvalidRatioGuard
from monitor.ingest.native import native
from monitor.state.engine import Engine
from tests.app.test_serving_kafka import MAPPING
from tests.helpers import T0
from tests.kafka_helpers import MODEL


def intake(fmt: str) -> Intake:
    text = MODEL.replace("    min_samples: 5\n", "    min_samples: 5\n" + MAPPING.format(fmt=fmt))
    if fmt == "seldon":
        text += "kafka: {predictions_topic: in, responses_topic: out}\n"
    engine = Engine(parse_config(yaml.safe_load(text)), clock=lambda: T0)
    return Intake(engine, engine.config.kafka, InvalidRatioGuard(0.5, 100, "t"))


@pytest.mark.parametrize(
    ("fmt", "off", "said"),
    [
        ("oip-json", False, "oip-json records: compiled (native/) decoder"),
        ("oip-json", True, "oip-json records: Python decoder"),
        ("seldon", False, "seldon records: compiled (native/) decoder"),
        ("kserve-cloudevents", False, "kserve-cloudevents records: Python decoder"),
    ],
)
def test_the_decoder_of_a_serving_format_is_logged_at_start(
    fmt: str,
    off: bool,
    said: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if native() is None and "compiled" in said:
        pytest.skip("monitor_native is not installed (under CI=true its own tests fail)")
    if off:
        monkeypatch.setenv("FAIRNESS_MONITOR_NATIVE", "0")
    with caplog.at_level(logging.INFO, logger="monitor.app.intake"):
        intake(fmt)
    assert [r.getMessage() for r in caplog.records] == [said]


def test_the_monitors_own_events_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="monitor.app.intake"):
        engine = Engine(parse_config(yaml.safe_load(MODEL)), clock=lambda: T0)
        Intake(engine, engine.config.kafka, InvalidRatioGuard(0.5, 100, "t"))
    assert caplog.records == []
