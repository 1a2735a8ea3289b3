//! The protobuf wire format of Seldon Core 2's records (`ModelInferRequest` /
//! `ModelInferResponse`), read with prost's functions over the records' own bytes: a message's
//! fields, its tensors (name, datatype, shape, contents) and raw contents, borrowed, with the
//! rare parts (parameters, requested outputs) only validated by prost messages.
use std::collections::HashMap;

use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use prost::Message;

use crate::seldon_half::MAX_DIMS;

// Parameters and requested outputs are only validated (what upb refuses, such as a parameter
// that is not UTF-8, must be declined), by these prost messages (open_inference_grpc.proto).

#[derive(Clone, PartialEq, prost::Oneof)]
pub(super) enum Choice {
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
pub(super) struct InferParameter {
    #[prost(oneof = "Choice", tags = "1, 2, 3, 4, 5")]
    pub(super) choice: Option<Choice>,
}

/// One entry of a `map<string, InferParameter>` (on the wire: a message of key and value).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ParameterEntry {
    #[prost(string, tag = "1")]
    pub(super) key: String,
    #[prost(message, optional, tag = "2")]
    pub(super) value: Option<InferParameter>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RequestedOutput {
    #[prost(string, tag = "1")]
    pub(super) name: String,
    #[prost(map = "string, message", tag = "2")]
    pub(super) parameters: HashMap<String, InferParameter>,
}

/// A tensor (`InferInputTensor` / `InferOutputTensor`), borrowed from its record.
pub(super) struct TensorView<'a> {
    pub(super) name: &'a str,
    pub(super) datatype: &'a str,
    pub(super) shape: Shape,
    pub(super) contents: &'a [u8], // the InferTensorContents message (empty when absent)
}

/// A shape of at most `MAX_DIMS` dimensions (more: declined, as the Python path gives up).
#[derive(Clone, Copy, Default)]
pub(super) struct Shape {
    pub(super) len: usize,
    pub(super) dims: [i64; MAX_DIMS],
}

impl Shape {
    pub(super) fn push(&mut self, d: i64) -> Option<()> {
        *self.dims.get_mut(self.len)? = d;
        self.len += 1;
        Some(())
    }

    pub(super) fn dims(&self) -> &[i64] {
        &self.dims[..self.len.min(MAX_DIMS)]
    }
}

/// One half of a call, whichever message it came in: its id, and where its tensors and raw
/// contents are in the batch's arenas.
pub(super) struct Msg<'a> {
    pub(super) id: &'a str,
    pub(super) tensors: std::ops::Range<usize>,
    pub(super) raw: std::ops::Range<usize>,
}

/// The tensors and raw buffers of all the batch's messages (two allocations a batch, not
/// several a message).
#[derive(Default)]
pub(super) struct Arena<'a> {
    pub(super) tensors: Vec<TensorView<'a>>,
    pub(super) raws: Vec<&'a [u8]>,
}

impl<'a> Arena<'a> {
    pub(super) fn tensors(&self, m: &Msg<'a>) -> &[TensorView<'a>] {
        self.tensors.get(m.tensors.clone()).unwrap_or(&[])
    }

    pub(super) fn raws(&self, m: &Msg<'a>) -> &[&'a [u8]] {
        self.raws.get(m.raw.clone()).unwrap_or(&[])
    }
}

// ---- the wire format (prost's functions over borrowed bytes) ----

/// A length-delimited field's bytes.
pub(super) fn delimited<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = usize::try_from(decode_varint(buf).ok()?).ok()?;
    if n > buf.len() {
        return None;
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Some(head)
}

/// A string field (UTF-8, as upb requires of proto3 strings).
pub(super) fn text<'a>(buf: &mut &'a [u8]) -> Option<&'a str> {
    std::str::from_utf8(delimited(buf)?).ok()
}

pub(super) fn skip(wire: WireType, tag: u32, buf: &mut &[u8]) -> Option<()> {
    skip_field(wire, tag, buf, DecodeContext::default()).ok()
}

/// Validates a `map<string, InferParameter>` entry.
pub(super) fn parameter(buf: &mut &[u8]) -> Option<()> {
    ParameterEntry::decode(delimited(buf)?).ok().map(|_| ())
}

/// A `ModelInferRequest` (`response`: a `ModelInferResponse`), its tensors into `arena`.
pub(super) fn parse<'a>(
    mut buf: &'a [u8],
    response: bool,
    arena: &mut Arena<'a>,
) -> Option<Msg<'a>> {
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

pub(super) fn tensor(mut buf: &[u8]) -> Option<TensorView<'_>> {
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
pub(super) fn walk<'a>(
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
pub(super) fn varints<T>(
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

pub(super) fn le<const N: usize>(c: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&c[..N]);
    a
}

/// Fixed-size elements (float, double), one or packed.
pub(super) fn fixed<T, const N: usize>(
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

pub(super) fn int32(x: u64) -> Option<i64> {
    let v = x as i64;
    (i32::MIN as i64..=i32::MAX as i64)
        .contains(&v)
        .then_some(v)
}

pub(super) fn uint32(x: u64) -> Option<i64> {
    (x <= u32::MAX as u64).then_some(x as i64)
}
