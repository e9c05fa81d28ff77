//! The read side: subscriptions, events decoded to Python values, recordings.

mod decode;
mod event;
mod fields;
mod recording;
mod subscription;

use pyo3::prelude::*;

/// Tells the broker that started this process (a supervised consumer) its exit code; does
/// nothing in a process the broker did not start.
#[pyfunction]
fn _report_exit(py: Python<'_>, code: i32) {
    py.detach(|| snapbus_bus::broker::report_exit(code));
}

/// Adds the consumer's classes and functions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<event::Event>()?;
    m.add_class::<event::Schema>()?;
    m.add_class::<event::Producer>()?;
    m.add_class::<subscription::Subscription>()?;
    m.add_class::<recording::Recording>()?;
    m.add_class::<fields::FieldPlan>()?;
    m.add_function(wrap_pyfunction!(_report_exit, m)?)?;
    Ok(())
}
