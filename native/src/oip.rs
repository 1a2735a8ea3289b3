//! Open Inference Protocol v2 JSON records (bare, as `oip-json` reads them): a poll's records
//! into the columns of `monitor/ingest/serving_fast.py`.
//!
//! The batch's *layout* (each half's tensors: name, datatype, dimensions after the first, rows
//! nested or flat) was learned by the Python path from earlier records; here each record is
//! parsed once (serde_json, borrowing its strings), checked against that layout exactly as the
//! typed msgspec structs check it (every tensor's every value, not only the mapped ones), and
//! the mapped columns are cut from it. Anything else — another layout, a record without an id,
//! a number wider than int64, a tombstone, a record over the size limit — declines the whole
//! batch (`None`), and the Python paths decode it as they would without this module.
use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyString, PyTuple};
use pyo3::{intern, IntoPyObjectExt};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::keys;

/// Declines the batch: the Python paths decode it.
struct Decline;

type Res<T> = Result<T, Decline>;

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow, default)]
    inputs: Option<Vec<Tensor<'a>>>,
    #[serde(borrow, default)]
    outputs: Option<Vec<Tensor<'a>>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model_name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Tensor<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    shape: Vec<i64>,
    #[serde(borrow)]
    datatype: Cow<'a, str>,
    #[serde(borrow)]
    data: Vec<&'a RawValue>,
}

/// One tensor of a layout: its name, datatype, dimensions after the first, nested rows.
struct Slot {
    name: String,
    kind: Kind,
    datatype: String,
    trailing: Vec<i64>,
    width: i64,
    nested: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bool,
    Bytes,
    Float,
    Int(i64, i64),
}

fn kind(datatype: &str) -> Option<Kind> {
    let (lo, hi) = match datatype {
        "BOOL" => return Some(Kind::Bool),
        "BYTES" => return Some(Kind::Bytes),
        "FP16" | "FP32" | "FP64" => return Some(Kind::Float),
        "UINT8" => (0, 255),
        "UINT16" => (0, 65_535),
        "UINT32" => (0, 4_294_967_295),
        "UINT64" => (0, i64::MAX), // past int64: the Python paths (as msgspec's bound)
        "INT8" => (-128, 127),
        "INT16" => (-32_768, 32_767),
        "INT32" => (-2_147_483_648, 2_147_483_647),
        "INT64" => (i64::MIN, i64::MAX),
        _ => return None,
    };
    Some(Kind::Int(lo, hi))
}

/// A value of a tensor, as msgspec gives it to Python.
enum Value<'a> {
    Bool(bool),
    Text(Cow<'a, str>),
    Int(i64),
    Float(f64),
}

impl Value<'_> {
    fn number(&self) -> f64 {
        match self {
            Value::Bool(b) => f64::from(u8::from(*b)),
            Value::Int(i) => *i as f64,
            Value::Float(f) => *f,
            Value::Text(_) => f64::NAN,
        }
    }

    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Value::Bool(b) => Ok(PyBool::new(py, *b).to_owned().into_any()),
            Value::Text(s) => Ok(PyString::new(py, s).into_any()),
            Value::Int(i) => i.into_bound_py_any(py),
            Value::Float(f) => f.into_bound_py_any(py),
        }
    }
}

/// One JSON value of a tensor's data, checked against its datatype.
fn element<'a>(raw: &'a RawValue, kind: Kind) -> Res<Value<'a>> {
    let text = raw.get();
    let first = *text.as_bytes().first().ok_or(Decline)?;
    match kind {
        Kind::Bool => match text {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(Decline),
        },
        Kind::Bytes if first == b'"' => Ok(Value::Text(
            serde_json::from_str::<Cow<'a, str>>(text).map_err(|_| Decline)?,
        )),
        Kind::Bytes => Err(Decline),
        _ if first != b'-' && !first.is_ascii_digit() => Err(Decline),
        Kind::Int(lo, hi) => {
            let v: i64 = text.parse().map_err(|_| Decline)?; // a fraction or exponent: no int
            if v < lo || v > hi {
                return Err(Decline);
            }
            Ok(Value::Int(v))
        }
        Kind::Float if text.bytes().any(|c| matches!(c, b'.' | b'e' | b'E')) => {
            let v: f64 = text.parse().map_err(|_| Decline)?;
            if !v.is_finite() {
                return Err(Decline); // msgspec refuses a number past a float's range
            }
            Ok(Value::Float(v))
        }
        Kind::Float => Ok(Value::Int(text.parse().map_err(|_| Decline)?)), // an int stays one
    }
}

