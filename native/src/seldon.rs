//! Seldon Core 2's protobuf records (`ModelInferRequest` / `ModelInferResponse` on Kafka),
//! a whole poll batch at a time: the compiled twin of `SeldonFast._decode`
//! (`monitor/ingest/seldon_fast.py`).
//!
//! Why: a single-row call is two records per decision, and upb's parse plus Python's per-record
//! and per-tensor work cost several times the monitor-JSON path's whole decode. Here the records
//! are read, parsed, checked and cut into columns in one call.
//!
//! Parsing borrows from the records' bytes (no allocation per message or tensor): the messages
//! are walked with prost's wire-format functions (`seldon_wire.rs`), each tensor's contents
//! are read only when its position's values are gathered over the batch (`seldon_half.rs`),
//! and the rare parts (parameters, requested outputs) are only validated, by prost messages.
//! Here: the records read from Python, the halves checked and keyed, the columns returned.
//!
//! The rule is the crate's: anything the Python fast path would give up on, and anything merely
//! unusual (a known field of an unexpected wire type, a contents message given twice, a bool
//! other than 0/1, an int32 or uint32 varint out of its type's range), returns `None` and the
//! Python paths decode the batch. Nothing here raises on data or panics (the pure-Rust part
//! runs under `catch_unwind` all the same). What it accepts decodes to exactly the Python fast
//! path's columns (`tests/ingest/test_seldon_native.py`).
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::decide::decide;
use crate::keys;
use crate::seldon_half::{Allowed, Half, Place, Value, REQUEST, RESPONSE};
use crate::seldon_wire::{parse, Arena};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};

/// What `decode_seldon` is asked, besides the records.
struct Ask<'a> {
    max_rows: i64,
    max_id_length: usize,
    attrs: Option<&'a [Place]>,
    score: Option<&'a Place>,
    pred: Option<&'a Place>,
    threshold: Option<f64>,
}

/// The batch's columns, before they become Python objects.
struct Out<'a> {
    asked: Half<'a>,
    answered: Half<'a>,
    q_keys: Vec<u64>,
    a_keys: Vec<u64>,
    columns: Vec<Vec<Value<'a>>>,
    scores: Vec<f64>,
    preds: Vec<u8>,
}

/// The rows' keys of a half (`keys.rs`), None when a row id is past `max_id_length`.
fn keyed(h: &Half<'_>, max_id_length: usize) -> Option<Vec<u64>> {
    let mut out = Vec::with_capacity(h.rows.iter().sum::<i64>().max(0) as usize);
    for (id, &r) in h.ids.iter().zip(&h.rows) {
        if keys::row_keys(id, r, &mut out) as usize > max_id_length {
            return None;
        }
    }
    Some(out)
}

/// The batch's records (bytes, response or not, x-request-id) → the checked columns.
fn columns<'a>(records: &[(&'a [u8], bool, Option<&'a str>)], ask: &Ask<'_>) -> Option<Out<'a>> {
    let n = records.len();
    let mut arena = Arena {
        tensors: Vec::with_capacity(2 * n),
        raws: vec![],
    };
    let half = || (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut asked, mut answered) = (half(), half());
    for &(value, response, header_id) in records {
        let half = if response { &mut answered } else { &mut asked };
        half.0.push(parse(value, response, &mut arena)?);
        half.1.push(header_id);
    }
    let asked = Half::check(&asked.0, &arena, &asked.1, ask.max_rows)?;
    let answered = Half::check(&answered.0, &arena, &answered.1, ask.max_rows)?;
    let q_keys = keyed(&asked, ask.max_id_length)?;
    let a_keys = keyed(&answered, ask.max_id_length)?;
    let mut columns = vec![];
    if !asked.ids.is_empty() {
        for at in ask.attrs.unwrap_or(&[]) {
            columns.push(asked.column(at, Allowed::Any)?);
        }
    }
    let n = answered.n_rows();
    let (scores, preds) = if n == 0 {
        (Vec::new(), Vec::new())
    } else {
        let scored = match ask.score {
            Some(at) => Some(answered.column(at, Allowed::Number)?),
            None => None,
        };
        let decided = match ask.pred {
            Some(at) => Some(answered.column(at, Allowed::Decision)?),
            None => None,
        };
        decide(
            n,
            scored.map(|c| c.into_iter().map(score)),
            decided.map(|c| c.into_iter().map(decision)),
            ask.threshold,
        )?
    };
    Some(Out {
        asked,
        answered,
        q_keys,
        a_keys,
        columns,
        scores,
        preds,
    })
}

/// A row's value as a score (a number) / as a decision (0 or 1), None when it is not one.
fn score(v: Value<'_>) -> Option<f64> {
    match v {
        Value::Int(x) => Some(x as f64),
        Value::UInt(x) => Some(x as f64),
        Value::Float(x) => Some(x),
        _ => None,
    }
}

