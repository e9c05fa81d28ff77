//! The emit side: telemetry handles, encode plans compiled per dataclass, levels.

use pyo3::prelude::*;

/// Adds the producer's classes and functions to the module.
pub(crate) fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
