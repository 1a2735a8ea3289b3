"""``checkpoint.store``: the SQLite file (default) or a compacted Kafka topic, and its keys."""

from __future__ import annotations

import pytest

from monitor.config.spec import ConfigError, parse_config

MODEL = {"models": {"m": {"attributes": {"g": {}}}}}


def test_sqlite_is_the_default() -> None:
    cp = parse_config(MODEL).checkpoint
    assert cp.store == "sqlite"
    assert cp.path == "fairness-monitor.sqlite"


def test_kafka_store_keys_are_read() -> None:
    cp = parse_config(
        {
            **MODEL,
            "checkpoint": {
                "store": "kafka",
                "state_topic": "fm-state",
                "state_topic_partitions": 3,
                "state_topic_replication": 2,
                "state_chunk_bytes": 65536,
                "state_transactions": True,
                "state_segment_bytes": 4 << 20,
            },
        }
    ).checkpoint
    assert (cp.store, cp.state_topic, cp.state_chunk_bytes) == ("kafka", "fm-state", 65536)
    assert (cp.state_topic_partitions, cp.state_topic_replication) == (3, 2)
    assert cp.state_transactions
    assert cp.state_segment_bytes == 4 << 20


def test_kafka_store_defaults() -> None:
    cp = parse_config({**MODEL, "checkpoint": {"store": "kafka"}}).checkpoint
    assert cp.state_topic == "fairness-monitor-state"
    assert cp.state_chunk_bytes == 512 * 1024
    assert (cp.state_topic_partitions, cp.state_topic_replication) == (1, -1)
    assert not cp.state_transactions
    assert cp.state_segment_bytes == 16 << 20


def test_the_segment_holds_a_chunk() -> None:
    """Unset, segment.bytes is 16 MiB or two chunks if more; set, it must hold a chunk's
    record (Kafka refuses a record batch larger than a segment)."""
    big = {"store": "kafka", "state_chunk_bytes": 32 << 20}
    assert parse_config({**MODEL, "checkpoint": big}).checkpoint.state_segment_bytes == 64 << 20
    with pytest.raises(ConfigError, match=r"checkpoint\.state_segment_bytes: < state_chunk_bytes"):
        parse_config({**MODEL, "checkpoint": {**big, "state_segment_bytes": 32 << 20}})


@pytest.mark.parametrize(
    ("checkpoint", "message"),
    [
        ({"store": "redis"}, "checkpoint.store: 'redis' is not one of sqlite, kafka"),
        ({"state_topic": "x"}, "checkpoint.state_topic: only with store: kafka"),
        ({"store": "kafka", "state_topic": ""}, "checkpoint.state_topic"),
        ({"store": "kafka", "state_chunk_bytes": 100}, "checkpoint.state_chunk_bytes"),
        ({"store": "kafka", "state_segment_bytes": 1000}, "checkpoint.state_segment_bytes"),
        ({"state_segment_bytes": 1 << 20}, "checkpoint.state_segment_bytes: only with store"),
        ({"store": "kafka", "state_topic_partitions": 0}, "checkpoint.state_topic_partitions"),
        (
            {"store": "kafka", "state_topic_replication": 0},
            "checkpoint.state_topic_replication: must be -1 or at least 1",
        ),
    ],
)
def test_bad_store_settings_name_the_key(checkpoint: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({**MODEL, "checkpoint": checkpoint})
    assert str(err.value).startswith(message), str(err.value)


def test_env_override_selects_the_kafka_store(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from monitor.config.spec import load_config

    p = tmp_path / "c.yaml"
    p.write_text("models: {m: {attributes: {g: {}}}}\n")
    cfg = load_config(p, env={"FAIRNESS_MONITOR__CHECKPOINT__STORE": "kafka"})
    assert cfg.checkpoint.store == "kafka"


def test_status_reads_the_state_topic_not_a_file(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With checkpoint.store: kafka, `status` reads the state topic (here an unreachable
    cluster: exit 2 naming the topic), not an empty SQLite file made at checkpoint.path and
    reported as no data. (Against a real broker: tests/app/test_kafka_state_status.py.)"""
    from monitor.cli import main
    from monitor.state import kafka_topic
    from tests.broker import free_port

    monkeypatch.setattr(kafka_topic, "BOOTSTRAP_TIMEOUT_MS", 1000)
    p = tmp_path / "c.yaml"
    p.write_text(
        "models: {m: {attributes: {g: {}}}}\n"
        f"kafka: {{bootstrap_servers: '127.0.0.1:{free_port()}'}}\n"
        f"checkpoint: {{store: kafka, state_topic: st, path: {tmp_path / 'cp.sqlite'}}}\n"
    )
    assert main(["status", "-c", str(p)]) == 2
    assert "state topic st: cannot reach Kafka at" in capsys.readouterr().err
    assert not (tmp_path / "cp.sqlite").exists()


def test_global_alerts_need_the_kafka_store_and_name_the_key() -> None:
    """``alerts.scope: global``: the judging replica's state must be where any replica can take
    it over, so a SQLite store is refused at start, naming the key; local is the default."""
    assert parse_config(MODEL).alerts.scope == "local"
    with pytest.raises(ConfigError) as err:
        parse_config({**MODEL, "alerts": {"scope": "global"}})
    assert str(err.value).startswith("alerts.scope") and "checkpoint.store: kafka" in str(err.value)
    cfg = parse_config(
        {
            **MODEL,
            "checkpoint": {"store": "kafka"},
            "alerts": {"scope": "global", "partials_topic": "fm-partials"},
        }
    )
    assert (cfg.alerts.scope, cfg.alerts.partials_topic) == ("global", "fm-partials")
    with pytest.raises(ConfigError) as err:
        parse_config({**MODEL, "checkpoint": {"store": "kafka"}, "alerts": {"scope": "all"}})
    assert "alerts.scope" in str(err.value)
