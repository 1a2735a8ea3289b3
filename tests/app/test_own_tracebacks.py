"""The log check the Kafka service tests use: kafka-python's handled errors pass, ours do not."""

from tests.kafka_helpers import own_tracebacks

KAFKA_HANDLED = """\
2026-11-29 19:31:40,100 ERROR kafka.net.transport: <x>: Error receiving network data closing socket
Traceback (most recent call last):
  File "/w/.venv/lib/python3.11/site-packages/kafka/net/transport.py", line 110, in _sock_recv
    data = self._sock.recv(4096)
           ^^^^^^^^^^^^^^^
AttributeError: 'NoneType' object has no attribute 'recv'
2026-11-29 19:31:40,105 INFO monitor.app.service: stopped"""

LOGGED_BY_MONITOR = """\
2026-11-29 19:31:40,100 ERROR monitor.app.service: boom
Traceback (most recent call last):
  File "/w/lib/helper.py", line 1, in f
ValueError: x"""

UNCAUGHT = """\
2026-11-29 19:31:40,105 INFO monitor.app.service: stopped
Traceback (most recent call last):
  File "/w/lib/helper.py", line 1, in f
ValueError: x"""

THROUGH_MONITOR_CODE = """\
2026-11-29 19:31:40,100 ERROR kafka.consumer: callback failed
Traceback (most recent call last):
  File "/w/monitor/ingest/kafka.py", line 1, in on_assign
ValueError: x"""


def test_kafka_pythons_own_handled_error_is_not_ours() -> None:
    assert own_tracebacks(KAFKA_HANDLED) == []


def test_monitor_logged_uncaught_and_monitor_frames_are_reported() -> None:
    for log in (LOGGED_BY_MONITOR, UNCAUGHT, THROUGH_MONITOR_CODE):
        assert len(own_tracebacks(log)) == 1, log
    assert len(own_tracebacks(KAFKA_HANDLED + "\n" + UNCAUGHT)) == 1
