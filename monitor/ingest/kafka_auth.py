"""A start-up check of Kafka authentication: TLS, client certificates and SASL credentials.

kafka-python treats a rejected password or certificate like an unreachable broker: it retries
the bootstrap with backoff and, half a minute later, raises ``KafkaTimeoutError: Unable to
bootstrap``, the real cause only in earlier warnings. Before the service builds its clients,
:func:`check_authentication` opens one connection itself, as kafka-python would (same TLS
settings), and goes through the TLS handshake, an ApiVersions request (a broker that requires
a client certificate rejects a missing or untrusted one here under TLS 1.3) and the SASL
exchange (PLAIN, SCRAM-SHA-256/512). A definite rejection raises :class:`KafkaAuthError` with
a one-line cause, which ``fairness-monitor run`` reports with exit code 2. Anything
inconclusive (broker unreachable, timeouts, OAUTHBEARER, which needs a token provider) is left
to the clients' own retries, as before.

Messages name the user, the mechanism, the server and the broker's reason: never the
password or a key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
import socket
import ssl
import struct
import time

from monitor.config.kafka import KafkaSpec

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM = 58, 33
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# TLS alerts by which a broker rejects the client's certificate (or its absence)
CLIENT_CERT_REJECTED = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_UNKNOWN_CA",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "TLSV1_ALERT_ACCESS_DENIED",
}


class KafkaAuthError(RuntimeError):
    """The broker rejected this client's credentials or certificate (or the client the
    broker's): retrying cannot help."""


class _Inconclusive(Exception):
    """No verdict from this server (unreachable, timed out, closed before any answer)."""


def check_authentication(spec: KafkaSpec, timeout: float = 10.0) -> None:
    """Raise :class:`KafkaAuthError` if a bootstrap server definitely rejects the configured
    TLS or SASL settings; return once one accepts them or none gives a verdict."""
    if spec.security_protocol == "PLAINTEXT" or spec.sasl_mechanism == "OAUTHBEARER":
        return
    deadline = time.monotonic() + timeout
    for server in spec.bootstrap_servers:
        if time.monotonic() >= deadline:
            return
        try:
            _Session(spec, server, deadline).check()
        except _Inconclusive as exc:
            log.debug("authentication check at %s inconclusive: %s", server, exc)
            continue
        log.info("authentication check at %s passed", server)
        return