fn decision(v: Value<'_>) -> Option<u8> {
    match v {
        Value::Bool(x) => Some(u8::from(x)),
        Value::Int(x @ (0 | 1)) => Some(x as u8),
        Value::UInt(x @ (0 | 1)) => Some(x as u8),
        _ => None,
    }
}

/// A record as read from Python: its value, half, x-request-id (None: absent or not UTF-8)
/// and time (seconds).
struct Record<'py> {
    value: Bound<'py, PyBytes>,
    response: bool,
    header_id: Option<Bound<'py, PyBytes>>,
    seconds: f64,
}

/// The record's half and x-request-id from its headers (`_kind`, `header`); None: decline.
/// Calls `f` on each item of a list, tuple or other iterable (lists and tuples without an
/// iterator object: one per record would feed Python's garbage collector).
fn each<'py>(
    seq: &Bound<'py, PyAny>,
    mut f: impl FnMut(Bound<'py, PyAny>) -> Option<()>,
) -> Option<()> {
    if let Ok(list) = seq.cast::<PyList>() {
        list.iter().try_for_each(f)
    } else if let Ok(tuple) = seq.cast::<PyTuple>() {
        tuple.iter().try_for_each(f)
    } else {
        seq.try_iter().ok()?.try_for_each(|x| f(x.ok()?))
    }
}

fn headers<'py>(
    headers: &Bound<'py, PyAny>,
    default: bool,
) -> Option<(bool, Option<Bound<'py, PyBytes>>)> {
    let (mut kind, mut id) = (None, None);
    if headers.is_none() {
        return Some((default, None));
    }
    each(headers, |item| {
        let pair = item.cast::<PyTuple>().ok()?;
        if pair.len() != 2 {
            return None;
        }
        let key = pair.get_borrowed_item(0).ok()?;
        let key = key.cast::<PyString>().ok()?;
        let key = key.to_str().ok()?;
        if !key.is_ascii() {
            return None; // str.lower() is Unicode's: leave such keys to Python
        }
        if kind.is_none() && key.eq_ignore_ascii_case("seldon-infer-type") {
            let value = pair.get_borrowed_item(1).ok()?;
            kind = Some(match value.cast::<PyBytes>().ok()?.as_bytes() {
                REQUEST => false,
                RESPONSE => true,
                _ => return None,
            });
        } else if id.is_none() && key.eq_ignore_ascii_case("x-request-id") {
            let value = pair.get_item(1).ok()?;
            if !value.is_none() {
                let b = value.cast_into::<PyBytes>().ok()?;
                id = (!b.as_bytes().is_empty()).then_some(b);
            }
        }
        Some(())
    })?;
    Some((kind.unwrap_or(default), id))
}

fn read<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyAny>,
    default: bool,
    max_record_bytes: usize,
    lo: f64,
    hi: f64,
) -> Option<Vec<Record<'py>>> {
    let mut out = Vec::with_capacity(records.len().unwrap_or(0));
    each(records, |r| {
        let value = r
            .getattr(intern!(py, "value"))
            .ok()?
            .cast_into::<PyBytes>()
            .ok()?;
        if value.as_bytes().len() > max_record_bytes {
            return None;
        }
        let (response, header_id) = headers(&r.getattr(intern!(py, "headers")).ok()?, default)?;
        let stamp = r.getattr(intern!(py, "timestamp")).ok()?;
        let ms: i64 = stamp.cast::<PyInt>().ok()?.extract().ok()?;
        let seconds = ms as f64 / 1000.0;
        if ms <= 0 || !(lo..=hi).contains(&seconds) {
            return None;
        }
        out.push(Record {
            value,
            response,
            header_id,
            seconds,
        });
        Some(())
    })?;
    Some(out)
}

/// A bytearray of the values' native bytes (numpy reads it with `frombuffer`, writable).
fn array<'py, T: Copy, const N: usize>(
    py: Python<'py>,
    v: impl Iterator<Item = T>,
    bytes: fn(T) -> [u8; N],
) -> PyResult<Bound<'py, PyAny>> {
    let v: Vec<T> = v.collect();
    let out = PyByteArray::new_with(py, v.len() * N, |buf| {
        for (chunk, &x) in buf.chunks_exact_mut(N).zip(&v) {
            chunk.copy_from_slice(&bytes(x));
        }
        Ok(())
    })?;
    Ok(out.into_any())
}

/// Each row's record time, or record index, repeated per row of its record.
fn per_row<'a, T: Copy>(of: &'a [T], rows: &'a [i64]) -> impl Iterator<Item = T> + 'a {
    of.iter()
        .zip(rows)
        .flat_map(|(&x, &r)| std::iter::repeat_n(x, r as usize))
}

