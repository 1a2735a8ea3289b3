"""The web configuration file (``service.web_config_file``): TLS, client certificates, basic
authentication, response headers and a rate limit for the HTTP endpoints.

The format is the Prometheus exporter-toolkit's, the file every official exporter accepts with
``--web.config.file``, so one file (and one habit) serves the monitor and its neighbours::

    tls_server_config:
      cert_file: /etc/tls/tls.crt
      key_file: /etc/tls/tls.key
      client_auth_type: RequireAndVerifyClientCert   # mTLS; default NoClientCert
      client_ca_file: /etc/tls/ca.crt
      min_version: TLS12
    http_server_config:
      headers: {X-Content-Type-Options: nosniff}
    basic_auth_users:
      prometheus: $2b$12$...   # bcrypt hash (htpasswd -nBC 12 "" | tr -d ':\\n')

Everything is checked when the file is read: an unknown key, a missing file, a certificate that
does not match its key or a string that is not a bcrypt hash is a :class:`ConfigError` naming
the key (``service.web_config_file: PATH: tls_server_config.cert_file: ...``). Error messages
never quote a password hash, a private key or a password.

Differences from the toolkit, all refused loudly rather than ignored: ``RequireAnyClientCert``
(it accepts any self-signed certificate, so it authenticates nobody; Python's ``ssl`` cannot
request a certificate without verifying it) and ``curve_preferences`` are not supported.
``RequestClientCert`` is accepted and behaves as ``NoClientCert``: the toolkit requests but never
verifies that certificate, so it authorises nothing either way. ``http2`` is accepted and
ignored (the monitor speaks HTTP/1.1).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from monitor.config.node import ConfigError, _Node

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# the toolkit's (Go's) names of the TLS <= 1.2 suites Go calls secure -> OpenSSL's names
CIPHER_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
}
# http_server_config.headers: the toolkit's five, with the values it accepts (None: any)
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class TlsServerConfig:
    cert_file: str | None = None
    key_file: str | None = None
    cert: str | None = field(default=None, repr=False)  # inline PEM
    key: str | None = field(default=None, repr=False)  # inline PEM (a secret)
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    client_ca: str | None = field(default=None, repr=False)  # inline PEM
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True

    def files(self) -> tuple[str, ...]:
        """The files this configuration reads (watched for changes)."""
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)


@dataclass(frozen=True)
class RateLimit:
    interval: float  # seconds between two requests (token refill)
    burst: int


@dataclass(frozen=True)
class WebConfig:
    path: str
    tls: TlsServerConfig | None = None
    users: Mapping[str, bytes] = field(default_factory=dict, repr=False)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    rate_limit: RateLimit | None = None

    def files(self) -> tuple[str, ...]:
        return (self.path, *(self.tls.files() if self.tls else ()))

    def authenticates(self) -> bool:
        """Whether clients must prove who they are (a password or a verified certificate)."""
        mtls = self.tls is not None and self.tls.client_auth_type == "RequireAndVerifyClientCert"
        return bool(self.users) or mtls


def load_web_config(path: str) -> WebConfig:
    """Read and check ``path``; errors name ``service.web_config_file``, the file and the key."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "service.web_config_file", f"cannot read {path}: {exc.strerror}"
        ) from None
    try:
        data = yaml.safe_load(text)
        config = _parse(data if data is not None else {}, path)
        if config.tls is not None:
            server_context(config.tls)  # certificate, key, CA, ciphers: all checked now
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError("service.web_config_file", f"{path}: not valid YAML{where}") from None
    except ConfigError as exc:
        raise ConfigError(
            "service.web_config_file",
            f"{path}: {exc.path}: {exc.reason}" if exc.path else exc.reason,
        ) from None
    return config


def _parse(data: object, path: str) -> WebConfig:
    root = _Node(data, "")
    tls = None
    if root.get("tls_server_config") is not None:
        tls = _parse_tls(root.node("tls_server_config"))
    headers: tuple[tuple[str, str], ...] = ()
    if root.get("http_server_config") is not None:
        headers = _parse_http(root.node("http_server_config"))
    users = _parse_users(root)
    rate = None
    if root.get("rate_limit") is not None:
        rate = _parse_rate(root.node("rate_limit"))
    root.finish()
    return WebConfig(path=path, tls=tls, users=users, headers=headers, rate_limit=rate)


