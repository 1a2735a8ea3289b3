"""Any document, however wrong, is either a configuration or a :class:`ConfigError` naming a
key that is in it: never a crash while re-locating msgspec's error, never a path made up."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.config.spec import ConfigError, parse_config

FULL: dict[str, Any] = {
    "fields": {"attributes": "features"},
    "models": {
        "credit": {
            "attributes": {"sex": {}, "age": {"bins": [25, 45], "max_groups": 5}},
            "intersections": [["sex", "age"]],
            "windows": ["1h", {"length": "1d", "lag": "1h", "name": "day"}],
            "label_values": {"no": 0, "yes": 1},
            "reference_groups": {"sex": "f"},
            "join": {"ttl": "7d"},
        }
    },
    "kafka": {"bootstrap_servers": ["k:9092"], "security_protocol": "PLAINTEXT"},
    "checkpoint": {"interval": "30s"},
    "service": {"listen": "127.0.0.1:0", "http_workers": 2},
    "limits": {"max_id_length": 64},
    "alerts": {
        "rules": [{"name": "A", "metric": "tpr_gap", "op": ">", "bound": 0.1, "for": "5m"}],
        "drift": {"metrics": ["tpr_gap"]},
        "sinks": {"webhook_url": "http://x/"},
    },
}

junk = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(FULL)[1:]


def _dotted(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.sampled_from(PATHS), value=junk, add=st.booleans())
def test_a_wrong_value_anywhere_is_a_config_error_naming_a_key_of_the_document(
    where: tuple[Any, ...], value: Any, add: bool
) -> None:
    doc = copy.deepcopy(FULL)
    parent = doc
    for p in where[:-1]:
        parent = parent[p]
    if add and isinstance(parent, dict):
        parent["x_" + str(where[-1])] = value  # an unknown key next to a known one
    else:
        parent[where[-1]] = value
    try:
        parse_config(doc)
    except ConfigError as exc:
        known = {_dotted(p) for p in _paths(doc)}
        # the path is a key of the document, or a required key missing under one
        assert exc.path in known or exc.path.rpartition(".")[0] in known or exc.path == "", exc


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({"kafka": {"\n": None}}, "kafka.\n"),
        ({"models": {"m": {"attributes": {"g": {"a\nb": 1}}}}}, "models.m.attributes.g.a\nb"),
    ],
)
def test_a_key_with_a_newline_is_named_not_an_internal_error(doc: dict, where: str) -> None:
    """msgspec quotes such a key as it is, newline and all; the explanation once failed an
    internal assertion on it (found by the fuzz test above)."""
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert str(err.value) == f"{where}: unknown key"
