//! `Recording`: the events of an MCAP recording or snapshot (`snapbus record`, `snapbus
//! snapshot`), as the same [`Event`]s a subscription gives, with damage and cuts reported.

use std::fs::File;
use std::io::BufReader;
use std::sync::{Mutex, MutexGuard};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::SchemaRef;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};
use snapbus_consumers::recording::{Item, ReadErrorKind, RecordingReader};
use snapbus_consumers::table::read_schema;

use super::event::{Event, Interned, Producer};

/// What `Recording._arrow_streams` returns.
type ArrowStreams = (
    Vec<Py<PyCapsule>>,
    u64,
    Vec<String>,
    Option<String>,
    Vec<String>,
);

/// `batches` (of one schema, with `schema`) as an Arrow C stream in a PyCapsule named
/// `arrow_array_stream` (the Arrow PyCapsule interface): pyarrow takes the arrays as they are.
fn stream_capsule(
    py: Python<'_>,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> PyResult<Py<PyCapsule>> {
    let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    let stream = FFI_ArrowArrayStream::new(Box::new(reader));
    Ok(PyCapsule::new_with_value(py, stream, c"arrow_array_stream")?.unbind())
}

struct Inner {
    reader: Option<RecordingReader<BufReader<File>>>,
    /// The first item, read at open (a file that is not a recording fails there).
    peeked: Option<Item>,
    interned: Interned,
    lost: u64,
    damage: Vec<String>,
    error: Option<String>,
    complete: bool,
    metadata: Vec<(String, Vec<(String, String)>)>,
}

/// An MCAP recording opened for reading (made by `snapbus.open_recording`): an iterator of
/// `Event`s in file order. Damaged parts are skipped and listed in `damage`; a file that ends
/// early (a killed recorder) stops the iteration with `complete == False` and the reason in
/// `error`; records the recorder never got (overwritten in a ring) are counted in `lost`.
#[pyclass(frozen, subclass, module = "snapbus", name = "Recording")]
pub(crate) struct Recording {
    inner: Mutex<Inner>,
    /// The file's path.
    #[pyo3(get)]
    path: String,
}

impl Recording {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

/// An error that makes the file unusable from its start: raised by `open_recording`.
fn fatal(path: &str, kind: &ReadErrorKind, msg: String) -> PyErr {
    match kind {
        ReadErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(format!("{path}: {msg}"))
        }
        ReadErrorKind::Io(_) => PyOSError::new_err(format!("{path}: {msg}")),
        _ => PyValueError::new_err(format!("{path} is not a readable snapbus recording: {msg}")),
    }
}

#[pymethods]
impl Recording {
    /// Opens `path` (see `snapbus.open_recording`).
    #[new]
    fn new(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Recording> {
        let shown = path.display().to_string();
        let file = File::open(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                PyFileNotFoundError::new_err(format!("no recording at {shown}"))
            }
            _ => PyOSError::new_err(format!("opening {shown}: {e}")),
        })?;
        let mut reader =
            RecordingReader::new(BufReader::with_capacity(1 << 20, file)).with_resync();
        let first = py.detach(|| reader.next());
        let peeked = match first {
            None => None,
            Some(Ok(item)) => Some(item),
            Some(Err(e)) => return Err(fatal(&shown, &e.kind, e.to_string())),
        };
        Ok(Recording {
            inner: Mutex::new(Inner {
                reader: Some(reader),
                peeked,
                interned: Interned::default(),
                lost: 0,
                damage: Vec::new(),
                error: None,
                complete: false,
                metadata: Vec::new(),
            }),
            path: shown,
        })
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<Event>>> {
        let mut g = self.lock();
        let inner = &mut *g;
        loop {
            let item = match inner.peeked.take() {
                Some(i) => i,
                None => {
                    let Some(reader) = inner.reader.as_mut() else {
                        return Ok(None);
                    };
                    match reader.next() {
                        Some(Ok(i)) => i,
                        Some(Err(e)) => {
                            inner.error = Some(e.to_string());
                            inner.complete = false;
                            inner.reader = None;
                            return Ok(None);
                        }
                        None => {
                            inner.complete = reader.complete();
                            inner.reader = None;
                            return Ok(None);
                        }
                    }
                }
            };
            match item {
                Item::Message(m) => {
                    let c = &m.channel;
                    let schema = inner.interned.schema(py, &c.schema)?;
                    let key = c.lane_id.unwrap_or(c.producer_id ^ (1 << 63));
                    let producer = inner.interned.producer(py, key, || {
                        Producer::recorded(&c.producer, c.pid, c.lane_id.unwrap_or(0))
                    })?;
                    let emitter = inner.interned.emitter(py, c.emitter.as_deref());
                    let ev = Event::new(
                        schema,
                        producer,
                        emitter,
                        c.level,
                        u64::from(m.sequence),
                        m.t_nanos,
                        PyBytes::new(py, &m.data).unbind(),
                    );
                    return Ok(Some(Py::new(py, ev)?));
                }
                Item::Loss { record, .. } => inner.lost += record.lost + record.damaged,
                Item::Damaged(d) => inner.damage.push(d.to_string()),
                Item::Metadata { name, fields } => {
                    inner.metadata.push((name, fields.into_iter().collect()));
                }
            }
        }
    }

