//! What a consumer receives: [`Event`] (a record: header, its bytes, its payload decoded lazily),
//! with its [`Schema`] and [`Producer`]; shared by subscriptions and recordings.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString, PyType};
use snapbus_bus::Level;
use snapbus_bus::schemas::SchemaDescriptor;

use super::decode::{self, Plan};

/// A schema: id, version, fingerprint (and the plan that decodes its payloads).
#[pyclass(frozen, module = "snapbus", name = "Schema")]
pub(crate) struct Schema {
    /// The schema id (`demo.step`).
    #[pyo3(get)]
    id: Py<PyString>,
    /// Its version.
    #[pyo3(get)]
    version: u32,
    /// The descriptor's fingerprint (covers id, version and type).
    #[pyo3(get)]
    fingerprint: u64,
    pub(crate) desc: Arc<SchemaDescriptor>,
    plan: PyOnceLock<Plan>,
}

#[pymethods]
impl Schema {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Schema(id={:?}, version={}, fingerprint=0x{:016x})",
            self.id.bind(py).to_string(),
            self.version,
            self.fingerprint
        )
    }

    /// The field names of the payload's root struct (empty for other types).
    #[getter]
    fn fields(&self) -> Vec<String> {
        let fields = self.desc.root().fields();
        fields.iter().map(|f| f.name.clone()).collect()
    }
}

impl Schema {
    pub(crate) fn new(py: Python<'_>, desc: &Arc<SchemaDescriptor>) -> Schema {
        Schema {
            id: PyString::new(py, desc.id()).unbind(),
            version: desc.version(),
            fingerprint: desc.fingerprint(),
            desc: Arc::clone(desc),
            plan: PyOnceLock::new(),
        }
    }
}

/// A producer: the process that emitted a record.
#[pyclass(frozen, module = "snapbus", name = "Producer")]
pub(crate) struct Producer {
    /// Its name (the script or program, unless the experiment set one).
    #[pyo3(get)]
    name: String,
    /// Process id.
    #[pyo3(get)]
    pid: u32,
    /// Its lane's id: the same across broker restarts.
    #[pyo3(get)]
    lane_id: u64,
    /// When it started, CLOCK_REALTIME nanoseconds (0 in recordings).
    #[pyo3(get)]
    started_nanos: u64,
    /// Run metadata: the session tag.
    #[pyo3(get)]
    session_tag: Option<String>,
    /// Run metadata: the performance tag.
    #[pyo3(get)]
    perf_tag: Option<String>,
    /// Its command line.
    #[pyo3(get)]
    cmdline: Vec<String>,
    /// Re-emitted from another machine's bus by `snapbus bridge --receive`.
    #[pyo3(get)]
    relayed: bool,
}

#[pymethods]
impl Producer {
    fn __repr__(&self) -> String {
        format!("Producer(name={:?}, pid={})", self.name, self.pid)
    }
}

impl Producer {
    pub(crate) fn of(p: &snapbus_consumers::Producer<'_>) -> Producer {
        Producer {
            name: p.name.to_owned(),
            pid: p.pid,
            lane_id: p.lane_id,
            started_nanos: p.started_nanos,
            session_tag: p.session_tag.map(str::to_owned),
            perf_tag: p.perf_tag.map(str::to_owned),
            cmdline: p.cmdline.to_vec(),
            relayed: p.relayed,
        }
    }

    pub(crate) fn recorded(name: &str, pid: u32, lane_id: u64) -> Producer {
        Producer {
            name: name.to_owned(),
            pid,
            lane_id,
            started_nanos: 0,
            session_tag: None,
            perf_tag: None,
            cmdline: Vec::new(),
            relayed: false,
        }
    }
}

/// A snapbus level as a Python `logging` level (TRACE 5, DEBUG 10, INFO 20, WARN 30, ERROR 40).
pub(crate) fn logging_level(level: Level) -> u8 {
    match level.as_u8() {
        0 => 5,
        l => l * 10,
    }
}

/// A record: header fields, the payload's bytes (`data`, one copy out of shared memory) and
/// the payload decoded on first access (`payload`, cached).
#[pyclass(frozen, module = "snapbus", name = "Event")]
pub(crate) struct Event {
    /// The payload's schema.
    #[pyo3(get)]
    schema: Py<Schema>,
    /// The producer.
    #[pyo3(get)]
    producer: Py<Producer>,
    /// The emitter (the telemetry handle's name, e.g. a module's `__name__`), if known.
    #[pyo3(get)]
    emitter: Option<Py<PyString>>,
    /// Its level, as a `logging` level.
    #[pyo3(get)]
    level: u8,
    /// Its number in its producer's lane (in recordings: the low 32 bits).
    #[pyo3(get)]
    seq: u64,
    /// When it was emitted, CLOCK_REALTIME nanoseconds.
    #[pyo3(get)]
    t_nanos: u64,
    /// The payload's bytes (wire format of its schema).
    #[pyo3(get)]
    data: Py<PyBytes>,
    /// The decoded payload, once made. A `std` cell, not a `PyOnceLock`: that one lets go of
    /// the interpreter while it sets its value (a GIL release and reacquire per event, 7 % of a
    /// Python consumer's time), and this cell's value is made before it is set.
    payload: OnceLock<Py<PyAny>>,
}