/// Rows of one tensor, every value checked; the values of column `keep` (if any) collected.
fn check_tensor<'a>(
    t: &Tensor<'a>,
    slot: &Slot,
    max_elements: i64,
    keep: Option<usize>,
    out: &mut Vec<Value<'a>>,
) -> Res<i64> {
    if t.name != slot.name
        || t.datatype != slot.datatype
        || t.shape.len() != slot.trailing.len() + 1
    {
        return Err(Decline);
    }
    if t.shape[1..] != slot.trailing[..] {
        return Err(Decline);
    }
    let rows = t.shape[0];
    if rows < 1 || rows > max_elements / slot.width {
        return Err(Decline);
    }
    let data = &t.data;
    let width = slot.width as usize;
    if slot.nested {
        if data.len() as i64 != rows {
            return Err(Decline);
        }
        for row in data.iter() {
            let cells: Vec<&'a RawValue> = serde_json::from_str(row.get()).map_err(|_| Decline)?;
            if cells.len() != width {
                return Err(Decline);
            }
            for (c, cell) in cells.into_iter().enumerate() {
                let v = element(cell, slot.kind)?;
                if keep == Some(c) {
                    out.push(v);
                }
            }
        }
    } else {
        if data.len() as i64 != rows * slot.width {
            return Err(Decline);
        }
        for (i, raw) in data.iter().enumerate() {
            let v = element(raw, slot.kind)?;
            if keep == Some(i % width) {
                out.push(v);
            }
        }
    }
    Ok(rows)
}

fn slots(sig: &Bound<'_, PyAny>) -> PyResult<Option<Vec<Slot>>> {
    let mut out = Vec::new();
    for item in sig.try_iter()? {
        let (name, datatype, trailing, nested): (String, String, Vec<i64>, bool) =
            item?.extract()?;
        let Some(kind) = kind(&datatype) else {
            return Ok(None);
        };
        let width = trailing.iter().product::<i64>();
        if width < 1 {
            return Ok(None);
        }
        out.push(Slot {
            name,
            kind,
            datatype,
            trailing,
            width,
            nested,
        });
    }
    Ok(Some(out))
}

/// Where a mapped column is: (tensor position, column) in its half's layout.
type Place = (usize, usize);

/// One half of the batch: ids, rows per call, and the mapped columns.
struct Half<'a> {
    ids: Vec<Cow<'a, str>>,
    rows: Vec<i64>,
    columns: Vec<Vec<Value<'a>>>,
    keys: Vec<u64>,
    longest: u64,
}

impl<'a> Half<'a> {
    fn new(n_columns: usize) -> Self {
        Half {
            ids: Vec::new(),
            rows: Vec::new(),
            columns: (0..n_columns).map(|_| Vec::new()).collect(),
            keys: Vec::new(),
            longest: 0,
        }
    }

    fn add(
        &mut self,
        id: Cow<'a, str>,
        tensors: &[Tensor<'a>],
        layout: &[Slot],
        places: &[Place],
        max: i64,
    ) -> Res<()> {
        if tensors.len() != layout.len() {
            return Err(Decline);
        }
        let mut rows = 0;
        for (k, (t, slot)) in tensors.iter().zip(layout).enumerate() {
            // a tensor may hold several mapped columns: collect the first here, the rest below
            let first = places.iter().position(|p| p.0 == k);
            let mut scratch = Vec::new();
            let r = match first {
                Some(c) => check_tensor(t, slot, max, Some(places[c].1), &mut self.columns[c])?,
                None => check_tensor(t, slot, max, None, &mut scratch)?,
            };
            if k > 0 && r != rows {
                return Err(Decline);
            }
            rows = r;
            for (c, p) in places.iter().enumerate() {
                if p.0 == k && Some(c) != first {
                    check_tensor(t, slot, max, Some(p.1), &mut self.columns[c])?;
                }
            }
        }
        if id.contains('\0') {
            return Err(Decline); // the careful path refuses it by name
        }
        self.longest = self.longest.max(keys::row_keys(&id, rows, &mut self.keys));
        self.ids.push(id);
        self.rows.push(rows);
        Ok(())
    }
}

fn i64_bytes<'py>(py: Python<'py>, v: &[i64]) -> Bound<'py, PyBytes> {
    let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &raw)
}

fn u64_bytes<'py>(py: Python<'py>, v: &[u64]) -> Bound<'py, PyBytes> {
    let raw: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &raw)
}

