//! Seldon Core 2's protobuf records (`ModelInferRequest` / `ModelInferResponse` on Kafka),
//! a whole poll batch at a time: the compiled twin of `SeldonFast._decode`
//! (`monitor/ingest/seldon_fast.py`).
//!
//! Why: a single-row call is two records per decision, and upb's parse plus Python's per-record
//! and per-tensor work cost several times the monitor-JSON path's whole decode. Here the records
//! are read, parsed (prost), checked and cut into columns in one call.
//!
//! The rule is the crate's: anything the Python fast path would give up on, and anything merely
//! unusual, returns `None` (the Python paths then decode the batch). Nothing here raises on
//! data or panics (the pure-Rust part runs under `catch_unwind` all the same). What it accepts
//! decodes to exactly the Python fast path's columns (`tests/ingest/test_seldon_native.py`).
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use prost::Message;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};

// The messages, field numbers as in `monitor/ingest/open_inference_grpc.proto`. Every field is
// declared (parameters too) so that what upb refuses (e.g. a parameter that is not UTF-8)
// prost refuses as well, and the batch is declined.

#[derive(Clone, PartialEq, prost::Oneof)]
enum Choice {
    #[prost(bool, tag = "1")]
    Bool(bool),
    #[prost(int64, tag = "2")]
    Int64(i64),
    #[prost(string, tag = "3")]
    Text(String),
    #[prost(double, tag = "4")]
    Double(f64),
    #[prost(uint64, tag = "5")]
    Uint64(u64),
}

#[derive(Clone, PartialEq, prost::Message)]
struct InferParameter {
    #[prost(oneof = "Choice", tags = "1, 2, 3, 4, 5")]
    choice: Option<Choice>,
}

type Parameters = HashMap<String, InferParameter>;

#[derive(Clone, PartialEq, prost::Message)]
struct Contents {
    #[prost(bool, repeated, tag = "1")]
    bools: Vec<bool>,
    #[prost(int32, repeated, tag = "2")]
    ints: Vec<i32>,
    #[prost(int64, repeated, tag = "3")]
    int64s: Vec<i64>,
    #[prost(uint32, repeated, tag = "4")]
    uints: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    uint64s: Vec<u64>,
    #[prost(float, repeated, tag = "6")]
    fp32s: Vec<f32>,
    #[prost(double, repeated, tag = "7")]
    fp64s: Vec<f64>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    bytes: Vec<Vec<u8>>,
}

