//! One half (requests or responses) of a Seldon batch: its messages checked as
//! `seldon_fast._Tensors` checks them (one layout, lengths against shapes, each datatype's
//! values), and the mapped columns gathered a tensor position at a time over the batch.
use prost::encoding::WireType;

use crate::seldon_wire::{delimited, fixed, int32, le, uint32, varints, walk, Arena, Msg};
pub(super) const MAX_ELEMENTS: i128 = 1_000_000; // per tensor (oip.MAX_ELEMENTS)
pub(super) const MAX_DIMS: usize = 8; // oip.MAX_DIMS
pub(super) const REQUEST: &[u8] = b"proto/InferModelRequest";
pub(super) const RESPONSE: &[u8] = b"proto/InferModelResponse";

/// A mapped value: tensor name and column (None: a tensor of one column).
pub(super) type Place = (String, Option<i64>);

/// Which datatypes a mapped value may have (`place`'s `allowed`).
#[derive(Clone, Copy)]
pub(super) enum Allowed {
    Any,      // attributes: every datatype with a contents field
    Number,   // scores: ints and floats
    Decision, // decisions: BOOL and ints
}

pub(super) fn allowed(datatype: &str, which: Allowed) -> bool {
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
pub(super) enum Values<'a> {
    Str(Vec<&'a str>),
    Int(Vec<i64>),
    UInt(Vec<u64>),
    Float(Vec<f64>),
    Bool(Vec<bool>),
}

/// A value cut from a column, before it becomes a Python object.
#[derive(Clone, Copy)]
pub(super) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
}

impl<'a> Values<'a> {
    pub(super) fn get(&self, i: usize) -> Option<Value<'a>> {
        Some(match self {
            Values::Str(v) => Value::Str(v.get(i)?),
            Values::Int(v) => Value::Int(*v.get(i)?),
            Values::UInt(v) => Value::UInt(*v.get(i)?),
            Values::Float(v) => Value::Float(*v.get(i)?),
            Values::Bool(v) => Value::Bool(*v.get(i)?),
        })
    }
}

// ---- a half of the batch ----

/// A half of the batch, checked as `_Tensors` checks it.
pub(super) struct Half<'a> {
    pub(super) ids: Vec<&'a str>,
    pub(super) rows: Vec<i64>,
    pub(super) sig: Vec<(&'a str, &'a str, usize)>, // name, datatype, width
    pub(super) flat: Vec<Values<'a>>,
}

impl<'a> Half<'a> {
    pub(super) fn check(
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
    pub(super) fn place(&self, at: &Place, which: Allowed) -> Option<(usize, usize, usize)> {
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
    pub(super) fn column(&self, at: &Place, which: Allowed) -> Option<Vec<Value<'a>>> {
        let (k, col, width) = self.place(at, which)?;
        let flat = self.flat.get(k)?;
        let n: i64 = self.rows.iter().sum();
        (0..n as usize).map(|r| flat.get(r * width + col)).collect()
    }

    pub(super) fn n_rows(&self) -> usize {
        self.rows.iter().sum::<i64>() as usize
    }
}

/// Each message's count of values against its rows × width.
pub(super) fn lengths_fit(counts: impl Iterator<Item = usize>, rows: &[i64], width: usize) -> bool {
    counts
        .zip(rows)
        .all(|(c, &r)| c as i128 == r as i128 * width as i128)
}

/// Field `own`'s values in each message's contents, exactly rows × width of them.
pub(super) fn gather<'a, T>(
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
pub(super) fn typed_values<'a>(
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
pub(super) fn raw_values<'a>(
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
pub(super) fn raw_bytes<'a>(mut buf: &'a [u8], out: &mut Vec<&'a str>, most: usize) -> Option<()> {
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