    /// Records lost before they were recorded (overwritten in a producer's ring), as far as
    /// the file was read.
    #[getter]
    fn lost(&self) -> u64 {
        self.lock().lost
    }

    /// The damaged parts skipped so far, described (byte range, what they held).
    #[getter]
    fn damage(&self) -> Vec<String> {
        self.lock().damage.clone()
    }

    /// Why the read stopped early (a file cut short, without its footer), or `None`.
    #[getter]
    fn error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// Whether the whole file was read through its footer (meaningful once iterated to the
    /// end, or after `to_arrow`/`to_pandas`; `False` before).
    #[getter]
    fn complete(&self) -> bool {
        self.lock().complete
    }

    /// The metadata records read so far: `(name, {field: value})` (`snapbus.recording`,
    /// `snapbus.producer`, …).
    #[getter]
    fn metadata(&self) -> Vec<(String, std::collections::BTreeMap<String, String>)> {
        self.lock()
            .metadata
            .iter()
            .map(|(n, f)| (n.clone(), f.iter().cloned().collect()))
            .collect()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> bool {
        self.close();
        false
    }

    /// Closes the file.
    fn close(&self) {
        let mut g = self.lock();
        g.reader = None;
        g.peeked = None;
    }

    /// The records of schema id `schema`, from the file's start (whatever this iterator has
    /// read): one Arrow C stream (a PyCapsule) per version of the schema, then how many
    /// payloads did not decode, the damaged parts skipped, why the read stopped early (or
    /// `None`) and the schema ids of the file. What `Recording.to_arrow()` reads; a read
    /// through the footer sets `complete`.
    fn _arrow_streams(&self, py: Python<'_>, schema: &str) -> PyResult<ArrowStreams> {
        let file = File::open(&self.path)
            .map_err(|e| PyOSError::new_err(format!("opening {}: {e}", self.path)))?;
        let reader = RecordingReader::new(BufReader::with_capacity(1 << 20, file)).with_resync();
        let read = py
            .detach(|| read_schema(reader, schema))
            .map_err(|e| PyValueError::new_err(format!("{}: {e}", self.path)))?;
        if read.complete {
            // The whole file was read through its footer, as an iteration to the end does.
            self.lock().complete = true;
        }
        let mut ids: Vec<String> = read.schema_ids.into_iter().collect();
        if !read.tables.is_empty() {
            ids.push(schema.to_owned());
            ids.sort();
        }
        let mut streams = Vec::with_capacity(read.tables.len());
        for t in read.tables {
            let Some(first) = t.batches.first() else {
                continue;
            };
            streams.push(stream_capsule(py, first.schema(), t.batches)?);
        }
        Ok((streams, read.undecodable, read.damage, read.error, ids))
    }

    fn __repr__(&self) -> String {
        format!("Recording({:?})", self.path)
    }
}
