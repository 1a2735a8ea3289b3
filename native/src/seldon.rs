//! Seldon Core 2's protobuf records (`ModelInferRequest` / `ModelInferResponse` on Kafka),
//! a whole poll batch at a time: the compiled twin of `SeldonFast._decode`
//! (`monitor/ingest/seldon_fast.py`).
//!
//! Why: a single-row call is two records per decision, and upb's parse plus Python's per-record
//! and per-tensor work cost several times the monitor-JSON path's whole decode. Here the records
//! are read, parsed, checked and cut into columns in one call.
//!
//! Parsing borrows from the records' bytes (no allocation per message or tensor): the messages
//! are walked with prost's wire-format functions (`prost::encoding`), each tensor's contents
//! are read only when its position's values are gathered over the batch, and the rare parts
//! (parameters, requested outputs) are only validated, by prost messages.
//!
//! The rule is the crate's: anything the Python fast path would give up on, and anything merely
//! unusual (a known field of an unexpected wire type, a contents message given twice, a bool
//! other than 0/1, an int32 or uint32 varint out of its type's range), returns `None` and the
//! Python paths decode the batch. Nothing here raises on data or panics (the pure-Rust part
//! runs under `catch_unwind` all the same). What it accepts decodes to exactly the Python fast
//! path's columns (`tests/ingest/test_seldon_native.py`).
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::keys;
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use prost::Message;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};

// Parameters and requested outputs are only validated (what upb refuses, such as a parameter
// that is not UTF-8, must be declined), by these prost messages (open_inference_grpc.proto).

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

/// One entry of a `map<string, InferParameter>` (on the wire: a message of key and value).
#[derive(Clone, PartialEq, prost::Message)]
struct ParameterEntry {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(message, optional, tag = "2")]
    value: Option<InferParameter>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RequestedOutput {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(map = "string, message", tag = "2")]
    parameters: HashMap<String, InferParameter>,
}

/// A tensor (`InferInputTensor` / `InferOutputTensor`), borrowed from its record.
struct TensorView<'a> {
    name: &'a str,
    datatype: &'a str,
    shape: Shape,
    contents: &'a [u8], // the InferTensorContents message (empty when absent)
}

/// A shape of at most `MAX_DIMS` dimensions (more: declined, as the Python path gives up).
#[derive(Clone, Copy, Default)]
struct Shape {
    len: usize,
    dims: [i64; MAX_DIMS],
}

impl Shape {
    fn push(&mut self, d: i64) -> Option<()> {
        *self.dims.get_mut(self.len)? = d;
        self.len += 1;
        Some(())
    }

    fn dims(&self) -> &[i64] {
        &self.dims[..self.len.min(MAX_DIMS)]
    }
}

/// One half of a call, whichever message it came in: its id, and where its tensors and raw
/// contents are in the batch's arenas.
struct Msg<'a> {
    id: &'a str,
    tensors: std::ops::Range<usize>,
    raw: std::ops::Range<usize>,
}

/// The tensors and raw buffers of all the batch's messages (two allocations a batch, not
/// several a message).
#[derive(Default)]
struct Arena<'a> {
    tensors: Vec<TensorView<'a>>,
    raws: Vec<&'a [u8]>,
}

impl<'a> Arena<'a> {
    fn tensors(&self, m: &Msg<'a>) -> &[TensorView<'a>] {
        self.tensors.get(m.tensors.clone()).unwrap_or(&[])
    }

    fn raws(&self, m: &Msg<'a>) -> &[&'a [u8]] {
        self.raws.get(m.raw.clone()).unwrap_or(&[])
    }
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

// ---- the wire format (prost's functions over borrowed bytes) ----

/// A length-delimited field's bytes.
fn delimited<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = usize::try_from(decode_varint(buf).ok()?).ok()?;
    if n > buf.len() {
        return None;
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Some(head)
}

/// A string field (UTF-8, as upb requires of proto3 strings).
fn text<'a>(buf: &mut &'a [u8]) -> Option<&'a str> {
    std::str::from_utf8(delimited(buf)?).ok()
}

fn skip(wire: WireType, tag: u32, buf: &mut &[u8]) -> Option<()> {
    skip_field(wire, tag, buf, DecodeContext::default()).ok()
}

/// Validates a `map<string, InferParameter>` entry.
fn parameter(buf: &mut &[u8]) -> Option<()> {
    ParameterEntry::decode(delimited(buf)?).ok().map(|_| ())
}

/// A `ModelInferRequest` (`response`: a `ModelInferResponse`), its tensors into `arena`.
fn parse<'a>(mut buf: &'a [u8], response: bool, arena: &mut Arena<'a>) -> Option<Msg<'a>> {
    use WireType::LengthDelimited as Ld;
    let (t0, r0) = (arena.tensors.len(), arena.raws.len());
    let raw_tag = if response { 6 } else { 7 };
    let mut id = "";
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).ok()?;
        match (tag, wire) {
            (1 | 2, Ld) => {
                text(&mut buf)?; // model name and version: read, not used
            }
            (3, Ld) => id = text(&mut buf)?,
            (4, Ld) => parameter(&mut buf)?,
            (5, Ld) => arena.tensors.push(tensor(delimited(&mut buf)?)?),
            (t, Ld) if t == raw_tag => arena.raws.push(delimited(&mut buf)?),
            (6, Ld) => {
                RequestedOutput::decode(delimited(&mut buf)?).ok()?;
            }
            (1..=7, _) => return None, // a known field of another wire type
            _ => skip(wire, tag, &mut buf)?,
        }
    }
    Some(Msg {
        id,
        tensors: t0..arena.tensors.len(),
        raw: r0..arena.raws.len(),
    })
}

