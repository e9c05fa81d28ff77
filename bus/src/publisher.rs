//! The producer side of a bus: this process's lane and catalog, and a background thread that
//! finds the broker, introduces the lane, and applies what the broker sends (level filters,
//! whom to wake).
//!
//! Emitting never waits for the broker or a consumer: with no bus running, records go into the
//! lane and are overwritten unread (the `snapbus` crate skips even that until a bus is found);
//! when a bus appears, or the broker restarts, the background thread (re)joins it within
//! [`RETRY`], and the lane, with its history, is adopted.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use snapbus_schemas::{EncodeError, SchemaDescriptor, Snapshot};
use thiserror::Error;

use crate::catalog::{CatalogError, CatalogWriter};
use crate::control::{Conn, FromBroker, PROTOCOL_VERSION, ProducerInfo, ToBroker};
use crate::doorbell::DoorbellPage;
use crate::lane::{
    ClaimError, LaneConfig, LaneOpenError, RecordMeta, SharedLaneWriter, ShmLane,
    now_realtime_nanos,
};
use crate::mem::ShmMem;
use crate::runtime::BusDir;

/// How often a producer without a broker looks for one.
pub const RETRY: Duration = Duration::from_millis(200);

/// Why a publisher could not start.
#[derive(Debug, Error)]
pub enum PublisherError {
    /// The lane or catalog could not be created.
    #[error("creating the lane: {0}")]
    Lane(#[from] LaneOpenError),
    /// The connection thread could not start.
    #[error("starting the connection thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Why one record was not emitted (each is counted; see [`PublisherStats`]).
#[derive(Debug, Error)]
pub enum EmitError {
    /// The lane refused the claim (too large, or it would overwrite an in-flight record).
    #[error("{0}")]
    Claim(#[from] ClaimError),
    /// The value did not encode.
    #[error("{0}")]
    Encode(#[from] EncodeError),
    /// The schema could not be registered.
    #[error("registering the schema: {0}")]
    Catalog(#[from] CatalogError),
    /// More than 65,535 schemas or a version above 65,535.
    #[error("schema {0} cannot be given a key (too many schemas, or version > 65535)")]
    NoKey(String),
}

/// Settings of a publisher.
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// A short name for `snapbus ls`.
    pub name: String,
    /// Lane size.
    pub lane: LaneConfig,
    /// Run metadata.
    pub session_tag: Option<String>,
    /// Run metadata.
    pub perf_tag: Option<String>,
}

/// Counters of a publisher.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublisherStats {
    /// Records that failed to encode.
    pub encode_errors: u64,
    /// Records dropped because their schema could not be registered.
    pub catalog_errors: u64,
    /// Whether a broker is connected now.
    pub connected: bool,
}

type FilterHook = Box<dyn Fn(&str) + Send + Sync>;

struct Keys {
    catalog: CatalogWriter,
    by_ptr: HashMap<usize, u16>,
    by_fingerprint: HashMap<(String, u32, u64), u16>,
    emitters: HashMap<String, u16>,
}

struct Wake {
    page: Option<Arc<DoorbellPage>>,
    mask: u64,
}

struct Inner {
    id: u64,
    lane: ShmLane,
    writer: SharedLaneWriter<ShmMem>,
    keys: Mutex<Keys>,
    wake: Mutex<Wake>,
    wake_gen: AtomicU64,
    connected: AtomicBool,
    encode_errors: AtomicU64,
    catalog_errors: AtomicU64,
    info: ProducerInfo,
    dir: BusDir,
    on_filter: Mutex<Option<FilterHook>>,
    /// The last directives the broker sent, for a hook registered after they came.
    last_directives: Mutex<Option<String>>,
    /// The (own, effective) filters to report to the broker, and a count of their changes.
    filter_report: Mutex<Option<(String, String)>>,
    filter_gen: AtomicU64,
    stop: AtomicBool,
}

/// A process's presence on a bus. Cheap to share (`Arc` inside); dropping the last handle
/// closes the lane (consumers see the end of the stream) and stops the connection thread.
pub struct Publisher {
    inner: Arc<Inner>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A thread's cached copy of a publisher's wake state.
struct WakeCache {
    publisher: u64,
    generation: u64,
    page: Option<Arc<DoorbellPage>>,
    mask: u64,
}

thread_local! {
    /// (publisher id, descriptor address, key), most recently used first.
    static KEY_CACHE: RefCell<Vec<(u64, usize, u16)>> = const { RefCell::new(Vec::new()) };
    /// This thread's copy of the wake state, checked against `wake_gen` on every emit.
    static WAKE_CACHE: RefCell<Option<WakeCache>> = const { RefCell::new(None) };
}

impl Publisher {
    /// Creates this process's lane and catalog and starts looking for the broker of `dir`.
    pub fn start(dir: BusDir, config: PublisherConfig) -> Result<Publisher, PublisherError> {
        // Rings then need no full fence per record (see `doorbell`); register before the
        // first record rather than during it.
        crate::doorbell::register_producer();
        let lane = ShmLane::create("snapbus-lane", &config.lane)?;
        let writer = lane
            .lane
            .shared_writer()
            .ok_or_else(|| LaneOpenError::Segment("lane mapped read-only".into()))?;
        let catalog = CatalogWriter::create()?;
        let cmdline: Vec<String> = std::env::args().collect();
        let info = ProducerInfo {
            pid: std::process::id(),
            name: config.name,
            cmdline,
            session_tag: config.session_tag,
            perf_tag: config.perf_tag,
            lane_id: lane.lane.geometry().salt,
            started_nanos: now_realtime_nanos(),
        };
        let inner = Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            lane,
            writer,
            keys: Mutex::new(Keys {
                catalog,
                by_ptr: HashMap::new(),
                by_fingerprint: HashMap::new(),
                emitters: HashMap::new(),
            }),
            wake: Mutex::new(Wake {
                page: None,
                mask: 0,
            }),
            wake_gen: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            encode_errors: AtomicU64::new(0),
            catalog_errors: AtomicU64::new(0),
            info,
            dir,
            on_filter: Mutex::new(None),
            last_directives: Mutex::new(None),
            filter_report: Mutex::new(None),
            filter_gen: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("snapbus-connection".into())
            .spawn(move || connection_thread(weak))?;
        Ok(Publisher { inner })
    }

    /// Calls `hook` with the directives whenever the broker sets a level filter (empty
    /// directives: the bus filter was reset, go back to your own), and at once with the last
    /// directives the broker sent, if they came before the hook.
    pub fn on_filter(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        // Under the hook's lock: directives stored before it are applied here, and those
        // stored after it wait for the lock and go to the new hook (`apply_filter`).
        if let Ok(mut h) = self.inner.on_filter.lock() {
            let last = self
                .inner
                .last_directives
                .lock()
                .ok()
                .and_then(|d| d.clone());
            if let Some(d) = last {
                hook(&d);
            }
            *h = Some(Box::new(hook));
        }
    }

    /// Tells the broker (now, and again after reconnecting) which level filters are in force
    /// here, for `snapbus ls`: `own` (the process's, e.g. `SNAPBUS_FILTER`) and `effective`.
    pub fn report_filter(&self, own: &str, effective: &str) {
        if let Ok(mut r) = self.inner.filter_report.lock() {
            *r = Some((own.to_owned(), effective.to_owned()));
        }
        self.inner.filter_gen.fetch_add(1, Ordering::Relaxed);
    }

    /// What this publisher tells the broker about itself.
    pub fn info(&self) -> &ProducerInfo {
        &self.inner.info
    }

    /// The lane (for tests and benches).
    pub fn lane(&self) -> &ShmLane {
        &self.inner.lane
    }

    /// Whether a broker is connected now.
    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::Relaxed)
    }

    /// Counters.
    pub fn stats(&self) -> PublisherStats {
        PublisherStats {
            encode_errors: self.inner.encode_errors.load(Ordering::Relaxed),
            catalog_errors: self.inner.catalog_errors.load(Ordering::Relaxed),
            connected: self.is_connected(),
        }
    }

    /// The emitter id of the handle named `name` (registered in the catalog once).
    pub fn emitter(&self, name: &str) -> u16 {
        let Ok(mut keys) = self.inner.keys.lock() else {
            return 0;
        };
        if let Some(&id) = keys.emitters.get(name) {
            return id;
        }
        let Ok(id) = u16::try_from(keys.emitters.len() + 1) else {
            return 0;
        };
        if keys.catalog.add_emitter(id, name).is_err() {
            return 0;
        }
        keys.emitters.insert(name.to_owned(), id);
        id
    }

    /// The schema key of `desc` in this lane, registering it in the catalog the first time.
    fn schema_key(&self, desc: &'static SchemaDescriptor) -> Result<u16, EmitError> {
        let ptr = desc as *const SchemaDescriptor as usize;
        let id = self.inner.id;
        let cached = KEY_CACHE.with(|c| {
            let c = c.borrow();
            c.iter()
                .find(|&&(p, d, _)| p == id && d == ptr)
                .map(|&(_, _, k)| k)
        });
        if let Some(k) = cached {
            return Ok(k);
        }
        let key = self.register(desc)?;
        KEY_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            c.insert(0, (id, ptr, key));
            c.truncate(32);
        });
        Ok(key)
    }