/// `InferInputTensor` and `InferOutputTensor` (the same fields).
#[derive(Clone, PartialEq, prost::Message)]
struct Tensor {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    datatype: String,
    #[prost(int64, repeated, tag = "3")]
    shape: Vec<i64>,
    #[prost(map = "string, message", tag = "4")]
    parameters: Parameters,
    #[prost(message, optional, tag = "5")]
    contents: Option<Contents>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RequestedOutput {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(map = "string, message", tag = "2")]
    parameters: Parameters,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ModelInferRequest {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
    #[prost(map = "string, message", tag = "4")]
    parameters: Parameters,
    #[prost(message, repeated, tag = "5")]
    inputs: Vec<Tensor>,
    #[prost(message, repeated, tag = "6")]
    outputs: Vec<RequestedOutput>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    raw: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ModelInferResponse {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
    #[prost(map = "string, message", tag = "4")]
    parameters: Parameters,
    #[prost(message, repeated, tag = "5")]
    outputs: Vec<Tensor>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    raw: Vec<Vec<u8>>,
}

/// One half of a call, whichever message it came in.
struct Msg {
    id: String,
    tensors: Vec<Tensor>,
    raw: Vec<Vec<u8>>,
}

const MAX_ELEMENTS: i128 = 1_000_000; // per tensor (oip.MAX_ELEMENTS)
const MAX_DIMS: usize = 8; // oip.MAX_DIMS
const REQUEST: &[u8] = b"proto/InferModelRequest";
const RESPONSE: &[u8] = b"proto/InferModelResponse";

/// A mapped value: tensor name and column (None: a tensor of one column).
type Place = (String, Option<i64>);

/// Which datatypes a mapped value may have (`place`'s `allowed`).
#[derive(Clone, Copy)]
enum Allowed {
    Any,      // attributes: every datatype with a contents field
    Number,   // scores: ints and floats
    Decision, // decisions: BOOL and ints
}

fn allowed(datatype: &str, which: Allowed) -> bool {
    let int = matches!(
        datatype,
        "INT8" | "INT16" | "INT32" | "INT64" | "UINT8" | "UINT16" | "UINT32" | "UINT64"
    );
    match which {
        Allowed::Any => int || matches!(datatype, "BOOL" | "BYTES" | "FP32" | "FP64"),
        Allowed::Number => int || matches!(datatype, "FP16" | "FP32" | "FP64"),
        Allowed::Decision => int || datatype == "BOOL",
    }
}

/// One tensor position's values over a half of the batch, row-major (the Python path's
/// numpy dtypes: object of str, int64, uint64, float64, bool).
enum Values<'a> {
    Str(Vec<&'a str>),
    Int(Vec<i64>),
    UInt(Vec<u64>),
    Float(Vec<f64>),
    Bool(Vec<bool>),
}

/// A value cut from a column, before it becomes a Python object.
#[derive(Clone, Copy)]
enum Value<'a> {
    Str(&'a str),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
}

impl<'a> Values<'a> {
    fn get(&self, i: usize) -> Option<Value<'a>> {
        Some(match self {
            Values::Str(v) => Value::Str(v.get(i)?),
            Values::Int(v) => Value::Int(*v.get(i)?),
            Values::UInt(v) => Value::UInt(*v.get(i)?),
            Values::Float(v) => Value::Float(*v.get(i)?),
            Values::Bool(v) => Value::Bool(*v.get(i)?),
        })
    }
}

/// A half of the batch, checked as `_Tensors` checks it.
struct Half<'a> {
    ids: Vec<&'a str>,
    rows: Vec<i64>,
    sig: Vec<(&'a str, &'a str, usize)>, // name, datatype, width
    flat: Vec<Values<'a>>,
}

impl<'a> Half<'a> {
    fn check(msgs: &'a [Msg], header_ids: &[Option<&'a str>], max_rows: i64) -> Option<Self> {
        let mut half = Half {
            ids: vec![],
            rows: vec![],
            sig: vec![],
            flat: vec![],
        };
        let first = match msgs.first() {
            None => return Some(half),
            Some(m) => &m.tensors,
        };
        // one layout: names, datatypes, trailing dimensions alike in every message
        for m in msgs {
            if m.tensors.len() != first.len() {
                return None;
            }
            for (t, f) in m.tensors.iter().zip(first) {
                if t.shape.is_empty()
                    || t.name != f.name
                    || t.datatype != f.datatype
                    || t.shape[1..] != f.shape[1..]
                {
                    return None;
                }
            }
        }
        if first.is_empty() {
            return None;
        }
        for (k, t) in first.iter().enumerate() {
            if first[..k].iter().any(|u| u.name == t.name) || t.shape[1..].contains(&0) {
                return None;
            }
        }
        for m in msgs {
            let rows = m.tensors[0].shape[0];
            if rows <= 0 || rows > max_rows || m.tensors.iter().any(|t| t.shape[0] != rows) {
                return None;
            }
            half.rows.push(rows);
        }
        for (m, h) in msgs.iter().zip(header_ids) {
            // the message's own id, else the record's x-request-id
            let id = if m.id.is_empty() {
                (*h)?
            } else {
                m.id.as_str()
            };
            if id.is_empty() {
                return None;
            }
            half.ids.push(id);
        }
        let raw = msgs.iter().any(|m| !m.raw.is_empty());
        if raw && msgs.iter().any(|m| m.raw.len() != first.len()) {
            return None;
        }
        let most = *half.rows.iter().max()? as i128;
        for (k, t) in first.iter().enumerate() {
            let trailing = &t.shape[1..];
            if trailing.len() >= MAX_DIMS || trailing.iter().any(|&d| d < 0) {
                return None;
            }
            let mut width: i128 = 1;
            for &d in trailing {
                width = width.saturating_mul(d as i128).min(MAX_ELEMENTS + 1);
            }
            if most * width > MAX_ELEMENTS {
                return None;
            }
            let width = width as usize;
            let values = if raw {
                raw_values(msgs, k, &t.datatype, &half.rows, width)?
            } else {
                typed_values(msgs, k, &t.datatype, &half.rows, width)?
            };
            half.sig.push((&t.name, &t.datatype, width));
            half.flat.push(values);
        }
        Some(half)
    }

    /// Tensor position, column and width of a mapped value (`place`), None where it does not fit.
    fn place(&self, at: &Place, which: Allowed) -> Option<(usize, usize, usize)> {
        let (k, &(_, datatype, width)) = self.sig.iter().enumerate().find(|(_, s)| s.0 == at.0)?;
        if !allowed(datatype, which) || (at.1.is_none() && width != 1) {
            return None;
        }
        let col = at.1.unwrap_or(0);
        if col < 0 || col as usize >= width {
            return None;
        }
        Some((k, col as usize, width))
    }

    /// One value per row (`_Tensors.column`).
    fn column(&self, at: &Place, which: Allowed) -> Option<Vec<Value<'a>>> {
        let (k, col, width) = self.place(at, which)?;
        let flat = self.flat.get(k)?;
        let n: i64 = self.rows.iter().sum();
        (0..n as usize).map(|r| flat.get(r * width + col)).collect()
    }

    fn n_rows(&self) -> usize {
        self.rows.iter().sum::<i64>() as usize
    }
}

