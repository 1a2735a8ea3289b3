"""The HTTP endpoints under a web config: TLS and basic auth with real clients (urllib, curl),
client certificates, a real Prometheus scraping through both, and the bounds on threads and
connections against idle and slow clients. Tests wait for conditions, never for the clock."""

from __future__ import annotations

import base64
import http.client
import logging
import re
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from prometheus_client import CollectorRegistry

from monitor.app.service import Monitor
from monitor.config.spec import parse_config
from monitor.config.webconfig import WebConfig, load_web_config
from monitor.outputs.exporter import FairnessExposition
from monitor.outputs.http import HttpLimits, HttpServer
from monitor.state.engine import Engine
from tests.conftest import require
from tests.helpers import T0, config, label, pred, run, wait_for
from tests.pki import CA, Pair
from tests.services import prometheus

PASSWORD = "s3cret-scrape-password"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
HEADER = ("X-Content-Type-Options", "nosniff")


def os_threads() -> int:
    """Threads of this process as the kernel counts them (not only Python's)."""
    m = re.search(r"^Threads:\s+(\d+)", Path("/proc/self/status").read_text(), re.M)
    assert m
    return int(m.group(1))


class Pki:
    def __init__(self, tmp: Path) -> None:
        self.ca = CA(tmp, "ca")
        self.server = self.ca.issue("server", server=True)
        self.client = self.ca.issue("client", server=False, dns=("prometheus",))
        self.stranger = self.ca.issue("stranger", server=False, dns=("stranger",))
        self.rogue = CA(tmp, "rogue").issue("rogue-client", server=False, dns=("prometheus",))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def web_config(tmp: Path, pki: Pki, *, users: bool = True, mtls: bool = False, **more: Any) -> WebConfig:  # fmt: skip
    tls: dict[str, Any] = {"cert_file": str(pki.server.cert), "key_file": str(pki.server.key)}
    if mtls:
        tls |= {
            "client_auth_type": "RequireAndVerifyClientCert",
            "client_ca_file": str(pki.ca.path),
            "client_allowed_sans": ["prometheus"],
        }
    doc: dict[str, Any] = {
        "tls_server_config": tls,
        "http_server_config": {"headers": dict([HEADER])},
        **more,
    }
    if users:
        doc["basic_auth_users"] = {"prometheus": HASH}
    path = tmp / "web.yml"
    path.write_text(yaml.safe_dump(doc))
    return load_web_config(str(path))


def exposition() -> FairnessExposition:
    engine = Engine(config(windows=["1h"], min_samples=1))
    run(engine, [pred(f"a{i}", T0 + i, "a" if i % 2 else "b", i % 3 == 0) for i in range(40)],
        [label(f"a{i}", T0 + 100, i % 2) for i in range(40)])  # fmt: skip
    snap = engine.snapshot()
    return FairnessExposition(lambda: snap, confidence=0.95)


