"""Logging setup: plain text for people, one JSON object per line for log pipelines.

Log messages carry counts, topics, partitions and offsets — never event contents (attributes
are personal data) — and the alert log sink's labels and summaries; whatever they hold, the text
format escapes control characters (:class:`TextFormatter`), the JSON format quotes them.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from monitor.outputs.report import printable


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class ClientTracebacks(logging.Filter):
    """kafka-python logs some errors it handles itself with a full traceback (a socket closed
    under a pending read at shutdown, a broker going away): an operator reading the log would
    think the monitor crashed. Below DEBUG, such a record keeps its message plus the
    exception's type and text on the same line; at DEBUG the traceback stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.exc_info
            and record.name.startswith("kafka.")
            and logging.getLogger().level > logging.DEBUG
        ):
            exc = record.exc_info[1]
            record.msg = (
                f"{record.getMessage()} ({type(exc).__name__}: {exc}; handled by the client)"
            )
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


class TextFormatter(logging.Formatter):
    """One line per message: a control or bidi character in it (event data can reach a
    message: a group's name in an alert's summary) is shown as an escape, so no value forges
    a log line or drives the terminal; a traceback keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ClientTracebacks())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("kafka").setLevel(max(logging.WARNING, root.level))
