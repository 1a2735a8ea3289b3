"""A serving stack's traffic vs the monitor's own events: decisions per second from raw records
to counts, side by side in one run (issue 16's bar: at least 0.7× of the monitor-JSON path).

The same decisions four ways, each as the records a poll gives (value, headers, time,
consecutive offsets) read through ``ConsumerBatch`` as the service reads them: the monitor's own
JSON events (one record per decision: the fast decoding path, then ``Engine.apply``), bare Open Inference Protocol JSON (a request and a
response record per call), KServe's logger CloudEvents (the same with ``ce_*`` headers), and
Seldon Core 2's protobuf messages (``ModelInferRequest`` / ``ModelInferResponse``).
The serving paths decode both halves, join them (``HalfJoin.add``) and apply what met. Calls
carry ``--rows`` decisions each (1: one applicant per call, the hardest case for the serving
paths, which then read two records per decision). Bare OIP JSON and Seldon's protobuf are
decoded by the compiled decoders (``native/``) when they are built, and again with
``FAIRNESS_MONITOR_NATIVE=0`` (the Python paths) in the same run. Each path runs on a fresh
engine, fastest of three; the ratio is its rate over the monitor-JSON rate of the same run.

Run: python -m bench.serving_throughput [--decisions N] [--rows R]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import yaml
from aiokafka.record._crecords import DefaultRecordBatch, DefaultRecordBatchBuilder

from bench.common import T0, best_of
from monitor.config.spec import parse_config
from monitor.ingest.events import ConsumerBatch, LabelBatch
from monitor.ingest.native import native
from monitor.ingest.open_inference_grpc_pb2 import ModelInferRequest, ModelInferResponse
from monitor.ingest.serving_decode import ServingDecoder
from monitor.state.engine import Engine
from monitor.state.served import apply_served

BATCH = 2_000  # records per poll (the service's max_poll_records default)
NOW = T0 + 86_400.0
CONFIG = """
models:
  credit:
    attributes: {sex: {}, age: {bins: [30, 50]}}
    intersections: [[sex, age]]
    threshold: 0.5
    windows: [1h]
"""
MAPPING = """    input:
      format: FMT
      score: {tensor: probabilities, column: 1}
      attributes: {sex: {tensor: sex}, age: {tensor: features, column: 1}}
