"""The ``run`` command: the service on its Kafka topics, and the one-line reason when it refuses
to start (exit code ``EXIT_CONFIG``: a supervisor should not restart it in a loop)."""

from __future__ import annotations

import sys

from kafka.errors import KafkaError

from monitor.app.logs import setup_logging
from monitor.app.service import EXIT_CONFIG, run_service
from monitor.config.spec import Config
from monitor.ingest.kafka import TopicError
from monitor.ingest.kafka_auth import KafkaAuthError
from monitor.state.checkpoint import CheckpointCorrupt, CheckpointError


def run(cfg: Config) -> int:
    """Run until stopped; the process exit code."""
    setup_logging(cfg.service.log_format, cfg.service.log_level)
    try:
        return run_service(cfg)
    except (KafkaAuthError, TopicError) as exc:
        print(f"fairness-monitor: refusing to start: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KafkaError as exc:
        print(
            f"fairness-monitor: cannot use Kafka at {','.join(cfg.kafka.bootstrap_servers)}: {exc}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    except CheckpointError as exc:
        # the on_corrupt hint only where it would help: a corrupt file under "refuse"
        hint = (
            " (set checkpoint.on_corrupt: fresh to move it aside and start over)"
            if isinstance(exc, CheckpointCorrupt) and cfg.checkpoint.on_corrupt == "refuse"
            else ""
        )
        print(f"fairness-monitor: refusing to start: {exc}{hint}", file=sys.stderr)
        return EXIT_CONFIG
