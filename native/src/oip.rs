//! Open Inference Protocol v2 JSON records (bare, as `oip-json` reads them): a poll's records
//! into the columns of `monitor/ingest/serving_fast.py`, with the decisions' row keys.
//!
//! The batch's *layout* (each half's tensors: name, datatype, dimensions after the first, rows
//! nested or flat) was learned by the Python path from earlier records; here each record is
//! read once (`json.rs`, borrowing its strings), checked against that layout exactly as the
//! typed msgspec structs check it (every tensor's every value, not only the mapped ones:
//! `payload.rs`), and the mapped columns are cut from it. Anything else — another layout, a
//! record without an id, a number wider than int64, a tombstone, a record over the size limit,
//! an id holding a NUL — declines the whole batch (`None`), and the Python paths decode it as
//! they would without this module.
use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyString, PyTuple};
use pyo3::{intern, IntoPyObjectExt};

use crate::decide::decide;
use crate::keys;
use crate::payload::{payload, slots, Sink, Slot, Value};

/// Declines the batch: the Python paths decode it.
pub struct Decline;

pub type Res<T> = Result<T, Decline>;

/// Where a mapped column is: (tensor position, column) in its half's layout.
type Place = (usize, usize);

/// One half of the batch: rows per call, the mapped columns, the rows' keys.
struct Half<'a> {
    rows: Vec<i64>,
    columns: Vec<Vec<Value<'a>>>,
    keys: Vec<u64>,
    longest: u64,
    times: Vec<f64>, // per row: its record's time
    which: Vec<i64>, // per row: its record's place in the batch
}

impl Half<'_> {
    fn new(n_columns: usize) -> Self {
        Half {
            rows: Vec::new(),
            columns: (0..n_columns).map(|_| Vec::new()).collect(),
            keys: Vec::new(),
            longest: 0,
            times: Vec::new(),
            which: Vec::new(),
        }
    }

    /// A call's id, rows, time and place (its values went to the columns as it was read).
    fn add(&mut self, id: &str, rows: i64, time: f64, at: usize) -> Res<()> {
        if id.contains('\0') {
            return Err(Decline); // the careful path refuses it by name
        }
        self.longest = self.longest.max(keys::row_keys(id, rows, &mut self.keys));
        self.rows.push(rows);
        let n = rows as usize;
        self.times.extend(std::iter::repeat_n(time, n));
        self.which.extend(std::iter::repeat_n(at as i64, n));
        Ok(())
    }
}

/// Per tensor position of `layout`, the (column, output column) pairs of `places`; None when
/// a column is past its tensor's width (the Python paths say why).
fn keep(layout: &[Slot], places: &[Place]) -> Option<Vec<Vec<(usize, usize)>>> {
    let mut out = vec![Vec::new(); layout.len()];
    for (c, &(k, col)) in places.iter().enumerate() {
        if col as i64 >= layout.get(k)?.width {
            return None;
        }
        out[k].push((col, c));
    }
    Some(out)
}

/// A row's value as a score (a number) / as a decision (0 or 1), None when it is not one.
fn score(v: &Value<'_>) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn decision(v: &Value<'_>) -> Option<u8> {
    match v {
        Value::Bool(b) => Some(u8::from(*b)),
        Value::Int(i @ (0 | 1)) => Some(*i as u8),
        _ => None,
    }
}

/// A column's values as Python objects; each distinct text made once (groups repeat: a few
/// are looked up linearly, more by hash).
fn py_column<'py>(py: Python<'py>, col: &[Value<'_>]) -> PyResult<Bound<'py, PyList>> {
    let mut few: Vec<(&str, Bound<'py, PyAny>)> = Vec::new();
    let mut many: HashMap<&str, Bound<'py, PyAny>> = HashMap::new();
    let mut items: Vec<Bound<'py, PyAny>> = Vec::with_capacity(col.len());
    for v in col {
        items.push(match v {
            Value::Text(s) => {
                let s = s.as_ref();
                if let Some((_, o)) = few.iter().find(|(t, _)| *t == s) {
                    o.clone()
                } else if few.len() < 16 {
                    let o = PyString::new(py, s).into_any();
                    few.push((s, o.clone()));
                    o
                } else {
                    many.entry(s)
                        .or_insert_with(|| PyString::new(py, s).into_any())
                        .clone()
                }
            }
            Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
            Value::Int(i) => i.into_bound_py_any(py)?,
            Value::Float(f) => f.into_bound_py_any(py)?,
        });
    }
    PyList::new(py, items)
}

fn i64_bytes<'py>(py: Python<'py>, v: &[i64]) -> Bound<'py, PyAny> {
    let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &raw).into_any()
}

fn u64_bytes<'py>(py: Python<'py>, v: &[u64]) -> Bound<'py, PyAny> {
    let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &raw).into_any()
}

fn f64_bytes<'py>(py: Python<'py>, v: impl Iterator<Item = f64>) -> Bound<'py, PyAny> {
    let raw: Vec<u8> = v.flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &raw).into_any()
}