/// Each message's count of values against its rows × width.
fn lengths_fit(counts: impl Iterator<Item = usize>, rows: &[i64], width: usize) -> bool {
    counts
        .zip(rows)
        .all(|(c, &r)| c as i128 == r as i128 * width as i128)
}

/// Typed contents of position `k` (`_contents`): only the datatype's field set, as long as
/// the shape says, every value of the datatype.
fn typed_values<'a>(
    msgs: &'a [Msg],
    k: usize,
    datatype: &str,
    rows: &[i64],
    width: usize,
) -> Option<Values<'a>> {
    static EMPTY: Contents = Contents {
        bools: vec![],
        ints: vec![],
        int64s: vec![],
        uints: vec![],
        uint64s: vec![],
        fp32s: vec![],
        fp64s: vec![],
        bytes: vec![],
    };
    let contents: Vec<&Contents> = msgs
        .iter()
        .map(|m| m.tensors[k].contents.as_ref().unwrap_or(&EMPTY))
        .collect();
    // (field number, its count) of each message: only the datatype's own may be non-empty
    let own: u8 = match datatype {
        "BOOL" => 1,
        "INT8" | "INT16" | "INT32" => 2,
        "INT64" => 3,
        "UINT8" | "UINT16" | "UINT32" => 4,
        "UINT64" => 5,
        "FP32" => 6,
        "FP64" => 7,
        "BYTES" => 8,
        _ => return None,
    };
    for c in &contents {
        let sizes = [
            c.bools.len(),
            c.ints.len(),
            c.int64s.len(),
            c.uints.len(),
            c.uint64s.len(),
            c.fp32s.len(),
            c.fp64s.len(),
            c.bytes.len(),
        ];
        if sizes
            .iter()
            .enumerate()
            .any(|(f, &n)| n > 0 && f as u8 + 1 != own)
        {
            return None;
        }
    }
    let range = |lo: i64, hi: i64, v: &[i64]| v.iter().all(|x| (lo..=hi).contains(x));
    let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
    macro_rules! field {
        ($f:ident) => {{
            if !lengths_fit(contents.iter().map(|c| c.$f.len()), rows, width) {
                return None;
            }
            contents.iter().flat_map(|c| c.$f.iter())
        }};
    }
    Some(match datatype {
        "BOOL" => Values::Bool(field!(bools).copied().collect()),
        "INT8" | "INT16" | "INT32" => {
            let v: Vec<i64> = field!(ints).map(|&x| x as i64).collect();
            let ok = match datatype {
                "INT8" => range(-128, 127, &v),
                "INT16" => range(-32768, 32767, &v),
                _ => true,
            };
            ok.then_some(Values::Int(v))?
        }
        "INT64" => Values::Int(field!(int64s).copied().collect()),
        "UINT8" | "UINT16" | "UINT32" => {
            let v: Vec<i64> = field!(uints).map(|&x| x as i64).collect();
            let ok = match datatype {
                "UINT8" => range(0, 255, &v),
                "UINT16" => range(0, 65535, &v),
                _ => true,
            };
            ok.then_some(Values::Int(v))?
        }
        "UINT64" => Values::UInt(field!(uint64s).copied().collect()),
        "FP32" | "FP64" => {
            let v: Vec<f64> = if datatype == "FP32" {
                field!(fp32s).map(|&x| x as f64).collect()
            } else {
                field!(fp64s).copied().collect()
            };
            finite(&v).then_some(Values::Float(v))?
        }
        _ => {
            let v: Option<Vec<&str>> = field!(bytes).map(|b| std::str::from_utf8(b).ok()).collect();
            Values::Str(v?)
        }
    })
}

