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

This module is the file's schema (``WebDoc``) and its checks; the TLS part is
:mod:`monitor.config.web_tls`, and what the HTTP server does with the result (bcrypt checks, the
rate limit's bucket, reloading) is :mod:`monitor.outputs.web_auth`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import msgspec
import yaml
from msgspec import Meta
from msgspec import field as key

from monitor.config.decode import ConfigError, Doc, convert
from monitor.config.web_tls import CIPHER_SUITES as CIPHER_SUITES
from monitor.config.web_tls import CLIENT_AUTH_TYPES as CLIENT_AUTH_TYPES
from monitor.config.web_tls import TLS_VERSIONS as TLS_VERSIONS
from monitor.config.web_tls import TlsDoc, parse_tls, server_context
from monitor.config.web_tls import TlsServerConfig as TlsServerConfig

# http_server_config.headers: the toolkit's five, with the values it accepts (None: any)
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
BCRYPT = r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}"
_BCRYPT = re.compile(BCRYPT)
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


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


GoDuration = Annotated[str | int, Meta(description="a Go duration, e.g. 100ms, 1s")]


class HeadersDoc(Doc, frozen=True):
    content_security_policy: str | None = key(default=None, name="Content-Security-Policy")
    x_frame_options: str | None = key(default=None, name="X-Frame-Options")
    x_content_type_options: str | None = key(default=None, name="X-Content-Type-Options")
    x_xss_protection: str | None = key(default=None, name="X-XSS-Protection")
    strict_transport_security: str | None = key(default=None, name="Strict-Transport-Security")


class HttpDoc(Doc, frozen=True):
    http2: Annotated[bool, Meta(description="accepted and ignored")] = True
    headers: HeadersDoc | None = None


class RateDoc(Doc, frozen=True):
    interval: GoDuration = 0
    burst: Annotated[int, Meta(ge=0)] = 0


class WebDoc(Doc, frozen=True):
    """The exporter-toolkit's web configuration file."""

    tls_server_config: TlsDoc | None = None
    http_server_config: HttpDoc | None = None
    basic_auth_users: (
        Annotated[
            dict[str, Annotated[str, Meta(extra_json_schema={"pattern": BCRYPT})]],
            Meta(description="user name -> bcrypt hash"),
        ]
        | None
    ) = None
    rate_limit: RateDoc | None = None


def load_web_config(path: str) -> WebConfig:
    """Read and check ``path``; errors name ``service.web_config_file``, the file and the key."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "service.web_config_file", f"cannot read {path}: {exc.strerror}"
        ) from None
    except UnicodeDecodeError as exc:  # a Latin-1 comment, a file cut mid-character
        raise ConfigError(
            "service.web_config_file", f"{path} is not UTF-8 (byte {exc.start})"
        ) from None
    try:
        data = yaml.safe_load(text)
        config = _resolve(convert(_plain(data if data is not None else {}), WebDoc), path)
        if config.tls is not None:
            server_context(config.tls)  # certificate, key, CA, ciphers: all checked now
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError("service.web_config_file", f"{path}: not valid YAML{where}") from None
    except RecursionError:
        raise ConfigError("service.web_config_file", f"{path}: nested too deeply") from None
    except ConfigError as exc:
        raise ConfigError(
            "service.web_config_file",
            f"{path}: {exc.path}: {exc.reason}" if exc.path else exc.reason,
        ) from None
    return config


def _plain(data: object) -> object:
    """The toolkit reads an empty TLS value as unset: drop those, as it does."""
    if isinstance(data, dict) and isinstance(data.get("tls_server_config"), dict):
        tls = {k: v for k, v in data["tls_server_config"].items() if v not in (None, "")}
        return {**data, "tls_server_config": tls}
    return data


def _resolve(doc: WebDoc, path: str) -> WebConfig:
    tls = parse_tls(doc.tls_server_config) if doc.tls_server_config is not None else None
    headers = _headers(doc.http_server_config) if doc.http_server_config else ()
    return WebConfig(
        path=path,
        tls=tls,
        users=_users(doc.basic_auth_users),
        headers=headers,
        rate_limit=_rate(doc.rate_limit) if doc.rate_limit is not None else None,
    )


def _headers(doc: HttpDoc) -> tuple[tuple[str, str], ...]:
    out = []
    at = "http_server_config.headers."
    for f in msgspec.structs.fields(HeadersDoc):
        value = getattr(doc.headers, f.name) if doc.headers else None
        if not value:
            continue
        allowed = HEADERS[f.encode_name]
        if allowed is not None and value.lower() not in allowed:
            raise ConfigError(at + f.encode_name, f"{value!r} is not one of {', '.join(allowed)}")
        if not all(c == "\t" or " " <= c <= "~" for c in value):  # what an HTTP header holds
            raise ConfigError(
                at + f.encode_name, "must be one line of printable ASCII (no curly quotes)"
            )
        out.append((f.encode_name, value))
    return tuple(out)


def _users(raw: dict[str, str] | None) -> dict[str, bytes]:
    users = {}
    for user, hashed in (raw or {}).items():
        if not user or ":" in user:
            raise ConfigError("basic_auth_users", "user names must be non-empty and without ':'")
        # the hash is a secret: never quoted in the message
        if not _BCRYPT.fullmatch(hashed):
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


def _rate(doc: RateDoc) -> RateLimit | None:
    try:
        interval = _go_duration(doc.interval)
    except ValueError as exc:
        raise ConfigError("rate_limit.interval", str(exc)) from None
    if interval == 0:
        return None  # the toolkit's "0 disables"
    if doc.burst < 1:
        raise ConfigError("rate_limit.burst", "must be at least 1 when interval is set")
    return RateLimit(interval=interval, burst=doc.burst)