@contextmanager
def serving(
    web: WebConfig | None = None, host: str = "127.0.0.1", **limits: Any
) -> Iterator[HttpServer]:
    server = HttpServer(
        host,
        0,
        live=lambda: (True, "alive"),
        ready=lambda: (True, "ready"),
        registry=CollectorRegistry(),
        extra=exposition(),
        web_config=web,
        limits=HttpLimits(**limits),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def client_context(pki: Pki, cert: Pair | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.path))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def get(
    url: str, ctx: ssl.SSLContext | None = None, auth: str | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        url, method=method, headers={"Authorization": auth} if auth else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_basic_auth_over_tls_with_urllib(tmp_path: Path, pki: Pki) -> None:
    with serving(web_config(tmp_path, pki)) as s:
        assert s.scheme == "https"
        url = f"https://127.0.0.1:{s.port}"
        ctx = client_context(pki)
        for path in ("/metrics", "/healthz", "/readyz", "/", "/nope"):  # everything is protected
            code, headers, body = get(url + path, ctx)
            assert code == 401, path
            assert headers["WWW-Authenticate"].startswith('Basic realm="fairness-monitor"')
            assert b"fairness_" not in body
        assert get(url + "/metrics", ctx, basic("prometheus", "wrong"))[0] == 401
        assert get(url + "/metrics", ctx, basic("someone", PASSWORD))[0] == 401
        assert get(url + "/metrics", ctx, basic("prometheus", PASSWORD.upper()))[0] == 401
        code, headers, body = get(url + "/metrics", ctx, basic("prometheus", PASSWORD))
        assert code == 200 and b"fairness_predictions{" in body
        assert headers[HEADER[0]] == HEADER[1]  # http_server_config.headers on every response
        assert get(url + "/healthz", ctx, basic("prometheus", PASSWORD))[:1] == (200,)
        assert get(url + "/nope", ctx, basic("prometheus", PASSWORD))[0] == 404
        # nothing is served in clear text on the TLS port
        with pytest.raises((http.client.HTTPException, ConnectionError, urllib.error.URLError)):
            get(f"http://127.0.0.1:{s.port}/metrics", auth=basic("prometheus", PASSWORD))
        # and a client that does not trust the CA refuses the server
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            get(url + "/metrics", ssl.create_default_context())


def test_basic_auth_over_tls_with_curl(tmp_path: Path, pki: Pki) -> None:
    curl = shutil.which("curl")
    require(curl is not None, "curl")
    assert curl is not None
    with serving(web_config(tmp_path, pki)) as s:
        url = f"https://localhost:{s.port}/metrics"

        def status(*args: str) -> str:
            cmd = [curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}"]
            cmd += ["--cacert", str(pki.ca.path), *args, url]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout

        assert status() == "401"
        assert status("-u", "prometheus:wrong") == "401"
        assert status("-u", f"prometheus:{PASSWORD}") == "200"
        assert status("-u", f"prometheus:{PASSWORD}", "--tls-max", "1.2") == "200"
        assert status("-u", f"prometheus:{PASSWORD}", "--tlsv1.3") == "200"


def raw_request(port: int, ctx: ssl.SSLContext, host: str = "127.0.0.1") -> bytes | Exception:
    """One GET over TLS; what came back, or the exception that stopped it."""
    try:
        with (
            socket.create_connection((host, port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname=host) as tls,
        ):
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            out = b""
            while chunk := tls.recv(65536):
                out += chunk
            return out
    except (OSError, ssl.SSLError) as exc:
        return exc


def test_mutual_tls_require_and_verify(tmp_path: Path, pki: Pki) -> None:
    with serving(web_config(tmp_path, pki, users=False, mtls=True)) as s:
        good = raw_request(s.port, client_context(pki, pki.client))
        assert isinstance(good, bytes) and good.startswith(b"HTTP/1.1 200 OK"), good
        for who, ctx in [
            ("no client certificate", client_context(pki)),
            ("a certificate from another CA", client_context(pki, pki.rogue)),
            ("a good CA but a SAN not in client_allowed_sans", client_context(pki, pki.stranger)),
        ]:
            refused = raw_request(s.port, ctx)
            assert isinstance(refused, Exception) or refused == b"", (who, refused)
        # the stranger's handshake succeeded (valid certificate) and was closed for its SAN
        assert len(s.conns) == 0 or wait_for(lambda: len(s.conns) == 0, 5, "connections closed")


def test_real_prometheus_scrapes_through_tls_client_certs_and_basic_auth(
    tmp_path: Path, pki: Pki
) -> None:
    require(shutil.which("prometheus") is not None, "prometheus (Debian package)")
    with serving(web_config(tmp_path, pki, mtls=True)) as s:
        target = f"127.0.0.1:{s.port}"

        def job(name: str, password: str, cert: Pair | None) -> str:
            tls = f"ca_file: {pki.ca.path}"
            if cert is not None:
                tls += f", cert_file: {cert.cert}, key_file: {cert.key}"
            return f"""  - job_name: {name}
    scheme: https
    tls_config: {{{tls}}}
    basic_auth: {{username: prometheus, password: "{password}"}}
    static_configs: [{{targets: ["{target}"]}}]
"""

        scrape = (
            job("good", PASSWORD, pki.client)
            + job("wrong-password", "not-it", pki.client)
            + job("no-client-cert", PASSWORD, None)
        )
        prom = prometheus(tmp_path, [], None, scrape_configs=scrape)
        try:

            def query(q: str) -> list[dict[str, Any]]:
                out = prom.get("/api/v1/query?query=" + urllib.parse.quote(q))
                assert out["status"] == "success"
                return list(out["data"]["result"])

            def ups() -> dict[str, str]:
                return {r["metric"]["job"]: r["value"][1] for r in query("up")}

            want = {"good": "1", "wrong-password": "0", "no-client-cert": "0"}
            wait_for(lambda: ups() == want, 60, "up per job", every=0.5)
            series = wait_for(lambda: query('fairness_predictions{job="good"}'), 30, "metric")
            print(f"\nprometheus up: {ups()}; fairness_predictions series: {len(series)}")
            assert {r["metric"]["group"] for r in series} == {"a", "b"}
            assert query('fairness_predictions{job!="good"}') == []
        finally:
            prom.stop()


def test_idle_connections_cost_no_threads_and_a_scrape_is_still_served(
    tmp_path: Path, pki: Pki
) -> None:
    n, workers = 1000, 4
    before = os_threads()
    with serving(web_config(tmp_path, pki), workers=workers, timeout=60, max_connections=n + 50) as s:  # fmt: skip
        idle: list[socket.socket] = []
        try:
            for _ in range(n):  # connected, no TLS handshake, nothing sent: slowloris at rest
                idle.append(socket.create_connection(("127.0.0.1", s.port), timeout=10))
            wait_for(lambda: len(s.conns) == n, 30, f"{n} connections accepted")
            during = os_threads()
            t0 = time.monotonic()
            code, _, body = get(
                f"https://127.0.0.1:{s.port}/metrics", client_context(pki), basic("prometheus", PASSWORD)
            )  # fmt: skip
            took = time.monotonic() - t0
            assert code == 200 and b"fairness_predictions" in body
            after = os_threads()
            print(f"\nthreads: {before} before the server, {during} with {n} idle connections "
                  f"open, {after} after a scrape among them ({workers} workers); scrape {took:.3f}s")  # fmt: skip
            assert during <= before + workers + 2, (before, during)
            assert after <= before + workers + 2
            assert len(s.conns) >= n  # the idle ones are all still open: nothing was dropped
        finally:
            for c in idle:
                c.close()


def closed_by_server(sock: socket.socket, timeout: float) -> float:
    """Seconds until the server closes ``sock`` (recv sees EOF or a reset)."""
    t0 = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"not closed within {timeout}s") from None
    return time.monotonic() - t0


def test_slow_and_stalled_clients_are_cut_at_the_deadline(tmp_path: Path, pki: Pki) -> None:
    timeout = 1.0
    web = web_config(tmp_path, pki, users=False)
    with serving(web, workers=1, timeout=timeout, idle_timeout=2 * timeout) as s:
        ctx = client_context(pki)
        t0 = time.monotonic()
        stalled = socket.create_connection(("127.0.0.1", s.port))  # never sends a ClientHello
        slow = ctx.wrap_socket(socket.create_connection(("127.0.0.1", s.port)), server_hostname="127.0.0.1")  # fmt: skip
        head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 400
        slow.settimeout(0.1)
        sent = 0
        cut = None
        while cut is None and time.monotonic() - t0 < 10 * timeout:
            try:  # a byte at a time, each well within any per-read timeout
                slow.send(head[sent % len(head) : sent % len(head) + 1])
                sent += 1
                if slow.recv(1) == b"":
                    cut = time.monotonic() - t0
            except TimeoutError:  # nothing from the server yet: it is still waiting
                continue
            except (ConnectionError, ssl.SSLError):
                cut = time.monotonic() - t0
            if sent == 3:  # meanwhile the only worker answers others at once
                code, _, _ = get(f"https://127.0.0.1:{s.port}/healthz", ctx)
                assert code == 200 and time.monotonic() - t0 < timeout
        assert cut is not None, "the slowloris client was never disconnected"
        print(f"\nslowloris disconnected after {cut:.2f}s ({sent} bytes sent; timeout {timeout}s)")
        assert 0.8 * timeout <= cut <= timeout + 1.0
        # the stalled handshake was closed by the same deadline
        assert closed_by_server(stalled, 5) + (time.monotonic() - t0) >= 0.8 * timeout
        # an idle kept-alive connection is closed after idle_timeout
        conn = http.client.HTTPSConnection("127.0.0.1", s.port, context=ctx, timeout=10)
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        assert r.status == 200 and r.headers["Connection"] == "keep-alive"
        r.read()
        assert conn.sock is not None
        idle_for = closed_by_server(conn.sock, 10 * timeout)
        assert 1.5 * timeout <= idle_for <= 2 * timeout + 1.0, idle_for
        wait_for(lambda: len(s.conns) == 0, 5, "all connections closed")
        for sock in (stalled, slow):
            sock.close()


def test_connection_cap_evicts_the_oldest_idle_connection() -> None:
    with serving(None, workers=2, max_connections=8, timeout=60) as s:
        idle = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(8)]
        wait_for(lambda: len(s.conns) == 8, 10, "8 connections")
        assert get(f"http://127.0.0.1:{s.port}/healthz")[0] == 200
        closed_by_server(idle[0], 5)  # the oldest made room
        assert len(s.conns) <= 8
        idle[1].setblocking(False)
        with pytest.raises(BlockingIOError):  # a younger one is still open
            idle[1].recv(1)
        for c in idle:
            c.close()