/// Raw contents of position `k` (`_raw`): little-endian buffers of the right size, no typed
/// contents beside them; BYTES elements are a 4-byte length and their bytes.
fn raw_values<'a>(
    msgs: &'a [Msg],
    k: usize,
    datatype: &str,
    rows: &[i64],
    width: usize,
) -> Option<Values<'a>> {
    let typed = |m: &Msg| {
        m.tensors[k].contents.as_ref().is_some_and(|c| {
            !(c.bools.is_empty()
                && c.ints.is_empty()
                && c.int64s.is_empty()
                && c.uints.is_empty()
                && c.uint64s.is_empty()
                && c.fp32s.is_empty()
                && c.fp64s.is_empty()
                && c.bytes.is_empty())
        })
    };
    if msgs.iter().any(typed) {
        return None;
    }
    let bufs: Vec<&[u8]> = msgs
        .iter()
        .map(|m| m.raw.get(k).map(|b| b.as_slice()))
        .collect::<Option<_>>()?;
    if datatype == "BYTES" {
        let mut out = Vec::new();
        for (b, &r) in bufs.iter().zip(rows) {
            let before = out.len();
            raw_bytes(b, &mut out, r as usize * width)?;
            if out.len() - before != r as usize * width {
                return None;
            }
        }
        return Some(Values::Str(out));
    }
    let size = match datatype {
        "BOOL" | "INT8" | "UINT8" => 1,
        "INT16" | "UINT16" => 2,
        "INT32" | "UINT32" | "FP32" => 4,
        "INT64" | "UINT64" | "FP64" => 8,
        _ => return None, // FP16 and unknown datatypes
    };
    if !lengths_fit(bufs.iter().map(|b| b.len()), rows, width * size) {
        return None;
    }
    let elems = || bufs.iter().flat_map(move |b| b.chunks_exact(size));
    fn le<const N: usize>(c: &[u8]) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    }
    Some(match datatype {
        "BOOL" => {
            let v: Option<Vec<bool>> = elems().map(|c| (c[0] <= 1).then_some(c[0] == 1)).collect();
            Values::Bool(v?)
        }
        "INT8" => Values::Int(elems().map(|c| c[0] as i8 as i64).collect()),
        "UINT8" => Values::Int(elems().map(|c| c[0] as i64).collect()),
        "INT16" => Values::Int(elems().map(|c| i16::from_le_bytes(le(c)) as i64).collect()),
        "UINT16" => Values::Int(elems().map(|c| u16::from_le_bytes(le(c)) as i64).collect()),
        "INT32" => Values::Int(elems().map(|c| i32::from_le_bytes(le(c)) as i64).collect()),
        "UINT32" => Values::Int(elems().map(|c| u32::from_le_bytes(le(c)) as i64).collect()),
        "INT64" => Values::Int(elems().map(|c| i64::from_le_bytes(le(c))).collect()),
        "UINT64" => Values::UInt(elems().map(|c| u64::from_le_bytes(le(c))).collect()),
        _ => {
            let v: Vec<f64> = if size == 4 {
                elems().map(|c| f32::from_le_bytes(le(c)) as f64).collect()
            } else {
                elems().map(|c| f64::from_le_bytes(le(c))).collect()
            };
            v.iter()
                .all(|x| x.is_finite())
                .then_some(Values::Float(v))?
        }
    })
}

