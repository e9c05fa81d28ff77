//! The native half of the `snapbus` Python package (`snapbus._snapbus`); the pure-Python half
//! is `python/snapbus/`. Users import `snapbus`, never this module.
//!
//! # Guarantees
//!
//! - **Emitting never blocks and never raises for bus conditions** (no bus yet, a full lane):
//!   those are counted in `snapbus.stats()`, exactly as for the Rust `Telemetry::snapshot`.
//! - **One copy in, one copy out.** A producer's arrays are copied once, from their buffer
//!   into the lane; a consumer copies a record once out of shared memory, and arrays are then
//!   read-only numpy views over that copy (no view outlives its memory).
//! - **Python runs on Python's threads.** Nothing here calls back into Python from a thread of
//!   its own; waiting releases the GIL and Ctrl-C interrupts it.
//!
//! # Example
//!
//! ```python
//! import logging, snapbus
//! from dataclasses import dataclass
//! from typing import ClassVar
//!
//! @dataclass
//! class Step:
//!     schema_id: ClassVar[str] = "lab.step"
//!     schema_version: ClassVar[int] = 1
//!     episode: int
//!     loss: float
//!
//! snapbus.get_telemetry(__name__).snapshot(logging.INFO, Step(episode=1, loss=0.5))
//! ```

use pyo3::prelude::*;

mod consumer;
mod producer;

/// The module `snapbus._snapbus`.
#[pymodule]
fn _snapbus(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    producer::register(m)?;
    consumer::register(m)?;
    Ok(())
}
