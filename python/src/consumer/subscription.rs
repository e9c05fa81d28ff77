//! `Subscription`: the bus's pull API (`Subscriber::next`) as a Python iterator and queue.
//!
//! Reading polls with the GIL held; waiting releases it (`py.detach`) in slices of at most
//! 100 ms, with `py.check_signals()` between them, so Ctrl-C interrupts a blocked `get`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_bus::lane::{FrameMeta, StartAt};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::schemas::SchemaDescriptor;
use snapbus_bus::subscriber::{
    Event as BusEvent, Glob, SubscribeError, SubscribeOptions, Subscriber, SubscriberStats,
};

use super::event::{Event, Interned, Producer};

/// The longest the GIL is released at once while waiting.
const SLICE: Duration = Duration::from_millis(100);

/// What a subscription read: a record, or (for `snapbus.run`) a lifecycle notice.
enum Item {
    Event(Py<Event>),
    Lag(Py<Producer>, u64),
    Change(&'static str, Py<Producer>),
}

/// A record copied out while the GIL was released (the borrowed form cannot leave the wait).
struct OwnedRecord {
    producer: ProducerInfo,
    schema: Arc<SchemaDescriptor>,
    emitter: Option<String>,
    meta: FrameMeta,
    payload: Vec<u8>,
}

enum Owned {
    Record(OwnedRecord),
    Lag(ProducerInfo, u64),
    Change(&'static str, ProducerInfo),
}

fn own(e: BusEvent<'_>) -> Owned {
    match e {
        BusEvent::Record(r) => Owned::Record(OwnedRecord {
            producer: r.producer.clone(),
            schema: Arc::clone(r.schema),
            emitter: r.emitter.map(str::to_owned),
            meta: r.meta,
            payload: r.payload.to_vec(),
        }),
        BusEvent::Lagged { producer, lost, .. } => Owned::Lag(producer.clone(), lost),
        BusEvent::Joined(p) => Owned::Change("joined", p.clone()),
        BusEvent::Died(p) => Owned::Change("died", p.clone()),
        BusEvent::Ended(p) => Owned::Change("ended", p.clone()),
    }
}

struct Inner {
    sub: Option<Subscriber>,
    interned: Interned,
}

#[allow(clippy::too_many_arguments)]
fn record(
    py: Python<'_>,
    interned: &mut Interned,
    producer: &ProducerInfo,
    schema: &Arc<SchemaDescriptor>,
    emitter: Option<&str>,
    meta: &FrameMeta,
    payload: &[u8],
) -> PyResult<Item> {
    let schema = interned.schema(py, schema)?;
    let prod = interned.producer(py, producer.lane_id, || Producer::from_info(producer))?;
    let emitter = interned.emitter(py, emitter);
    let data = PyBytes::new(py, payload).unbind();
    let ev = Event::new(
        schema,
        prod,
        emitter,
        Level::from_wire(meta.level),
        meta.seq,
        meta.t_nanos,
        data,
    );
    Ok(Item::Event(Py::new(py, ev)?))
}

fn convert(py: Python<'_>, interned: &mut Interned, e: BusEvent<'_>) -> PyResult<Item> {
    let p = |i: &mut Interned, info: &ProducerInfo| {
        i.producer(py, info.lane_id, || Producer::from_info(info))
    };
    Ok(match e {
        BusEvent::Record(r) => {
            return record(
                py, interned, r.producer, r.schema, r.emitter, &r.meta, r.payload,
            );
        }
        BusEvent::Lagged { producer, lost, .. } => Item::Lag(p(interned, producer)?, lost),
        BusEvent::Joined(info) => Item::Change("joined", p(interned, info)?),
        BusEvent::Died(info) => Item::Change("died", p(interned, info)?),
        BusEvent::Ended(info) => Item::Change("ended", p(interned, info)?),
    })
}

fn convert_owned(py: Python<'_>, interned: &mut Interned, e: Owned) -> PyResult<Item> {
    Ok(match e {
        Owned::Record(r) => {
            return record(
                py,
                interned,
                &r.producer,
                &r.schema,
                r.emitter.as_deref(),
                &r.meta,
                &r.payload,
            );
        }
        Owned::Lag(info, lost) => Item::Lag(
            interned.producer(py, info.lane_id, || Producer::from_info(&info))?,
            lost,
        ),
        Owned::Change(what, info) => Item::Change(
            what,
            interned.producer(py, info.lane_id, || Producer::from_info(&info))?,
        ),
    })
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

/// A subscription to schemas of a bus (made by `snapbus.subscribe`): an iterator of
/// [`Event`]s, a queue (`get`, `get_nowait`, `get_batch`) and a context manager.
#[pyclass(frozen, module = "snapbus", name = "Subscription")]
pub(crate) struct Subscription {
    inner: Mutex<Inner>,
    until_end: bool,
    /// `close()` was called (a reader waiting in another thread leaves within a slice).
    closing: AtomicBool,
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
    /// subscription ends). `records_only`: lag and lifecycle notices are skipped.
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
        if let Some(sub) = inner.sub.as_ref() {
            self.publish(sub.stats());
        }
        if self.closing.load(Ordering::Relaxed) {
            self.drop_sub(py, inner);
        }
        got
    }

    fn publish(&self, s: SubscriberStats) {
        self.delivered.store(s.delivered, Ordering::Relaxed);
        self.lost.store(s.lost, Ordering::Relaxed);
        self.damaged.store(s.damaged, Ordering::Relaxed);
    }

    fn drop_sub(&self, py: Python<'_>, inner: &mut Inner) {
        if let Some(sub) = inner.sub.take() {
            self.publish(sub.stats());
            py.detach(|| drop(sub));
        }
    }

    fn next_locked(
        &self,
        py: Python<'_>,
        inner: &mut Inner,
        deadline: Option<Instant>,
        records_only: bool,
    ) -> PyResult<Option<Item>> {
        loop {
            if self.closing.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let Some(sub) = inner.sub.as_mut() else {
                return Ok(None);
            };
            // Poll with the GIL held: the hot path.
            match sub.next(Duration::ZERO) {
                Ok(Some(e)) => {
                    if records_only && !matches!(e, BusEvent::Record(_)) {
                        continue;
                    }
                    return convert(py, &mut inner.interned, e).map(Some);
                }
                Ok(None) => {}
                Err(e) => return Err(subscribe_error(py, e)),
            }
            if self.until_end && sub.all_ended() {
                return Ok(None);
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
            let got = py.detach(|| sub.next(slice).map(|o| o.map(own)));
            match got {
                Ok(Some(o)) => {
                    if records_only && !matches!(o, Owned::Record(_)) {
                        py.check_signals()?;
                        continue;
                    }
                    return convert_owned(py, &mut inner.interned, o).map(Some);
                }
                Ok(None) => {}
                Err(e) => return Err(subscribe_error(py, e)),
            }
            py.check_signals()?;
        }
    }

    fn next_event(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<Option<Py<Event>>> {
        match self.next_item(py, timeout, true)? {
            Some(Item::Event(e)) => Ok(Some(e)),
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
    #[pyo3(signature = (globs, start="latest", bus=None, kind="python", cut=false, until_end=false, start_nanos=None))]
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
        let opts = SubscribeOptions {
            kind: kind.to_owned(),
            globs,
            start,
            cut,
            skip_lanes: Vec::new(),
            // From "latest", the lanes read from their oldest record are those of producers
            // that joined after subscribing: whatever of theirs was overwritten before it was
            // read (a consumer that was stopped, or busy) was lost to this subscription.
            count_history_as_lost: matches!(start, StartAt::Latest),
        };
        let sub = py
            .detach(|| Subscriber::connect(&dir, opts))
            .map_err(|e| subscribe_error(py, e))?;
        Ok(Subscription {
            inner: Mutex::new(Inner {
                sub: Some(sub),
                interned: Interned::default(),
            }),
            until_end,
            closing: AtomicBool::new(false),
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
    /// when none came. `("event", Event)`, `("lag", Producer, lost)`, or
    /// `("joined" | "died" | "ended", Producer)`.
    #[pyo3(signature = (timeout=None))]
    fn _poll<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        Ok(match self.next_item(py, timeout_of(timeout)?, false)? {
            None => None,
            Some(Item::Event(e)) => Some(PyTuple::new(
                py,
                [
                    ("event").into_pyobject(py)?.into_any(),
                    e.into_bound(py).into_any(),
                ],
            )?),
            Some(Item::Lag(p, n)) => Some(PyTuple::new(
                py,
                [
                    "lag".into_pyobject(py)?.into_any(),
                    p.into_bound(py).into_any(),
                    n.into_pyobject(py)?.into_any(),
                ],
            )?),
            Some(Item::Change(what, p)) => Some(PyTuple::new(
                py,
                [
                    what.into_pyobject(py)?.into_any(),
                    p.into_bound(py).into_any(),
                ],
            )?),
        })
    }

    /// Whether every producer's lane was read to its end (true when there are none).
    fn _all_ended(&self) -> PyResult<bool> {
        Ok(self.lock()?.sub.as_ref().is_none_or(Subscriber::all_ended))
    }

    /// Whether the subscription has ended: closed, or (with `until_end`) every producer's
    /// lane was read to its end.
    #[getter]
    fn ended(&self) -> bool {
        if self.closing.load(Ordering::Relaxed) {
            return true;
        }
        match self.inner.try_lock() {
            Ok(g) => g
                .sub
                .as_ref()
                .is_none_or(|s| self.until_end && s.all_ended()),
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
            self.drop_sub(py, &mut g);
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
