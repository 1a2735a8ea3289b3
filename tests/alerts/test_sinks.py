"""Alert delivery: retried with backoff, failures counted, never blocking the caller."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from monitor.alerts.lifecycle import Alert, Transition
from monitor.alerts.rules import SinkSpec
from monitor.alerts.sinks import Dispatcher

from ..broker import free_port


class Receiver:
    """A real local HTTP receiver that fails the first ``fail`` requests, or hangs."""

    def __init__(self, fail: int = 0, hang: float = 0.0) -> None:
        self.fail, self.hang = fail, hang
        self.bodies: list[object] = []
        self.calls = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.calls += 1
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if outer.hang:
                    time.sleep(outer.hang)
                if outer.calls <= outer.fail:
                    self.send_response(500)
                    self.end_headers()
                    return
                outer.bodies.append(body)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def transition(state: str = "firing") -> Transition:
    a = Alert(
        "FourFifthsRule",
        {
            "alertname": "FourFifthsRule",
            "model": "m",
            "window": "1h",
            "attribute": "race",
            "severity": "page",
        },
        state,  # type: ignore[arg-type]
        1.0e9,
        1.0e9 + 600,
        0.61,
        {"summary": "DIR 0.61 < 0.8"},
    )
    return Transition(a, "pending")


def wait_for(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.02)
    assert cond()


def test_500s_are_retried_and_counted_then_delivered() -> None:
    am, hook = Receiver(fail=2), Receiver(fail=1)
    d = Dispatcher(
        SinkSpec(
            alertmanager_url=am.url,
            webhook_url=hook.url,
            log=False,
            max_retries=5,
            resend_interval=3600,
        )
    )
    d.backoff = 0.01
    d.start()
    d.submit(transition())
    wait_for(lambda: am.bodies and hook.bodies)
    assert d.failures["alertmanager"] == 2 and d.failures["webhook"] == 1
    body = am.bodies[0]
    assert body[0]["labels"]["alertname"] == "FourFifthsRule"  # Alertmanager API v2 shape
    assert body[0]["annotations"]["summary"] == "DIR 0.61 < 0.8" and "endsAt" in body[0]
    assert hook.bodies[0]["state"] == "firing"
    d.submit(transition("resolved"))
    wait_for(lambda: len(am.bodies) == 2)
    assert am.bodies[1][0]["endsAt"] <= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
    d.close()
    am.close()
    hook.close()


def test_receiver_down_or_hanging_never_blocks_the_caller() -> None:
    hang = Receiver(hang=2.0)
    d = Dispatcher(
        SinkSpec(
            alertmanager_url=f"http://127.0.0.1:{free_port()}",  # nobody there
            webhook_url=hang.url,
            log=False,
            max_retries=2,
            timeout=0.3,
            resend_interval=3600,
        )
    )
    d.backoff = 0.01
    d.start()
    t = time.perf_counter()
    for _ in range(50):
        d.submit(transition())
    assert time.perf_counter() - t < 0.05  # the consumer thread only enqueues
    wait_for(lambda: d.failures["alertmanager"] >= 3 and d.failures["webhook"] >= 3, timeout=15)
    d.close(timeout=0.1)
    hang.close()


def test_firing_alerts_are_resent_to_alertmanager() -> None:
    am = Receiver()
    d = Dispatcher(SinkSpec(alertmanager_url=am.url, log=False, resend_interval=1))
    d.start()
    d.submit(transition())
    wait_for(lambda: len(am.bodies) >= 3, timeout=6)  # first send + two re-sends
    d.close()
    am.close()
