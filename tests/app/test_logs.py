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


def test_a_value_in_a_message_cannot_forge_a_log_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Found in review: the alert log sink writes labels and summaries, whose group names come
    from the data; one with a newline forged an ERROR line and cleared the terminal. The text
    format shows control and bidi characters as escapes; a traceback keeps its lines."""
    setup_logging("text", "INFO")
    forged = "F\n2026-01-01 00:00:00,000 ERROR monitor.app.service: FORGED\x1b[2J\u202e"
    logging.getLogger("monitor.alerts.sinks").warning("alert %s firing: %s", "X", forged)
    try:
        raise ValueError("ours")
    except ValueError:
        logging.getLogger("monitor.app.service").exception("boom")
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "FORGED" in line] == [
        next(line for line in err if "alert X firing" in line)
    ]
    assert not any(line.startswith("2026-01-01 00:00:00,000 ERROR") for line in err)
    assert "\x1b" not in "".join(err) and "\\x1b[2J\\u202e" in "".join(err)
    assert "Traceback (most recent call last):" in err  # the traceback's own lines stay
