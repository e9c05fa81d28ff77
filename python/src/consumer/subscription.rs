//! `Subscription`: the consumer runtime's pull form ([`Reader`]) as a Python iterator and
//! queue, and the loop `snapbus.run` dispatches hooks over (drain-on-stop, batch reads and
//! the flush cadence are the runtime's).
//!
//! Reading polls with the GIL held; waiting releases it (`py.detach`) in slices of at most
//! 100 ms, with `py.check_signals()` between them, so Ctrl-C interrupts a blocked `get`. A
//! record is copied once, from the ring straight into its `bytes` (with the GIL taken back
//! for it when it arrives during a wait).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyList, PyString, PyTuple};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::status::{StatusBoard, StatusValue};
use snapbus_bus::subscriber::{Glob, SubscribeError, SubscriberStats};
use snapbus_consumers::prelude::StartAt;
use snapbus_consumers::{
    BatchReads, InPlace, Item as RunItem, Producer as RunProducer, ProducerChange, Reader,
    RecordRef, RunError, RunOptions, RunSummary, StopReason,
};

use super::event::{Event, Interned, Producer};

/// The longest the GIL is released at once while waiting.
const SLICE: Duration = Duration::from_millis(100);

/// What a subscription read: a record, or (for `snapbus.run`) a notice.
enum Item {
    /// A record (`true`: the first of its schema).
    Event(Py<Event>, bool),
    Lag(Py<Producer>, u64),
    Change(&'static str, Py<Producer>),
    Flush,
    End(RunSummary),
}

struct Inner {
    reader: Option<Reader>,
    interned: Interned,
}

/// A record's payload copied from the ring straight into a new `bytes` (`None`: out of
/// bounds, which validation excludes).
fn payload_bytes(py: Python<'_>, r: &InPlace<'_>) -> Option<Py<PyBytes>> {
    let mut copied = false;
    let bytes = PyBytes::new_with(py, r.payload.len(), |buf| {
        copied = r.payload.copy_to(buf);
        Ok(())
    })
    .ok()?;
    copied.then(|| bytes.unbind())
}

fn producer(
    py: Python<'_>,
    interned: &mut Interned,
    p: &RunProducer<'_>,
) -> PyResult<Py<Producer>> {
    interned.producer(py, p.lane_id, || Producer::of(p))
}

fn record(
    py: Python<'_>,
    interned: &mut Interned,
    r: RecordRef<'_, Option<Py<PyBytes>>>,
    first: bool,
) -> PyResult<Option<Item>> {
    let Some(data) = r.payload else {
        return Ok(None);
    };
    let ev = Event::new(
        interned.schema(py, r.schema)?,
        producer(py, interned, &r.producer)?,
        interned.emitter(py, r.emitter),
        r.header.level,
        r.header.seq,
        r.header.t_nanos,
        data,
    );
    Ok(Some(Item::Event(Py::new(py, ev)?, first)))
}

/// The subscription's item of what the reader read (`None`: nothing to hand out).
fn convert(
    py: Python<'_>,
    interned: &mut Interned,
    item: RunItem<'_, Option<Py<PyBytes>>>,
) -> PyResult<Option<Item>> {
    Ok(Some(match item {
        RunItem::Record(r) => return record(py, interned, r, false),
        RunItem::NewSchema(r) => return record(py, interned, r, true),
        // Records lost to damage in the ring are missing too (`Lag` counts them apart).
        RunItem::Lag(lag) => Item::Lag(
            producer(py, interned, &lag.producer)?,
            lag.lost + lag.damaged,
        ),
        RunItem::Producer(change) => {
            let (what, p) = match change {
                ProducerChange::Joined(p) => ("joined", p),
                ProducerChange::Died(p) => ("died", p),
                ProducerChange::Ended(p) => ("ended", p),
            };
            Item::Change(what, producer(py, interned, &p)?)
        }
        RunItem::Flush => Item::Flush,
        RunItem::End(s) => Item::End(s),
    }))
}

fn subscribe_error(py: Python<'_>, e: SubscribeError) -> PyErr {
    let msg = e.to_string();
    match e {
        SubscribeError::NoBus(_) => match py
            .import("snapbus._errors")
            .and_then(|m| m.getattr("BusNotRunning"))
        {
            Ok(cls) => PyErr::from_type(cls.cast_into().expect("a class"), msg),
            Err(e) => e,
        },
        SubscribeError::Glob(_) => PyValueError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
}

fn run_error(py: Python<'_>, e: RunError) -> PyErr {
    match e {
        RunError::Subscribe(e) => subscribe_error(py, e),
        e => PyRuntimeError::new_err(e.to_string()),
    }
}

fn reason_name(r: StopReason) -> &'static str {
    match r {
        StopReason::Consumer => "consumer",
        StopReason::Signal => "signal",
        StopReason::AllEnded => "all_ended",
        StopReason::Stopped => "stopped",
    }
}

/// A subscription to schemas of a bus (made by `snapbus.subscribe`): an iterator of
/// [`Event`]s, a queue (`get`, `get_nowait`, `get_batch`) and a context manager.
#[pyclass(frozen, module = "snapbus", name = "Subscription")]
pub(crate) struct Subscription {
    inner: Mutex<Inner>,
    /// The reader's stop flag (`_stop`: drain what was emitted until then, then end).
    stop: Arc<AtomicBool>,
    /// The consumer's status board, sent with its counters (`snapbus ls` shows it).
    board: StatusBoard,
    /// `close()` was called (a reader waiting in another thread leaves within a slice).
    closing: AtomicBool,
    /// The reader handed out its end.
    finished: AtomicBool,
    /// Counters mirrored after every read, so they are read without the lock.
    delivered: AtomicU64,
    lost: AtomicU64,
    damaged: AtomicU64,
    /// The bus's name.
    #[pyo3(get)]
    bus: String,
}

impl Subscription {
    fn lock(&self) -> PyResult<MutexGuard<'_, Inner>> {
        match self.inner.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(PyRuntimeError::new_err(
                "this subscription is being read by another thread: read a subscription from \
                 one thread at a time (or make one per thread)",
            )),
        }
    }

    /// The next item, waiting up to `timeout` (`None`: until there is one, or the
    /// subscription ends). `records_only`: notices are skipped.
    fn next_item(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
        records_only: bool,
    ) -> PyResult<Option<Item>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let got = self.next_locked(py, inner, deadline, records_only);
        if let Some(reader) = inner.reader.as_ref() {
            self.publish(reader.subscriber().stats());
        }
        if self.closing.load(Ordering::Relaxed) {
            self.drop_reader(py, inner);
        }
        got
    }

    fn publish(&self, s: SubscriberStats) {
        self.delivered.store(s.delivered, Ordering::Relaxed);
        self.lost.store(s.lost, Ordering::Relaxed);
        self.damaged.store(s.damaged, Ordering::Relaxed);
    }

    fn drop_reader(&self, py: Python<'_>, inner: &mut Inner) {
        if let Some(reader) = inner.reader.take() {
            self.publish(reader.subscriber().stats());
            py.detach(|| drop(reader));
        }
    }

    /// What `next_item` hands out of a reader's item (`None`: skip it).
    fn keep(&self, item: Option<Item>, records_only: bool) -> Option<Item> {
        match item {
            Some(Item::End(s)) => {
                self.finished.store(true, Ordering::Relaxed);
                (!records_only).then_some(Item::End(s))
            }
            Some(Item::Event(..)) => item,
            Some(_) if records_only => None,
            other => other,
        }
    }

    fn next_locked(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        deadline: Option<Instant>,
        records_only: bool,
    ) -> PyResult<Option<Item>> {
        let Inner { reader, interned } = inner;
        loop {
            if self.closing.load(Ordering::Relaxed)
                || (records_only && self.finished.load(Ordering::Relaxed))
            {
                return Ok(None);
            }
            let Some(reader) = reader.as_mut() else {
                return Ok(None);
            };
            // Poll with the GIL held: the hot path.
            let got = reader
                .next_with(Duration::ZERO, |r| payload_bytes(py, r))
                .map_err(|e| subscribe_error(py, e))?;
            let waited = got.is_none();
            if let Some(item) = got {
                let item = convert(py, interned, item)?;
                if let Some(item) = self.keep(item, records_only) {
                    return Ok(Some(item));
                }
                if records_only && self.finished.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                continue;
            }
            let slice = match deadline {
                None => SLICE,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    left.min(SLICE)
                }
            };
            // Waiting lets go of the GIL; a record that arrives takes it back for its bytes.
            let got = py.detach(|| {
                let item = reader.next_with(slice, |r| Python::attach(|py| payload_bytes(py, r)));
                Python::attach(|py| match item {
                    Ok(Some(item)) => convert(py, interned, item),
                    Ok(None) => Ok(None),
                    Err(e) => Err(subscribe_error(py, e)),
                })
            })?;
            if let Some(item) = self.keep(got, records_only) {
                return Ok(Some(item));
            }
            debug_assert!(waited);
            py.check_signals()?;
        }
    }

    fn next_event(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<Option<Py<Event>>> {
        match self.next_item(py, timeout, true)? {
            Some(Item::Event(e, _)) => Ok(Some(e)),
            _ => Ok(None),
        }
    }

    fn stats(&self) -> SubscriberStats {
        SubscriberStats {
            delivered: self.delivered.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            damaged: self.damaged.load(Ordering::Relaxed),
            ..SubscriberStats::default()
        }
    }
}

