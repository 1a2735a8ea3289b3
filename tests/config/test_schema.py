"""``check-config --schema``: the JSON Schema of the configuration (from the msgspec Structs the
monitor decodes with), the chart's ``values.schema.json`` generated from it, and the shipped
configurations valid against both."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from monitor.cli import main
from monitor.config.spec import ConfigError, json_schema, parse_config
from tests.conftest import ROOT

jsonschema = pytest.importorskip("jsonschema")

CHART = ROOT / "deploy/helm/fairness-monitor"
SHIPPED = [*sorted(ROOT.glob("examples/**/config.yaml")), ROOT / "deploy/compose/monitor.yaml"]
MINIMAL = {"models": {"m": {"attributes": {"g": {}}}}}


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "values_schema", ROOT / "deploy/helm/values_schema.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _errors(schema: dict[str, Any], doc: object) -> list[str]:
    """Every error with its path, those under an ``anyOf`` (a section that may be null) too."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    out: list[str] = []
    pending = list(validator.iter_errors(doc))
    while pending:
        e = pending.pop()
        out.append(f"{'/'.join(map(str, e.absolute_path))}: {e.message}")
        pending += e.context or []
    return out


def test_check_config_schema_prints_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(json_schema()))
    jsonschema.validators.validator_for(printed).check_schema(printed)
    root = printed["$defs"]["ConfigDoc"]
    assert root["additionalProperties"] is False  # a typo is an error, for editors too
    for section in ("models", "kafka", "service", "alerts", "checkpoint", "limits", "fields"):
        assert section in root["properties"], section
    window = printed["$defs"]["WindowDoc"]["properties"]["length"]
    assert "90s" in window["description"]  # durations are explained where they are used
    # `for` is the YAML key of a rule's duration (for_ in Python)
    assert "for" in printed["$defs"]["RuleDoc"]["properties"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_configs_are_valid_against_the_schema(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert _errors(json_schema(), doc) == []


def test_the_demos_config_is_valid_against_the_schema() -> None:
    from monitor.app.demo import demo_config_text

    doc = yaml.safe_load(demo_config_text("localhost:9092", host="127.0.0.1", port=8000))
    assert _errors(json_schema(), doc) == []


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["models"]["m"].update(min_sampels=5), "models/m"),
        (lambda d: d["models"]["m"].update(label_time="later"), "models/m/label_time"),
        (lambda d: d["models"]["m"].update(windows=["1x"]), "models/m/windows/0"),
        (lambda d: d.update(kafka={"security_protocol": "TLS"}), "kafka/security_protocol"),
        (lambda d: d.update(service={"http_workers": 0}), "service/http_workers"),
        (
            lambda d: d.update(alerts={"rules": [{"name": "X", "metric": "dir", "bound": 1}]}),
            "alerts/rules/0/metric",
        ),
    ],
)
def test_schema_and_monitor_refuse_the_same_mistakes(change: Any, where: str) -> None:
    doc = copy.deepcopy(MINIMAL)
    change(doc)
    errors = _errors(json_schema(), doc)
    assert errors, "the JSON Schema accepted it"
    assert any(e.startswith(f"{where}:") for e in errors), errors
    with pytest.raises(ConfigError):
        parse_config(doc)


def test_the_charts_values_schema_is_generated_from_the_config_schema() -> None:
    gen = _generator()
    committed = (CHART / "values.schema.json").read_text()
    assert committed == gen.render(gen.generate(json.loads(committed))), (
        "run: python deploy/helm/values_schema.py"
    )
    # and it is the monitor's schema, not a copy that could drift
    schema = json.loads(committed)
    assert schema["definitions"]["ConfigDoc"] == json.loads(
        json.dumps(json_schema()["$defs"]["ConfigDoc"]).replace("#/$defs/", "#/definitions/")
    )


def test_the_charts_default_values_are_valid() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert _errors(schema, values) == []
    parse_config(values["config"])  # and the monitor agrees
    bad = copy.deepcopy(values)
    bad["config"]["models"]["lending"]["bucket"] = "5 minutes"
    assert any("bucket" in e for e in _errors(schema, bad))
    bad = copy.deepcopy(values)
    bad["config"]["kafka"]["sasl_password"] = "hunter2"
    assert any("sasl_password" in e for e in _errors(schema, bad))