/// Decodes a poll's bare OIP JSON records of one model, or declines (`None`).
///
/// `request` / `response`: the layout, `[(name, datatype, trailing dims, nested)]` per tensor;
/// `attributes`: `(tensor, column)` of each attribute column in the request layout;
/// `decisions`: `(tensor, column)` of the score and of the decision in the response layout
/// (`None`: not mapped). Returns `(is request: bytes, record times ms: f64 bytes (NaN: none),
/// then per half (requests, responses): rows per call (i64 bytes), the rows' keys (u64 bytes),
/// the longest row id; the attribute columns (lists), the scores (f64 bytes or None), the
/// decisions (i64 bytes or None))`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (records, request, response, attributes, decisions, threshold, model, bounds, max_bytes, max_elements))]
pub fn decode_oip<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    request: &Bound<'py, PyAny>,
    response: &Bound<'py, PyAny>,
    attributes: Vec<Place>,
    decisions: (Option<Place>, Option<Place>),
    threshold: Option<f64>,
    model: &str,
    bounds: (f64, f64),
    max_bytes: usize,
    max_elements: i64,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let (Some(req_layout), Some(resp_layout)) = (slots(request)?, slots(response)?) else {
        return Ok(None);
    };
    let (value, stamp) = (intern!(py, "value"), intern!(py, "timestamp"));
    let mut bodies: Vec<Bound<'py, PyBytes>> = Vec::with_capacity(records.len());
    let mut times = Vec::with_capacity(records.len());
    for r in records.iter() {
        let Ok(body) = r.getattr(value)?.cast_into::<PyBytes>() else {
            return Ok(None); // a tombstone, or no bytes
        };
        if body.as_bytes().len() > max_bytes {
            return Ok(None);
        }
        bodies.push(body);
        let t = r.getattr(stamp)?;
        let ms = match t.extract::<i64>() {
            Ok(ms) => ms as f64,                              // Kafka's milliseconds
            Err(_) => t.extract::<f64>().unwrap_or(f64::NAN), // None: no time
        };
        let seconds = ms / 1000.0;
        if !(ms > 0.0 && seconds >= bounds.0 && seconds <= bounds.1) {
            return Ok(None); // no record time, or out of bounds: the Python paths judge it
        }
        times.push(seconds);
    }
    let resp_places: Vec<Place> = [decisions.0, decisions.1].into_iter().flatten().collect();
    let (Some(req_keep), Some(resp_keep)) = (
        keep(&req_layout, &attributes),
        keep(&resp_layout, &resp_places),
    ) else {
        return Ok(None);
    };
    let mut asked = Half::new(attributes.len());
    let mut answered = Half::new(resp_places.len());
    for (at, body) in bodies.iter().enumerate() {
        let Ok(text) = std::str::from_utf8(body.as_bytes()) else {
            return Ok(None);
        };
        let mut request = Sink {
            layout: &req_layout,
            keep: &req_keep,
            columns: &mut asked.columns,
        };
        let mut response = Sink {
            layout: &resp_layout,
            keep: &resp_keep,
            columns: &mut answered.columns,
        };
        let Ok(p) = payload(text, &mut request, &mut response, max_elements) else {
            return Ok(None);
        };
        let id = match &p.id {
            Some(id) if !id.is_empty() => id,
            _ => return Ok(None), // the record's header, or none: the Python paths
        };
        let done = match (p.inputs, p.outputs) {
            (Some(rows), None) => asked.add(id, rows, times[at], at),
            (None, Some(rows)) => {
                if p.model_name.as_deref().is_some_and(|m| m != model) {
                    return Ok(None);
                }
                answered.add(id, rows, times[at], at)
            }
            _ => return Ok(None),
        };
        if done.is_err() {
            return Ok(None);
        }
    }
    let columns = PyList::empty(py);
    for col in &asked.columns {
        columns.append(py_column(py, col)?)?;
    }
    let mut cols = answered.columns.iter();
    let scored = decisions.0.and_then(|_| cols.next());
    let decided = decisions.1.and_then(|_| cols.next());
    let (scored, decided) = (
        scored.map(|c| c.iter().map(score)),
        decided.map(|c| c.iter().map(decision)),
    );
    let Some((scores, preds)) = decide(answered.times.len(), scored, decided, threshold) else {
        return Ok(None);
    };
    let items: Vec<Bound<'py, PyAny>> = vec![
        i64_bytes(py, &asked.rows),
        u64_bytes(py, &asked.keys),
        asked.longest.into_bound_py_any(py)?,
        f64_bytes(py, asked.times.iter().copied()),
        columns.into_any(),
        i64_bytes(py, &answered.rows),
        u64_bytes(py, &answered.keys),
        answered.longest.into_bound_py_any(py)?,
        f64_bytes(py, answered.times.iter().copied()),
        i64_bytes(py, &answered.which),
        f64_bytes(py, scores.into_iter()),
        PyBytes::new(py, &preds).into_any(),
    ];
    Ok(Some(PyTuple::new(py, items)?))
}