/// Raw BYTES elements of one buffer (`raw_bytes`), at most `most` of them, each UTF-8.
fn raw_bytes<'a>(mut buf: &'a [u8], out: &mut Vec<&'a str>, most: usize) -> Option<()> {
    let mut n = 0;
    while !buf.is_empty() {
        n += 1;
        if n > most || buf.len() < 4 {
            return None;
        }
        let size = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let rest = &buf[4..];
        if size > rest.len() {
            return None;
        }
        out.push(std::str::from_utf8(&rest[..size]).ok()?);
        buf = &rest[size..];
    }
    Some(())
}

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
    columns: Vec<Vec<Value<'a>>>,
    scores: Vec<f64>,
    preds: Vec<u8>,
}

/// Characters of a decision id as `RowIds.longest` counts them.
fn id_length(id: &str, rows: i64) -> usize {
    let n = id.chars().count();
    if rows > 1 {
        n + 1 + (rows - 1).to_string().len()
    } else {
        n
    }
}

fn columns<'a>(
    asked_msgs: &'a [Msg],
    asked_ids: &[Option<&'a str>],
    answered_msgs: &'a [Msg],
    answered_ids: &[Option<&'a str>],
    ask: &Ask<'_>,
) -> Option<Out<'a>> {
    let asked = Half::check(asked_msgs, asked_ids, ask.max_rows)?;
    let answered = Half::check(answered_msgs, answered_ids, ask.max_rows)?;
    for h in [&asked, &answered] {
        for (id, &r) in h.ids.iter().zip(&h.rows) {
            if id_length(id, r) > ask.max_id_length {
                return None;
            }
        }
    }
    let mut columns = vec![];
    if !asked.ids.is_empty() {
        for at in ask.attrs.unwrap_or(&[]) {
            columns.push(asked.column(at, Allowed::Any)?);
        }
    }
    let n = answered.n_rows();
    let (mut scores, mut preds) = (vec![f64::NAN; n], vec![0u8; n]);
    if n > 0 {
        if let Some(at) = ask.score {
            for (s, v) in scores.iter_mut().zip(answered.column(at, Allowed::Number)?) {
                *s = match v {
                    Value::Int(x) => x as f64,
                    Value::UInt(x) => x as f64,
                    Value::Float(x) => x,
                    _ => return None,
                };
                if !(0.0..=1.0).contains(s) {
                    return None;
                }
            }
        }
        if let Some(at) = ask.pred {
            for (p, v) in preds
                .iter_mut()
                .zip(answered.column(at, Allowed::Decision)?)
            {
                *p = match v {
                    Value::Bool(x) => x as u8,
                    Value::Int(x @ (0 | 1)) => x as u8,
                    Value::UInt(x @ (0 | 1)) => x as u8,
                    _ => return None,
                };
            }
        } else {
            let t = ask.threshold?;
            for (p, s) in preds.iter_mut().zip(&scores) {
                *p = (*s >= t) as u8;
            }
        }
    }
    Some(Out {
        asked,
        answered,
        columns,
        scores,
        preds,
    })
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
fn headers<'py>(
    headers: &Bound<'py, PyAny>,
    default: bool,
) -> Option<(bool, Option<Bound<'py, PyBytes>>)> {
    let (mut kind, mut id) = (None, None);
    if headers.is_none() {
        return Some((default, None));
    }
    for item in headers.try_iter().ok()? {
        let item = item.ok()?;
        let pair = item.cast::<PyTuple>().ok()?;
        if pair.len() != 2 {
            return None;
        }
        let key = pair.get_item(0).ok()?;
        let key = key.cast::<PyString>().ok()?.to_str().ok()?;
        if !key.is_ascii() {
            return None; // str.lower() is Unicode's: leave such keys to Python
        }
        let value = pair.get_item(1).ok()?;
        if kind.is_none() && key.eq_ignore_ascii_case("seldon-infer-type") {
            let raw = value.cast::<PyBytes>().ok()?.as_bytes();
            kind = Some(match raw {
                REQUEST => false,
                RESPONSE => true,
                _ => return None,
            });
        } else if id.is_none() && key.eq_ignore_ascii_case("x-request-id") {
            if value.is_none() {
                continue;
            }
            let b = value.cast_into::<PyBytes>().ok()?;
            if !b.as_bytes().is_empty() {
                id = Some(b);
            }
        }
    }
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
    let mut out = Vec::new();
    for r in records.try_iter().ok()? {
        let r = r.ok()?;
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
    }
    Some(out)
}

