"""``tls_server_config`` of the web configuration file: its schema, its checks, and the
server-side ``SSLContext`` built from it.

The context is built when the file is read, so ``check-config`` finds a key that does not match
its certificate or a CA file that is not PEM (the HTTP server in ``monitor.outputs`` uses the
same function; configuration may not import it). Errors name the key, never a key's content.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, get_args

from msgspec import Meta

from monitor.config.decode import ConfigError, Doc

Pem = Annotated[str, Meta(description="inline PEM")]
ClientAuthType = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
CLIENT_AUTH_TYPES: tuple[str, ...] = get_args(ClientAuthType)
TlsVersion = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
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


@dataclass(frozen=True)
class TlsServerConfig:
    cert_file: str | None = None
    key_file: str | None = None
    cert: str | None = field(default=None, repr=False)  # inline PEM
    key: str | None = field(default=None, repr=False)  # inline PEM (a secret)
    client_auth_type: ClientAuthType = "NoClientCert"
    client_ca_file: str | None = None
    client_ca: str | None = field(default=None, repr=False)  # inline PEM
    client_allowed_sans: tuple[str, ...] = ()
    min_version: TlsVersion = "TLS12"
    max_version: TlsVersion = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True

    def files(self) -> tuple[str, ...]:
        """The files this configuration reads (watched for changes)."""
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)


class TlsDoc(Doc, frozen=True):
    cert_file: str | None = None
    key_file: str | None = None
    cert: Pem | None = None
    key: Pem | None = None
    client_auth_type: ClientAuthType = "NoClientCert"
    client_ca_file: str | None = None
    client_ca: Pem | None = None
    client_allowed_sans: list[Annotated[str, Meta(min_length=1)]] | None = None
    min_version: TlsVersion = "TLS12"
    max_version: TlsVersion = "TLS13"
    cipher_suites: list[str] | None = None
    prefer_server_cipher_suites: bool = True
    curve_preferences: Annotated[list[str], Meta(description="not supported")] | None = None


def _existing(path: str | None, key: str) -> str | None:
    if path is not None and not os.access(path, os.R_OK):
        raise ConfigError(key, f"{path} is not a readable file")
    if path is not None and not Path(path).is_file():
        raise ConfigError(key, f"{path} is not a file")
    return path


def parse_tls(doc: TlsDoc) -> TlsServerConfig | None:
    at = "tls_server_config."
    cert_file = _existing(doc.cert_file, at + "cert_file")
    key_file = _existing(doc.key_file, at + "key_file")
    ca_file, ca = _existing(doc.client_ca_file, at + "client_ca_file"), doc.client_ca
    auth, sans = doc.client_auth_type, doc.client_allowed_sans or []
    if auth == "RequireAnyClientCert":
        raise ConfigError(
            at + "client_auth_type",
            "RequireAnyClientCert is not supported: it accepts any self-signed certificate, so "
            "it authenticates nobody; use RequireAndVerifyClientCert with client_ca_file",
        )
    if TLS_VERSIONS[doc.min_version] > TLS_VERSIONS[doc.max_version]:
        raise ConfigError(at + "min_version", "is above max_version")
    for s in doc.cipher_suites or ():
        if s not in CIPHER_SUITES:
            raise ConfigError(
                at + "cipher_suites",
                f"{s!r} is not a supported cipher suite (supported: {', '.join(CIPHER_SUITES)})",
            )
    if doc.curve_preferences:
        raise ConfigError(at + "curve_preferences", "is not supported by fairness-monitor")
    if cert_file and doc.cert:
        raise ConfigError(at + "cert", "give cert or cert_file, not both")
    if key_file and doc.key:
        raise ConfigError(at + "key", "give key or key_file, not both")
    if ca_file and ca:
        raise ConfigError(at + "client_ca", "give client_ca or client_ca_file, not both")
    has_cert, has_key = bool(cert_file or doc.cert), bool(key_file or doc.key)
    if not has_cert and not has_key:
        if ca_file or ca or auth != "NoClientCert" or sans:
            raise ConfigError(at + "cert_file", "required when client certificates are set")
        return None  # an empty tls_server_config: plain HTTP, as with the toolkit
    if not has_cert:
        raise ConfigError(at + "cert_file", "missing (key_file is set)")
    if not has_key:
        raise ConfigError(at + "key_file", "missing (cert_file is set)")
    verifying = auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
    if (ca_file or ca) and not verifying:
        raise ConfigError(
            at + "client_ca_file",
            f"a client CA is set but client_auth_type {auth} does not verify client "
            "certificates (use RequireAndVerifyClientCert)",
        )
    if verifying and not (ca_file or ca):
        raise ConfigError(at + "client_ca_file", f"required with client_auth_type {auth}")
    if sans and auth != "RequireAndVerifyClientCert":
        raise ConfigError(
            at + "client_allowed_sans", "needs client_auth_type RequireAndVerifyClientCert"
        )
    return TlsServerConfig(
        cert_file=cert_file,
        key_file=key_file,
        cert=doc.cert,
        key=doc.key,
        client_auth_type=auth,
        client_ca_file=ca_file,
        client_ca=ca,
        client_allowed_sans=tuple(sans),
        min_version=doc.min_version,
        max_version=doc.max_version,
        cipher_suites=tuple(doc.cipher_suites or ()),
        prefer_server_cipher_suites=doc.prefer_server_cipher_suites,
    )


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
