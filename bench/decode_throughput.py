"""Decoding throughput: raw JSON records to columnar batches, on each of the decoder's paths.

Three cases over the same records (default field layout, two attribute sets, 20,000 records
per batch like a Kafka poll): a clean batch (the typed fast path), the same batch with the fast
path switched off (the careful per-record path), and a batch with one malformed record (the fast
path gives up and the careful path decodes it, producing one dead letter). Labels: clean batch.
Decoding is the only per-event Python work of the monitor, so this is where a refactoring of
``monitor/ingest`` could cost throughput unseen by the engine benchmarks.

Run: python -m bench.decode_throughput [--events N]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from bench.common import T0, best_of
from monitor.config.spec import Config, parse_config
from monitor.ingest.events import RawBatch
from monitor.state.engine import Engine

BATCH = 20_000
NOW = T0 + 86_400.0


def config() -> Config:
    return parse_config(
        {
            "models": {
                "credit": {
                    "attributes": {"sex": {}, "age": {"bins": [25, 45]}},
                    "intersections": [["sex", "age"]],
                    "windows": ["1h"],
                    "threshold": 0.5,
                }
            }
        }
    )


def records(n: int) -> tuple[list[bytes], list[bytes]]:
    preds, labels = [], []
    for i in range(n):
        preds.append(
            json.dumps(
                {
                    "prediction_id": f"p-{i}",
                    "model_id": "credit",
                    "timestamp": T0 + i * 0.01,
                    "prediction": i % 2,
                    "score": (i % 100) / 100,
                    "attributes": {"sex": "fm"[i % 2], "age": 18 + i % 60},
                }
            ).encode()
        )
        labels.append(
            json.dumps(
                {"prediction_id": f"p-{i}", "timestamp": T0 + i * 0.01 + 60, "label": i % 3 == 0}
            ).encode()
        )
    return preds, labels


def rate(n: int, fn: Callable[[], object]) -> float:
    """Events per second, best of three runs."""
    return n / best_of(fn)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    n = ap.parse_args().events
    preds, labels = records(n)
    bad = list(preds)
    for i in range(0, n, BATCH):
        bad[i] = b'{"prediction_id": "x", "timestamp": '  # one malformed record per batch
    fast = Engine(config(), clock=lambda: NOW)
    slow = Engine(config(), clock=lambda: NOW)
    slow.decoder.fast.enabled = False

    def run(engine: Engine, values: list[bytes], kind: str) -> None:
        decode = engine.decoder.decode_predictions if kind == "p" else engine.decoder.decode_labels
        for i in range(0, n, BATCH):
            chunk = values[i : i + BATCH]
            decode(RawBatch(chunk, [None] * len(chunk)))

    cases = {
        "predictions, clean batches (fast path)": lambda: run(fast, preds, "p"),
        "predictions, careful path": lambda: run(slow, preds, "p"),
        "predictions, one bad record per batch": lambda: run(fast, bad, "p"),
        "labels, clean batches (fast path)": lambda: run(fast, labels, "l"),
        "labels, careful path": lambda: run(slow, labels, "l"),
    }
    for name, fn in cases.items():
        fn()  # warm: the group registries learn every group
        print(f"{name}: {rate(n, fn) / 1e6:.3f} M events/s")


if __name__ == "__main__":
    main()