fn parse(value: &[u8], response: bool) -> Option<Msg> {
    Some(if response {
        let m = ModelInferResponse::decode(value).ok()?;
        Msg {
            id: m.id,
            tensors: m.outputs,
            raw: m.raw,
        }
    } else {
        let m = ModelInferRequest::decode(value).ok()?;
        Msg {
            id: m.id,
            tensors: m.inputs,
            raw: m.raw,
        }
    })
}

fn i64s<'py>(py: Python<'py>, v: impl Iterator<Item = i64>) -> Bound<'py, PyByteArray> {
    let bytes: Vec<u8> = v.flat_map(i64::to_ne_bytes).collect();
    PyByteArray::new(py, &bytes)
}

fn f64s<'py>(py: Python<'py>, v: impl Iterator<Item = f64>) -> Bound<'py, PyByteArray> {
    let bytes: Vec<u8> = v.flat_map(f64::to_ne_bytes).collect();
    PyByteArray::new(py, &bytes)
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
/// (float64), decisions (uint8), each response row's record index (int64))`, or None to
/// decline. `responses`: records without a `seldon-infer-type` header are responses (read
/// from the responses topic). `attrs`: the request columns (None: no columns, the stream
/// mapping); `score`, `pred`: where the response's are.
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
    let parsed = catch_unwind(AssertUnwindSafe(|| {
        let mut halves = (vec![], vec![], vec![], vec![]); // messages and header ids of each half
        for ((v, &resp), &h) in values.iter().zip(&kinds).zip(&header_ids) {
            let m = parse(v, resp)?;
            if resp {
                halves.2.push(m);
                halves.3.push(h);
            } else {
                halves.0.push(m);
                halves.1.push(h);
            }
        }
        Some(halves)
    }));
    let Ok(Some((q_msgs, q_ids, a_msgs, a_ids))) = parsed else {
        return Ok(None);
    };
    let out = catch_unwind(AssertUnwindSafe(|| {
        columns(&q_msgs, &q_ids, &a_msgs, &a_ids, &ask)
    }));
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
        i64s(py, asked.rows.iter().copied()).into_any(),
        f64s(py, per_row(&q_times, &asked.rows)).into_any(),
        cols.into_any(),
        PyList::new(py, &answered.ids)?.into_any(),
        i64s(py, answered.rows.iter().copied()).into_any(),
        f64s(py, per_row(&a_times, &answered.rows)).into_any(),
        f64s(py, out.scores.iter().copied()).into_any(),
        PyByteArray::new(py, &out.preds).into_any(),
        i64s(py, per_row(&a_index, &answered.rows)).into_any(),
    ];
    Ok(Some(PyTuple::new(py, items)?))
}
