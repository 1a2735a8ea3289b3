"""The start-up authentication check (monitor/ingest/kafka_auth.py) without a broker: what it
must NOT call a rejection. A broker that is down, slow or closes a connection before judging
any credential is left to the clients' retries (rejections are tested against a real broker in
tests/ingest/test_kafka_security.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from monitor.config.kafka import KafkaSpec
from monitor.ingest.kafka_auth import check_authentication
from tests.broker import free_port


def spec(bootstrap: str, protocol: str) -> KafkaSpec:
    return KafkaSpec(
        bootstrap_servers=(bootstrap,),
        security_protocol=protocol,
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password="not-checked-here",
    )


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A TCP server that either never answers ("silent") or closes each connection at once."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if request.param == "silent":
                held.append(conn)
            else:
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT", "SSL"])
def test_an_unreachable_broker_is_no_verdict(protocol: str) -> None:
    started = time.monotonic()
    check_authentication(spec(f"127.0.0.1:{free_port()}", protocol), timeout=5)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("server", ["silent", "closing"], indirect=True)
@pytest.mark.parametrize("protocol", ["SASL_SSL", "SASL_PLAINTEXT", "SSL"])
def test_a_silent_or_closing_server_is_no_verdict(server: str, protocol: str) -> None:
    started = time.monotonic()
    check_authentication(spec(server, protocol), timeout=1.0)  # returns: no KafkaAuthError
    assert time.monotonic() - started < 3


def test_plaintext_is_not_checked() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.5)
        check_authentication(
            KafkaSpec(bootstrap_servers=(f"127.0.0.1:{listener.getsockname()[1]}",))
        )
        with pytest.raises(TimeoutError):
            listener.accept()  # nobody connected
