"""Basic authentication at run time: bcrypt rounds only when needed, never a cached failure."""

from __future__ import annotations

import base64

import pytest

from monitor.outputs import web_auth
from monitor.outputs.web_auth import Authenticator
from tests.config.test_webconfig import HASH, PASSWORD, basic


def test_authenticator_caches_successes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = web_auth._checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(web_auth, "_checkpw", counting)
    auth = Authenticator({"prometheus": HASH.encode()})
    assert auth.check(basic("prometheus", PASSWORD)) and len(calls) == 1
    for _ in range(5):  # repeated scrapes: no further bcrypt round
        assert auth.check(basic("prometheus", PASSWORD))
    assert len(calls) == 1
    for _ in range(3):  # failures are never cached: each costs a round
        assert not auth.check(basic("prometheus", "wrong"))
    assert len(calls) == 4
    assert not auth.check(basic("nobody", PASSWORD))  # unknown user: still a bcrypt round
    assert len(calls) == 5
    assert auth.check(basic("prometheus", PASSWORD)) and len(calls) == 5  # still cached
    # a prefix, a suffix or another user's name never matches the cached credentials
    assert not auth.check(basic("prometheus", PASSWORD + "x"))
    assert not auth.check(basic("prometheus", PASSWORD[:-1]))
    for header in (None, "", "Bearer abc", "Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode()):  # fmt: skip
        assert not auth.check(header)
    # the toolkit's $2y$ hashes (htpasswd) verify too
    y = "$2y$" + HASH[4:]
    assert Authenticator({"u": y.encode()}).check(basic("u", PASSWORD))


def test_an_unknown_user_costs_what_a_configured_one_costs() -> None:
    """Found by a review: the stand-in hash for unknown users had cost 10 whatever the
    configured hashes' (cost 12: 350 ms for a real user, 89 ms for an unknown one, so timing
    told which user names exist). It takes the configured cost now."""
    import bcrypt

    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=5))
    auth = Authenticator({"prometheus": hashed})
    assert not auth.check(basic("nosuchuser", "pw"))
    assert auth._dummy is not None and auth._dummy.startswith(b"$2b$05$")


def test_an_ipv6_san_matches_however_it_is_spelled() -> None:
    """Python reports 2001:DB8:0:0:0:0:0:1 where the configuration (and Go's toolkit) says
    2001:db8::1: the client was refused."""
    from monitor.config.web_tls import TlsServerConfig

    tls = TlsServerConfig(cert_file="c", key_file="k", client_allowed_sans=("2001:db8::1",))
    peer = {"subjectAltName": (("IP Address", "2001:DB8:0:0:0:0:0:1"),)}
    assert web_auth.allowed_san(tls, peer)
    assert not web_auth.allowed_san(tls, {"subjectAltName": (("IP Address", "2001:db8::2"),)})
