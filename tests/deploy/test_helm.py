"""The Helm chart: ``helm lint``, ``helm template`` rendering manifests valid against the
Kubernetes schemas (kubernetes-validate, strict), the values schema rejecting bad values, the
security posture, and the PrometheusRule carrying exactly the shipped rules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.config.spec import load_config
from tests.conftest import ROOT, require

CHART = ROOT / "deploy/helm/fairness-monitor"
KUBE = "1.31.0"


def helm_bin() -> str:
    local = ROOT / ".cache/bin/helm"
    found = str(local) if local.exists() else shutil.which("helm")
    require(found is not None, "helm (.ci/run builds it: go install helm.sh/helm/v3/cmd/helm)")
    assert found is not None
    return found


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_bin(), *args], capture_output=True, text=True, check=check, timeout=120
    )


def render(*sets: str) -> list[dict[str, Any]]:
    args = ["template", "rel", str(CHART), "--kube-version", KUBE]
    for s in sets:
        args += ["--set", s]
    out = helm(*args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


def validate(tmp_path: Path, docs: list[dict[str, Any]]) -> None:
    """The Kubernetes resources pass kubernetes-validate, strictly."""
    core = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com")]
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all(core))
    r = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", KUBE, str(path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("passed for resource") == len(core)


def test_helm_lint_strict() -> None:
    r = helm("lint", str(CHART), "--strict", "--kube-version", KUBE, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout


FULL = (
    "persistence.enabled=true",
    "serviceMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "kafka.credentials.existingSecret=kafka-creds",
    "webConfig.existingSecret=fm-web",
    "serviceMonitor.scheme=https",
    "serviceMonitor.tlsConfig.ca.secret.name=fm-web",
    "serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
    "serviceMonitor.basicAuth.username.name=fm-scrape",
    "serviceMonitor.basicAuth.username.key=username",
    "serviceMonitor.basicAuth.password.name=fm-scrape",
    "serviceMonitor.basicAuth.password.key=password",
)


@pytest.mark.parametrize("sets", [(), FULL], ids=["defaults", "everything-on"])
def test_rendered_manifests_are_valid_kubernetes(tmp_path: Path, sets: tuple[str, ...]) -> None:
    docs = render(*sets)
    validate(tmp_path, docs)
    kinds = {d["kind"] for d in docs}
    expected = {"ServiceAccount", "ConfigMap", "Service", "Deployment"}
    if sets:
        expected |= {"PersistentVolumeClaim", "ServiceMonitor", "PrometheusRule"}
    assert kinds == expected


def test_kubernetes_validation_catches_a_broken_manifest(tmp_path: Path) -> None:
    """The validator is not a rubber stamp: a wrong type in the Deployment fails."""
    dep = by_kind(render())["Deployment"]
    dep["spec"]["replicas"] = "two"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(dep))
    r = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", KUBE, str(path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "replicas" in r.stdout + r.stderr


def test_deployment_probes_security_and_secrets() -> None:
    docs = by_kind(render(*FULL))
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["resources"]["limits"]["memory"] and c["resources"]["requests"]["cpu"]
    env = {e["name"]: e for e in c["env"]}
    ref = env["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "kafka-creds", "key": "password"}
    # the monitor reads the secret's text as it is, not as YAML (0123 stays 0123)
    assert env["FAIRNESS_MONITOR__KAFKA__SASL_PASSWORD_ENV"]["value"] == "KAFKA_SASL_PASSWORD"
    cfg_env = {
        "FAIRNESS_MONITOR__KAFKA__SASL_PASSWORD_ENV": "KAFKA_SASL_PASSWORD",
        "FAIRNESS_MONITOR__KAFKA__SASL_USERNAME_ENV": "KAFKA_SASL_USERNAME",
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKA_SASL_PASSWORD", "0123")
        mp.setenv("KAFKA_SASL_USERNAME", "007")
        from monitor.config.spec import apply_env_overrides, parse_config

        data = apply_env_overrides(
            {
                "models": {"m": {"attributes": {"g": {}}}},
                "kafka": {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512"},
            },
            cfg_env,
        )
        kafka = parse_config(data).kafka
    assert (kafka.sasl_username, kafka.sasl_password) == ("007", "0123")
    claim = next(v for v in pod["volumes"] if v["name"] == "state")["persistentVolumeClaim"]
    assert claim["claimName"] == docs["PersistentVolumeClaim"]["metadata"]["name"]
    assert docs["Deployment"]["spec"]["strategy"]["type"] == "Recreate"
    sm = docs["ServiceMonitor"]["spec"]["endpoints"][0]
    assert sm["port"] == "http" and sm["path"] == "/metrics"


def test_configmap_is_a_valid_monitor_config_with_the_chart_env(tmp_path: Path) -> None:
    docs = by_kind(render())
    path = tmp_path / "config.yaml"
    path.write_text(docs["ConfigMap"]["data"]["config.yaml"])
    env = {
        e["name"]: e["value"]
        for e in docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    cfg = load_config(path, env)
    assert cfg.service.http_port == 9108
    assert cfg.checkpoint.path == "/var/lib/fairness-monitor/checkpoint.sqlite"
    assert list(cfg.models) == ["lending"]


def test_web_config_secret_probe_port_and_authenticated_service_monitor(tmp_path: Path) -> None:
    plain = by_kind(render())
    (c,) = plain["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert c["livenessProbe"]["httpGet"]["port"] == "http"  # no web config: unchanged
    assert not any("WEB_CONFIG" in e["name"] for e in c["env"])

    docs = by_kind(render(*FULL))
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    for probe in ("livenessProbe", "readinessProbe"):  # the plain probe-only port
        assert c[probe]["httpGet"]["port"] == "probes"
    assert {"name": "probes", "containerPort": 9109, "protocol": "TCP"} in c["ports"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (
        env["FAIRNESS_MONITOR__SERVICE__WEB_CONFIG_FILE"]
        == "/etc/fairness-monitor/web/web-config.yml"
    )
    assert env["FAIRNESS_MONITOR__SERVICE__PROBE_LISTEN"] == "0.0.0.0:9109"
    web = next(v for v in pod["volumes"] if v["name"] == "web")["secret"]
    assert web["secretName"] == "fm-web"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "web")
    assert mount == {"name": "web", "mountPath": "/etc/fairness-monitor/web", "readOnly": True}
    sm = docs["ServiceMonitor"]["spec"]["endpoints"][0]
    assert sm["scheme"] == "https"
    assert sm["tlsConfig"]["ca"]["secret"] == {"name": "fm-web", "key": "ca.crt"}
    assert sm["basicAuth"]["password"] == {"name": "fm-scrape", "key": "password"}
    # the chart's environment is a valid monitor configuration (web config path swapped for a
    # local file, since /etc/fairness-monitor/web exists only in the pod)
    config = tmp_path / "config.yaml"
    config.write_text(docs["ConfigMap"]["data"]["config.yaml"])
    (tmp_path / "web.yml").write_text("basic_auth_users: {}\n")
    env = {k: v for k, v in env.items() if v is not None}
    env["FAIRNESS_MONITOR__SERVICE__WEB_CONFIG_FILE"] = str(tmp_path / "web.yml")
    with pytest.MonkeyPatch.context() as mp:  # what the kubelet sets from the secret
        mp.setenv("KAFKA_SASL_USERNAME", "monitor")
        mp.setenv("KAFKA_SASL_PASSWORD", "s3cret")
        cfg = load_config(config, env)
    assert (cfg.service.http_port, cfg.service.probe_port) == (9108, 9109)
    assert cfg.service.web_config is not None


def test_prometheus_rule_is_the_shipped_rules_file_and_the_charts_own_config_gives_it(
    tmp_path: Path,
) -> None:
    """Found by a review: the chart shipped the Compose stack's rules (FourFifthsRule on 3h, for
    30m) while its default config ran the monitor's defaults (every window, for 10m): with
    default values a breach in the 12h window paged from the monitor and never from Prometheus.
    The chart's rendered config must generate exactly the rules it ships."""
    from monitor.outputs.promql import rules_yaml

    shipped = yaml.safe_load((ROOT / "deploy/prometheus/fairness-rules.yml").read_text())
    copy = (CHART / "files/fairness-rules.yml").read_text()
    assert copy == (ROOT / "deploy/prometheus/fairness-rules.yml").read_text(), (
        "copy deploy/prometheus/fairness-rules.yml to the chart's files/"
    )
    docs = by_kind(render("prometheusRule.enabled=true"))
    assert docs["PrometheusRule"]["spec"] == shipped
    config = tmp_path / "config.yaml"
    config.write_text(docs["ConfigMap"]["data"]["config.yaml"])
    own = yaml.safe_load(rules_yaml(load_config(config, {}), source="chart"))
    assert own == shipped, "regenerate files/fairness-rules.yml from the chart's default config"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("replicaCount=0", "minimum: got 0, want 1"),
        ("service.port=70000", "maximum: got 70,000, want 65,535"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("persistence.accessMode=ReadManyTimes", "accessMode"),
        ("securityContext.allowPrivilegeEscalation=true", "allowPrivilegeEscalation"),
        ("config.kafka.sasl_password=hunter2", "sasl_password"),
        # config is checked against the monitor's own schema (check-config --schema)
        ("config.kafka.grup_id=fm", "grup_id"),
        ("config.models.lending.bucket=5x", "bucket"),
        ("config.service.log_format=xml", "log_format"),
        ("webConfig.probePort=0", "probePort"),
        ("serviceMonitor.scheme=ftp", "scheme"),
        ("replicas=2", "additional properties 'replicas' not allowed"),
    ],
)
def test_values_schema_rejects_bad_values(value: str, message: str) -> None:
    r = helm("template", "rel", str(CHART), "--kube-version", KUBE, "--set", value, check=False)
    assert r.returncode != 0
    assert "values don't meet the specifications of the schema" in r.stderr
    assert message in r.stderr, r.stderr


