"""The test broker helper itself (tests/broker.py)."""

from __future__ import annotations


def test_broker_cluster_ids_never_look_like_an_option(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Kafka's storage tool read a cluster id starting with "-" as an option (1 run in 64)."""
    import uuid

    from tests import broker

    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64 "-AAAA…"
    plain = uuid.UUID(bytes=bytes(16))
    queue = [dash, dash, plain]
    monkeypatch.setattr(broker.uuid, "uuid4", lambda: queue.pop(0))
    cid = broker.cluster_id()
    assert not cid.startswith("-") and cid == "AAAAAAAAAAAAAAAAAAAAAA" and queue == []
