"""Configuration: defaults, env overrides, and errors that name the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.cli import main
from monitor.config.spec import ConfigError, load_config, parse_config


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_for_the_common_case() -> None:
    c = parse_config({"models": {"credit": {"attributes": {"sex": {}}}}})
    m = c.models["credit"]
    assert m.favourable == 1 and m.bucket == 60 and m.windows[0].length == 3600
    assert m.attributes[0].path == ("attributes", "sex")
    assert m.ring_buckets == (3600 + 3600) // 60 + 1


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {
                "models": {
                    "credit": {"attributes": {"sex": {}}, "windows": ["1h", {"length": "1x"}]}
                }
            },
            "models.credit.windows[1].length: '1x' is not a duration",
        ),
        (
            {"models": {"credit": {"attributes": {"sex": {}}, "windows": ["90s"]}}},
            "models.credit.windows[0].length: 1m30s is not a multiple of the bucket width 1m",
        ),
        (
            {"models": {"credit": {"attributes": {"sex": {}}, "favourable": 2}}},
            "models.credit.favourable: 2 must be 0 or 1",
        ),
        (
            {"models": {"credit": {"attributes": {"sex": {}}, "intersections": [["sex", "race"]]}}},
            "models.credit.intersections[0]: 'race' is not one of the model's attributes",
        ),
        (
            {"models": {"credit": {"attributes": {"age": {"bins": [45, 25]}}}}},
            "models.credit.attributes.age.bins",
        ),
        (
            {"models": {"credit": {"attributes": {"sex": {}}, "min_sampels": 5}}},
            "models.credit.min_sampels: unknown key",
        ),
        (
            {"models": {"credit": {"attributes": {}}}},
            "models.credit.attributes: at least one protected attribute is required",
        ),
        ({"models": {}}, "models: at least one model must be configured"),
        (
            {"models": {"credit": {"attributes": {"sex": {}}, "join": {"ttl": "soon"}}}},
            "models.credit.join.ttl",
        ),
        (
            {"models": {"credit": {"attributes": {"sex": {}}, "label_time": "later"}}},
            "models.credit.label_time: 'later' is not one of prediction, arrival",
        ),
    ],
)
def test_errors_name_the_key(doc: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert str(err.value).startswith(message)


def test_env_overrides(tmp_path: Path) -> None:
    p = write(tmp_path, "models:\n  credit:\n    attributes: {sex: {}}\n    min_samples: 30\n")
    c = load_config(
        p, env={"FAIRNESS_MONITOR__MODELS__CREDIT__MIN_SAMPLES": "50", "UNRELATED": "x"}
    )
    assert c.models["credit"].min_samples == 50
    with pytest.raises(ConfigError, match=r"models\.credit\.min_samples: .many. is not an integer"):
        load_config(p, env={"FAIRNESS_MONITOR__MODELS__CREDIT__MIN_SAMPLES": "many"})


def test_check_config_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = write(tmp_path, "models:\n  credit:\n    attributes: {sex: {}}\n")
    assert main(["check-config", str(ok)]) == 0
    assert "OK" in capsys.readouterr().out
    bad = write(tmp_path, "models:\n  credit:\n    attributes: {sex: {}}\n    windows: [1x]\n")
    assert main(["check-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "models.credit.windows[0].length: '1x' is not a duration" in err
    assert "Traceback" not in err
    assert main(["check-config", str(tmp_path / "missing.yaml")]) == 2


def test_shipped_examples_are_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    examples = sorted(root.glob("examples/**/config.yaml"))
    assert examples, f"no example configs under {root}/examples"
    for p in examples:
        assert main(["check-config", str(p)]) == 0


def test_a_secret_that_yaml_reads_as_a_number_is_refused_not_changed() -> None:
    """``FAIRNESS_MONITOR__KAFKA__SASL_PASSWORD=0123`` is read as YAML: 83 (octal). Refused,
    naming the key, instead of authenticating with "83"."""
    from monitor.config.spec import apply_env_overrides

    base = {"models": {"m": {"attributes": {"g": {}}}}}
    for raw in ("0123", "yes", "1.5"):
        data = apply_env_overrides(dict(base), {"FAIRNESS_MONITOR__KAFKA__SASL_PASSWORD": raw})
        with pytest.raises(ConfigError, match=r"kafka\.sasl_password: must be text") as err:
            parse_config(data)
        assert raw not in str(err.value)
    quoted = apply_env_overrides(dict(base), {"FAIRNESS_MONITOR__KAFKA__SASL_PASSWORD": '"0123"'})
    assert parse_config(quoted).kafka.sasl_password == "0123"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        # found in review: urllib sends no credentials from the URL, every delivery failed and
        # each failure logged the password
        (
            {
                "models": {"m": {"attributes": {"g": {}}}},
                "alerts": {"sinks": {"webhook_url": "https://pager:S3cr3t@hooks.example/x"}},
            },
            "alerts.sinks.webhook_url: credentials in the URL are not supported",
        ),
        # msgspec elides a mapping's key (`$.models[...]`): the error still names it
        (
            {
                "models": {
                    "ok": {"attributes": {"g": {}}},
                    "credit": {"attributes": {"sex": {"max_groups": 0}}},
                }
            },
            "models.credit.attributes.sex.max_groups: 0 is below the minimum 1",
        ),
        (
            {"models": {"credit": {"attributes": {"sex": {"bins": ["a"]}}}}},
            "models.credit.attributes.sex.bins[0]: 'a' is not",
        ),
        (
            {
                "models": {"credit": {"attributes": {"sex": {}}}},
                "kafka": {"security_protocol": "TLS"},
            },
            "kafka.security_protocol: 'TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
        (
            {
                "models": {"m": {"attributes": {"g": {}}}},
                "alerts": {
                    "rules": [{"name": "A", "metric": "tpr_gap", "bound": 0.1, "for_": "5m"}]
                },
            },
            "alerts.rules[0].for_: unknown key",
        ),
        (
            {
                "models": {"m": {"attributes": {"g": {}}}},
                "alerts": {"rules": [{"name": "A", "metric": "tpr_gap"}]},
            },
            "alerts.rules[0].bound: required",
        ),
        (
            {
                "models": {"m": {"attributes": {"g": {}}}},
                "alerts": {"rules": [{"name": "9lives", "metric": "tpr_gap", "bound": 1}]},
            },
            "alerts.rules[0].name: '9lives' must be an identifier",
        ),
        (
            {"models": {"m": {"attributes": {"g": {}}, "windows": [True]}}},
            "models.m.windows[0]: expected int | str | mapping, got bool",
        ),
        (
            {"models": {"m": {"attributes": {"g": {}}}}, "confidence": 1},
            "confidence: 1.0 must be in [0.5, 1)",
        ),
        (["models"], "expected a mapping, got array"),
    ],
)
def test_schema_errors_name_the_key_and_the_value(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert str(err.value).startswith(message), str(err.value)


def test_yaml_forms_are_read_as_before(tmp_path: Path) -> None:
    """YAML's own types: numeric mapping keys and group names, dates, `for` of a rule."""
    p = write(
        tmp_path,
        "min_timestamp: 2020-01-01\n"
        "models:\n  credit:\n    attributes: {race: {}}\n"
        "    reference_groups: {race: 1}\n    label_values: {0: 0, 'yes': 1}\n"
        "alerts:\n  rules:\n    - {name: A, metric: tpr_gap, op: '>', bound: 0.1, for: 5m}\n",
    )
    c = load_config(p, env={})
    assert c.min_timestamp == 1577836800.0
    assert c.models["credit"].reference_groups == {"race": "1"}
    assert c.models["credit"].label_values == {"0": 0, "yes": 1}
    assert c.alerts.rules[0].for_ == 300 and c.alerts.rules[0].op == ">"


