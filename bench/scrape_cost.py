"""Scrape cost of the exporter at 5 models × 3 attributes × 20 groups × 3 windows, and the
consumer's throughput while being scraped every second vs not scraped (ratio, one run).

Run: python -m bench.scrape_cost
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from monitor.config.spec import parse_config
from monitor.ingest.events import RawBatch
from monitor.outputs.exporter import render
from monitor.state.engine import Engine

T0 = 1_767_225_600.0


def config():  # type: ignore[no-untyped-def]
    model = {
        "attributes": {"a": {}, "b": {}, "c": {}},
        "windows": ["5m", "1h", "1d"],
        "bucket": "1m",
        "lateness": "10m",
        "min_samples": 5,
    }
    return parse_config({"models": {f"m{i}": model for i in range(5)}, "unknown_models": "refuse"})


def events(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out.append(
            json.dumps(
                {
                    "prediction_id": f"{seed}-{i}",
                    "model_id": f"m{i % 5}",
                    "timestamp": T0 + i * 0.05,
                    "prediction": int(rng.random() < 0.5),
                    "attributes": {k: f"g{int(rng.integers(0, 20))}" for k in "abc"},
                }
            ).encode()
        )
    return out


def consume(engine: Engine, values: list[bytes]) -> float:
    t = time.perf_counter()
    for i in range(0, len(values), 5000):
        chunk = values[i : i + 5000]
        pb, _ = engine.decoder.decode_predictions(RawBatch(chunk, [None] * len(chunk)))
        engine.apply(0, pb, engine.decoder.decode_labels(RawBatch((), ()))[0])
    return time.perf_counter() - t


def main() -> None:
    engine = Engine(config())
    consume(engine, events(100_000, 0))  # fill: every group of every attribute has data
    snap = engine.snapshot()
    text = render(snap, confidence=0.95)
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    best = min(_timed(lambda: render(snap, confidence=0.95)) for _ in range(5))
    reg = CollectorRegistry()
    reg.register(_Wrap(snap))
    generic = min(_timed(lambda: generate_latest(reg)) for _ in range(2))
    print(f"series per scrape: {series:,}")
    print(
        f"scrape, uncached (all metric math + text): {best * 1e3:.1f} ms (target < 50 ms); "
        f"same families through prometheus_client's generic path: {generic * 1e3:.0f} ms"
    )

    # throughput with and without a scraper taking a fresh snapshot every second
    values = events(200_000, 1)
    consume(Engine(config()), values)  # warm-up
    quiet = consume(Engine(config()), values)
    busy_engine = Engine(config())
    stop = threading.Event()

    def scraper() -> None:
        while not stop.wait(1.0):
            render(busy_engine.snapshot(), confidence=0.95)  # publish + uncached scrape

    th = threading.Thread(target=scraper, daemon=True)
    th.start()
    busy = consume(busy_engine, values)
    stop.set()
    th.join()
    print(
        f"consumer alone: {len(values) / quiet:,.0f} events/s; scraped every second: "
        f"{len(values) / busy:,.0f} events/s; ratio {quiet / busy:.2f}"
    )


class _Wrap:
    """The same families as prometheus_client metric objects (for the comparison)."""

    def __init__(self, snap) -> None:  # type: ignore[no-untyped-def]
        self.fams = list(text_string_to_metric_families(render(snap, confidence=0.95)))

    def collect(self):  # type: ignore[no-untyped-def]
        for f in self.fams:
            g = GaugeMetricFamily(f.name, f.documentation, labels=list(f.samples[0].labels))
            for s in f.samples:
                g.add_metric(list(s.labels.values()), s.value)
            yield g


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
