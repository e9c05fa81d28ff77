//! The emit side: telemetry handles, encode plans compiled per dataclass, levels.
//!
//! `Telemetry.snapshot` is a method of a frozen pyclass (the hot path: three atomic loads
//! when the level is off, see `levels`; a cached plan, two passes and one claim when on).
//! Data that does not fit its schema raises `TypeError`/`ValueError` naming the field, or,
//! with `bad_values="count"`, is counted and warned about once per (class, field); bus
//! conditions are only ever counted.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyRuntimeWarning, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};
use snapbus::schemas::builtin::DurationSample;

mod levels;
mod plan;

use levels::LoggingLevel;
use plan::{Compiled, Staged};

/// Raise bad values (the default) instead of counting them (`bad_values="count"`).
static STRICT: AtomicBool = AtomicBool::new(true);
/// Snapshots not written because their data did not fit the schema (`bad_values="count"`).
static DATA_ERRORS: AtomicU64 = AtomicU64::new(0);
/// (class address, field path) already warned about.
static WARNED: Mutex<Option<HashSet<(usize, String)>>> = Mutex::new(None);

/// A handle for emitting snapshots under a target name (a module's `__name__`).
#[pyclass(frozen, module = "snapbus._snapbus", name = "Telemetry")]
pub(crate) struct Telemetry {
    inner: snapbus::Telemetry,
    /// Python `logging`'s say in its level (see `levels`).
    logging: LoggingLevel,
}

#[pymethods]
impl Telemetry {
    /// The target name (what `SNAPBUS_FILTER` directives and `snapbus ls` use).
    #[getter]
    fn name(&self) -> &str {
        self.inner.target()
    }

    /// Emits `event` (an event: a dataclass with `schema_id`/`schema_version` ClassVars, a
    /// pydantic model, or a `dict` with a `"kind"`) at `level` (a `logging` level), its schema
    /// id prefixed with `schema_prefix`. Never blocks and never raises for bus conditions
    /// (counted in `snapbus.stats()`); raises `TypeError` for an object that cannot be an event,
    /// and `TypeError`/`ValueError` for a value that does not fit its field (unless bad values
    /// are counted: `snapbus.init(bad_values="count")`).
    #[pyo3(signature = (level, event, *, schema_prefix=None))]
    fn snapshot(
        &self,
        py: Python<'_>,
        level: i64,
        event: &Bound<'_, PyAny>,
        schema_prefix: Option<&str>,
    ) -> PyResult<()> {
        // The one level check: the emit below goes through the handle at this level.
        let Some(at) = self.logging.at(py, &self.inner, level)? else {
            return Ok(());
        };
        emit_event(py, at, event, schema_prefix)
    }

    /// `SnapbusHandler`'s emit: as `snapshot`, but `logging` has decided the level already
    /// (the record reached the handler), so only a bus filter can still refuse it.
    #[pyo3(signature = (level, event, schema_prefix=None))]
    fn _snapshot_logged(
        &self,
        py: Python<'_>,
        level: i64,
        event: &Bound<'_, PyAny>,
        schema_prefix: Option<&str>,
    ) -> PyResult<()> {
        let Some(at) = levels::bus_first(&self.inner, level) else {
            return Ok(());
        };
        emit_event(py, at, event, schema_prefix)
    }

    /// Whether a snapshot at `level` would be written now (the level rule lets it through
    /// and this process has its lane: a bus runs or was started for it): guards costly event
    /// construction.
    #[allow(non_snake_case)]
    fn isEnabledFor(&self, py: Python<'_>, level: i64) -> PyResult<bool> {
        Ok(self
            .logging
            .at(py, &self.inner, level)?
            .is_some_and(|at| at.enabled()))
    }

    /// Alias of `isEnabledFor`.
    fn enabled(&self, py: Python<'_>, level: i64) -> PyResult<bool> {
        self.isEnabledFor(py, level)
    }

    /// A span labelled `label`, like the Rust `span`/`time_it`: a context manager, and a
    /// decorator timing every call. Each block emits one `snapbus.duration` record when it
    /// ends, with its trace, span and parent ids (spans nest per thread, with Rust's).
    fn span(slf: &Bound<'_, Self>, level: i64, label: String) -> Span {
        Span {
            telemetry: slf.clone().unbind(),
            level,
            label,
            starts: Mutex::new(Vec::new()),
        }
    }