"""


def engine(fmt: str | None) -> Engine:
    text = CONFIG if fmt is None else CONFIG + MAPPING.replace("FMT", fmt)
    if fmt == "seldon":
        text += "kafka: {responses_topic: outputs}\n"
    return Engine(parse_config(yaml.safe_load(text)), clock=lambda: NOW)


def traffic(n: int, rows: int) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """Records as a poll gives them (value, headers, time, offset), of the monitor's own
    events, bare OIP, CloudEvents and Seldon's protobuf, for ``n`` decisions."""
    own, oip, ce, sel = [], [], [], []
    for c in range(n // rows):
        t = T0 + c * 0.05
        sex = ["FM"[(c + r) % 2] for r in range(rows)]
        age = [18 + (c + r) % 60 for r in range(rows)]
        p = [((c + r) % 100) / 100 for r in range(rows)]
        cid = f"call-{c}"
        ids = [cid] if rows == 1 else [f"{cid}/{r}" for r in range(rows)]
        for i in range(rows):
            own.append(
                json.dumps(
                    {
                        "prediction_id": ids[i],
                        "model_id": "credit",
                        "timestamp": t,
                        "score": p[i],
                        "attributes": {"sex": sex[i], "age": age[i]},
                    }
                ).encode()
            )
        req = {
            "id": cid,
            "inputs": [
                {"name": "sex", "shape": [rows], "datatype": "BYTES", "data": sex},
                {"name": "features", "shape": [rows, 2], "datatype": "INT64",
                 "data": [v for a in age for v in (700, a)]},
            ],
        }  # fmt: skip
        resp = {
            "model_name": "credit",
            "id": cid,
            "outputs": [
                {"name": "probabilities", "shape": [rows, 2], "datatype": "FP64",
                 "data": [v for x in p for v in (1 - x, x)]},
            ],
        }  # fmt: skip
        ms = round(t * 1000)
        for kind, body in (("request", req), ("response", resp)):
            value = json.dumps(body).encode()
            oip.append(SimpleNamespace(value=value, headers=[], timestamp=ms))
            headers = [
                ("ce_specversion", b"1.0"),
                ("ce_id", cid.encode()),
                ("ce_type", f"org.kubeflow.serving.inference.{kind}".encode()),
                ("ce_source", b"http://credit-predictor/"),
                ("ce_inferenceservicename", b"credit"),
                ("content-type", b"application/json"),
            ]
            ce.append(SimpleNamespace(value=value, headers=headers, timestamp=ms))
        for kind, msg in zip(("Request", "Response"), _protobuf(cid, sex, age, p), strict=True):
            headers = [("x-request-id", cid.encode()), ("seldon-infer-type",
                       f"proto/InferModel{kind}".encode())]  # fmt: skip
            value = msg.SerializeToString()
            sel.append(SimpleNamespace(value=value, headers=headers, timestamp=ms))
    records = [SimpleNamespace(value=v, headers=[], timestamp=0) for v in own]
    return polled(records), polled(oip), polled(ce), polled(sel)


def polled(records: list[Any]) -> list[Any]:
    """The records as the service's poll gives them: Kafka record batches of ``BATCH`` records
    (consecutive offsets) read by aiokafka's compiled reader (``record_reader.py``), whose
    records' fields are read in C (a Python object with a ``__dict__`` per record costs ~0.25 µs
    a field read over 200,000 of them, more than decoding the record)."""
    out: list[Any] = []
    for start in range(0, len(records), BATCH):
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i, r in enumerate(records[start : start + BATCH]):
            builder.append(i, r.timestamp, None, r.value, r.headers)
        out.extend(DefaultRecordBatch(bytes(builder.build())))
    return out


def _protobuf(cid: str, sex: list[str], age: list[int], p: list[float]) -> tuple[Any, Any]:
    """A call as Seldon Core 2 writes it: ModelInferRequest and ModelInferResponse."""
    rows = len(sex)
    req = ModelInferRequest(model_name="credit_1", id=cid)
    t = req.inputs.add(name="sex", datatype="BYTES", shape=[rows])
    t.contents.bytes_contents.extend(x.encode() for x in sex)
    t = req.inputs.add(name="features", datatype="INT64", shape=[rows, 2])
    t.contents.int64_contents.extend(v for a in age for v in (700, a))
    resp = ModelInferResponse(model_name="credit_1", id=cid)
    t = resp.outputs.add(name="probabilities", datatype="FP64", shape=[rows, 2])
    t.contents.fp64_contents.extend(v for x in p for v in (1 - x, x))
    return req, resp


def run_own(records: list[Any]) -> Engine:
    e = engine(None)
    for i in range(0, len(records), BATCH):
        pb, _ = e.decoder.decode_predictions(ConsumerBatch(records[i : i + BATCH], "t", 0))
        e.apply(0, pb, LabelBatch())
    return e


def run_served(records: list[Any], fmt: str) -> Engine:
    e = engine(fmt)
    dec = ServingDecoder(e.decoder.plan, fmt)
    for i in range(0, len(records), BATCH):
        asked, answered, dead = dec.decode(ConsumerBatch(records[i : i + BATCH], "t", 0))
        assert not dead, dead[0].detail
        apply_served(e, 0, asked, answered, LabelBatch())
    return e


def python_only(fn: Callable[[], Engine]) -> Callable[[], Engine]:
    """``fn`` with the compiled decoders turned off (``FAIRNESS_MONITOR_NATIVE=0``)."""

    def run() -> Engine:
        was = os.environ.get("FAIRNESS_MONITOR_NATIVE")
        os.environ["FAIRNESS_MONITOR_NATIVE"] = "0"
        try:
            return fn()
        finally:
            if was is None:
                del os.environ["FAIRNESS_MONITOR_NATIVE"]
            else:
                os.environ["FAIRNESS_MONITOR_NATIVE"] = was

    return run


def cases(n: int, rows: int) -> tuple[int, dict[str, Callable[[], Engine]]]:
    """The decisions, and each path's run over them (returning its engine)."""
    own, oip, ce, sel = traffic(n, rows)
    runs: dict[str, Callable[[], Engine]] = {
        "monitor-json": lambda: run_own(own),
        "oip-json": lambda: run_served(oip, "oip-json"),
        "kserve-cloudevents": lambda: run_served(ce, "kserve-cloudevents"),
        "seldon (protobuf)": lambda: run_served(sel, "seldon"),
    }
    if native() is not None:
        runs["oip-json, Python"] = python_only(runs["oip-json"])
        runs["seldon (protobuf), Python"] = python_only(runs["seldon (protobuf)"])
    return len(own), runs


def measure(n: int, rows: int) -> dict[str, float]:
    decided, runs = cases(n, rows)
    return {name: decided / best_of(fn) for name, fn in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decisions", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=1, help="decisions per inference call")
    args = ap.parse_args()
    rates = measure(args.decisions, args.rows)
    base = rates["monitor-json"]
    if native() is None:
        print("native/ is not built (no cargo?): the serving paths decode in Python")
    for name, r in rates.items():
        print(f"{name}: {r / 1e3:.1f} k decisions/s ({r / base:.2f}× monitor-json)")


if __name__ == "__main__":
    main()