fn tensor(mut buf: &[u8]) -> Option<TensorView<'_>> {
    use WireType::{LengthDelimited as Ld, Varint};
    let mut t = TensorView {
        name: "",
        datatype: "",
        shape: Shape::default(),
        contents: &[],
    };
    let mut contents = false;
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).ok()?;
        match (tag, wire) {
            (1, Ld) => t.name = text(&mut buf)?,
            (2, Ld) => t.datatype = text(&mut buf)?,
            (3, Varint) => t.shape.push(decode_varint(&mut buf).ok()? as i64)?,
            (3, Ld) => {
                let mut packed = delimited(&mut buf)?;
                while !packed.is_empty() {
                    t.shape.push(decode_varint(&mut packed).ok()? as i64)?;
                }
            }
            (4, Ld) => parameter(&mut buf)?,
            (5, Ld) if !contents => {
                t.contents = delimited(&mut buf)?;
                contents = true;
            }
            (1..=5, _) => return None, // another wire type, or contents twice (merged by upb)
            _ => skip(wire, tag, &mut buf)?,
        }
    }
    Some(t)
}

/// Walks a contents message: `on` reads each occurrence of field `own`; any other field of
/// `InferTensorContents` declines (`own` 0: any at all).
fn walk<'a>(
    mut buf: &'a [u8],
    own: u32,
    mut on: impl FnMut(WireType, &mut &'a [u8]) -> Option<()>,
) -> Option<()> {
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).ok()?;
        if tag == own {
            on(wire, &mut buf)?;
        } else if (1..=8).contains(&tag) {
            return None;
        } else {
            skip(wire, tag, &mut buf)?;
        }
    }
    Some(())
}

/// Varint elements, one or packed.
fn varints<T>(
    wire: WireType,
    buf: &mut &[u8],
    out: &mut Vec<T>,
    conv: fn(u64) -> Option<T>,
) -> Option<()> {
    match wire {
        WireType::Varint => out.push(conv(decode_varint(buf).ok()?)?),
        WireType::LengthDelimited => {
            let mut packed = delimited(buf)?;
            while !packed.is_empty() {
                out.push(conv(decode_varint(&mut packed).ok()?)?);
            }
        }
        _ => return None,
    }
    Some(())
}

fn le<const N: usize>(c: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&c[..N]);
    a
}

/// Fixed-size elements (float, double), one or packed.
fn fixed<T, const N: usize>(
    wire: WireType,
    buf: &mut &[u8],
    out: &mut Vec<T>,
    conv: fn([u8; N]) -> T,
) -> Option<()> {
    let one = if N == 4 {
        WireType::ThirtyTwoBit
    } else {
        WireType::SixtyFourBit
    };
    let bytes = if wire == one {
        let (head, tail) = buf.split_at_checked(N)?;
        *buf = tail;
        head
    } else if wire == WireType::LengthDelimited {
        delimited(buf)?
    } else {
        return None;
    };
    if bytes.len() % N != 0 {
        return None;
    }
    out.extend(bytes.chunks_exact(N).map(|c| conv(le(c))));
    Some(())
}

fn int32(x: u64) -> Option<i64> {
    let v = x as i64;
    (i32::MIN as i64..=i32::MAX as i64)
        .contains(&v)
        .then_some(v)
}

fn uint32(x: u64) -> Option<i64> {
    (x <= u32::MAX as u64).then_some(x as i64)
}

// ---- a half of the batch ----

/// A half of the batch, checked as `_Tensors` checks it.
struct Half<'a> {
    ids: Vec<&'a str>,
    rows: Vec<i64>,
    sig: Vec<(&'a str, &'a str, usize)>, // name, datatype, width
    flat: Vec<Values<'a>>,
}