    fn register(&self, desc: &'static SchemaDescriptor) -> Result<u16, EmitError> {
        let ptr = desc as *const SchemaDescriptor as usize;
        let mut keys = self
            .inner
            .keys
            .lock()
            .map_err(|_| EmitError::NoKey(desc.id().to_owned()))?;
        if let Some(&k) = keys.by_ptr.get(&ptr) {
            return Ok(k);
        }
        let key = Self::key_of(&mut keys, desc)?;
        keys.by_ptr.insert(ptr, key);
        Ok(key)
    }

    /// The key of `desc` (by id, version and fingerprint), registering it the first time.
    fn key_of(keys: &mut Keys, desc: &SchemaDescriptor) -> Result<u16, EmitError> {
        let fp = (desc.id().to_owned(), desc.version(), desc.fingerprint());
        let key = match keys.by_fingerprint.get(&fp) {
            Some(&k) => k,
            None => {
                // Key 0 is never used, so a zeroed frame header names no schema.
                let k = u16::try_from(keys.by_fingerprint.len() + 1)
                    .map_err(|_| EmitError::NoKey(desc.id().to_owned()))?;
                if u16::try_from(desc.version()).is_err() {
                    return Err(EmitError::NoKey(desc.id().to_owned()));
                }
                keys.catalog.add_schema(k, desc)?;
                keys.by_fingerprint.insert(fp, k);
                k
            }
        };
        Ok(key)
    }

