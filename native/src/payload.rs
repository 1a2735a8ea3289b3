//! One OIP JSON payload read against the batch's layout, as the typed msgspec structs of
//! `monitor/ingest/serving_layout.py` read it: per tensor position its name, datatype and
//! dimensions after the first fixed, the first dimension (rows) bounded, and every value of
//! the datatype's type (BOOL a bool, BYTES a string, an integer type an int in its range and
//! int64's, a float type an int (kept an int) or a finite float); unknown fields skipped.
use std::borrow::Cow;

use pyo3::prelude::*;

use crate::json::Reader;
use crate::oip::{Decline, Res};

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
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

/// One tensor of a layout: its name, datatype, dimensions after the first, nested rows.
pub struct Slot {
    name: String,
    kind: Kind,
    datatype: String,
    trailing: Vec<i64>,
    pub width: i64,
    nested: bool,
}

/// A half's layout from Python's `Signature` (None: nothing the compiled path reads).
pub fn slots(sig: &Bound<'_, PyAny>) -> PyResult<Option<Vec<Slot>>> {
    let mut out = Vec::new();
    for item in sig.try_iter()? {
        let (name, datatype, trailing, nested): (String, String, Vec<i64>, bool) =
            item?.extract()?;
        let Some(kind) = kind(&datatype) else {
            return Ok(None);
        };
        let width = trailing
            .iter()
            .try_fold(1i64, |a, &d| a.checked_mul(d))
            .unwrap_or(0);
        if width < 1 || (nested && trailing.len() != 1) {
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

/// A value of a tensor, as msgspec gives it to Python.
#[derive(Clone)]
pub enum Value<'a> {
    Bool(bool),
    Text(Cow<'a, str>),
    Int(i64),
    Float(f64),
}

/// Where one half's mapped columns go: per tensor position of its layout, the (column,
/// output column) pairs to keep; every other value is checked and dropped.
pub struct Sink<'s, 'a> {
    pub layout: &'s [Slot],
    pub keep: &'s [Vec<(usize, usize)>],
    pub columns: &'s mut [Vec<Value<'a>>],
}

/// A payload: its id, model name, and the rows of its inputs (a request: any `outputs` it
/// holds are the outputs it asks for, not read) or of its outputs (a response); their kept
/// values went to the sinks (a payload that is neither is declined by the caller, and with it
/// the batch: the sinks are dropped).
pub struct Payload<'a> {
    pub id: Option<Cow<'a, str>>,
    pub model_name: Option<Cow<'a, str>>,
    pub inputs: Option<i64>,
    pub outputs: Option<i64>,
}

fn once<T>(field: &mut Option<T>, value: T) -> Res<()> {
    if field.is_some() {
        return Err(Decline); // a repeated key: the Python paths judge it
    }
    *field = Some(value);
    Ok(())
}

fn first_time(seen: &mut bool) -> Res<()> {
    if *seen {
        return Err(Decline); // a repeated key: the Python paths judge it
    }
    *seen = true;
    Ok(())
}

/// Reads one payload (the record's whole text) against the request and response layouts.
pub fn payload<'a>(
    text: &'a str,
    request: &mut Sink<'_, 'a>,
    response: &mut Sink<'_, 'a>,
    max: i64,
) -> Res<Payload<'a>> {
    let mut r = Reader::new(text);
    let mut p = Payload {
        id: None,
        model_name: None,
        inputs: None,
        outputs: None,
    };
    let (mut seen_id, mut seen_model, mut seen_in, mut seen_out) = (false, false, false, false);
    let (mut pushed, mut asked_for) = (None, false);
    r.object()?;
    let mut first = true;
    while let Some(key) = r.key(&mut first)? {
        match key.as_ref() {
            "id" => {
                first_time(&mut seen_id)?;
                p.id = if r.null()? { None } else { Some(r.string()?) };
            }
            "model_name" => {
                first_time(&mut seen_model)?;
                p.model_name = if r.null()? { None } else { Some(r.string()?) };
            }
            "inputs" => {
                first_time(&mut seen_in)?;
                if !r.null()? {
                    p.inputs = Some(tensors(&mut r, request, max)?);
                }
            }
            "outputs" => {
                first_time(&mut seen_out)?;
                if !r.null()? {
                    // a response's tensors, or a request's outputs asked for (any JSON, which
                    // the careful path does not read): known only once the keys are all read
                    let (mark, before) = (r.mark(), lengths(response));
                    match tensors(&mut r, response, max) {
                        Ok(rows) => (p.outputs, pushed) = (Some(rows), Some(before)),
                        Err(Decline) => {
                            r.reset(mark);
                            cut(response, &before);
                            r.skip()?;
                            asked_for = true;
                        }
                    }
                }
            }
            _ => r.skip()?,
        }
    }
    r.end()?;
    if p.inputs.is_some() {
        if let Some(before) = pushed {
            cut(response, &before); // a request's outputs asked for: no response values
        }
        p.outputs = None;
    } else if asked_for {
        return Err(Decline); // outputs that are not the layout's tensors, and no inputs
    }
    Ok(p)
}