impl<'a> Half<'a> {
    fn check(
        msgs: &[Msg<'a>],
        arena: &Arena<'a>,
        header_ids: &[Option<&'a str>],
        max_rows: i64,
    ) -> Option<Self> {
        let mut half = Half {
            ids: vec![],
            rows: vec![],
            sig: vec![],
            flat: vec![],
        };
        let first = match msgs.first() {
            None => return Some(half),
            Some(m) => arena.tensors(m),
        };
        // one layout: names, datatypes, trailing dimensions alike in every message
        for m in msgs {
            let ts = arena.tensors(m);
            if ts.len() != first.len() {
                return None;
            }
            for (t, f) in ts.iter().zip(first) {
                if t.shape.len == 0
                    || t.name != f.name
                    || t.datatype != f.datatype
                    || t.shape.dims()[1..] != f.shape.dims()[1..]
                {
                    return None;
                }
            }
        }
        if first.is_empty() {
            return None;
        }
        for (k, t) in first.iter().enumerate() {
            if first[..k].iter().any(|u| u.name == t.name) || t.shape.dims()[1..].contains(&0) {
                return None;
            }
        }
        for m in msgs {
            let ts = arena.tensors(m);
            let rows = ts[0].shape.dims[0];
            if rows <= 0 || rows > max_rows || ts.iter().any(|t| t.shape.dims[0] != rows) {
                return None;
            }
            half.rows.push(rows);
        }
        for (m, h) in msgs.iter().zip(header_ids) {
            // the message's own id, else the record's x-request-id
            let id = if m.id.is_empty() { (*h)? } else { m.id };
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
            let trailing = &t.shape.dims()[1..];
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
                raw_values(msgs, arena, k, t.datatype, &half.rows, width)?
            } else {
                typed_values(msgs, arena, k, t.datatype, &half.rows, width)?
            };
            half.sig.push((t.name, t.datatype, width));
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

/// Field `own`'s values in each message's contents, exactly rows × width of them.
fn gather<'a, T>(
    contents: impl Iterator<Item = &'a [u8]>,
    rows: &[i64],
    width: usize,
    own: u32,
    mut read: impl FnMut(WireType, &mut &'a [u8], &mut Vec<T>) -> Option<()>,
) -> Option<Vec<T>> {
    let mut out = Vec::new();
    for (c, &r) in contents.zip(rows) {
        let want = out.len() + r as usize * width;
        walk(c, own, |wire, buf| {
            read(wire, buf, &mut out)?;
            (out.len() <= want).then_some(())
        })?;
        if out.len() != want {
            return None;
        }
    }
    Some(out)
}

/// Typed contents of position `k` (`_contents`): only the datatype's field set, as long as
/// the shape says, every value of the datatype.
fn typed_values<'a>(
    msgs: &[Msg<'a>],
    arena: &Arena<'a>,
    k: usize,
    datatype: &str,
    rows: &[i64],
    width: usize,
) -> Option<Values<'a>> {
    let cs = || {
        msgs.iter()
            .map(|m| arena.tensors(m).get(k).map_or(&[][..], |t| t.contents))
    };
    let ints = |own: u32, conv: fn(u64) -> Option<i64>| {
        gather(cs(), rows, width, own, |w, b, o| varints(w, b, o, conv))
    };
    Some(match datatype {
        "BOOL" => Values::Bool(gather(cs(), rows, width, 1, |w, b, o| {
            varints(w, b, o, |x| (x <= 1).then_some(x == 1))
        })?),
        "INT8" => Values::Int(ints(2, |x| int32(x).filter(|v| (-128..=127).contains(v)))?),
        "INT16" => Values::Int(ints(2, |x| {
            int32(x).filter(|v| (-32768..=32767).contains(v))
        })?),
        "INT32" => Values::Int(ints(2, int32)?),
        "INT64" => Values::Int(ints(3, |x| Some(x as i64))?),
        "UINT8" => Values::Int(ints(4, |x| uint32(x).filter(|&v| v <= 255))?),
        "UINT16" => Values::Int(ints(4, |x| uint32(x).filter(|&v| v <= 65535))?),
        "UINT32" => Values::Int(ints(4, uint32)?),
        "UINT64" => Values::UInt(gather(cs(), rows, width, 5, |w, b, o| {
            varints(w, b, o, Some)
        })?),
        "FP32" | "FP64" => {
            let v = if datatype == "FP32" {
                gather(cs(), rows, width, 6, |w, b, o| {
                    fixed(w, b, o, |c: [u8; 4]| f32::from_le_bytes(c) as f64)
                })?
            } else {
                gather(cs(), rows, width, 7, |w, b, o| {
                    fixed(w, b, o, f64::from_le_bytes)
                })?
            };
            v.iter()
                .all(|x| x.is_finite())
                .then_some(Values::Float(v))?
        }
        "BYTES" => Values::Str(gather(cs(), rows, width, 8, |w, b, o| {
            if w != WireType::LengthDelimited {
                return None;
            }
            o.push(std::str::from_utf8(delimited(b)?).ok()?);
            Some(())
        })?),
        _ => return None, // FP16 (raw contents only) and unknown datatypes
    })
}

/// Raw contents of position `k` (`_raw`): little-endian buffers of the right size, no typed
/// contents beside them; BYTES elements are a 4-byte length and their bytes.
fn raw_values<'a>(
    msgs: &[Msg<'a>],
    arena: &Arena<'a>,
    k: usize,
    datatype: &str,
    rows: &[i64],
    width: usize,
) -> Option<Values<'a>> {
    let mut bufs: Vec<&'a [u8]> = Vec::with_capacity(msgs.len());
    for m in msgs {
        let contents = arena.tensors(m).get(k)?.contents;
        walk(contents, 0, |_, _| None)?; // no typed contents beside raw ones
        bufs.push(arena.raws(m).get(k)?);
    }
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
        q_keys,
        a_keys,
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
