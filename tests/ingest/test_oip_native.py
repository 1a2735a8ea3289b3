"""The compiled decoder of bare OIP JSON batches (``native/src/oip.rs`` through
``oip_native.py``): clean batches take it once the layout is learned, and whatever the batch,
the rows and dead letters are those of the Python fast path and of the careful path."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.ingest import oip_native
from monitor.ingest.events import ConsumerBatch
from monitor.ingest.keys import row_keys
from monitor.ingest.native import native
from monitor.ingest.serving_checks import GiveUp, within_limits
from monitor.ingest.serving_decode import ServingDecoder
from monitor.ingest.serving_fast import ServingFast
from tests.app.test_serving_kafka import calls
from tests.ingest.test_serving_fast import SPOILERS, _spoil, decoder, outcome, records, same

FMT = "oip-json"

if native() is None:
    if os.environ.get("CI") == "true":
        pytest.fail("monitor_native is not installed (make install builds native/)")
    pytest.skip("monitor_native is not installed (needs cargo)", allow_module_level=True)


def warm(recs: list[Any], *, fast: bool = True) -> ServingDecoder:
    """A decoder that has decoded ``recs`` once: a fast one has learned their layout (the
    Python path learns it), and each has numbered their groups in the same order."""
    dec = decoder(FMT, fast=fast)
    outcome(dec, copy.deepcopy(recs))
    return dec


def compiled(dec: ServingDecoder, recs: list[Any]) -> Any:
    """The compiled path's columns, None where it declines (or its checks give up, or the
    batch is past ``limits``: as ``ServingFast.decode``)."""
    fast, compiled = dec.fast, native()
    assert isinstance(fast, ServingFast) and fast.layout is not None and compiled is not None
    try:
        rb = ConsumerBatch(recs, "s", 0)
        out = oip_native.decode(compiled, rb, fast.layout, fast.plan, fast.model, fast.m)
    except GiveUp:
        return None
    return None if out is None else within_limits(fast.plan, out)


def three_ways(recs: list[Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any]:
    """Outcomes of the compiled path, the Python fast path and the careful path."""
    got = outcome(warm(recs), copy.deepcopy(recs))
    with monkeypatch.context() as m:
        m.setenv("FAIRNESS_MONITOR_NATIVE", "0")
        python = outcome(warm(recs), copy.deepcopy(recs))
    return got, python, outcome(warm(recs, fast=False), copy.deepcopy(recs))


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
@pytest.mark.parametrize("seed", range(4))
def test_clean_batches_take_the_compiled_path_with_the_python_paths_rows(
    nested: bool, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cs = calls(seed, n=80)  # 1-64 rows a call
    recs = records(cs, FMT, nested=nested, seed=seed)
    assert compiled(warm(recs), recs) is not None
    got, python, careful = three_ways(recs, monkeypatch)
    same(got, python)
    same(got, careful)
    assert len(got[0]) == len(got[1]) == sum(len(c["sex"]) for c in cs) and got[2] == []


def test_keys_and_longest_id_are_those_of_keys_py() -> None:
    """Row keys from the compiled decoder equal ``keys.row_keys`` of the same calls, for ids
    beyond ASCII (two-byte, three-byte, astral code points) and calls of one and many rows."""
    cs = calls(5, n=40)
    names = ["é", "✓", "𝔘", "a/b", "x" * 70]
    for i, c in enumerate(cs):
        c["id"] = f"{names[i % len(names)]}-{i}"
    recs = records(cs, FMT)
    out = compiled(warm(recs), recs)
    assert out is not None
    (asked, _, _), (answered, *_) = out
    for ids, half in ((asked, "inputs"), (answered, "outputs")):
        sent = [json.loads(r.value) for r in recs if f'"{half}"'.encode() in r.value]
        names = [c["id"] for c in sent]
        rows = np.array([c[half][0]["shape"][0] for c in sent])
        assert ids.keys().tolist() == row_keys(names, rows).tolist()
        several = [len(c) + 1 + len(str(r - 1)) for c, r in zip(names, rows, strict=True) if r > 1]
        assert ids.longest() == max([len(c) for c in names] + several)


def _body(inputs: list[dict[str, Any]], **extra: Any) -> bytes:
    return json.dumps({"id": extra.pop("id", "c"), "inputs": inputs, **extra}).encode()


EDGES = [  # (sex values, age column values): each read as the careful path reads it
    (["F", "M"], [30, 41]),
    (["é", '"q"'], [-0, 0]),
    (["\u0000x", "F"], [30, 41]),  # a NUL in a group value: the careful path's judgement
    (["F", "M"], [1e5, 2.5]),
    (["F", "M"], [1.0, 1]),  # an int and a float of one value: two groups, as the careful path
    (["F", "M"], [1e-400, 30]),
    (["F", "M"], [9007199254740993, 3]),
]


@pytest.mark.parametrize(("sex", "age"), EDGES)
def test_values_read_as_the_careful_path_reads_them(
    sex: list[str], age: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group values of FP tensors (an int stays an int), escapes, huge and tiny numbers,
    whitespace and unknown fields nested deep: the same rows as the careful path."""
    n = len(sex)
    features = {"name": "features", "shape": [n, 2], "datatype": "FP64",
                "data": [v for a in age for v in (700, a)]}  # fmt: skip
    inputs = [{"name": "sex", "shape": [n], "datatype": "BYTES", "data": sex}, features]
    req = _body(inputs, id="e", parameters={"deep": [[[{"x": [1, {"y": None}]}]]]})
    resp = json.dumps(
        {"model_name": "credit", "id": "e", "outputs": [{"name": "probabilities",
         "shape": [n, 2], "datatype": "FP64", "data": [0.25, 0.75] * n}]}, indent=1
    ).encode()  # fmt: skip
    recs = [SimpleNamespace(value=v, headers=[], timestamp=1_767_225_600_000 + i, offset=i)
            for i, v in enumerate([req, resp])]  # fmt: skip
    assert compiled(warm(recs), recs) is not None  # the compiled path reads each of them
    got, python, careful = three_ways(recs, monkeypatch)
    same(got, careful)
    same(python, careful)