    fn __repr__(&self) -> String {
        format!("<snapbus.Telemetry {:?}>", self.inner.target())
    }
}

/// Emits the event `event` at the level `at` passed, its schema id prefixed with
/// `schema_prefix`.
fn emit_event(
    py: Python<'_>,
    at: snapbus::AtLevel<'_>,
    event: &Bound<'_, PyAny>,
    schema_prefix: Option<&str>,
) -> PyResult<()> {
    let class = plan::event_class(&event.get_type())?;
    let prefix = schema_prefix.unwrap_or("");
    if prefix.is_empty() {
        if let Some(plan) = class.fixed() {
            return emit(py, at, plan, event, &[]);
        }
    }
    let mut extras = plan::Extras::new();
    let plan = class.shape(event, prefix, &mut extras)?;
    emit(py, at, &plan, event, &extras)
}

/// Encodes `event` with `plan` (then its `extras`, each a dynamic value) and emits it at the
/// level `at` passed; bad values per the `bad_values` setting.
fn emit(
    py: Python<'_>,
    at: snapbus::AtLevel<'_>,
    plan: &Compiled,
    event: &Bound<'_, PyAny>,
    extras: &[(Bound<'_, PyString>, Bound<'_, PyAny>)],
) -> PyResult<()> {
    if let Some(why) = &plan.refused {
        // Its layout conflicts with the bus's (checked at its first emit): never written.
        return count_or_raise(py, plan, "", || PyTypeError::new_err(why.clone()), why);
    }
    let mut staged = Staged::new();
    if let Err(e) = plan::measure(&plan.root, event, &mut staged) {
        return data_error(py, plan, &e);
    }
    for (name, value) in extras {
        if let Err(e) = plan::measure_dynamic(value, &mut staged, 0) {
            return data_error(py, plan, &e.within(&name.to_string()));
        }
    }
    // Bus conditions (no bus yet, lane full, closed) are counted by the producer crate, which
    // also decides how each part is copied into the lane.
    let _ = at.snapshot_encoded(&plan.desc, staged.len(), |w| {
        Ok(plan::write(py, &staged, w)?)
    });
    Ok(())
}

#[cold]
fn data_error(py: Python<'_>, plan: &Compiled, e: &plan::DataError) -> PyResult<()> {
    count_or_raise(py, plan, &e.path, || e.to_py(&plan.class), &e.to_string())
}

/// A record of `plan` not emitted for `what` (at field path `path`, empty for the whole
/// event): raised as `err` unless bad values are counted, then counted and warned about once
/// per (class, path).
#[cold]
fn count_or_raise(
    py: Python<'_>,
    plan: &Compiled,
    path: &str,
    err: impl FnOnce() -> PyErr,
    what: &str,
) -> PyResult<()> {
    if STRICT.load(Ordering::Relaxed) {
        return Err(err());
    }
    DATA_ERRORS.fetch_add(1, Ordering::Relaxed);
    let first = {
        let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
        warned
            .get_or_insert_with(HashSet::new)
            .insert((plan.class_id, path.to_owned()))
    };
    if first {
        let msg = format!(
            "snapbus: {} not emitted: {what} (counted in snapbus.stats()['data_errors']; warned once \
             per field; bad values raise unless snapbus.init(bad_values=\"count\") or \
             SNAPBUS_BAD_VALUES=count)",
            plan.class
        );
        let msg = std::ffi::CString::new(msg.replace('\0', " "))
            .unwrap_or_else(|_| c"snapbus: a snapshot was not emitted".to_owned());
        PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &msg, 1)?;
    }
    Ok(())
}

/// See `Telemetry.span`.
#[pyclass(frozen, module = "snapbus._snapbus", name = "Span")]
pub(crate) struct Span {
    telemetry: Py<Telemetry>,
    /// A `logging` level.
    level: i64,
    label: String,
    /// The open `with` blocks, by thread (a span may be re-entered, and a decorated function
    /// called from several threads at once): start time and place in the trace (`None`: the
    /// level was off, or no bus yet).
    starts: Mutex<Vec<Start>>,
}

/// An open block of a [`Span`]: its thread, start time and trace context.
type Start = (
    std::thread::ThreadId,
    Instant,
    Option<snapbus::trace::Entered>,
);