@pytest.mark.parametrize("written", ["yes", "No", "on", "off", "true", "~", "null"])
def test_a_key_yaml_reads_as_true_false_or_null_is_refused_with_how_to_quote_it(
    tmp_path: Path, written: str
) -> None:
    """``prediction_values: {yes: 1, no: 0}`` was read as ``{'True': 1, 'False': 0}``: events
    saying "yes" matched neither, every one was dead-lettered and the monitor stopped."""
    models = "models:\n  m:\n    attributes: {g: {}}\n"
    bad = write(tmp_path, models + f"    prediction_values: {{{written}: 1, maybe: 0}}\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad, env={})
    assert info.value.path == "models.m.prediction_values"
    assert "quote it" in info.value.reason
    good = write(tmp_path, models + f"    prediction_values: {{'{written}': 1, maybe: 0}}\n")
    assert load_config(good, env={}).models["m"].prediction_values == {written: 1, "maybe": 0}


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("models:\n  m: {attributes: {g: {}}}\nmodels:\n  n: {attributes: {g: {}}}\n", 3, "models"),
        (
            "models:\n  m:\n    attributes: {g: {}}\n    min_samples: 500\n    min_samples: 5\n",
            5,
            "min_samples",
        ),
        ("models:\n  m: {attributes: {g: {}, g: {bins: [1]}}}\n", 2, "g"),
    ],
)
def test_a_key_written_twice_is_refused_with_its_line(
    tmp_path: Path, text: str, line: int, key: str
) -> None:
    """YAML lets the last of two equal keys win: a second ``models:`` silently dropped every
    model of the first, a second ``min_samples`` silently replaced the first."""
    with pytest.raises(ConfigError, match=rf"line {line}: key '{key}' is written twice"):
        load_config(write(tmp_path, text), env={})