def test_keep_alive_pipelining_methods_and_limits() -> None:
    with serving(None, workers=2) as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")  # fmt: skip
            out = b""
            while chunk := c.recv(65536):
                out += chunk
        assert out.count(b"HTTP/1.1 200 OK") == 3, out
        assert out.endswith(b"Connection: close\r\n\r\n")  # HEAD: headers only
        assert b"alive\n" in out and b"ready\n" in out
        url = f"http://127.0.0.1:{s.port}"
        code, headers, _ = get(url + "/metrics", method="POST")
        assert code == 405 and headers["Allow"] == "GET, HEAD"
        req = urllib.request.Request(url + "/healthz", headers={"X-Big": "a" * 20000})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 431
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
            c.sendall(b"NONSENSE\r\n\r\n")
            assert c.recv(100).startswith(b"HTTP/1.1 400 ")


def test_rate_limit_answers_429(tmp_path: Path, pki: Pki) -> None:
    web = web_config(tmp_path, pki, users=False, rate_limit={"interval": "1h", "burst": 2})
    with serving(web) as s:
        codes = [get(f"https://127.0.0.1:{s.port}/healthz", client_context(pki))[0] for _ in range(3)]  # fmt: skip
        assert codes == [200, 200, 429]


def test_web_config_reload_and_no_secret_in_logs(
    tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    web = web_config(tmp_path, pki)
    path = Path(web.path)
    new_password = "n3w-password-after-rotation"
    with serving(web) as s:
        url, ctx = f"https://127.0.0.1:{s.port}/metrics", client_context(pki)
        assert get(url, ctx, basic("prometheus", "guess-1"))[0] == 401
        raw_request(s.port, ssl._create_unverified_context(protocol=ssl.PROTOCOL_TLS_CLIENT, cert_reqs=ssl.CERT_NONE, check_hostname=False))  # fmt: skip
        with socket.create_connection(("127.0.0.1", s.port)) as c:  # not TLS at all
            c.sendall(b"GET /metrics HTTP/1.1\r\nAuthorization: " + basic("prometheus", "guess-2").encode() + b"\r\n\r\n")  # fmt: skip
            closed_by_server(c, 5)
        # rotate the password: picked up without a restart
        doc = yaml.safe_load(path.read_text())
        new_hash = bcrypt.hashpw(new_password.encode(), bcrypt.gensalt(rounds=4)).decode()
        doc["basic_auth_users"] = {"prometheus": new_hash}
        path.write_text(yaml.safe_dump(doc))
        wait_for(lambda: get(url, ctx, basic("prometheus", new_password))[0] == 200, 10, "reload")
        assert get(url, ctx, basic("prometheus", PASSWORD))[0] == 401
        # a broken edit is refused and logged; the previous configuration stays
        doc["basic_auth_users"] = {"prometheus": new_password}  # a password, not a hash
        path.write_text(yaml.safe_dump(doc))
        wait_for(lambda: "web config not reloaded" in caplog.text, 10, "refused reload")
        assert get(url, ctx, basic("prometheus", new_password))[0] == 200
        # an edit in Latin-1 (found by a review: it ended the server's thread for good)
        path.write_bytes(b"# r\xe9vision\n" + yaml.safe_dump(doc).encode())
        wait_for(lambda: "is not UTF-8" in caplog.text, 10, "refused non-UTF-8 reload")
        assert get(url, ctx, basic("prometheus", new_password))[0] == 200
    text = caplog.text
    assert "basic_auth_users.prometheus: not a bcrypt hash" in text
    for secret in (PASSWORD, HASH, new_password, new_hash, "guess-1", "guess-2",
                   pki.server.key_pem.splitlines()[1]):  # fmt: skip
        assert secret not in text
    assert "PRIVATE KEY" not in text


def test_monitor_serves_tls_and_a_plain_probe_listener(tmp_path: Path, pki: Pki) -> None:
    web = web_config(tmp_path, pki)
    cfg = parse_config(
        {
            "models": {"m": {"attributes": {"g": {}}}},
            "checkpoint": {"path": str(tmp_path / "c.sqlite")},
            "service": {
                "listen": "127.0.0.1:0",
                "probe_listen": "127.0.0.1:0",
                "web_config_file": web.path,
                "http_workers": 3,
                "http_timeout": "5s",
            },
        }
    )
    monitor = Monitor(cfg)
    monitor.start_http()
    try:
        assert monitor.http is not None and monitor.probes is not None
        assert monitor.http.limits == HttpLimits(workers=3, timeout=5, idle_timeout=60, max_connections=256)  # fmt: skip
        url, ctx = f"https://127.0.0.1:{monitor.http.port}", client_context(pki)
        assert get(url + "/readyz", ctx)[0] == 401
        code, _, body = get(url + "/readyz", ctx, basic("prometheus", PASSWORD))
        assert (code, body) == (503, b"starting\n")  # no consumer yet
        probes = f"http://127.0.0.1:{monitor.probes.port}"
        assert get(probes + "/readyz")[:3:2] == (503, b"starting\n")
        assert get(probes + "/healthz")[0] == 200
        for path in ("/metrics", "/", "/api/status"):  # the probe port serves probes only
            assert get(probes + path)[0] == 404
    finally:
        monitor.stop_http()
        monitor.store.close()


def test_ipv6_listen() -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    with serving(None, host="::1") as s:
        assert get(f"http://[::1]:{s.port}/healthz")[0] == 200
    with serving(None, host="::") as s:  # dual stack: IPv4 clients too
        assert get(f"http://127.0.0.1:{s.port}/healthz")[0] == 200
        assert get(f"http://[::1]:{s.port}/healthz")[0] == 200