#[pymethods]
impl Span {
    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        let span = slf.get();
        let t = span.telemetry.get();
        // A span nobody would record costs no id (see `snapbus::trace`).
        let on = t
            .logging
            .at(py, &t.inner, span.level)?
            .is_some_and(|at| at.enabled());
        let entered = on.then(snapbus::trace::enter);
        span.starts.lock().unwrap_or_else(|p| p.into_inner()).push((
            std::thread::current().id(),
            Instant::now(),
            entered,
        ));
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        let me = std::thread::current().id();
        let start = {
            let mut starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
            let last = starts.iter().rposition(|(t, _, _)| *t == me);
            last.map(|i| starts.remove(i))
        };
        if let Some((_, start, entered)) = start {
            if let Some(e) = &entered {
                snapbus::trace::exit(e);
            }
            self.emit(py, start.elapsed(), entered)?;
        }
        Ok(false)
    }

    /// Used as a decorator: times every call of `func`.
    fn __call__<'py>(
        slf: Bound<'py, Self>,
        func: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("snapbus.telemetry")?
            .getattr("_timed")?
            .call1((slf, func))
    }

    /// The label.
    #[getter]
    fn label(&self) -> &str {
        &self.label
    }
}

impl Span {
    fn emit(
        &self,
        py: Python<'_>,
        took: Duration,
        entered: Option<snapbus::trace::Entered>,
    ) -> PyResult<()> {
        // As the Rust span: counted as no_bus before a bus is found, else a DurationSample.
        let t = self.telemetry.get();
        if let Some(at) = t.logging.at(py, &t.inner, self.level)? {
            let _ = at.snapshot(&DurationSample {
                label: self.label.clone(),
                duration_nanos: took.as_nanos().min(u128::from(u64::MAX)) as u64,
                trace_id: entered.map_or(0, |e| e.context.trace_id),
                span_id: entered.map_or(0, |e| e.context.span_id),
                parent_id: entered.map_or(0, |e| e.parent_id()),
            });
        }
        Ok(())
    }
}

/// A running resource sampler (`snapbus.sample_resources`); stops on `stop()`, on leaving its
/// `with` block, or when collected.
#[pyclass(frozen, module = "snapbus._snapbus", name = "ResourceSampler")]
pub(crate) struct ResourceSampler {
    inner: Mutex<Option<snapbus::ResourceSampler>>,
}

#[pymethods]
impl ResourceSampler {
    /// Stops sampling (waits for the sampler thread, with the GIL released).
    fn stop(&self, py: Python<'_>) {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(move || drop(s));
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.stop(py);
        false
    }
}

/// Sets process-wide settings and joins the bus (starting its broker unless `start_bus` is
/// false); `false` if they were fixed already.
#[pyfunction]
#[pyo3(signature = (
    bus=None, name=None, session_tag=None, perf_tag=None, lane_bytes=None, start_bus=None,
    snapbus_bin=None, record=None
))]
#[allow(clippy::too_many_arguments)]
fn _init(
    bus: Option<String>,
    name: Option<String>,
    session_tag: Option<String>,
    perf_tag: Option<String>,
    lane_bytes: Option<usize>,
    start_bus: Option<bool>,
    snapbus_bin: Option<std::path::PathBuf>,
    record: Option<std::path::PathBuf>,
) -> bool {
    snapbus::set_warning_hook(warn_through_logging);
    snapbus::init(snapbus::Config {
        bus,
        name,
        session_tag,
        perf_tag,
        lane_bytes,
        start_bus,
        snapbus_bin,
        record,
        ..Default::default()
    })
}

/// Says a warning of the producer crate (no bus can be reached) through `logging` (logger
/// `snapbus`), or on stderr when Python cannot be reached (it is shutting down).
fn warn_through_logging(message: &str) {
    let logged = Python::try_attach(|py| -> PyResult<()> {
        py.import("logging")?
            .call_method1("getLogger", ("snapbus",))?
            .call_method1("warning", ("%s", message))?;
        Ok(())
    });
    if !matches!(logged, Some(Ok(()))) {
        snapbus_bus::say!("{message}");
    }
}

/// The handle for `name`.
#[pyfunction]
fn _get_telemetry(name: &str) -> Telemetry {
    Telemetry {
        inner: snapbus::get_telemetry(name),
        logging: LoggingLevel::new(name),
    }
}

