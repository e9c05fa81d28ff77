//! The read side: subscriptions, events decoded to Python values, recordings.

use pyo3::prelude::*;

/// Adds the consumer's classes and functions to the module.
pub(crate) fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
