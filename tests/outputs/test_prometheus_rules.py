"""The shipped Prometheus rules pass `promtool check rules` and their `promtool test rules`
unit tests (firing, not firing on small samples, resolving after keep_firing_for)."""

from __future__ import annotations

import shutil
import subprocess

import yaml

from tests.conftest import ROOT, require

RULES = ROOT / "deploy" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    require(exe is not None, "promtool (Debian package prometheus)")
    assert exe is not None
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=RULES, timeout=120)


def test_rules_are_valid() -> None:
    r = promtool("check", "rules", "fairness-rules.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = yaml.safe_load((RULES / "fairness-rules.yml").read_text())
    n = sum(len(g["rules"]) for g in doc["groups"])
    assert n >= 32  # recording rules (incl. the interval bands) and alerts
    assert f"SUCCESS: {n} rules found" in r.stdout


def test_rule_unit_tests_pass() -> None:
    r = promtool("test", "rules", "fairness-rules.test.yml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_a_wrong_bound_is_caught(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The unit tests can fail: with the bound at 0.5 the expected alert does not fire."""
    broken = (
        (RULES / "fairness-rules.yml")
        .read_text()
        .replace("fairness:disparate_impact:ratio < 0.8", "fairness:disparate_impact:ratio < 0.5")
    )
    (tmp_path / "fairness-rules.yml").write_text(broken)
    shutil.copy(RULES / "fairness-rules.test.yml", tmp_path)
    exe = shutil.which("promtool")
    require(exe is not None, "promtool")
    r = subprocess.run(
        [str(exe), "test", "rules", "fairness-rules.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