@pytest.mark.parametrize("how", SPOILERS)
def test_each_spoiled_record_gives_the_careful_paths_rows_and_dead_letters(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = records(calls(7, n=10), FMT)
    req = next(r for r in recs if b'"inputs"' in r.value)
    resp = next(r for r in recs if b'"outputs"' in r.value)
    dec, careful = warm(recs), warm(recs, fast=False)
    for r in (req, resp):
        _spoil(r, how, FMT)
    got = outcome(dec, copy.deepcopy(recs))
    same(got, outcome(careful, copy.deepcopy(recs)))
    if got[2]:  # a dead letter: the compiled path declined the batch
        assert compiled(dec, recs) is None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    spoils=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(SPOILERS)), max_size=3),
    nested=st.booleans(),
)
def test_whatever_the_batch_the_compiled_path_gives_the_careful_paths_outcome(
    seed: int, spoils: list[tuple[int, str]], nested: bool
) -> None:
    recs = records(calls(seed, n=12), FMT, nested=nested, seed=seed)
    dec, careful = warm(recs), warm(recs, fast=False)
    for at, how in spoils:
        with contextlib.suppress(KeyError):
            _spoil(recs[at % len(recs)], how, FMT)
    same(outcome(dec, copy.deepcopy(recs)), outcome(careful, recs))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=300), st.none()), min_size=1, max_size=6))
def test_any_bytes_are_declined_or_decoded_never_raised(values: list[bytes | None]) -> None:
    """Arbitrary bytes, and clean records cut or mutated at random bytes: the compiled
    decoder returns (or declines) and never raises; the batch's outcome is the careful path's."""
    clean = records(calls(1, n=3), FMT)
    dec, careful = warm(clean), warm(clean, fast=False)
    rng = random.Random(len(values))
    recs = copy.deepcopy(clean)
    for r, v in zip(recs, values, strict=False):
        if v is not None and v and rng.random() < 0.5:  # mutate a clean record at a byte
            at = rng.randrange(len(r.value))
            r.value = r.value[:at] + v[:3] + r.value[at + 1 :]
        else:
            r.value = v
    compiled(dec, recs)  # returns or declines
    same(outcome(dec, copy.deepcopy(recs)), outcome(careful, recs))