def refused(*sets: str) -> str:
    """``helm template`` with these values fails: its error message."""
    args = ["template", "rel", str(CHART), "--kube-version", KUBE]
    for s in sets:
        args += ["--set", s]
    r = helm(*args, check=False)
    assert r.returncode != 0, f"rendered with {sets}"
    return r.stderr


def pod_config(tmp_path: Path, docs: dict[str, dict[str, Any]]) -> Any:
    """The configuration a pod runs with: the ConfigMap it mounts, with the pod's environment."""
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    mounted = next(v for v in pod["volumes"] if v["name"] == "config")["configMap"]["name"]
    assert mounted == docs["ConfigMap"]["metadata"]["name"]
    (c,) = pod["containers"]
    assert {"name": "config", "mountPath": "/etc/fairness-monitor", "readOnly": True} in c[
        "volumeMounts"
    ]
    assert c["args"] == ["run", "--config", "/etc/fairness-monitor/config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(docs["ConfigMap"]["data"]["config.yaml"])
    return load_config(path, {e["name"]: e["value"] for e in c["env"] if "value" in e})


@pytest.mark.parametrize(
    "sets",
    [
        ("replicaCount=3",),  # the chart picks the state topic
        ("replicaCount=3", "config.checkpoint.store=kafka", "config.checkpoint.state_topic=fm-st"),
    ],
    ids=["store-unset", "store-kafka"],
)
def test_three_replicas_without_persistence_use_the_state_topic(
    tmp_path: Path, sets: tuple[str, ...]
) -> None:
    """Issue 15 item 3: replicaCount 3 and no persistence render, pass the values schema
    (helm applies it) and the Kubernetes schemas, claim no volume, and every pod runs with
    checkpoint.store: kafka."""
    values = [a for s in sets for a in ("--set", s)]
    r = helm("lint", str(CHART), "--strict", "--kube-version", KUBE, *values, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    listed = render(*sets)
    validate(tmp_path, listed)
    docs = by_kind(listed)
    assert "PersistentVolumeClaim" not in docs
    dep = docs["Deployment"]["spec"]
    assert dep["replicas"] == 3
    assert "strategy" not in dep  # rolling updates: no volume to hand over
    pod = dep["template"]["spec"]
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert state == {"name": "state", "emptyDir": {}}
    assert not any("persistentVolumeClaim" in v for v in pod["volumes"])
    cfg = pod_config(tmp_path, docs)
    assert cfg.checkpoint.store == "kafka"
    assert cfg.alerts.scope == "global"  # alerts judged over every replica's partitions
    assert cfg.checkpoint.state_topic == ("fm-st" if len(sets) > 1 else "fairness-monitor-state")
    assert cfg.kafka.bootstrap_servers == ("kafka:9092",)  # the state topic's cluster
    env = [e["name"] for e in pod["containers"][0]["env"]]
    assert "FAIRNESS_MONITOR__CHECKPOINT__PATH" not in env


def test_one_replica_keeps_the_sqlite_checkpoint_on_its_volume(tmp_path: Path) -> None:
    docs = by_kind(render("persistence.enabled=true"))
    cfg = pod_config(tmp_path, docs)
    assert cfg.checkpoint.store == "sqlite"
    assert cfg.checkpoint.path == "/var/lib/fairness-monitor/checkpoint.sqlite"
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    claim = next(v for v in pod["volumes"] if v["name"] == "state")["persistentVolumeClaim"]
    assert claim["claimName"] == docs["PersistentVolumeClaim"]["metadata"]["name"]
    assert docs["Deployment"]["spec"]["strategy"]["type"] == "Recreate"
    # and a single replica may use the state topic too, without any volume
    docs = by_kind(render("config.checkpoint.store=kafka"))
    assert pod_config(tmp_path, docs).checkpoint.store == "kafka"
    assert pod_config(tmp_path, docs).alerts.scope == "local"  # one replica judges its own
    assert "PersistentVolumeClaim" not in docs
    # several replicas keep the scope the config names
    docs = by_kind(render("replicaCount=2", "config.alerts.scope=local"))
    assert pod_config(tmp_path, docs).alerts.scope == "local"


def test_several_replicas_need_a_shared_checkpoint_volume() -> None:
    """The SQLite checkpoint with several replicas: refused on a ReadWriteOnce volume (and on
    one emptyDir per pod), rendered on a ReadWriteMany one; the state topic wants no volume."""
    err = refused("replicaCount=3", "persistence.enabled=true")
    assert "replicaCount 3 with the SQLite checkpoint on a ReadWriteOnce volume" in err
    assert "ReadWriteMany" in err and "config.checkpoint.store: kafka" in err
    err = refused(
        "replicaCount=2", "persistence.enabled=true", "persistence.accessMode=ReadWriteOncePod"
    )
    assert "ReadWriteOncePod volume" in err
    err = refused("replicaCount=3", "config.checkpoint.store=sqlite")
    assert "each replica would keep its checkpoint on its own emptyDir" in err
    err = refused("replicaCount=3", "config.checkpoint.store=kafka", "persistence.enabled=true")
    assert "set persistence.enabled=false" in err
    docs = by_kind(
        render("replicaCount=3", "persistence.enabled=true", "persistence.accessMode=ReadWriteMany")
    )
    assert docs["Deployment"]["spec"]["replicas"] == 3
    assert "strategy" not in docs["Deployment"]["spec"]
    assert docs["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_notes_render(tmp_path: Path) -> None:
    """NOTES.txt renders (``helm template`` skips it: render a copy as a plain template; an
    install dry run would need a cluster)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates/NOTES.txt").read_text()
    (chart / "templates/NOTES.txt").unlink()
    (chart / "templates/notes.yaml").write_text(
        '{{- define "notes" }}' + notes + '{{ end }}\ntext: {{ include "notes" . | toJson }}\n'
    )

    def notes_text(*sets: str) -> str:
        args = ["template", "rel", str(chart), "--kube-version", KUBE]
        for s in sets:
            args += ["--set", s]
        rendered = helm(*args, "--show-only", "templates/notes.yaml").stdout
        return str(yaml.safe_load(rendered)["text"])

    out = notes_text()
    assert "port-forward svc/rel-fairness-monitor 9108" in out
    assert "persistence is disabled" in out
    assert "http://127.0.0.1:9108/" in out and "no TLS and no authentication" in out
    secured = notes_text("webConfig.existingSecret=fm-web")
    assert "https://127.0.0.1:9108/" in secured and "no authentication" not in secured
    scaled = notes_text("replicaCount=3")
    assert "state topic fairness-monitor-state" in scaled
    assert "chosen\nbecause replicaCount > 1 without persistence" in scaled
    assert "persistence is disabled" not in scaled
    assert "judged over all 3 replicas' partitions (alerts.scope: global)" in scaled
    assert "fairness-monitor-partials" in scaled
    assert "fairness-monitor status -c /etc/fairness-monitor/config.yaml" in scaled
    local = notes_text("replicaCount=3", "config.alerts.scope=local")
    assert "see only the\npartitions it owns" in local and "Enable prometheusRule" in local
    routed = notes_text(
        "replicaCount=3", "prometheusRule.enabled=true", "config.alerts.scope=local"
    )
    assert "Route the PrometheusRule's alerts" in routed


def test_a_listen_address_in_config_runs_on_the_container_port(tmp_path: Path) -> None:
    """The README's config writes ``service.listen``; the chart's port setting and it together
    were refused at start ("give listen or http_host/http_port, not both": found by a review)."""
    cfg = pod_config(tmp_path, by_kind(render("config.service.listen=127.0.0.1:9000")))
    assert (cfg.service.http_host, cfg.service.http_port) == ("0.0.0.0", 9108)
    cfg = pod_config(tmp_path, by_kind(render("config.service.http_port=9000")))
    assert cfg.service.http_port == 9108


@pytest.mark.parametrize("key", ["sasl_username=svc", "sasl_password_file=/run/secrets/pw"])
def test_sasl_keys_in_config_beside_the_credentials_secret_are_refused(key: str) -> None:
    """The secret sets ``sasl_*_env``; a ``sasl_*`` key in config too was refused only when
    the pods started ("give only one of ..."): now at render time, naming the key."""
    name = key.split("=")[0]
    err = refused("kafka.credentials.existingSecret=kafka-creds", f"config.kafka.{key}")
    assert f"config.kafka.{name} with kafka.credentials.existingSecret" in err
