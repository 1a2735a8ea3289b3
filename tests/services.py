"""Real Prometheus and Alertmanager processes for the tests (Debian packages)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.broker import free_port
from tests.conftest import require
from tests.helpers import records_accounted, wait_for


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    """Until ``url`` answers 2xx (polled every 0.3 s), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: OSError | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} process exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError as exc:
            last = exc
            time.sleep(0.3)
    raise RuntimeError(
        f"{url} not ready within {timeout:.0f}s ({last!r}): {log.read_text()[-2000:]}"
    )


class Service:
    def __init__(self, name: str, cmd: list[str], ready_path: str, port: int, tmp: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tmp / f"{name}.log"
        self.proc = subprocess.Popen(
            cmd,
            stdout=open(self.log, "wb"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        _wait_http(self.url + ready_path, self.proc, self.log)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def alertmanager(tmp: Path, webhook_url: str, port: int | None = None) -> Service:
    """A fresh Alertmanager (empty storage); ``port``: the one a stopped instance had."""
    exe = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    require(exe is not None, "prometheus-alertmanager (Debian package)")  # CI: fails
    assert exe is not None
    cfg = tmp / "alertmanager.yml"
    cfg.write_text(f"""
route:
  receiver: hook
  group_by: [alertname, model, attribute]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {webhook_url}
        send_resolved: true
""")
    port = port or free_port()
    data = Path(tempfile.mkdtemp(dir=tmp))
    return Service(
        "alertmanager",
        [
            exe,
            f"--config.file={cfg}",
            f"--storage.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        "/-/ready",
        port,
        tmp,
    )


def prometheus(
    tmp: Path,
    targets: list[str],
    rules: Path | None,
    alertmanager_url: str | None = None,
    scrape_configs: str | None = None,
) -> Service:
    """``scrape_configs``: YAML replacing the default single job over ``targets``."""
    exe = shutil.which("prometheus")
    require(exe is not None, "prometheus (Debian package)")  # CI: fails, not skips
    assert exe is not None
    cfg = tmp / "prometheus.yml"
    default = f"""  - job_name: fairness-monitor
    static_configs: [{{targets: {json.dumps(targets)}}}]"""
    rule_list = f"[{rules}]" if rules else "[]"
    alerting = ""
    if alertmanager_url:
        am = alertmanager_url.removeprefix("http://")
        alerting = f"""
alerting:
  alertmanagers:
    - static_configs: [{{targets: ["{am}"]}}]"""
    cfg.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: {rule_list}{alerting}
scrape_configs:
{scrape_configs or default}
""")
    port = free_port()
    data = Path(tempfile.mkdtemp(dir=tmp))
    return Service(
        "prometheus",
        [
            exe,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        "/-/ready",
        port,
        tmp,
    )


def wait_monitor_applied(port: int, produced: int, alive: Callable[[], None]) -> float:
    """Until the monitor's published state (``/api/status``) accounts for every produced
    record; returns the wall time then. From there on its ``/metrics`` no longer change."""

    def applied() -> bool:
        alive()  # fails with the monitor's log if it died
        url = f"http://127.0.0.1:{port}/api/status"
        with urllib.request.urlopen(url, timeout=5) as r:
            counters = json.loads(r.read())["counters"]
        seen.append(counters)
        return records_accounted(counters) == produced

    seen: list[dict[str, int]] = []
    wait_for(applied, 120, lambda: f"the monitor to apply all {produced} records: {seen[-1:]}")
    return time.time()


def wait_rules_evaluated_after(prom: Any, t: float) -> None:
    """Until Prometheus has scraped the monitor after ``t`` and evaluated every rule group at
    least one scrape interval (1 s) after that scrape, so the rules read data from after
    ``t``."""

    def newest(expr: str) -> float:
        q = urllib.parse.urlencode({"query": expr})
        result = prom.get(f"/api/v1/query?{q}")["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    def scraped_after(after: float) -> float:
        s = newest('max(timestamp(up{job="fairness-monitor"}))')
        return s if s > after else 0.0

    def evaluated_after(after: float) -> bool:
        groups = prom.get("/api/v1/rules")["data"]["groups"]
        assert groups, "no rule group loaded"
        return all(datetime.fromisoformat(g["lastEvaluation"]).timestamp() > after for g in groups)

    scraped = wait_for(lambda: scraped_after(t), 30, "a scrape of the settled monitor")
    wait_for(lambda: evaluated_after(scraped + 1), 30, "a rule evaluation after that scrape")
