"""Real Prometheus and Alertmanager processes for the tests (Debian packages)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.broker import free_port


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
    assert exe, "prometheus-alertmanager is not installed"
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
    assert exe, "prometheus is not installed"
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
