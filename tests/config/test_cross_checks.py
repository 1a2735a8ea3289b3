"""Settings that passed check-config and then misbehaved at run time: each is refused at
start, naming its key (found by an adversarial review, each with a reproduction)."""

from __future__ import annotations

from typing import Any

import pytest

from monitor.config.spec import ConfigError, apply_env_overrides, parse_config
from monitor.ingest.groups import bin_labels


def config(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "models": {"m": {"attributes": {"g": {}, "s": {}}, "windows": ["1h", "6h"]}}
    }
    for path, value in over.items():
        target = doc
        *keys, last = path.split("__")
        for k in keys:
            target = target.setdefault(k, {})
        target[last] = value
    return doc


def refused(doc: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    return info.value


RULE = {"name": "R", "metric": "disparate_impact_ratio", "op": "<", "bound": 0.8}


@pytest.mark.parametrize(
    ("rule", "path", "named", "known"),
    [
        ({"windows": ["1h", "1hr"]}, "alerts.rules[0].windows[1]", "'1hr'", "(1h, 6h)"),
        ({"attributes": ["group"]}, "alerts.rules[0].attributes[0]", "'group'", "(g, s)"),
        ({"attributes": ["g&t"]}, "alerts.rules[0].attributes[0]", "'g&t'", "(g, s)"),
    ],
)
def test_a_rule_naming_a_window_or_attribute_no_model_has_is_refused(
    rule: dict[str, Any], path: str, named: str, known: str
) -> None:
    """A typo made the rule apply to nothing: a DIR of 0.44 paged nothing, check-config said
    OK. The error names the key and the names that exist."""
    err = refused(config(alerts__rules=[{**RULE, **rule}]))
    assert err.path == path and named in err.reason and known in err.reason, err
    good = config(
        models__m__intersections=[["g", "s"]],
        alerts__rules=[{**RULE, "windows": ["6h"], "attributes": ["s", "g&s"]}],
    )
    assert parse_config(good).alerts.rules[0].attributes == ("s", "g&s")


@pytest.mark.parametrize(
    ("over", "path"),
    [
        ({"kafka__dead_letter_topic": "predictions"}, "kafka.dead_letter_topic"),
        ({"alerts__sinks__kafka_topic": "labels"}, "alerts.sinks.kafka_topic"),
        (
            {"checkpoint__store": "kafka", "checkpoint__state_topic": "predictions"},
            "checkpoint.state_topic",
        ),
        (
            {"kafka__dead_letter_topic": "dlq", "alerts__sinks__kafka_topic": "dlq"},
            "alerts.sinks.kafka_topic",
        ),
    ],
)
def test_a_topic_the_monitor_writes_cannot_be_one_it_reads_or_another_it_writes(
    over: dict[str, Any], path: str
) -> None:
    """Dead letters written to the predictions topic were read, refused and written again,
    forever."""
    err = refused(
        config(kafka__predictions_topic="predictions", kafka__labels_topic="labels", **over)
    )
    assert err.path == path and "the monitor writes here" in err.reason


@pytest.mark.parametrize(
    ("intersections", "attributes", "says"),
    [
        ([["g", "s"], ["s", "g"]], None, "repeats the intersection"),
        ([["g", "g"]], None, "two or more distinct"),
        ([["g", "s"]], {"g": {}, "s": {}, "g&s": {}}, "without '&'"),
    ],
)
def test_attribute_sets_with_one_name_are_refused(
    intersections: list[list[str]], attributes: dict[str, Any] | None, says: str
) -> None:
    """Two sets named alike gave duplicate series on /metrics with different values."""
    over: dict[str, Any] = {"models__m__intersections": intersections}
    if attributes is not None:
        over["models__m__attributes"] = attributes
    assert says in refused(config(**over)).reason


@pytest.mark.parametrize(
    ("over", "path", "says"),
    [
        (
            {"models__m__bucket": "1s", "models__m__windows": ["365d"]},
            "models.m.bucket",
            "over 100,000",
        ),
        (
            {"models__m__windows": ["99999999999999999999w"]},
            "models.m.windows[0].length",
            "ten years",
        ),
        ({"models__m__score_bins": 10_000_000}, "models.m.score_bins", "1000"),
        (  # found by a review: the ring never held an hour's cohort, drift was silently off
            {
                "models__m__windows": ["30m"],
                "models__m__lateness": "5m",
                "alerts__drift__enabled": True,
            },
            "alerts.drift.bucket",
            "model 'm' keeps (35m",
        ),
        (  # the label join keeps group indices as int16: a label past 32,767 hit no group
            {"models__m__attributes": {"zip": {"max_groups": 40_000}}},
            "models.m.attributes",
            "over 32,767",
        ),
        (
            {
                "models__m__intersections": [["g", "s"]],
                "models__m__max_intersection_groups": 32_764,
            },
            "models.m.attributes",
            "32,870 groups",  # 50 + 50 + 32,764, and two more per set
        ),
        ({"alerts__sinks__timeout": 0}, "alerts.sinks.timeout", "more than zero"),
        ({"alerts__drift__threshold": -8}, "alerts.drift.threshold", "more than zero"),
        ({"alerts__drift__delta": 0}, "alerts.drift.delta", "more than zero"),
        (
            {"alerts__drift__detector": "adwin", "alerts__drift__delta": 2},
            "alerts.drift.delta",
            "below 1",
        ),
        ({"alerts__sinks__timeout": -1}, "alerts.sinks.timeout", "more than zero"),
        (
            {"alerts__rules": [{**RULE, "hysteresis": -0.1}]},
            "alerts.rules[0].hysteresis",
            "negative",
        ),
        (
            {"models__m__attributes": {"g": {"bins": [float("nan")]}}},
            "models.m.attributes.g.bins",
            "finite",
        ),
        (
            {"models__m__attributes": {"g": {"bins": [1, float("inf")]}}},
            "models.m.attributes.g.bins",
            "finite",
        ),
    ],
)
def test_sizes_and_numbers_that_fail_at_run_time_are_refused_at_start(
    over: dict[str, Any], path: str, says: str
) -> None:
    """A 1-second bucket over a year asked for 13.6 GiB at the first event; a timeout of 0
    failed every delivery; a NaN bin edge put every age in one group '<nan'."""
    err = refused(config(**over))
    assert err.path == path and says in err.reason, err


def test_bin_edges_that_print_alike_get_labels_apart() -> None:
    """Edges 1.0000001 and 1.0000002 both printed as '1': two bins were counted as one."""
    labels = bin_labels([1.0000001, 1.0000002, 1.0000003])
    assert len(set(labels)) == len(labels) == 4
    assert bin_labels([25, 45.5]) == ["<25", "25-45.5", ">=45.5"]  # short ones are as before


def test_environment_overrides_match_the_files_keys_case_aside() -> None:
    """FAIRNESS_MONITOR__...__RACE__MAX_GROUPS created a second attribute 'race' beside the
    file's 'Race' (every event then lacked it)."""
    doc = {"models": {"M1": {"attributes": {"Race": {}}}}}
    env = {"FAIRNESS_MONITOR__MODELS__M1__ATTRIBUTES__RACE__MAX_GROUPS": "5"}
    c = parse_config(apply_env_overrides(doc, env))
    assert [(a.name, a.max_groups) for a in c.models["M1"].attributes] == [("Race", 5)]
    two = {"models": {"m": {"attributes": {"Race": {}, "race": {}}}}}
    with pytest.raises(ConfigError, match="matches keys"):
        apply_env_overrides(two, {"FAIRNESS_MONITOR__MODELS__M__ATTRIBUTES__RACE__MAX_GROUPS": "5"})


def test_a_model_just_within_the_group_limit_is_accepted() -> None:
    doc = config(models__m__attributes={"g": {"max_groups": 32_763}})  # + __missing__, __other__
    assert parse_config(doc).models["m"].attributes[0].max_groups == 32_763


def test_short_windows_fit_drift_once_lateness_covers_the_cohort() -> None:
    """The same 30-minute window with the default lateness (1 h) keeps a drift cohort."""
    assert parse_config(config(models__m__windows=["30m"])).alerts.drift.enabled


def test_drift_by_default_that_cannot_fit_a_model_says_so_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Drift is on by default: a short-window model is no configuration error, but a warning
    names it (before, the only sign was a log line blaming evaluation for falling behind)."""
    import logging

    with caplog.at_level(logging.WARNING):
        parse_config(config(models__m__windows=["30m"], models__m__lateness="5m"))
    assert "drift would never be judged" in caplog.text and "model 'm'" in caplog.text
