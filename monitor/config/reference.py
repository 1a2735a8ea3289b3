"""The configuration reference: every key of the file with its type, default and meaning.

Why generated: a hand-written list drifts from the schema (keys such as ``min_timestamp`` or
``shutdown_timeout`` were only in ``check-config --schema``). Types, choices, bounds and defaults
come from the msgspec Structs' JSON Schema, the meanings from ``descriptions.py``; the same
meanings are added to the JSON Schema that editors and the Helm chart read.
``check-config --reference`` prints docs/config.md (a test checks it is current).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import msgspec

from monitor.config.decode import Doc
from monitor.config.descriptions import KEYS
from monitor.config.durations import DURATION_PATTERN, format_duration

ROOT = "ConfigDoc"
# where each Struct sits in the file, in the order the reference shows them
PLACES = {
    "ConfigDoc": "",
    "ModelDoc": "models.<model>",
    "AttributeDoc": "models.<model>.attributes.<attribute>",
    "WindowDoc": "models.<model>.windows[]",
    "JoinDoc": "models.<model>.join",
    "FieldsDoc": "fields",
    "LimitsDoc": "limits",
    "KafkaDoc": "kafka",
    "CheckpointDoc": "checkpoint",
    "ServiceDoc": "service",
    "AlertsDoc": "alerts",
    "RuleDoc": "alerts.rules[]",
    "DriftDoc": "alerts.drift",
    "SinkDoc": "alerts.sinks",
    "BudgetDoc": "alerts.false_page_budget",
    "EvidenceDoc": "alerts.evidence",
}
HEADER = """# Configuration reference

Every key of the configuration file: its type, its default (— : absent) and what it does.
Generated from the schema by `fairness-monitor check-config --reference > docs/config.md`;
`tests/config/test_reference.py` fails while this file differs from that output. The README's
"Configuration" section shows a complete example; docs/serving.md the `input` of a serving
stack. A duration is seconds or text such as `90s`, `5m`, `1h30m`, `7d`, `2w`. Any key can be
set from the environment: `FAIRNESS_MONITOR__MODELS__CREDIT__MIN_SAMPLES=50`.
"""


def described_schema(root: type) -> dict[str, Any]:
    """The JSON Schema of the Struct ``root`` with each property's meaning as its
    ``description`` (a type's own description, such as a duration's format, is kept after it in
    parentheses; one given to a single key says what the table says, and gives way) and the
    defaults made by a factory (``windows: [1h]``), which msgspec leaves out."""
    out = msgspec.json.schema(root)
    structs, todo = {}, [root, *Doc.__subclasses__()]
    while todo:
        cls = todo.pop()
        structs[cls.__name__] = cls
        todo += cls.__subclasses__()
    for name, struct in out["$defs"].items():
        for f in msgspec.structs.fields(structs[name]):
            if f.default_factory is not msgspec.NODEFAULT:
                made = msgspec.to_builtins(f.default_factory())
                struct["properties"][f.encode_name]["default"] = made
    props = [(f"{n}.{k}", p) for n, d in out["$defs"].items() for k, p in d["properties"].items()]
    shared = Counter(p.get("description") for _, p in props)  # a type's, on every key of it
    for name, prop in props:
        text, own = KEYS.get(name), prop.get("description")
        if text is not None:  # a key's own Meta text gives way; a type's is kept after it
            prop["description"] = f"{text} ({own})" if own and shared[own] > 1 else text
    return out


def markdown(schema: dict[str, Any]) -> str:
    """docs/config.md: one table per Struct, in :data:`PLACES` order."""
    defs = schema["$defs"]
    parts = [HEADER]
    for name, place in PLACES.items():
        struct = defs[name]
        title = f"`{place}`" if place else "The file"
        doc = " ".join(struct.get("description", "").split())
        parts.append(
            f"\n## {title}\n\n{doc}\n\n| key | type | default | meaning |\n|---|---|---|---|"
        )
        for key, prop in struct.get("properties", {}).items():
            required = key in struct.get("required", ())
            default = "required" if required else _default(prop)
            meaning = KEYS.get(f"{name}.{key}", "").replace("|", "\\|")
            parts.append(f"| `{key}` | {_type(prop)} | {default} | {meaning} |")
    return "\n".join(parts) + "\n"


def _is_duration(prop: dict[str, Any]) -> bool:
    return any(p.get("pattern") == DURATION_PATTERN for p in prop.get("anyOf", ()))


def _type(prop: dict[str, Any]) -> str:
    """A property's type in a few words (``Struct`` names link to their section)."""
    if _is_duration(prop):
        return "duration"
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        place = PLACES.get(name, name)
        return f"[object](#{_anchor(place)})"
    if "anyOf" in prop:
        kinds = [_type(p) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(dict.fromkeys(kinds))
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    kind = prop.get("type")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if kind == "object":
        extra = prop.get("additionalProperties")
        return f"map of {_type(extra)}" if isinstance(extra, dict) else "object"
    if prop.get("pattern") == "^https?://":
        return "URL (http or https)"
    word = {"integer": "integer", "number": "number", "string": "text", "boolean": "boolean"}
    text = word.get(str(kind), "any")
    bounds = [("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
              ("exclusiveMaximum", "<")]  # fmt: skip
    limits = [f"{sign} {prop[k]}" for k, sign in bounds if k in prop]
    if "ge" not in prop and "minLength" in prop:
        limits.append("not empty")
    return f"{text} ({', '.join(limits)})" if limits else text


def _default(prop: dict[str, Any]) -> str:
    if "default" not in prop or prop["default"] is None:
        return "—"
    value = prop["default"]
    if _is_duration(prop) and isinstance(value, int) and value > 0:
        return f"`{format_duration(value)}`"
    if value == {} or value == []:
        return "—"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _anchor(place: str) -> str:
    """GitHub's heading anchor of ``## `place` ``: lower case, punctuation but ``-``/``_``
    dropped, spaces to ``-``."""
    kept = "".join(c for c in place.lower() if c.isalnum() or c in "-_ ")
    return kept.replace(" ", "-")
