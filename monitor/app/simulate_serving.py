"""The lending simulation's decisions as a serving stack logs them (``simulate --format``):
each decision one inference call, a request record (the applicant's attributes as tensors) and a
response record (the probabilities and the decision), both keyed by the call's id; as bare Open
Inference Protocol JSON, wrapped in KServe's logger CloudEvents (binary mode, ``ce_*``
headers), or as Seldon Core 2 writes them (protobuf, requests and responses on two topics).
Labels stay the monitor's own events, keyed by the same id.

:data:`MAPPING` is the ``input`` section a model needs to read them (``docs/serving.md``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

MAPPING: dict[str, Any] = {
    "score": {"tensor": "probabilities", "column": 1},
    "prediction": {"tensor": "approved"},
    "attributes": {"group": {"tensor": "group"}, "sex": {"tensor": "sex"}},
}
# half, key, value, headers, record time (ms: bare OIP has no time of its own, the record's)
Record = tuple[str, bytes, bytes, list[tuple[str, bytes]], int]


def serving_records(fmt: str, event: bytes, *, attributes: bool = True) -> list[Record]:
    """One monitor prediction event → its request and response records, in ``fmt``; the
    applicant's attributes as request tensors, or (``attributes=False``: they come on an
    attributes topic) only the model's own input tensor."""
    ev = json.loads(event)
    pid, s = str(ev["prediction_id"]), float(ev["score"])
    tensors = sorted(ev["attributes"].items()) if attributes else []
    request = {
        "id": pid,
        "inputs": [
            {"name": a, "shape": [1], "datatype": "BYTES", "data": [str(v)]} for a, v in tensors
        ]
        + [{"name": "features", "shape": [1], "datatype": "FP64", "data": [s]}],
    }
    response = {
        "model_name": ev["model_id"],
        "id": pid,
        "outputs": [
            {"name": "probabilities", "shape": [1, 2], "datatype": "FP64", "data": [1 - s, s]},
            {
                "name": "approved",
                "shape": [1],
                "datatype": "BOOL",
                "data": [bool(ev["prediction"])],
            },
        ],
    }
    if fmt == "seldon":
        return _seldon(ev, pid, s, tensors)
    out = []
    for kind, body in (("request", request), ("response", response)):
        headers: list[tuple[str, bytes]] = []
        if fmt == "kserve-cloudevents":
            headers = [
                ("ce_specversion", b"1.0"),
                ("ce_id", pid.encode()),
                ("ce_type", f"org.kubeflow.serving.inference.{kind}".encode()),
                ("ce_source", f"http://{ev['model_id']}-predictor/".encode()),
                ("ce_time", _rfc3339(float(ev["timestamp"]))),
                ("ce_inferenceservicename", str(ev["model_id"]).encode()),
                ("ce_namespace", b"lending"),
                ("ce_component", b"predictor"),
                ("content-type", b"application/json"),
            ]
        ms = round(float(ev["timestamp"]) * 1000)
        out.append((kind, pid.encode(), json.dumps(body).encode(), headers, ms))
    return out


def _seldon(ev: dict[str, Any], pid: str, s: float, tensors: list[tuple[str, Any]]) -> list[Record]:
    """Seldon Core 2's records: protobuf messages, the id in ``x-request-id`` only (the
    model's server sees a versioned model name, as Seldon's do)."""
    from monitor.ingest.open_inference_grpc_pb2 import ModelInferRequest as Req
    from monitor.ingest.open_inference_grpc_pb2 import ModelInferResponse as Resp

    name = f"{ev['model_id']}_1"
    req = Req(model_name=name)
    for a, v in tensors:
        t = req.inputs.add(name=a, datatype="BYTES", shape=[1])
        t.contents.bytes_contents.append(str(v).encode())
    req.inputs.add(name="features", datatype="FP64", shape=[1]).contents.fp64_contents.append(s)
    resp = Resp(model_name=name, model_version="1")
    probs = resp.outputs.add(name="probabilities", datatype="FP64", shape=[1, 2])
    probs.contents.fp64_contents.extend([1 - s, s])
    approved = resp.outputs.add(name="approved", datatype="BOOL", shape=[1])
    approved.contents.bool_contents.append(bool(ev["prediction"]))
    ms = round(float(ev["timestamp"]) * 1000)
    return [
        (kind, pid.encode(), msg.SerializeToString(), [("x-request-id", pid.encode()),
         ("seldon-infer-type", f"proto/InferModel{kind.title()}".encode())], ms)
        for kind, msg in (("request", req), ("response", resp))
    ]  # fmt: skip


def _rfc3339(t: float) -> bytes:
    return (
        datetime.fromtimestamp(t, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
        .encode()
    )
