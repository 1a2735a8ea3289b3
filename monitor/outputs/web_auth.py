"""The web configuration at run time: basic-auth checks (bcrypt), the client certificate's
SAN check, the rate limit's token bucket, and the state swapped whole when the file is reloaded.

What the file may say, and every check of it, is configuration (:mod:`monitor.config.webconfig`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import secrets
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any

from monitor.config.web_tls import TlsServerConfig, server_context
from monitor.config.webconfig import RateLimit, WebConfig


def allowed_san(tls: TlsServerConfig, peer: dict[str, Any] | None) -> bool:
    """Whether the verified client certificate has a SAN in ``client_allowed_sans`` (if set)."""
    if not tls.client_allowed_sans:
        return True
    if not peer:
        return False
    names = {_san(str(v)) for _, v in peer.get("subjectAltName", ())}
    return any(_san(s) in names for s in tls.client_allowed_sans)


def _san(name: str) -> str:
    """An IP address in one spelling (Python reports ``2001:DB8:0:0:0:0:0:1`` where the config
    says ``2001:db8::1``, as Go's ``ip.String()`` does); any other name as it is."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


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

    def _cost(self) -> int:
        """The highest cost of the configured hashes (``$2b$12$…``: 12), within bcrypt's 4–31."""
        costs = [int(h.split(b"$")[2]) for h in self.users.values() if h.count(b"$") >= 3]
        return min(max([4, *costs]), 31)

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
            if self._dummy is None:  # as costly as the configured hashes (the highest cost)
                self._dummy = bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=self._cost()))
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


class WebState:
    """The web configuration in force and what is derived from it (swapped whole on reload)."""

    def __init__(self, config: WebConfig | None) -> None:
        self.config = config
        self.context: ssl.SSLContext | None = (
            server_context(config.tls) if config and config.tls else None
        )
        self.auth = Authenticator(config.users if config else {})
        self.bucket = TokenBucket(config.rate_limit) if config and config.rate_limit else None
        self.headers = config.headers if config else ()
        self.stamp = stamp(config.files()) if config else ()


def stamp(files: tuple[str, ...]) -> tuple[tuple[int, int] | None, ...]:
    """Modification time and size of each file (a reload happens when these change)."""
    out: list[tuple[int, int] | None] = []
    for f in files:
        try:
            st = os.stat(f)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)
