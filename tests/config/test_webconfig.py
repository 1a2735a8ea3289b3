"""service.web_config_file (exporter-toolkit format) and service.listen: what parses, what fails
fast with the key named, and that no secret reaches an error message."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

from monitor.cli import main
from monitor.config.spec import ConfigError, parse_config
from monitor.config.webconfig import load_web_config
from monitor.outputs.web_auth import Authenticator
from tests.pki import CA, Pair

PASSWORD = "correct horse battery staple"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()


@pytest.fixture
def tls(tmp_path: Path) -> tuple[CA, Pair]:
    ca = CA(tmp_path, "ca")
    return ca, ca.issue("server", server=True)


def web(tmp_path: Path, doc: dict[str, Any]) -> str:
    p = tmp_path / "web.yml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_a_full_toolkit_file_parses(tmp_path: Path, tls: tuple[CA, Pair]) -> None:
    ca, server = tls
    path = web(
        tmp_path,
        {
            "tls_server_config": {
                "cert_file": str(server.cert),
                "key_file": str(server.key),
                "client_auth_type": "RequireAndVerifyClientCert",
                "client_ca_file": str(ca.path),
                "client_allowed_sans": ["prometheus"],
                "min_version": "TLS13",
                "max_version": "TLS13",
                "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
                "prefer_server_cipher_suites": True,
            },
            "http_server_config": {
                "http2": True,
                "headers": {"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff"},
            },
            "basic_auth_users": {"prometheus": HASH},
            "rate_limit": {"interval": "100ms", "burst": 20},
        },
    )
    c = load_web_config(path)
    assert c.tls is not None and c.tls.client_auth_type == "RequireAndVerifyClientCert"
    assert c.tls.client_allowed_sans == ("prometheus",) and c.tls.min_version == "TLS13"
    assert c.headers == (("X-Frame-Options", "deny"), ("X-Content-Type-Options", "nosniff"))
    assert c.rate_limit is not None and c.rate_limit.interval == pytest.approx(0.1)
    assert c.authenticates() and set(c.users) == {"prometheus"}
    assert HASH not in repr(c)
    # inline PEM (the toolkit's cert/key/client_ca) works too
    inline = web(
        tmp_path,
        {
            "tls_server_config": {
                "cert": server.cert.read_text(),
                "key": server.key_pem,
                "client_auth_type": "VerifyClientCertIfGiven",
                "client_ca": ca.path.read_text(),
            }
        },
    )
    assert load_web_config(inline).tls is not None
    # an empty file or an empty tls_server_config means plain HTTP, as with the toolkit
    assert load_web_config(web(tmp_path, {"tls_server_config": {}})).tls is None


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("unknown-top", {"basic_auth": {}}, r"web\.yml: basic_auth: unknown key"),
    (
        "unknown-tls",
        {"tls_server_config": {"cert_file": "@CERT", "key_file": "@KEY", "certfile": "x"}},
        r"tls_server_config\.certfile: unknown key",
    ),
    (
        "missing-cert",
        {"tls_server_config": {"cert_file": "/nonexistent/tls.crt", "key_file": "@KEY"}},
        r"tls_server_config\.cert_file: /nonexistent/tls\.crt is not a readable file",
    ),
    (
        "key-without-cert",
        {"tls_server_config": {"key_file": "@KEY"}},
        r"tls_server_config\.cert_file: missing",
    ),
    (
        "key-of-another-cert",
        {"tls_server_config": {"cert_file": "@CERT", "key_file": "@OTHERKEY"}},
        r"tls_server_config\.cert_file: cannot load the certificate and key",
    ),
    (
        "bad-hash",
        {"basic_auth_users": {"alice": "$2y$10$short"}},
        r"basic_auth_users\.alice: not a bcrypt hash",
    ),
    (
        "plain-password",
        {"basic_auth_users": {"alice": PASSWORD}},
        r"basic_auth_users\.alice: not a bcrypt hash",
    ),
    (
        "bad-client-auth",
        {
            "tls_server_config": {
                "cert_file": "@CERT",
                "key_file": "@KEY",
                "client_auth_type": "Required",
            }
        },
        r"tls_server_config\.client_auth_type: 'Required' is not one of NoClientCert",
    ),
    (
        "require-any",
        {
            "tls_server_config": {
                "cert_file": "@CERT",
                "key_file": "@KEY",
                "client_auth_type": "RequireAnyClientCert",
            }
        },
        r"tls_server_config\.client_auth_type: RequireAnyClientCert is not supported",
    ),
    (
        "verify-without-ca",
        {
            "tls_server_config": {
                "cert_file": "@CERT",
                "key_file": "@KEY",
                "client_auth_type": "RequireAndVerifyClientCert",
            }
        },
        r"tls_server_config\.client_ca_file: required with client_auth_type",
    ),
    (
        "ca-without-verification",
        {"tls_server_config": {"cert_file": "@CERT", "key_file": "@KEY", "client_ca_file": "@CA"}},
        r"tls_server_config\.client_ca_file: a client CA is set but client_auth_type NoClientCert",
    ),
    (
        "bad-version",
        {"tls_server_config": {"cert_file": "@CERT", "key_file": "@KEY", "min_version": "TLS1.2"}},
        r"tls_server_config\.min_version: 'TLS1\.2' is not one of TLS10",
    ),
    (
        "bad-header",
        {"http_server_config": {"headers": {"X-Frame-Options": "allow"}}},
        r"http_server_config\.headers\.X-Frame-Options: 'allow' is not one of deny, sameorigin",
    ),
    (
        "unknown-header",
        {"http_server_config": {"headers": {"X-Powered-By": "x"}}},
        r"http_server_config\.headers\.X-Powered-By: unknown key",
    ),
    (  # curly quotes: every response failed to encode (found by a review)
        "non-ascii-header",
        {
            "http_server_config": {
                "headers": {"Content-Security-Policy": "default-src \u2018self\u2019"}
            }
        },
        r"http_server_config\.headers\.Content-Security-Policy: must be one line of printable ASCII",
    ),
    (
        "bad-rate",
        {"rate_limit": {"interval": "fast", "burst": 1}},
        r"rate_limit\.interval: 'fast' is not a duration",
    ),
]


@pytest.mark.parametrize(("doc", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_web_config_fails_naming_the_key(
    tmp_path: Path, tls: tuple[CA, Pair], doc: dict[str, Any], message: str
) -> None:
    ca, server = tls
    other = CA(tmp_path, "other").issue("other-server", server=True)
    subst = {"@CERT": server.cert, "@KEY": server.key, "@OTHERKEY": other.key, "@CA": ca.path}
    text = yaml.safe_dump(doc)
    for k, v in subst.items():
        text = text.replace(k, str(v))
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_web_config(str(path))
    assert err.value.path == "service.web_config_file"
    assert f"{path}:" in str(err.value)

    assert re.search(message, str(err.value)), str(err.value)
    # no secret in the message: passwords, hashes, private keys
    for secret in (PASSWORD, "$2y$10$short", HASH, server.key_pem, other.key_pem):
        assert secret not in str(err.value)
    assert "PRIVATE KEY" not in str(err.value)


def test_check_config_exits_2_with_the_key_path_and_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = web(tmp_path, {"basic_auth_users": {"alice": PASSWORD}})
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {"models": {"m": {"attributes": {"g": {}}}}, "service": {"web_config_file": bad}}
        )
    )
    assert main(["check-config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "service.web_config_file" in err and "basic_auth_users.alice" in err
    assert PASSWORD not in err and "Traceback" not in err


def service(**s: Any) -> Any:
    return parse_config({"models": {"m": {"attributes": {"g": {}}}}, "service": s}).service


def test_listen_and_http_host_port() -> None:
    d = service()
    assert (d.http_host, d.http_port) == ("0.0.0.0", 9108)  # the documented default
    assert d.web_config is None and d.http_workers == 8 and d.http_timeout == 10
    assert (service(listen="[::]:9200").http_host, service(listen="[::]:9200").http_port) == ("::", 9200)  # fmt: skip
    assert service(listen="127.0.0.1:0").http_port == 0
    assert service(listen=":9108").http_host == "0.0.0.0"
    s = service(http_host="127.0.0.1", http_port=9300)
    assert (s.http_host, s.http_port) == ("127.0.0.1", 9300)
    p = service(probe_listen="0.0.0.0:9109")
    assert (p.probe_host, p.probe_port) == ("0.0.0.0", 9109)
    for bad, message in [
        ({"listen": "0.0.0.0:9108", "http_port": 9108}, "service.listen: give listen or http_host"),
        ({"listen": "localhost"}, "service.listen: 'localhost' is not host:port"),
        ({"listen": "::1:9108"}, "service.listen: '::1:9108': write an IPv6 address in brackets"),
        ({"listen": "0.0.0.0:99999"}, "service.listen: '0.0.0.0:99999' is not host:port"),
        ({"http_port": 70000}, "service.http_port: 70000 is not a port number"),
        ({"http_workers": 0}, "service.http_workers: 0 is below the minimum 1"),
        ({"http_timeout": "0s"}, "service.http_timeout: '0s' must be longer than zero"),
        ({"web_config_file": "/nonexistent.yml"}, "service.web_config_file: cannot read"),
    ]:
        with pytest.raises(ConfigError) as err:
            service(**bad)
        assert message in str(err.value), (bad, str(err.value))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_shipped_compose_example_parses_and_its_hash_is_of_the_documented_password() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy/compose/web-config.example.yml"
    c = load_web_config(str(example))
    assert c.tls is None and set(c.users) == {"prometheus"}
    assert Authenticator(c.users).check(basic("prometheus", "change-me"))


def test_a_web_config_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """A Latin-1 comment raised UnicodeDecodeError: a traceback from check-config, and a
    reload ended the HTTP server's thread for good (found by a review)."""
    path = tmp_path / "web.yml"
    path.write_bytes(b"# r\xe9vision\nbasic_auth_users: {}\n")
    with pytest.raises(ConfigError, match="is not UTF-8"):
        load_web_config(str(path))
    path.write_text("a:\n" + "- " * 5000 + "x\n")  # nested past the parser's recursion
    with pytest.raises(ConfigError):
        load_web_config(str(path))