class _Session:
    def __init__(self, spec: KafkaSpec, server: str, deadline: float) -> None:
        self.spec, self.server, self.deadline = spec, server, deadline
        self.tls = spec.security_protocol in ("SSL", "SASL_SSL")
        self.correlation = 0
        self.sock: socket.socket | None = None

    # -- verdicts ----------------------------------------------------------------------------
    def _who(self) -> str:
        return f"user {self.spec.sasl_username!r} ({self.spec.sasl_mechanism})"

    def _sasl_failed(self, reason: str) -> KafkaAuthError:
        return KafkaAuthError(
            f"Kafka authentication failed for {self._who()} at {self.server}: {reason}"
        )

    def _tls_failed(self, exc: ssl.SSLError) -> KafkaAuthError:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return KafkaAuthError(
                f"Kafka TLS authentication failed at {self.server}: the broker's certificate is "
                f"not trusted ({exc.verify_message}); check kafka.ssl_cafile"
            )
        reason = exc.reason or type(exc).__name__
        if reason in CLIENT_CERT_REJECTED:
            problem = (
                f"the broker requires a client certificate ({reason}); set kafka.ssl_certfile "
                "and kafka.ssl_keyfile"
                if not self.spec.ssl_certfile
                else f"the broker rejected the client certificate ({reason}); is it signed by "
                "a CA the broker trusts, and still valid?"
            )
            return KafkaAuthError(f"Kafka TLS authentication failed at {self.server}: {problem}")
        return KafkaAuthError(f"Kafka TLS handshake with {self.server} failed: {reason}")

    # -- the exchange ------------------------------------------------------------------------
    def check(self) -> None:
        host, _, port = self.server.rpartition(":")
        host = host.strip("[]")
        context = self._context() if self.tls else None
        try:
            raw = socket.create_connection((host, int(port)), timeout=self._left())
        except (OSError, ValueError) as exc:
            raise _Inconclusive(f"cannot connect: {exc}") from None
        try:
            if context is not None:
                try:
                    self.sock = context.wrap_socket(raw, server_hostname=host.rstrip("."))
                except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError) as exc:
                    raise _Inconclusive(f"closed during the TLS handshake: {exc}") from None
                except ssl.SSLError as exc:  # a certificate or a TLS alert: a verdict
                    raise self._tls_failed(exc) from None
            else:
                self.sock = raw
            if self.spec.security_protocol.startswith("SASL"):
                self._sasl()
            else:
                self._request(API_VERSIONS, 0, b"")  # a rejected client certificate shows here
        except OSError as exc:  # timeouts, resets: no verdict (SSLError is mapped above)
            raise _Inconclusive(f"{type(exc).__name__}: {exc}") from None
        finally:
            (self.sock or raw).close()

    def _context(self) -> ssl.SSLContext:
        """The TLS settings kafka-python builds from the same options."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = True
        try:
            if self.spec.ssl_cafile:
                ctx.load_verify_locations(self.spec.ssl_cafile)
            else:
                ctx.load_default_certs()
            if self.spec.ssl_certfile:
                ctx.load_cert_chain(self.spec.ssl_certfile, self.spec.ssl_keyfile)
        except (ssl.SSLError, OSError) as exc:
            raise KafkaAuthError(
                f"cannot load the TLS files (kafka.ssl_cafile/ssl_certfile/ssl_keyfile): "
                f"{getattr(exc, 'reason', None) or exc.strerror or type(exc).__name__}"
            ) from None
        return ctx

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Inconclusive("out of time")
        return left

    def _request(self, api_key: int, version: int, body: bytes, *, sasl: bool = False) -> bytes:
        """Send one request (header v1) and return its response body. A connection closed
        without an answer to credentials (``sasl``) is the broker's rejection; otherwise (a
        restarting broker, a proxy) it is inconclusive."""
        assert self.sock is not None
        self.correlation += 1
        client = self.spec.client_id.encode()
        header = struct.pack(">hhih", api_key, version, self.correlation, len(client)) + client
        frame = header + body
        try:
            self.sock.settimeout(self._left())
            self.sock.sendall(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", self._read(4))[0]
            response = self._read(size)
        except (
            ssl.SSLZeroReturnError,
            ssl.SSLEOFError,
            ssl.SSLSyscallError,
            ConnectionError,
            EOFError,
        ) as exc:
            if sasl:
                raise self._sasl_failed(
                    "the broker closed the connection (wrong credentials, or SASL is not "
                    "enabled on this listener)"
                ) from None
            raise _Inconclusive(f"connection lost: {exc}") from None
        except ssl.SSLError as exc:  # a TLS alert: under TLS 1.3, a rejected client certificate
            raise self._tls_failed(exc) from None
        if struct.unpack(">i", response[:4])[0] != self.correlation:
            raise _Inconclusive("response out of order")
        return response[4:]

    def _read(self, n: int) -> bytes:
        assert self.sock is not None
        out = b""
        while len(out) < n:
            self.sock.settimeout(self._left())
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError("closed by the broker")
            out += chunk
        return out

    def _sasl(self) -> None:
        mechanism = self.spec.sasl_mechanism or ""
        body = self._request(SASL_HANDSHAKE, 1, _string(mechanism))
        error = struct.unpack(">h", body[:2])[0]
        if error == UNSUPPORTED_SASL_MECHANISM:
            offered = _strings(body[2:])
            raise self._sasl_failed(
                f"the broker does not enable {mechanism} here (it offers {', '.join(offered)})"
            )
        if error:
            raise self._sasl_failed(f"SASL handshake error code {error}")
        user = self.spec.sasl_username or ""
        password = self.spec.sasl_password or ""
        if mechanism == "PLAIN":
            self._authenticate(b"\0" + user.encode() + b"\0" + password.encode())
        else:
            _Scram(self, mechanism, user, password).run()
        log.debug("authenticated as %r with %s", user, mechanism)

    def _authenticate(self, token: bytes) -> bytes:
        """One SaslAuthenticate v1 round; returns the broker's bytes."""
        body = self._request(SASL_AUTHENTICATE, 1, struct.pack(">i", len(token)) + token, sasl=True)
        error, text_len = struct.unpack(">hh", body[:4])
        text = body[4 : 4 + text_len].decode(errors="replace") if text_len > 0 else ""
        pos = 4 + max(text_len, 0)
        if error == SASL_AUTHENTICATION_FAILED:
            raise self._sasl_failed(text or "invalid credentials")
        if error:
            raise self._sasl_failed(f"error code {error}: {text}")
        size = struct.unpack(">i", body[pos : pos + 4])[0]
        return body[pos + 4 : pos + 4 + max(size, 0)]


class _Scram:
    """The client side of SCRAM (RFC 5802, as Kafka uses it: no channel binding)."""

    def __init__(self, session: _Session, mechanism: str, user: str, password: str) -> None:
        self.session, self.hash = session, SCRAM_HASHES[mechanism]
        self.user = user.replace("=", "=3D").replace(",", "=2C")
        self.password = password.encode()

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.hash).digest()

    def run(self) -> None:
        nonce = secrets.token_urlsafe(24)
        first_bare = f"n={self.user},r={nonce}"
        server_first = self.session._authenticate(f"n,,{first_bare}".encode()).decode()
        fields = {k: v for k, _, v in (p.partition("=") for p in server_first.split(","))}
        if not fields.get("r", "").startswith(nonce) or "s" not in fields or "i" not in fields:
            raise self.session._sasl_failed("unexpected SCRAM server message")
        salted = hashlib.pbkdf2_hmac(
            self.hash, self.password, base64.b64decode(fields["s"]), int(fields["i"])
        )
        client_key = self._hmac(salted, b"Client Key")
        stored_key = hashlib.new(self.hash, client_key).digest()
        final_bare = f"c=biws,r={fields['r']}"
        message = f"{first_bare},{server_first},{final_bare}".encode()
        proof = bytes(
            a ^ b for a, b in zip(client_key, self._hmac(stored_key, message), strict=True)
        )
        server_final = self.session._authenticate(
            f"{final_bare},p={base64.b64encode(proof).decode()}".encode()
        ).decode()
        expected = self._hmac(self._hmac(salted, b"Server Key"), message)
        if server_final.startswith("e="):
            raise self.session._sasl_failed(server_final[2:])
        if not hmac.compare_digest(
            server_final.removeprefix("v="), base64.b64encode(expected).decode()
        ):
            raise self.session._sasl_failed("the broker's SCRAM signature does not match")


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _strings(body: bytes) -> list[str]:
    """A Kafka array of (non-null) strings."""
    try:
        (count,) = struct.unpack(">i", body[:4])
        out, pos = [], 4
        for _ in range(max(count, 0)):
            (n,) = struct.unpack(">h", body[pos : pos + 2])
            out.append(body[pos + 2 : pos + 2 + n].decode(errors="replace"))
            pos += 2 + n
        return out
    except struct.error:
        return []
