"""``fairness-monitor demo --print-config``: the configuration the demo runs, for each input
form, is valid and reads what the simulator writes (the attributes apart: a third topic)."""

from __future__ import annotations

import pytest
import yaml

from monitor.app.demo import demo_config_text
from monitor.app.demo_processes import ATTRIBUTES, RESPONSES
from monitor.config.spec import parse_config


@pytest.mark.parametrize("fmt", ["kserve-cloudevents", "oip-json", "seldon"])
@pytest.mark.parametrize("apart", [False, True], ids=["in-requests", "apart"])
def test_the_demo_config_reads_each_form(fmt: str, apart: bool) -> None:
    cfg = parse_config(yaml.safe_load(demo_config_text(fmt=fmt, apart=apart)))
    serving = cfg.models["lending"].serving
    assert serving is not None and serving.format == fmt and serving.stream is apart
    assert cfg.kafka.attributes_topic == (ATTRIBUTES if apart else None)
    assert cfg.kafka.responses_topic == (RESPONSES if fmt == "seldon" else None)
    if not apart:
        assert set(serving.attributes) == {"group", "sex"}


def test_attributes_apart_needs_a_serving_format() -> None:
    with pytest.raises(SystemExit, match="needs a serving format"):
        demo_config_text(fmt="monitor-json", apart=True)
