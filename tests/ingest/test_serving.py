"""A model's tensor mapping: read from config with errors naming the key path, then applied to
decoded payloads (scores, decisions, groups per row), a payload that does not fit refused."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from monitor.config.decode import ConfigError
from monitor.config.serving import Column, TensorMapping, resolve_mapping
from monitor.ingest.events import Invalid, Reason
from monitor.ingest.oip import decode_request, decode_response
from monitor.ingest.serving import decisions, groups

PATH = "models.credit.input"
MAPPING = {
    "score": {"tensor": "probabilities", "column": 1},
    "attributes": {"sex": {"tensor": "sex"}, "age": {"tensor": "features", "column": 1}},
}


def resolve(raw: Any, threshold: float | None = 0.5) -> TensorMapping:
    return resolve_mapping(raw, PATH, attributes=("sex", "age"), threshold=threshold, lateness=3600)


def test_a_mapping_is_read_into_columns() -> None:
    m = resolve(MAPPING)
    assert m.score == Column("probabilities", 1) and m.prediction is None
    assert m.attributes == {"sex": Column("sex"), "age": Column("features", 1)}


@pytest.mark.parametrize(
    ("raw", "threshold", "path", "words"),
    [
        ([], 0.5, PATH, "must be a mapping"),
        ({**MAPPING, "scores": {}}, 0.5, f"{PATH}.scores", "unknown key"),
        ({"attributes": MAPPING["attributes"]}, 0.5, PATH, "neither score nor prediction"),
        (MAPPING, None, f"{PATH}.score", "without the model's threshold"),
        ({**MAPPING, "score": {"tensor": "p", "column": -1}}, 0.5, f"{PATH}.score.column", "-1"),
        ({**MAPPING, "score": {"tensor": "p", "column": "1"}}, 0.5, f"{PATH}.score.column", "'1'"),
        ({**MAPPING, "score": {"tensor": ""}}, 0.5, f"{PATH}.score.tensor", "not a tensor"),
        ({**MAPPING, "score": {"name": "p"}}, 0.5, f"{PATH}.score", "{tensor: <name>}"),
        ({**MAPPING, "score": {"tensor": "p", "col": 1}}, 0.5, f"{PATH}.score.col", "unknown"),
        ({**MAPPING, "attributes": {}}, 0.5, f"{PATH}.attributes", "must map"),
        (
            {**MAPPING, "attributes": {**MAPPING["attributes"], "race": {"tensor": "r"}}},
            0.5,
            f"{PATH}.attributes.race",
            "not an attribute",
        ),
        (
            {**MAPPING, "attributes": {"sex": {"tensor": "sex"}}},
            0.5,
            f"{PATH}.attributes",
            "['age']",
        ),
    ],
)
def test_a_wrong_mapping_is_explained_by_key_path(
    raw: Any, threshold: float | None, path: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(raw, threshold)
    assert info.value.path == path and words in info.value.reason


def response(*outputs: dict[str, Any]) -> bytes:
    return json.dumps({"model_name": "credit", "id": "r1", "outputs": list(outputs)}).encode()


def t(name: str, shape: list[int], datatype: str, data: list[Any]) -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def test_scores_decide_by_the_threshold_and_decisions_are_taken_as_they_are() -> None:
    table = decode_response(
        response(t("probabilities", [3, 2], "FP32", [0.9, 0.1, 0.3, 0.7, 0.5, 0.5]))
    )
    scores, preds = decisions(table, resolve(MAPPING), 0.5)
    assert scores == [0.1, 0.7, 0.5] and preds == [0, 1, 1]  # at the threshold: positive
    both = resolve({**MAPPING, "prediction": {"tensor": "label"}})
    table = decode_response(
        response(
            t("probabilities", [2, 2], "FP32", [0.9, 0.1, 0.3, 0.7]),
            t("label", [2], "BOOL", [True, False]),
        )
    )
    assert decisions(table, both, 0.5) == ([0.1, 0.7], [1, 0])  # the model's own decision wins
    only = resolve({"prediction": {"tensor": "label"}, "attributes": MAPPING["attributes"]}, None)
    scores, preds = decisions(
        decode_response(response(t("label", [2], "INT64", [0, 1]))), only, None
    )
    assert all(math.isnan(s) for s in scores) and preds == [0, 1]


def test_groups_are_the_raw_values_of_their_columns() -> None:
    req = {
        "id": "r1",
        "inputs": [
            t("sex", [2], "BYTES", ["F", "M"]),
            t("features", [2, 2], "INT32", [700, 3, 650, 1]),
            t("income", [2, 1], "FP32", [1.5, 2.5]),
        ],
    }
    table = decode_request(json.dumps(req).encode())
    assert groups(table, resolve(MAPPING), frozenset()) == {"sex": ["F", "M"], "age": [3, 1]}
    binned = resolve(
        {**MAPPING, "attributes": {"sex": {"tensor": "sex"}, "age": {"tensor": "income"}}}
    )
    assert groups(table, binned, frozenset({"age"}))["age"] == [1.5, 2.5]  # binned later
    with pytest.raises(Invalid) as info:  # text is no number to bin
        groups(table, resolve(MAPPING), frozenset({"sex"}))
    assert info.value.reason == Reason.BAD_ATTRIBUTE
    with pytest.raises(Invalid) as info:
        groups(
            table,
            resolve(
                {
                    **MAPPING,
                    "attributes": {"sex": {"tensor": "gender"}, "age": {"tensor": "income"}},
                }
            ),
            frozenset(),
        )
    assert info.value.reason == Reason.MISSING_TENSOR


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (t("probabilities", [1, 2], "FP32", [0.2, 1.5]), Reason.BAD_SCORE),
        (t("probabilities", [1, 2], "INT8", [0, 2]), Reason.BAD_SCORE),
        (t("probabilities", [1, 2], "BOOL", [True, False]), Reason.BAD_SCORE),
        (t("probabilities", [1, 1], "FP32", [0.2]), Reason.BAD_TENSOR),  # no column 1
        (t("probability", [1, 2], "FP32", [0.2, 0.8]), Reason.MISSING_TENSOR),
    ],
)
def test_a_response_that_does_not_fit_the_mapping_is_refused(
    output: dict[str, Any], reason: Reason
) -> None:
    with pytest.raises(Invalid) as info:
        decisions(decode_response(response(output)), resolve(MAPPING), 0.5)
    assert info.value.reason == reason


def test_a_decision_must_be_zero_or_one() -> None:
    m = resolve({"prediction": {"tensor": "label"}, "attributes": MAPPING["attributes"]}, None)
    for bad in (2, -1):
        with pytest.raises(Invalid) as info:
            decisions(decode_response(response(t("label", [1], "INT64", [bad]))), m, None)
        assert info.value.reason == Reason.BAD_PREDICTION


def test_the_groups_of_a_request_become_the_models_group_indices() -> None:
    from monitor.config.spec import parse_config
    from monitor.ingest.groups import GroupRegistry

    cfg = parse_config(
        {"models": {"credit": {"attributes": {"sex": {}, "age": {"bins": [2]}}, "threshold": 0.5}}}
    )
    spec = cfg.models["credit"]
    m = resolve_mapping(
        MAPPING,
        PATH,
        attributes=tuple(a.name for a in spec.attributes),
        threshold=spec.threshold,
        lateness=spec.lateness,
    )
    req = {
        "id": "r1",
        "inputs": [
            t("sex", [3], "BYTES", ["F", "M", "F"]),
            t("features", [3, 2], "INT32", [0, 1, 0, 3, 0, 2]),
        ],
    }
    got = groups(decode_request(json.dumps(req).encode()), m, frozenset({"age"}))
    reg = GroupRegistry(spec)
    idx = reg.encode([got[a.name] for a in spec.attributes])
    names = [[reg.labels[g] for g in row] for row in idx.tolist()]
    assert [n[0] for n in names] == ["F", "M", "F"]
    assert [n[1] for n in names] == ["<2", ">=2", ">=2"]  # ages 1, 3, 2 against the edge 2