def _string(node: _Node, key: str) -> str | None:
    raw = node.get(key)
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise ConfigError(node.sub(key), f"expected a string, got {type(raw).__name__}")
    return raw


def _existing(node: _Node, key: str) -> str | None:
    path = _string(node, key)
    if path is not None and not os.access(path, os.R_OK):
        raise ConfigError(node.sub(key), f"{path} is not a readable file")
    if path is not None and not Path(path).is_file():
        raise ConfigError(node.sub(key), f"{path} is not a file")
    return path


def _parse_tls(node: _Node) -> TlsServerConfig | None:
    cert_file, key_file = _existing(node, "cert_file"), _existing(node, "key_file")
    cert, key = _string(node, "cert"), _string(node, "key")
    ca_file, ca = _existing(node, "client_ca_file"), _string(node, "client_ca")
    auth = node.get("client_auth_type") or "NoClientCert"
    if auth not in CLIENT_AUTH_TYPES:
        raise ConfigError(
            node.sub("client_auth_type"), f"{auth!r} is not one of {', '.join(CLIENT_AUTH_TYPES)}"
        )
    if auth == "RequireAnyClientCert":
        raise ConfigError(
            node.sub("client_auth_type"),
            "RequireAnyClientCert is not supported: it accepts any self-signed certificate, so "
            "it authenticates nobody; use RequireAndVerifyClientCert with client_ca_file",
        )
    sans = node.get("client_allowed_sans") or []
    if not isinstance(sans, list) or not all(isinstance(s, str) and s for s in sans):
        raise ConfigError(node.sub("client_allowed_sans"), "expected a list of strings")
    versions = {}
    for k, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        versions[k] = node.get(k) or default
        if versions[k] not in TLS_VERSIONS:
            raise ConfigError(
                node.sub(k), f"{versions[k]!r} is not one of {', '.join(TLS_VERSIONS)}"
            )
    if TLS_VERSIONS[versions["min_version"]] > TLS_VERSIONS[versions["max_version"]]:
        raise ConfigError(node.sub("min_version"), "is above max_version")
    suites = node.get("cipher_suites") or []
    if not isinstance(suites, list):
        raise ConfigError(node.sub("cipher_suites"), "expected a list of cipher suite names")
    for s in suites:
        if s not in CIPHER_SUITES:
            raise ConfigError(
                node.sub("cipher_suites"),
                f"{s!r} is not a supported cipher suite (supported: {', '.join(CIPHER_SUITES)})",
            )
    prefer = node.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise ConfigError(node.sub("prefer_server_cipher_suites"), f"{prefer!r} is not a boolean")
    if node.get("curve_preferences"):
        raise ConfigError(node.sub("curve_preferences"), "is not supported by fairness-monitor")
    node.finish()

    if cert_file and cert:
        raise ConfigError(node.sub("cert"), "give cert or cert_file, not both")
    if key_file and key:
        raise ConfigError(node.sub("key"), "give key or key_file, not both")
    if ca_file and ca:
        raise ConfigError(node.sub("client_ca"), "give client_ca or client_ca_file, not both")
    has_cert, has_key = bool(cert_file or cert), bool(key_file or key)
    if not has_cert and not has_key:
        if ca_file or ca or auth != "NoClientCert" or sans:
            raise ConfigError(node.sub("cert_file"), "required when client certificates are set")
        return None  # an empty tls_server_config: plain HTTP, as with the toolkit
    if not has_cert:
        raise ConfigError(node.sub("cert_file"), "missing (key_file is set)")
    if not has_key:
        raise ConfigError(node.sub("key_file"), "missing (cert_file is set)")
    verifying = auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
    if (ca_file or ca) and not verifying:
        raise ConfigError(
            node.sub("client_ca_file"),
            f"a client CA is set but client_auth_type {auth} does not verify client "
            "certificates (use RequireAndVerifyClientCert)",
        )
    if verifying and not (ca_file or ca):
        raise ConfigError(node.sub("client_ca_file"), f"required with client_auth_type {auth}")
    if sans and auth != "RequireAndVerifyClientCert":
        raise ConfigError(
            node.sub("client_allowed_sans"), "needs client_auth_type RequireAndVerifyClientCert"
        )
    return TlsServerConfig(
        cert_file=cert_file,
        key_file=key_file,
        cert=cert,
        key=key,
        client_auth_type=auth,
        client_ca_file=ca_file,
        client_ca=ca,
        client_allowed_sans=tuple(sans),
        min_version=versions["min_version"],
        max_version=versions["max_version"],
        cipher_suites=tuple(suites),
        prefer_server_cipher_suites=prefer,
    )