    /// Registers a schema known only at run time (a replayed recording's), returning the key to
    /// pass to [`emit_raw`](Self::emit_raw).
    pub fn register_schema(&self, desc: &SchemaDescriptor) -> Result<u16, EmitError> {
        let mut keys = self
            .inner
            .keys
            .lock()
            .map_err(|_| EmitError::NoKey(desc.id().to_owned()))?;
        Self::key_of(&mut keys, desc)
    }

    /// Emits an already-encoded payload of the schema registered as `key` (version
    /// `version`). The payload is not checked against the schema: it must be a payload some
    /// producer wrote with that schema (replay copies them from a CRC-checked recording).
    pub fn emit_raw(
        &self,
        key: u16,
        version: u16,
        level: u8,
        emitter: u16,
        payload: &[u8],
    ) -> Result<u64, EmitError> {
        let meta = RecordMeta {
            schema_key: key,
            schema_version: version,
            level,
            emitter,
        };
        let mut claim = self.inner.writer.claim(payload.len(), meta)?;
        claim.payload_mut().copy_from_slice(payload);
        let seq = claim.seq();
        claim.commit();
        self.ring();
        Ok(seq)
    }

    /// Encodes `value` straight into the lane and commits it, then wakes sleeping subscribers.
    /// Never waits for a consumer; failures are counted and returned.
    #[inline]
    pub fn emit<T: Snapshot>(&self, level: u8, emitter: u16, value: &T) -> Result<u64, EmitError> {
        let key = match self.schema_key(T::descriptor()) {
            Ok(k) => k,
            Err(e) => {
                self.inner.catalog_errors.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        let meta = RecordMeta {
            schema_key: key,
            schema_version: T::VERSION as u16,
            level,
            emitter,
        };
        let mut claim = self.inner.writer.claim(value.encoded_len(), meta)?;
        if let Err(e) = value.encode_into(claim.payload_mut()) {
            // Dropping the claim turns it into an aborted frame.
            self.inner.encode_errors.fetch_add(1, Ordering::Relaxed);
            return Err(e.into());
        }
        let seq = claim.seq();
        claim.commit();
        self.ring();
        Ok(seq)
    }

    /// Rings the doorbells of sleeping subscribers (a thread-local cached page and mask).
    #[inline]
    fn ring(&self) {
        let generation = self.inner.wake_gen.load(Ordering::Acquire);
        let id = self.inner.id;
        WAKE_CACHE.with(|c| {
            let mut c = c.borrow_mut();
            let fresh = c
                .as_ref()
                .is_some_and(|w| w.publisher == id && w.generation == generation);
            if !fresh {
                let (page, mask) = match self.inner.wake.lock() {
                    Ok(w) => (w.page.clone(), w.mask),
                    Err(_) => (None, 0),
                };
                *c = Some(WakeCache {
                    publisher: id,
                    generation,
                    page,
                    mask,
                });
            }
            if let Some(WakeCache {
                page: Some(page),
                mask,
                ..
            }) = &*c
            {
                page.ring_mask(*mask);
            }
        });
    }

    fn set_wake(inner: &Inner, page: Option<Arc<DoorbellPage>>, mask: Option<u64>) {
        if let Ok(mut w) = inner.wake.lock() {
            if let Some(p) = page {
                w.page = Some(p);
            }
            if let Some(m) = mask {
                w.mask = m;
            }
            inner.wake_gen.fetch_add(1, Ordering::Release);
        }
    }
}

impl Publisher {
    /// Closes the lane: consumers read to its end and see it end (not die). Later emits fail
    /// with `ClaimError::Closed`.
    pub fn close(&self) {
        self.inner.writer.close();
        self.ring();
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        self.close();
    }
}

/// Finds the broker, introduces the lane, and follows its messages; reconnects when it goes.
fn connection_thread(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.stop.load(Ordering::Relaxed) {
            return;
        }
        let sock = inner.dir.socket_path();
        let conn = if sock.exists() {
            Conn::connect(&sock).ok()
        } else {
            None
        };
        if let Some(conn) = conn {
            serve(&inner, conn);
            inner.connected.store(false, Ordering::Relaxed);
            Publisher::set_wake(&inner, None, Some(0));
        }
        drop(inner);
        std::thread::sleep(RETRY);
    }
}

/// One broker connection: hello, then messages until it closes or the publisher is dropped.
fn serve(inner: &Inner, mut conn: Conn) {
    let Ok(keys) = inner.keys.lock() else { return };
    let hello = ToBroker::HelloProducer {
        version: PROTOCOL_VERSION,
        info: inner.info.clone(),
    };
    let sent = conn.send(&hello, &[inner.lane.fd.as_fd(), keys.catalog.fd()]);
    drop(keys);
    if sent.is_err() {
        return;
    }
    inner.connected.store(true, Ordering::Relaxed);
    let mut reported_gen = None;
    loop {
        if inner.stop.load(Ordering::Relaxed) {
            return;
        }
        let filter_gen = inner.filter_gen.load(Ordering::Relaxed);
        if reported_gen != Some(filter_gen) {
            let report = inner.filter_report.lock().ok().and_then(|r| r.clone());
            if let Some((own, effective)) = report {
                if conn
                    .send(&ToBroker::ProducerFilter { own, effective }, &[])
                    .is_err()
                {
                    return;
                }
            }
            reported_gen = Some(filter_gen);
        }
        match conn.recv::<FromBroker>(Some(RETRY)) {
            Ok(None) => {}
            Ok(Some((msg, mut fds))) => match msg {
                FromBroker::WelcomeProducer {
                    filter, wake_mask, ..
                } => {
                    let page = fds
                        .pop()
                        .and_then(|fd| DoorbellPage::open(fd).ok())
                        .map(Arc::new);
                    Publisher::set_wake(inner, page, Some(wake_mask));
                    // Every welcome says what holds: a bus filter, or none (a new broker, or one
                    // reset while we were away: back to our own).
                    apply_filter(inner, &filter);
                }
                FromBroker::Filter { directives } => apply_filter(inner, &directives),
                FromBroker::WakeMask { mask } => Publisher::set_wake(inner, None, Some(mask)),
                _ => {}
            },
            Err(_) => return,
        }
    }
}

fn apply_filter(inner: &Inner, directives: &str) {
    if let Ok(mut d) = inner.last_directives.lock() {
        *d = Some(directives.to_owned());
    }
    if let Ok(h) = inner.on_filter.lock() {
        if let Some(h) = h.as_ref() {
            h(directives);
        }
    }
}
