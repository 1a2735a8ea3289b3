"""A serving stack's tensor mapping in the configuration: ``check-config`` explains a wrong
one by key path, and the predictions topic has one format."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from monitor.cli import main
from monitor.config.spec import ConfigError, parse_config

MODEL = "models:\n  credit:\n    attributes: {sex: {}, age: {bins: [30]}}\n    threshold: 0.5\n"


def test_check_config_names_the_key_of_a_wrong_tensor_mapping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for mapping, words in [
        (
            "{format: kserve-cloudevents, score: {tensor: p, column: -1}, attributes: {sex: {tensor: s}, age: {tensor: a}}}",
            "models.credit.input.score.column: -1 is not a column",
        ),
        (
            "{format: kserve, score: {tensor: p}, attributes: {sex: {tensor: s}, age: {tensor: a}}}",
            "models.credit.input.format: 'kserve' is not one of oip-json, kserve-cloudevents",
        ),
        (
            "{score: {tensor: p}, attributes: {sex: {tensor: s}}}",
            "models.credit.input.attributes: no tensor for the model's attribute(s) ['age']",
        ),
        (
            "{score: {tensor: p}, attributes: {sex: {tensor: s}, age: {tensor: a}, race: {tensor: r}}}",
            "models.credit.input.attributes.race: not an attribute of the model",
        ),
    ]:
        path = tmp_path / "c.yaml"
        path.write_text(MODEL + f"    input: {mapping}\n")
        assert main(["check-config", str(path)]) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err


def test_every_model_reads_the_predictions_topic_in_one_format() -> None:
    serving = {"score": {"tensor": "p"}, "attributes": {"sex": {"tensor": "s"}}}
    data = {
        "models": {
            "a": {"attributes": {"sex": {}}, "threshold": 0.5, "input": serving},
            "b": {"attributes": {"sex": {}}},
        }
    }
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.path == "models.b.input"
    assert "every model reads the predictions topic" in info.value.reason
    data["models"]["b"]["input"] = {**serving, "format": "kserve-cloudevents"}  # type: ignore[index]
    data["models"]["b"]["threshold"] = 0.5  # type: ignore[index]
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.path == "models.b.input.format"
    data["models"]["b"]["input"] = serving  # type: ignore[index]
    with pytest.raises(ConfigError) as info:  # bare OIP requests name no model: all refused
        parse_config(data)
    assert info.value.path == "models.b.input.format"
    assert "one model per monitor reads oip-json" in info.value.reason
    kserve = {**serving, "format": "kserve-cloudevents"}  # names the InferenceService
    data["models"]["a"]["input"] = data["models"]["b"]["input"] = kserve  # type: ignore[index]
    cfg = parse_config(data)
    assert cfg.models["a"].serving is not None and cfg.models["b"].serving is not None


def test_a_responses_topic_is_for_serving_traffic_and_differs_from_the_others() -> None:
    mapping = "    input: {score: {tensor: p}, attributes: {sex: {tensor: s}, age: {tensor: a}}}\n"
    ok = parse_config(
        yaml_doc(MODEL + mapping + "kafka: {predictions_topic: in, responses_topic: out}\n")
    )
    assert ok.kafka.prediction_topics == ("in", "out")
    for text, where, words in [
        (MODEL + "kafka: {responses_topic: out}\n", "kafka.responses_topic", "serving stack"),
        (MODEL + mapping + "kafka: {responses_topic: labels}\n", "kafka.responses_topic", "differ"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_config(yaml_doc(text))
        assert info.value.path == where and words in str(info.value)


def yaml_doc(text: str) -> object:
    return yaml.safe_load(text)


def test_seldon_needs_its_responses_topic() -> None:
    mapping = (
        "    input: {format: seldon, score: {tensor: p}, "
        "attributes: {sex: {tensor: s}, age: {tensor: a}}}\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_config(yaml_doc(MODEL + mapping))
    assert info.value.path == "kafka.responses_topic" and "outputs" in str(info.value)
    ok = parse_config(yaml_doc(MODEL + mapping + "kafka: {responses_topic: o}\n"))
    assert ok.models["credit"].serving is not None
    assert ok.models["credit"].serving.format == "seldon"