fn f64_bytes<'py>(py: Python<'py>, v: impl Iterator<Item = f64>) -> Bound<'py, PyBytes> {
    let raw: Vec<u8> = v.flat_map(|x| x.to_le_bytes()).collect();
    PyBytes::new(py, &raw)
}

/// Decodes a poll's bare OIP JSON records of one model, or declines (`None`).
///
/// `request` / `response`: the layout, `[(name, datatype, trailing dims, nested)]` per tensor;
/// `attributes`: `(tensor, column)` of each attribute column in the request layout;
/// `decisions`: `(tensor, column)` of the score and of the decision in the response layout
/// (`None`: not mapped). Returns `(is request: bytes, record times ms: f64 bytes (NaN: none),
/// request ids, rows per request: i64 bytes, attribute columns, response ids, rows per
/// response, scores (f64 bytes or None), decisions (i64 bytes or None))`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (records, request, response, attributes, decisions, model, max_bytes, max_elements))]
pub fn decode_oip<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    request: &Bound<'py, PyAny>,
    response: &Bound<'py, PyAny>,
    attributes: Vec<Place>,
    decisions: (Option<Place>, Option<Place>),
    model: &str,
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
            return Ok(None);
        };
        if body.as_bytes().len() > max_bytes {
            return Ok(None);
        }
        bodies.push(body);
        let t = r.getattr(stamp)?;
        times.push(if t.is_none() {
            f64::NAN
        } else {
            t.extract::<f64>().unwrap_or(f64::NAN)
        });
    }
    let resp_places: Vec<Place> = [decisions.0, decisions.1].into_iter().flatten().collect();
    let mut asked = Half::new(attributes.len());
    let mut answered = Half::new(resp_places.len());
    let mut is_request = Vec::with_capacity(bodies.len());
    for body in &bodies {
        let Ok(text) = std::str::from_utf8(body.as_bytes()) else {
            return Ok(None);
        };
        let Ok(p) = serde_json::from_str::<Payload>(text) else {
            return Ok(None);
        };
        let id = match p.id {
            Some(id) if !id.is_empty() => id,
            _ => return Ok(None), // the record's header, or none: the Python paths
        };
        let done = match (&p.inputs, &p.outputs) {
            (Some(inputs), None) => asked.add(id, inputs, &req_layout, &attributes, max_elements),
            (None, Some(outputs)) => {
                if p.model_name.as_deref().is_some_and(|m| m != model) {
                    return Ok(None);
                }
                answered.add(id, outputs, &resp_layout, &resp_places, max_elements)
            }
            _ => return Ok(None),
        };
        if done.is_err() {
            return Ok(None);
        }
        is_request.push(u8::from(p.inputs.is_some()));
    }
    let columns = PyList::empty(py);
    for col in &asked.columns {
        let values = PyList::empty(py);
        for v in col {
            values.append(v.to_py(py)?)?;
        }
        columns.append(values)?;
    }
    let mut cols = answered.columns.iter();
    let scores = decisions.0.map(|_| cols.next());
    let preds = decisions.1.map(|_| cols.next());
    let scores = match scores.flatten() {
        Some(c) => f64_bytes(py, c.iter().map(Value::number)).into_any(),
        None => py.None().into_bound(py),
    };
    let preds = match preds.flatten() {
        Some(c) => {
            let mut out = Vec::with_capacity(c.len());
            for v in c {
                match v {
                    Value::Bool(b) => out.push(i64::from(*b)),
                    Value::Int(i) => out.push(*i),
                    _ => return Ok(None),
                }
            }
            i64_bytes(py, &out).into_any()
        }
        None => py.None().into_bound(py),
    };
    let items: Vec<Bound<'py, PyAny>> = vec![
        PyBytes::new(py, &is_request).into_any(),
        f64_bytes(py, times.into_iter()).into_any(),
        PyList::new(py, asked.ids.iter().map(|s| s.as_ref()))?.into_any(),
        i64_bytes(py, &asked.rows).into_any(),
        u64_bytes(py, &asked.keys).into_any(),
        asked.longest.into_bound_py_any(py)?,
        columns.into_any(),
        PyList::new(py, answered.ids.iter().map(|s| s.as_ref()))?.into_any(),
        i64_bytes(py, &answered.rows).into_any(),
        u64_bytes(py, &answered.keys).into_any(),
        answered.longest.into_bound_py_any(py)?,
        scores,
        preds,
    ];
    Ok(Some(PyTuple::new(py, items)?))
}