impl Event {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        schema: Py<Schema>,
        producer: Py<Producer>,
        emitter: Option<Py<PyString>>,
        level: Level,
        seq: u64,
        t_nanos: u64,
        data: Py<PyBytes>,
    ) -> Event {
        Event {
            schema,
            producer,
            emitter,
            level: logging_level(level),
            seq,
            t_nanos,
            data,
            payload: OnceLock::new(),
        }
    }
}

#[pymethods]
impl Event {
    /// The payload decoded to Python values (made on first access, then cached).
    #[getter]
    fn payload(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if let Some(v) = self.payload.get() {
            return Ok(v.clone_ref(py));
        }
        let schema = self.schema.get();
        let plan = schema
            .plan
            .get_or_try_init(py, || Plan::of_schema(py, &schema.desc))?;
        let v = plan.decode(self.data.bind(py))?;
        // Decoding ran Python code (record classes), so another thread may have set it
        // meanwhile: the first value set is the one every access returns.
        Ok(self.payload.get_or_init(|| v).clone_ref(py))
    }

    /// The payload decoded into `cls` (a dataclass), by field name: fields the record lacks
    /// take the class's defaults; Enum and Literal fields become the member or literal.
    fn as_(&self, py: Python<'_>, cls: &Bound<'_, PyType>) -> PyResult<Py<PyAny>> {
        let payload = self.payload(py)?;
        let schema = self.schema.get();
        let named = format!(
            "record of schema {:?} version {}",
            schema.id.bind(py).to_string(),
            schema.version
        );
        Ok(decode::helpers(py)?
            .call_method1("as_", (cls, payload, named))?
            .unbind())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Event(schema={:?} v{}, producer={:?}, seq={}, t_nanos={}, level={}, {} bytes)",
            self.schema.get().id.bind(py).to_string(),
            self.schema.get().version,
            self.producer.get().name,
            self.seq,
            self.t_nanos,
            self.level,
            self.data.bind(py).as_bytes().len()
        )
    }
}

/// Python objects made once per schema, producer and emitter, shared by the events.
#[derive(Default)]
pub(crate) struct Interned {
    schemas: HashMap<u64, Py<Schema>>,
    /// The last schema looked up (runs of one schema skip the hash).
    last_schema: Option<(Arc<SchemaDescriptor>, Py<Schema>)>,
    producers: HashMap<u64, Py<Producer>>,
    /// The last producer looked up, by lane id.
    last_producer: Option<(u64, Py<Producer>)>,
    emitters: HashMap<String, Py<PyString>>,
    /// The last emitter looked up.
    last_emitter: Option<Py<PyString>>,
}

impl Interned {
    pub(crate) fn schema(
        &mut self,
        py: Python<'_>,
        desc: &Arc<SchemaDescriptor>,
    ) -> PyResult<Py<Schema>> {
        if let Some((d, s)) = &self.last_schema {
            if Arc::ptr_eq(d, desc) {
                return Ok(s.clone_ref(py));
            }
        }
        let s = match self.schemas.get(&desc.fingerprint()) {
            Some(s) => s.clone_ref(py),
            None => {
                let s = Py::new(py, Schema::new(py, desc))?;
                self.schemas.insert(desc.fingerprint(), s.clone_ref(py));
                s
            }
        };
        self.last_schema = Some((Arc::clone(desc), s.clone_ref(py)));
        Ok(s)
    }

    /// The producer of lane `lane_id`, made by `make` the first time.
    pub(crate) fn producer(
        &mut self,
        py: Python<'_>,
        lane_id: u64,
        make: impl FnOnce() -> Producer,
    ) -> PyResult<Py<Producer>> {
        if let Some((id, p)) = &self.last_producer {
            if *id == lane_id {
                return Ok(p.clone_ref(py));
            }
        }
        let p = match self.producers.get(&lane_id) {
            Some(p) => p.clone_ref(py),
            None => {
                let p = Py::new(py, make())?;
                self.producers.insert(lane_id, p.clone_ref(py));
                p
            }
        };
        self.last_producer = Some((lane_id, p.clone_ref(py)));
        Ok(p)
    }

    pub(crate) fn emitter(&mut self, py: Python<'_>, name: Option<&str>) -> Option<Py<PyString>> {
        let name = name?;
        if let Some(s) = &self.last_emitter {
            if s.bind(py).to_cow().is_ok_and(|t| t == name) {
                return Some(s.clone_ref(py));
            }
        }
        let s = match self.emitters.get(name) {
            Some(s) => s.clone_ref(py),
            None => {
                let s = PyString::new(py, name).unbind();
                self.emitters.insert(name.to_owned(), s.clone_ref(py));
                s
            }
        };
        self.last_emitter = Some(s.clone_ref(py));
        Some(s)
    }
}