fn timeout_of(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if t == f64::INFINITY => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(format!(
            "timeout must be a non-negative number of seconds (or None), not {t}"
        ))),
        Some(t) => Ok(Some(
            Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX),
        )),
    }
}

fn empty(py: Python<'_>) -> PyErr {
    match py.import("queue").and_then(|m| m.getattr("Empty")) {
        Ok(cls) => PyErr::from_type(cls.cast_into().expect("a class"), ()),
        Err(e) => e,
    }
}

#[pymethods]
impl Subscription {
    /// Subscribes (see `snapbus.subscribe`).
    #[new]
    ///
    /// For `snapbus.run`: `flush_every` (seconds: `("flush",)` items from `_poll`; `None`:
    /// none), `drain_on_stop` (seconds: after `_stop`, what was emitted until then is read
    /// first, for at most this long) and `batch` (read in batches: for consumers that do not
    /// need microseconds).
    #[pyo3(signature = (globs, start="latest", bus=None, kind="python", cut=false, until_end=false, start_nanos=None, flush_every=None, drain_on_stop=0.0, batch=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        globs: Vec<String>,
        start: &str,
        bus: Option<&str>,
        kind: &str,
        cut: bool,
        until_end: bool,
        start_nanos: Option<u64>,
        flush_every: Option<f64>,
        drain_on_stop: f64,
        batch: bool,
    ) -> PyResult<Subscription> {
        let start = match (start, start_nanos) {
            ("time", Some(t)) => StartAt::Time(t),
            ("latest", _) => StartAt::Latest,
            ("oldest", _) => StartAt::Oldest,
            (other, _) => {
                return Err(PyValueError::new_err(format!(
                    "unknown start {other:?}: use \"latest\" (only records from now on), \
                     \"oldest\" (the history the rings still hold) or a datetime"
                )));
            }
        };
        let globs = globs
            .iter()
            .map(|g| Glob::new(g).map_err(|e| PyValueError::new_err(e.to_string())))
            .collect::<PyResult<Vec<_>>>()?;
        let name = BusName::resolve(bus).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let dir = BusDir::locate(&name);
        let mut opts = RunOptions::new(kind);
        opts.subscribe.globs = globs;
        opts.subscribe.start = start;
        opts.subscribe.cut = cut;
        // From "latest", the lanes read from their oldest record are those of producers
        // that joined after subscribing: whatever of theirs was overwritten before it was
        // read (a consumer that was stopped, or busy) was lost to this subscription.
        opts.subscribe.count_history_as_lost = matches!(start, StartAt::Latest);
        opts.until_end = until_end;
        // Python handles its signals (KeyboardInterrupt); `snapbus.run` stops the reader.
        opts.handle_signals = false;
        opts.flush_every = timeout_of(flush_every)?.unwrap_or(Duration::MAX);
        opts.drain_on_stop = timeout_of(Some(drain_on_stop))?.unwrap_or(Duration::MAX);
        opts.batch = batch.then(BatchReads::default);
        let board = StatusBoard::new();
        opts.status = Some(board.clone());
        let reader = py
            .detach(|| Reader::open(&dir, &opts))
            .map_err(|e| run_error(py, e))?;
        Ok(Subscription {
            stop: reader.stop_flag(),
            board,
            inner: Mutex::new(Inner {
                reader: Some(reader),
                interned: Interned::default(),
            }),
            closing: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            damaged: AtomicU64::new(0),
            bus: name.as_str().to_owned(),
        })
    }

    /// The next event, waiting up to `timeout` seconds (`None`: until one arrives); raises
    /// `queue.Empty` when none came in time (or the subscription is closed or ended).
    #[pyo3(signature = (timeout=None))]
    fn get(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<Event>> {
        self.next_event(py, timeout_of(timeout)?)?
            .ok_or_else(|| empty(py))
    }

    /// The next event if one is there now, else raises `queue.Empty`.
    fn get_nowait(&self, py: Python<'_>) -> PyResult<Py<Event>> {
        self.next_event(py, Some(Duration::ZERO))?
            .ok_or_else(|| empty(py))
    }

    /// Up to `max` events: waits up to `timeout` seconds for the first (`None`: until one
    /// arrives), then takes what is there without waiting. An empty list when none came.
    #[pyo3(signature = (max=1024, timeout=None))]
    fn get_batch<'py>(
        &self,
        py: Python<'py>,
        max: usize,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        if max == 0 {
            return Ok(list);
        }
        let Some(first) = self.next_event(py, timeout_of(timeout)?)? else {
            return Ok(list);
        };
        list.append(first)?;
        while list.len() < max {
            match self.next_event(py, Some(Duration::ZERO))? {
                Some(e) => list.append(e)?,
                None => break,
            }
        }
        Ok(list)
    }

    /// For `snapbus.run`: the next record or notice, waiting up to `timeout` seconds; `None`
    /// when none came. `("event", Event)`, `("schema", Event)` (the first record of a
    /// schema), `("lag", Producer, lost)`, `("joined" | "died" | "ended", Producer)`,
    /// `("flush",)`, or `("end", reason, delivered, lost, unread_bytes)` (then again on every
    /// call).
    #[pyo3(signature = (timeout=None))]
    fn _poll<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let tuple = |items: Vec<Bound<'py, PyAny>>| PyTuple::new(py, items);
        let s = |s: &str| s.into_pyobject(py).map(|o| o.into_any());
        let n = |n: u64| n.into_pyobject(py).map(|o| o.into_any());
        Ok(Some(
            match self.next_item(py, timeout_of(timeout)?, false)? {
                None => return Ok(None),
                Some(Item::Event(e, first)) => tuple(vec![
                    s(if first { "schema" } else { "event" })?,
                    e.into_bound(py).into_any(),
                ])?,
                Some(Item::Lag(p, lost)) => {
                    tuple(vec![s("lag")?, p.into_bound(py).into_any(), n(lost)?])?
                }
                Some(Item::Change(what, p)) => tuple(vec![s(what)?, p.into_bound(py).into_any()])?,
                Some(Item::Flush) => tuple(vec![s("flush")?])?,
                Some(Item::End(sum)) => tuple(vec![
                    s("end")?,
                    s(reason_name(sum.reason))?,
                    n(sum.delivered)?,
                    n(sum.lost)?,
                    n(sum.unread_bytes)?,
                ])?,
            },
        ))
    }

    /// For `snapbus.run`: stop, as Ctrl-C stops a Rust consumer (what was emitted until now is
    /// read first, for up to `drain_on_stop`, then `("end", "stopped", ...)`). From any
    /// thread.
    fn _stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// For `snapbus.run`: end here, the consumer's choice: `(reason, delivered, lost,
    /// unread_bytes)`.
    fn _end(&self) -> PyResult<(&'static str, u64, u64, u64)> {
        let mut g = self.lock()?;
        let s = match g.reader.as_mut() {
            Some(r) => r.end(),
            None => return Ok(("consumer", self.stats().delivered, self.stats().lost, 0)),
        };
        self.finished.store(true, Ordering::Relaxed);
        Ok((reason_name(s.reason), s.delivered, s.lost, s.unread_bytes))
    }

    /// For `Consumer.set_status`: `key` on the subscription's status board, which `snapbus ls`
    /// shows (an int: a count, a float: a measurement, a str: a state or message; `None`
    /// removes it).
    fn _set_status(&self, key: &str, value: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let Some(v) = value else {
            self.board.remove(key);
            return Ok(());
        };
        let v = if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
            if let Ok(s) = v.cast::<PyString>() {
                StatusValue::Text(s.to_cow()?.into_owned())
            } else if v.is_instance_of::<PyFloat>() {
                StatusValue::Number(v.extract()?)
            } else {
                return Err(PyTypeError::new_err(format!(
                    "a status is an int, a float or a str, not {}",
                    v.get_type().name()?
                )));
            }
        } else {
            match v.extract::<u64>() {
                Ok(n) => StatusValue::Count(n),
                Err(_) => StatusValue::Number(v.extract()?),
            }
        };
        self.board.set(key, v);
        Ok(())
    }

    /// Whether every producer's lane was read to its end (true when there are none).
    fn _all_ended(&self) -> PyResult<bool> {
        Ok(self
            .lock()?
            .reader
            .as_ref()
            .is_none_or(|r| r.subscriber().all_ended()))
    }

    /// Whether the subscription has ended: closed, or (with `until_end`) every producer's
    /// lane was read to its end.
    #[getter]
    fn ended(&self) -> bool {
        if self.closing.load(Ordering::Relaxed) {
            return true;
        }
        if self.finished.load(Ordering::Relaxed) {
            return true;
        }
        match self.inner.try_lock() {
            Ok(g) => g.reader.is_none(),
            Err(_) => false,
        }
    }

    /// Records delivered so far.
    #[getter]
    fn delivered(&self) -> u64 {
        self.stats().delivered
    }

    /// Records of subscribed producers lost so far (overwritten before they were read, or left
    /// unfinished by a dead producer; lanes carry records of every schema, so this counts all
    /// of a subscribed producer's lost records). Exact.
    #[getter]
    fn lost(&self) -> u64 {
        self.stats().lost
    }

    /// Records lost to damaged shared memory (not in `lost`).
    #[getter]
    fn damaged(&self) -> u64 {
        self.stats().damaged
    }

    /// Whether the subscription was closed.
    #[getter]
    fn closed(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// Leaves the bus (the broker shows the final counters); further reads find nothing. May
    /// be called from another thread while one waits in `get`: that one returns (raising
    /// `queue.Empty`, or ending the iteration) within 100 ms.
    fn close(&self, py: Python<'_>) {
        self.closing.store(true, Ordering::Relaxed);
        if let Ok(mut g) = self.inner.try_lock() {
            self.drop_reader(py, &mut g);
        }
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<Event>>> {
        self.next_event(py, None)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        let s = self.stats();
        format!(
            "Subscription(bus={:?}, delivered={}, lost={})",
            self.bus, s.delivered, s.lost
        )
    }
}