def _parse_http(node: _Node) -> tuple[tuple[str, str], ...]:
    http2 = node.get("http2", True)
    if not isinstance(http2, bool):
        raise ConfigError(node.sub("http2"), f"{http2!r} is not a boolean")
    out = []
    if node.get("headers") is not None:
        hnode = node.node("headers")
        for name, allowed in HEADERS.items():
            value = _string(hnode, name)
            if value is None:
                continue
            if allowed is not None and value.lower() not in allowed:
                raise ConfigError(hnode.sub(name), f"{value!r} is not one of {', '.join(allowed)}")
            if "\r" in value or "\n" in value:
                raise ConfigError(hnode.sub(name), "must be one line")
            out.append((name, value))
        hnode.finish()
    node.finish()
    return tuple(out)


def _parse_users(root: _Node) -> dict[str, bytes]:
    raw = root.get("basic_auth_users")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError("basic_auth_users", "expected a mapping of user name to bcrypt hash")
    users = {}
    for user, hashed in raw.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise ConfigError("basic_auth_users", "user names must be non-empty and without ':'")
        # the hash is a secret: never quoted in the message
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise ConfigError(
                f"basic_auth_users.{user}",
                "not a bcrypt hash ($2a$, $2b$ or $2y$, a cost of 04-31, 53 characters; "
                "e.g. htpasswd -nBC 12 \"\" | tr -d ':\\n')",
            )
        users[user] = hashed.encode("ascii")
    return users


def _go_duration(raw: object) -> float:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw == 0:
        return 0.0
    if isinstance(raw, str) and raw.strip():
        text = raw.strip()
        if text == "0":
            return 0.0
        if _GO_DURATION.sub("", text) == "":
            return sum(float(n) * _GO_UNITS[u] for n, u in _GO_DURATION.findall(text))
    raise ValueError(f"{raw!r} is not a duration (e.g. 100ms, 1s)")


def _parse_rate(node: _Node) -> RateLimit | None:
    try:
        interval = _go_duration(node.get("interval", 0))
    except ValueError as exc:
        raise ConfigError(node.sub("interval"), str(exc)) from None
    burst = node.integer("burst", 0, minimum=0)
    node.finish()
    if interval == 0:
        return None  # the toolkit's "0 disables"
    if burst < 1:
        raise ConfigError(node.sub("burst"), "must be at least 1 when interval is set")
    return RateLimit(interval=interval, burst=burst)


# -- TLS ------------------------------------------------------------------------------------------


def _pem_fd(pem: str, key: str) -> int:
    """An in-memory file holding ``pem`` (inline key or certificate; never written to disk)."""
    if not hasattr(os, "memfd_create"):
        raise ConfigError(f"tls_server_config.{key}", "inline PEM needs Linux; use a file")
    fd = os.memfd_create("fm-pem", 0)
    os.write(fd, pem.encode("utf-8"))
    return fd


