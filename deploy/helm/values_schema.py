"""Regenerate the monitor-config part of the chart's ``values.schema.json``.

``config`` in the chart's values is the monitor's configuration file, so its schema is the
monitor's own (``fairness-monitor check-config --schema``, from the msgspec Structs in
``monitor/config/``) plus what the chart adds: ``models`` and ``kafka`` are required, and the
Kafka password may not sit in the values (use ``kafka.credentials.existingSecret``). The rest of
the file (the chart's own values) is written by hand and kept as it is.

Run ``python deploy/helm/values_schema.py`` after changing the configuration schema;
``tests/config/test_schema.py`` fails while the committed file differs from this output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "deploy/helm/fairness-monitor/values.schema.json"

CHART_RULES: dict[str, Any] = {
    "type": "object",
    "required": ["models", "kafka"],
    "properties": {
        "kafka": {
            "type": "object",
            "required": ["bootstrap_servers", "predictions_topic", "labels_topic"],
            "properties": {
                "sasl_password": {
                    "not": {},
                    "description": "use kafka.credentials.existingSecret",
                }
            },
        }
    },
}


def _refs(node: Any) -> Any:
    """``#/$defs/X`` -> ``#/definitions/X`` (the chart's schema is draft-07)."""
    if isinstance(node, dict):
        return {
            k: (v.replace("#/$defs/", "#/definitions/") if k == "$ref" else _refs(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_refs(v) for v in node]
    return node


def generate(current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (the chart's values schema) with ``config`` and ``definitions`` regenerated."""
    sys.path.insert(0, str(ROOT))
    from monitor.config.spec import json_schema

    monitor = _refs(json_schema())
    for key in ("$schema", "title"):  # the chart's file says which draft it is
        del monitor[key]
    out = dict(current)
    out["definitions"] = monitor["$defs"]
    properties = dict(current["properties"])
    properties["config"] = {
        "description": "The monitor's configuration file (fairness-monitor check-config "
        "--schema), rendered into a ConfigMap.",
        "allOf": [monitor, CHART_RULES],
    }
    del monitor["$defs"]
    out["properties"] = properties
    return out


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA.write_text(render(generate(json.loads(SCHEMA.read_text()))))
    print(f"wrote {SCHEMA}")
