"""The configuration reference (``config/reference.py``): every key of the schema has a
meaning, docs/config.md is what ``check-config --reference`` prints, and the meanings reach the
JSON Schema editors read."""

from __future__ import annotations

import re

import msgspec
import pytest

from monitor.cli import main
from monitor.config.descriptions import KEYS
from monitor.config.reference import PLACES, markdown
from monitor.config.spec import ConfigDoc, json_schema, parse_config
from tests.conftest import ROOT


def _keys() -> set[str]:
    schema = msgspec.json.schema(ConfigDoc)
    return {f"{n}.{k}" for n, d in schema["$defs"].items() for k in d.get("properties", {})}


def test_every_key_of_the_schema_says_what_it_does_and_no_meaning_is_left_over() -> None:
    keys = _keys()
    assert sorted(keys - KEYS.keys()) == []  # a new key needs its sentence in descriptions.py
    assert sorted(KEYS.keys() - keys) == []  # a key renamed or removed: its sentence too
    assert set(PLACES) == {k.split(".")[0] for k in keys}  # every section has its place


def test_docs_config_md_is_the_generated_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--reference"]) == 0
    printed = capsys.readouterr().out
    committed = (ROOT / "docs/config.md").read_text()
    assert printed == committed, "run: fairness-monitor check-config --reference > docs/config.md"


def test_the_reference_lists_every_key_with_the_default_the_monitor_uses() -> None:
    """Defaults are read from the schema, not written twice: each row's default is what
    parsing a minimal file gives (a sample across sections, durations and factories)."""
    text = markdown(json_schema())
    cfg = parse_config({"models": {"m": {"attributes": {"g": {}}}}})
    m = cfg.models["m"]

    def row(section: str, key: str) -> list[str]:
        part = text.split(f"## `{section}`\n", 1)[1].split("\n## ", 1)[0]
        line = next(x for x in part.splitlines() if x.startswith(f"| `{key}` |"))
        return [c.strip() for c in line.strip("|").split(" | ")]

    assert row("models.<model>", "bucket")[2] == "`1m`" and m.bucket == 60
    assert row("models.<model>", "lateness")[2] == "`1h`" and m.lateness == 3600
    assert row("models.<model>", "windows")[2] == '`["1h"]`' and m.windows[0].length == 3600
    assert row("models.<model>", "min_samples")[2] == f"`{m.min_samples}`"
    assert row("service", "shutdown_timeout")[2] == "`10s`" and cfg.service.shutdown_timeout == 10
    assert row("alerts.evidence", "baseline")[2] == "`1w`" and cfg.alerts.evidence.baseline == (
        7 * 86400
    )
    assert row("alerts.rules[]", "for")[1] == "duration"
    assert row("alerts.rules[]", "name")[2] == "required"
    assert row("alerts.sinks", "webhook_url")[1] == "URL (http or https)"
    assert row("kafka", "session_timeout_ms")[1] == "integer (≥ 1000)"
    # every section linked from its parent resolves to a heading of the page
    anchors = set(re.findall(r"\]\(#([^)]+)\)", text))
    headings = {
        "".join(c for c in h.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")
        for h in re.findall(r"^## (.+)$", text, flags=re.M)
    }
    assert anchors and anchors <= headings


def test_the_json_schema_carries_each_keys_meaning_and_keeps_the_types_own() -> None:
    defs = json_schema()["$defs"]
    assert defs["ServiceDoc"]["properties"]["shutdown_timeout"]["description"].startswith(
        KEYS["ServiceDoc.shutdown_timeout"]
    )
    bucket = defs["ModelDoc"]["properties"]["bucket"]["description"]
    assert bucket.startswith(KEYS["ModelDoc.bucket"]) and "1h30m" in bucket  # the format kept
    confidence = defs["ConfigDoc"]["properties"]["confidence"]["description"]
    assert confidence == KEYS["ConfigDoc.confidence"]  # its own Meta text said the same
    path = defs["FieldsDoc"]["properties"]["score"]["description"]
    assert path == f"{KEYS['FieldsDoc.score']} (dotted path of the field in an event)"
