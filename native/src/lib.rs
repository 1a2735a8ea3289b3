//! Compiled fast paths of the monitor's serving-stack decoders (`monitor/ingest/native.py`).
//!
//! Each function decodes a whole poll batch of one model's records into columns, or returns
//! `None` when anything in the batch is unusual: the Python paths then decode it (and the
//! careful path dead-letters what is bad). A native function never judges a record bad; it
//! only declines, so what it accepts must decode to exactly what the Python paths give.
use pyo3::prelude::*;

mod decide;
mod json;
mod keys;
mod oip;
mod payload;
mod seldon;
mod seldon_half;
mod seldon_wire;

#[pymodule]
fn monitor_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(oip::decode_oip, m)?)?;
    m.add_function(wrap_pyfunction!(seldon::decode_seldon, m)?)?;
    Ok(())
}