fn lengths(sink: &Sink<'_, '_>) -> Vec<usize> {
    sink.columns.iter().map(Vec::len).collect()
}

/// The sink's columns back to the lengths they had.
fn cut(sink: &mut Sink<'_, '_>, before: &[usize]) {
    for (c, &n) in sink.columns.iter_mut().zip(before) {
        c.truncate(n);
    }
}

/// A half's tensors, each of its layout's slot in order, all of as many rows (returned).
fn tensors<'a>(r: &mut Reader<'a>, sink: &mut Sink<'_, 'a>, max: i64) -> Res<i64> {
    let mut k = 0;
    let mut rows = 0;
    r.array()?;
    let mut first = true;
    while r.more(&mut first)? {
        let slot = sink.layout.get(k).ok_or(Decline)?; // more tensors than the layout's
        let n = tensor(r, slot, &sink.keep[k], sink.columns, max)?;
        if k > 0 && n != rows {
            return Err(Decline);
        }
        rows = n;
        k += 1;
    }
    if k != sink.layout.len() {
        return Err(Decline);
    }
    Ok(rows)
}

fn tensor<'a>(
    r: &mut Reader<'a>,
    slot: &Slot,
    keep: &[(usize, usize)],
    columns: &mut [Vec<Value<'a>>],
    max: i64,
) -> Res<i64> {
    let (mut name, mut datatype, mut shape, mut count) = (None, None, None, None);
    r.object()?;
    let mut first = true;
    while let Some(key) = r.key(&mut first)? {
        match key.as_ref() {
            "name" => once(&mut name, r.string()?)?,
            "datatype" => once(&mut datatype, r.string()?)?,
            "shape" => once(&mut shape, dims(r)?)?,
            "data" => once(&mut count, values(r, slot, keep, columns)?)?,
            _ => r.skip()?,
        }
    }
    let (Some(name), Some(datatype), Some(shape), Some(count)) = (name, datatype, shape, count)
    else {
        return Err(Decline);
    };
    if name != slot.name || datatype != slot.datatype || shape.len() != slot.trailing.len() + 1 {
        return Err(Decline);
    }
    if shape[1..] != slot.trailing[..] {
        return Err(Decline);
    }
    let rows = shape[0];
    if rows < 1 || rows > max / slot.width {
        return Err(Decline);
    }
    let want = if slot.nested { rows } else { rows * slot.width }; // nested: rows checked wide
    if count != want {
        return Err(Decline);
    }
    Ok(rows)
}

fn dims(r: &mut Reader<'_>) -> Res<Vec<i64>> {
    let mut out = Vec::with_capacity(2);
    r.array()?;
    let mut first = true;
    while r.more(&mut first)? {
        let n = r.number()?;
        if !n.int {
            return Err(Decline);
        }
        out.push(n.text.parse().map_err(|_| Decline)?);
    }
    Ok(out)
}

/// A tensor's data, every value checked, the kept columns' values sent to their columns;
/// returns how many items the outer array held.
fn values<'a>(
    r: &mut Reader<'a>,
    slot: &Slot,
    keep: &[(usize, usize)],
    columns: &mut [Vec<Value<'a>>],
) -> Res<i64> {
    let mut count = 0;
    let mut cell = 0usize; // the column of the next value
    let width = slot.width as usize;
    let mut put = |v: Value<'a>, col: usize| match keep {
        [] => {}
        [(c, out)] => {
            if *c == col {
                columns[*out].push(v);
            }
        }
        _ => {
            for (c, out) in keep {
                if *c == col {
                    columns[*out].push(v.clone());
                }
            }
        }
    };
    r.array()?;
    let mut first = true;
    while r.more(&mut first)? {
        count += 1;
        if slot.nested {
            let mut cells = 0;
            r.array()?;
            let mut inner = true;
            while r.more(&mut inner)? {
                if cells >= width {
                    return Err(Decline);
                }
                put(element(r, slot.kind)?, cells);
                cells += 1;
            }
            if cells != width {
                return Err(Decline);
            }
        } else {
            put(element(r, slot.kind)?, cell);
            cell = if cell + 1 == width { 0 } else { cell + 1 };
        }
    }
    Ok(count)
}

fn element<'a>(r: &mut Reader<'a>, kind: Kind) -> Res<Value<'a>> {
    match kind {
        Kind::Bool => Ok(Value::Bool(r.boolean()?)),
        Kind::Bytes => Ok(Value::Text(r.string()?)),
        Kind::Int(lo, hi) => {
            let n = r.number()?;
            let v: i64 = if n.int {
                n.text.parse().map_err(|_| Decline)?
            } else {
                return Err(Decline);
            };
            if v < lo || v > hi {
                return Err(Decline);
            }
            Ok(Value::Int(v))
        }
        Kind::Float => {
            let n = r.number()?;
            if n.int {
                return Ok(Value::Int(n.text.parse().map_err(|_| Decline)?)); // an int stays one
            }
            let v: f64 = n.text.parse().map_err(|_| Decline)?;
            if !v.is_finite() {
                return Err(Decline); // msgspec refuses a number past a float's range
            }
            Ok(Value::Float(v))
        }
    }
}
