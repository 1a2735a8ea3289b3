"""Logging: kafka-python's handled errors are one line, not a traceback that looks like a crash."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from monitor.app.logs import setup_logging


@pytest.fixture(autouse=True)
def _restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _client_error() -> None:
    try:
        None.recv(4096)  # type: ignore[attr-defined]  # the race kafka-python logs at shutdown
    except AttributeError:
        logging.getLogger("kafka.net.transport").exception("<conn>: Error receiving network data")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_client_tracebacks_become_one_line(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging(fmt, "INFO")
    _client_error()
    try:
        raise ValueError("ours")
    except ValueError:
        logging.getLogger("monitor.app.service").exception("boom %d", 1)
    err = capsys.readouterr().err.splitlines()
    client = next(line for line in err if "Error receiving" in line)
    assert "AttributeError: 'NoneType' object has no attribute 'recv'" in client
    assert "handled by the client" in client
    if fmt == "json":
        rec = json.loads(client)
        assert "exc" not in rec and rec["logger"] == "kafka.net.transport"
        ours = json.loads(next(line for line in err if "boom 1" in line))
        assert "ValueError: ours" in ours["exc"]  # the monitor's own errors keep their detail
    else:
        assert sum("Traceback" in line for line in err) == 1  # the monitor's own one only


def test_debug_keeps_client_tracebacks(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("text", "DEBUG")
    _client_error()
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "None.recv(4096)" in err