def test_a_declined_batch_leaves_the_layout_and_next_batch_compiled() -> None:
    """A spoiled batch goes the Python ways; the next clean one takes the compiled path."""
    recs = records(calls(3, n=20), FMT)
    dec, careful = warm(recs), warm(recs, fast=False)
    bad = copy.deepcopy(recs)
    bad[0].value = b"{"
    assert compiled(dec, bad) is None
    outcome(dec, bad)
    assert compiled(dec, recs) is not None
    assert np.array_equal(
        dec.decode(ConsumerBatch(recs, "s", 0))[0],
        careful.decode(ConsumerBatch(recs, "s", 0))[0],
    )


ASKED_FOR = [  # a request's "outputs": what it asks for, which the careful path does not read
    [{"name": "probabilities"}],
    [{"name": "probabilities", "parameters": {"binary_data": False}}],
    {"not": ["a", "list"]},
    "first",  # before "inputs" in the document
    "tensors",  # the response's own tensors, in a request: still no response of it
]


@pytest.mark.parametrize(
    "outputs", ASKED_FOR, ids=["names", "parameters", "object", "first", "tensors"]
)
def test_requests_asking_for_outputs_take_the_compiled_path(
    outputs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests that list the outputs they ask for (as Triton's and KServe's clients do) are
    read by the compiled path (the Python fast path gives them to the careful path) with the
    careful path's rows; a response's values never come from a request's outputs."""
    recs = records(calls(4, n=30), FMT)
    for r in recs:
        body = json.loads(r.value)
        if "inputs" not in body:
            continue
        if outputs == "first":
            body = {"outputs": [{"name": "probabilities"}], **body}
        elif outputs == "tensors":
            resp = next(json.loads(x.value) for x in recs if b'"outputs"' in x.value)
            body["outputs"] = resp["outputs"]
        else:
            body["outputs"] = outputs
        r.value = json.dumps(body).encode()
    clean = records(calls(4, n=30), FMT)
    dec, careful = warm(clean), warm(clean, fast=False)
    assert compiled(dec, recs) is not None
    got, want = outcome(dec, copy.deepcopy(recs)), outcome(careful, copy.deepcopy(recs))
    same(got, want)
    assert len(got[0]) == len(got[1]) > 0 and got[2] == []


def test_a_request_asking_for_outputs_in_broken_json_is_declined() -> None:
    recs = records(calls(4, n=10), FMT)
    req = next(r for r in recs if b'"inputs"' in r.value)
    req.value = req.value[:-1] + b', "outputs": [{"name": "p"},]}'
    clean = records(calls(4, n=10), FMT)
    dec, careful = warm(clean), warm(clean, fast=False)
    assert compiled(dec, recs) is None
    got = outcome(dec, copy.deepcopy(recs))
    same(got, outcome(careful, copy.deepcopy(recs)))
    assert len(got[2]) == 1  # the broken record is dead-lettered


def test_a_compiled_decoder_that_raises_leaves_batches_to_python_and_is_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A compiled function declines by returning None; one that raises is a bug: the batch is
    decoded by the Python paths all the same (the consumer never dies of it), and the first
    failure is logged with its traceback, not every batch's."""
    import logging

    from monitor.ingest import native as native_module

    class Broken:
        def decode_oip(self, *args: Any) -> Any:
            raise RuntimeError("a bug")

    monkeypatch.setattr(native_module, "_module", Broken())
    monkeypatch.setattr(native_module, "_failed", set())
    recs = records(calls(2, n=10), FMT)
    dec, careful = warm(recs), warm(recs, fast=False)
    with caplog.at_level(logging.ERROR, logger="monitor.ingest.native"):
        got = [outcome(dec, copy.deepcopy(recs)) for _ in range(3)]
    want = outcome(careful, copy.deepcopy(recs))
    for g in got:
        same(g, want)
    assert [r.getMessage() for r in caplog.records] == [
        "compiled decoder decode_oip failed; the Python paths decode instead"
    ]
    assert caplog.records[0].exc_info is not None