/// Whether bad values raise (`true`, the default) or are counted (`bad_values="count"`).
#[pyfunction]
fn _set_strict(strict: bool) {
    STRICT.store(strict, Ordering::Relaxed);
}

/// The descriptor of an event class as JSON, and its fingerprint.
#[pyfunction]
fn _schema_json(cls: &Bound<'_, PyType>) -> PyResult<(String, u64)> {
    let plan = plan::plan_for(cls)?;
    let json = serde_json::to_string(&plan.desc)
        .map_err(|e| PyRuntimeError::new_err(format!("rendering the descriptor: {e}")))?;
    Ok((json, plan.desc.fingerprint()))
}

/// This process's telemetry counters.
#[pyfunction]
fn stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = snapbus::stats();
    let d = PyDict::new(py);
    d.set_item("has_lane", s.has_lane)?;
    d.set_item("connected", s.lane.connected)?;
    d.set_item("refused", snapbus::refusal())?;
    d.set_item("written", s.written())?;
    d.set_item(
        "not_written",
        s.not_written() + DATA_ERRORS.load(Ordering::Relaxed),
    )?;
    d.set_item("no_bus", s.no_bus)?;
    d.set_item("oversize", s.lane.oversize)?;
    d.set_item("lane_full", s.lane.lapped)?;
    d.set_item("encode_errors", s.lane.encode_errors)?;
    d.set_item("data_errors", DATA_ERRORS.load(Ordering::Relaxed))?;
    d.set_item("catalog_errors", s.lane.catalog_errors)?;
    d.set_item("closed", s.lane.closed)?;
    d.set_item("no_lane", s.lane.no_lane)?;
    d.set_item("unadopted", s.lane.unadopted)?;
    Ok(d)
}

/// Whether large arrays go into this process's lane with stores that bypass the caches (the
/// lane is larger than the last-level cache): for tests of that path.
#[pyfunction]
fn _streams_large_payloads() -> bool {
    snapbus::streams_large_payloads()
}

/// Whether this process is connected to a bus now.
#[pyfunction]
fn is_connected() -> bool {
    snapbus::is_connected()
}

/// Waits up to `timeout` seconds for a bus, with the GIL released; Ctrl-C interrupts it.
#[pyfunction]
#[pyo3(signature = (timeout=5.0))]
fn wait_for_bus(py: Python<'_>, timeout: f64) -> PyResult<bool> {
    if !timeout.is_finite() || timeout < 0.0 {
        return Err(PyValueError::new_err(format!(
            "timeout must be a finite number of seconds >= 0, not {timeout}"
        )));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(timeout);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let slice = left.min(Duration::from_millis(50));
        if py.detach(|| snapbus::wait_for_bus(slice)) {
            return Ok(true);
        }
        py.check_signals()?;
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

/// Closes this process's lane: consumers see the stream end.
#[pyfunction]
fn shutdown(py: Python<'_>) {
    py.detach(snapbus::shutdown);
}

/// Emits a resource sample (`snapbus.resources`) every `period` seconds until stopped.
#[pyfunction]
fn sample_resources(period: f64) -> PyResult<ResourceSampler> {
    if !period.is_finite() || period <= 0.0 {
        return Err(PyValueError::new_err(format!(
            "period must be a positive number of seconds, not {period}"
        )));
    }
    let s = snapbus::sample_resources(Duration::from_secs_f64(period))
        .map_err(|e| PyRuntimeError::new_err(format!("starting the resource sampler: {e}")))?;
    Ok(ResourceSampler {
        inner: Mutex::new(Some(s)),
    })
}

/// Adds the producer's classes and functions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Telemetry>()?;
    m.add_class::<Span>()?;
    m.add_class::<ResourceSampler>()?;
    m.add_function(wrap_pyfunction!(_init, m)?)?;
    m.add_function(wrap_pyfunction!(_get_telemetry, m)?)?;
    m.add_function(wrap_pyfunction!(levels::_logging_changed, m)?)?;
    m.add_function(wrap_pyfunction!(_set_strict, m)?)?;
    m.add_function(wrap_pyfunction!(_schema_json, m)?)?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    m.add_function(wrap_pyfunction!(is_connected, m)?)?;
    m.add_function(wrap_pyfunction!(_streams_large_payloads, m)?)?;
    m.add_function(wrap_pyfunction!(wait_for_bus, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(sample_resources, m)?)?;
    Ok(())
}