def server_context(tls: TlsServerConfig) -> ssl.SSLContext:
    """An ``SSLContext`` for the server side of ``tls``; :class:`ConfigError` if it cannot be
    built (the message names the key, never the key's content)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.cipher_suites:
        try:
            ctx.set_ciphers(":".join(CIPHER_SUITES[s] for s in tls.cipher_suites))
        except ssl.SSLError:
            raise ConfigError(
                "tls_server_config.cipher_suites", "none of these suites is available"
            ) from None
    opened: list[int] = []
    try:
        certfile = tls.cert_file
        keyfile = tls.key_file
        if tls.cert is not None:
            opened.append(_pem_fd(tls.cert, "cert"))
            certfile = f"/proc/self/fd/{opened[-1]}"
        if tls.key is not None:
            opened.append(_pem_fd(tls.key, "key"))
            keyfile = f"/proc/self/fd/{opened[-1]}"
        assert certfile is not None and keyfile is not None
        try:
            ctx.load_cert_chain(certfile, keyfile, password=_no_password)
        except (ssl.SSLError, OSError, TypeError, ValueError):
            raise ConfigError(
                "tls_server_config.cert_file",
                "cannot load the certificate and key (PEM expected; the key must match the "
                "certificate and must not be encrypted)",
            ) from None
    finally:
        for fd in opened:
            os.close(fd)
    if tls.client_auth_type in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert"):
        try:
            if tls.client_ca_file:
                ctx.load_verify_locations(cafile=tls.client_ca_file)
            else:
                ctx.load_verify_locations(cadata=tls.client_ca)
        except (ssl.SSLError, OSError, ValueError):
            raise ConfigError(
                "tls_server_config.client_ca_file", "cannot load the CA certificates (PEM expected)"
            ) from None
        ctx.verify_mode = (
            ssl.CERT_REQUIRED
            if tls.client_auth_type == "RequireAndVerifyClientCert"
            else ssl.CERT_OPTIONAL
        )
    else:
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _no_password() -> str:
    raise ValueError("encrypted key")


def allowed_san(tls: TlsServerConfig, peer: dict[str, Any] | None) -> bool:
    """Whether the verified client certificate has a SAN in ``client_allowed_sans`` (if set)."""
    if not tls.client_allowed_sans:
        return True
    if not peer:
        return False
    names = {str(v) for _, v in peer.get("subjectAltName", ())}
    return any(s in names for s in tls.client_allowed_sans)


# -- basic authentication -------------------------------------------------------------------------


class Authenticator:
    """Checks ``Authorization: Basic`` headers against bcrypt hashes.

    A bcrypt round costs tens of milliseconds by design; Prometheus sends the same credentials
    on every scrape, so a successful check is remembered as an HMAC (under a key drawn at start)
    of the user, the hash and the password, compared in constant time. Failures are never
    remembered. An unknown user still costs a bcrypt round, so timing does not tell which user
    names exist.
    """

    def __init__(self, users: Mapping[str, bytes]) -> None:
        self.users = dict(users)
        self._key = secrets.token_bytes(32)
        self._ok: dict[str, bytes] = {}  # user -> digest of the credentials last verified
        self._lock = threading.Lock()
        self._dummy: bytes | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.users)

    def _digest(self, user: str, hashed: bytes, password: bytes) -> bytes:
        msg = b"\0".join((user.encode("utf-8"), hashed, password))
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def check(self, header: str | None) -> bool:
        if not self.users:
            return True
        credentials = _basic(header)
        if credentials is None:
            return False
        user, password = credentials
        import bcrypt

        hashed = self.users.get(user)
        if hashed is None:
            if self._dummy is None:
                self._dummy = bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=10))
            _checkpw(password, self._dummy)
            return False
        digest = self._digest(user, hashed, password)
        with self._lock:
            known = self._ok.get(user, b"\0" * 32)
        if hmac.compare_digest(known, digest):
            return True
        if not _checkpw(password, hashed):
            return False
        with self._lock:
            self._ok[user] = digest
        return True


def _checkpw(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bool(bcrypt.checkpw(password, hashed))
    except ValueError:  # e.g. a password over bcrypt's 72 bytes
        return False


def _basic(header: str | None) -> tuple[str, bytes] | None:
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


class TokenBucket:
    """The toolkit's ``rate_limit``: one request per ``interval``, bursts of ``burst``."""

    def __init__(self, limit: RateLimit, clock: Any = time.monotonic) -> None:
        self.limit, self.clock = limit, clock
        self.tokens = float(limit.burst)
        self.at = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self.clock()
            self.tokens = min(
                float(self.limit.burst), self.tokens + (now - self.at) / self.limit.interval
            )
            self.at = now
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            return False