def test_absent_keys_take_the_specs_defaults() -> None:
    """The schema's defaults are the frozen specs' own (one place defines each default)."""
    from monitor.config.spec import (
        AlertsSpec,
        AttributeSpec,
        CheckpointSpec,
        Config,
        FieldMap,
        KafkaSpec,
        LimitsSpec,
        ModelSpec,
        ServiceSpec,
    )

    c = parse_config({"models": {"m": {"attributes": {"g": {}}}}})
    model = ModelSpec(name="m", attributes=(AttributeSpec("g", ("attributes", "g")),))
    assert c == Config(models={"m": model})
    assert (c.kafka, c.checkpoint, c.limits) == (KafkaSpec(), CheckpointSpec(), LimitsSpec())
    assert (c.service, c.alerts, c.fields) == (ServiceSpec(), AlertsSpec(), FieldMap())


@pytest.mark.parametrize("module", ["monitor", "monitor.cli"])
def test_both_module_entry_points_run_the_command_line(module: str, tmp_path: Path) -> None:
    """``python -m monitor.cli`` did nothing and exited 0 (found by a review): a CI step
    written that way passed without checking anything. Both spellings check the config."""
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text("models: {m: {attributes: {g: {}}, windows: [1h], bucket: 7x}}\n")
    done = subprocess.run(
        [sys.executable, "-m", module, "check-config", str(bad)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "models.m.bucket" in done.stderr, done.stderr


def test_point_past_is_the_point_estimate_beyond_the_bound_whatever_the_significance() -> None:
    """``AlertRule.point_past``: what a significant rule whose interval reaches back asks
    before searching the other pairs, and what the gate's "not significantly" note says."""
    import math

    from monitor.config.rules import AlertRule

    low = AlertRule("R", "disparate_impact_ratio", "<", 0.8, significant=True)
    high = AlertRule("G", "tpr_gap", ">", 0.1, significant=True)
    assert low.point_past(0.79) and not low.point_past(0.8) and not low.point_past(math.nan)
    assert high.point_past(0.11) and not high.point_past(0.1) and not high.point_past(math.nan)
    assert not low.breached(0.79, 0.7, 0.85)  # the interval reaches back: not breached
    for v in (0.5, 0.79, 0.8, 0.81):  # the same as the rule without significance
        assert low.point_past(v) == AlertRule("R", "disparate_impact_ratio", "<", 0.8).breached(
            v, v, v
        )