fn to_py<'py>(py: Python<'py>, v: Value<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::Int(x) => x.into_pyobject(py)?.into_any(),
        Value::UInt(x) => x.into_pyobject(py)?.into_any(),
        Value::Float(x) => PyFloat::new(py, x).into_any(),
        Value::Bool(x) => PyBool::new(py, x).to_owned().into_any(),
    })
}

/// A whole batch of Seldon Core 2 records → `(request ids, their rows (int64 bytes), each
/// row's time (float64 bytes), the attribute columns, response ids, rows, times, scores
/// (float64), decisions (uint8), each response row's record index (int64), the request rows'
/// keys and the response rows' keys (uint64))`, or None to decline (the arrays as bytearrays
/// of native byte order, for `numpy.frombuffer`). `responses`: records without a
/// `seldon-infer-type` header are responses (read from the responses topic). `lo`, `hi`: the
/// accepted record times (seconds). `attrs`: the request columns (None: none, the stream
/// mapping); `score`, `pred`: where the response's are; `threshold`: decides without `pred`.
#[pyfunction]
#[pyo3(signature = (records, responses, max_record_bytes, max_rows, max_id_length, lo, hi, attrs, score, pred, threshold))]
#[allow(clippy::too_many_arguments)]
pub fn decode_seldon<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyAny>,
    responses: bool,
    max_record_bytes: usize,
    max_rows: i64,
    max_id_length: usize,
    lo: f64,
    hi: f64,
    attrs: Option<Vec<Place>>,
    score: Option<Place>,
    pred: Option<Place>,
    threshold: Option<f64>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Some(recs) = read(py, records, responses, max_record_bytes, lo, hi) else {
        return Ok(None);
    };
    let values: Vec<&[u8]> = recs.iter().map(|r| r.value.as_bytes()).collect();
    let header_ids: Vec<Option<&str>> = recs
        .iter()
        .map(|r| {
            r.header_id
                .as_ref()
                .and_then(|b| std::str::from_utf8(b.as_bytes()).ok())
        })
        .collect();
    let kinds: Vec<bool> = recs.iter().map(|r| r.response).collect();
    let ask = Ask {
        max_rows,
        max_id_length,
        attrs: attrs.as_deref(),
        score: score.as_ref(),
        pred: pred.as_ref(),
        threshold,
    };
    // the pure part: parse and check (no Python objects; a panic declines)
    let input: Vec<(&[u8], bool, Option<&str>)> = values
        .iter()
        .zip(&kinds)
        .zip(&header_ids)
        .map(|((&v, &k), &h)| (v, k, h))
        .collect();
    let out = catch_unwind(AssertUnwindSafe(|| columns(&input, &ask)));
    let Ok(Some(out)) = out else {
        return Ok(None);
    };
    let times: Vec<f64> = recs.iter().map(|r| r.seconds).collect();
    let (q_times, a_times, a_index): (Vec<f64>, Vec<f64>, Vec<i64>) = {
        let (mut q, mut a, mut w) = (vec![], vec![], vec![]);
        for (i, (&t, &resp)) in times.iter().zip(&kinds).enumerate() {
            if resp {
                a.push(t);
                w.push(i as i64);
            } else {
                q.push(t);
            }
        }
        (q, a, w)
    };
    let (asked, answered) = (&out.asked, &out.answered);
    let cols = PyList::empty(py);
    for c in &out.columns {
        let items: Vec<Bound<'py, PyAny>> =
            c.iter().map(|&v| to_py(py, v)).collect::<PyResult<_>>()?;
        cols.append(PyList::new(py, items)?)?;
    }
    let items: Vec<Bound<'py, PyAny>> = vec![
        PyList::new(py, &asked.ids)?.into_any(),
        array(py, asked.rows.iter().copied(), i64::to_ne_bytes)?,
        array(py, per_row(&q_times, &asked.rows), f64::to_ne_bytes)?,
        cols.into_any(),
        PyList::new(py, &answered.ids)?.into_any(),
        array(py, answered.rows.iter().copied(), i64::to_ne_bytes)?,
        array(py, per_row(&a_times, &answered.rows), f64::to_ne_bytes)?,
        array(py, out.scores.iter().copied(), f64::to_ne_bytes)?,
        PyByteArray::new(py, &out.preds).into_any(),
        array(py, per_row(&a_index, &answered.rows), i64::to_ne_bytes)?,
        array(py, out.q_keys.iter().copied(), u64::to_ne_bytes)?,
        array(py, out.a_keys.iter().copied(), u64::to_ne_bytes)?,
    ];
    Ok(Some(PyTuple::new(py, items)?))
}
