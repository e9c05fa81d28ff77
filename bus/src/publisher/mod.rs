//! The producer side of a bus: this process's lane and catalog, and a background thread that
//! finds the broker, introduces the lane, and applies what the broker sends (level filters,
//! whom to wake).
//!
//! Emitting never waits for the broker or a consumer, and never depends on it: once a
//! publisher exists, every record goes into its lane whether or not a broker is connected
//! (consumers that mapped the lane keep reading it; the `snapbus` crate creates the publisher
//! only once a bus is found). When a bus appears, or the broker restarts, the background
//! thread (re)joins it within [`RETRY`], and the lane, with its history, is adopted.
//!
//! **Fork.** A `fork()`ed child never writes its parent's lane: the first use of a publisher
//! in a forked child (detected by [`crate::fork`]'s generation, one relaxed load per emit)
//! creates the child's own lane, catalog and broker connection (with the parent's emitter
//! names and filter hook), and every later call goes there. Closing or dropping the parent's
//! publisher in the child never closes the parent's lane.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use snapbus_schemas::EncodeError;
use thiserror::Error;

use crate::catalog::{CatalogError, CatalogWriter};
use crate::control::{Conn, FromBroker, PROTOCOL_VERSION, ProducerInfo, ToBroker};
use crate::doorbell::DoorbellPage;
use crate::lane::{
    ClaimError, LaneConfig, LaneOpenError, SharedLaneWriter, ShmLane, now_realtime_nanos,
};
use crate::mem::ShmMem;
use crate::runtime::BusDir;

mod emit;
mod foster;
mod payload;
mod shapes;

pub use emit::EmitMeta;
pub use payload::{FillError, PayloadWriter};
pub use shapes::{evolution_conflict, shapes_of_one_event};

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
    /// The lane refused the claim (too large, or it would overwrite an in-flight record), or
    /// the lane is closed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The value did not encode.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The schema could not be registered.
    #[error("registering the schema: {0}")]
    Catalog(#[from] CatalogError),
    /// More than 65,535 schemas or a version above 65,535.
    #[error("schema {0} cannot be given a key (too many schemas, or version > 65535)")]
    NoKey(String),
    /// This process has no lane: no bus was found yet (the `snapbus` crate creates its
    /// publisher once one is), or this forked process could not create a lane of its own.
    #[error("not written: {0}")]
    NoLane(&'static str),
    /// The caller gave the payload up while writing it ([`FillError::Abort`]): its frame is
    /// aborted, and readers skip it. The one outcome that is not counted.
    #[error("not written: the payload was given up")]
    Aborted,
}

/// Why [`Publisher::emit_many`] did not write every record: how many it wrote and the
/// first refusal (every refused record is counted, as for single emits).
#[derive(Debug, Error)]
#[error("{written} of {total} records written; the first refusal: {first}")]
pub struct EmitManyError {
    /// Records written.
    pub written: usize,
    /// Records given.
    pub total: usize,
    /// Why the first record that was not written was refused.
    #[source]
    pub first: EmitError,
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
    /// The records are re-emitted from another machine's bus
    /// ([`ProducerInfo::relayed`]): only a bridge's station sets it.
    pub relayed: bool,
}

/// Counters of a publisher: what was written, and every record that was not, by reason.
/// `oversize`, `lapped` and `encode_errors` are also in `snapbus ls` (DROPPED), which reads
/// them from the lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PublisherStats {
    /// Records committed to the lane.
    pub written: u64,
    /// Records refused because they exceed the lane's largest payload.
    pub oversize: u64,
    /// Records dropped by the lap guard (they would have overwritten a record another thread
    /// was still writing).
    pub lapped: u64,
    /// Records that failed to encode (their claim became an aborted frame).
    pub encode_errors: u64,
    /// Records dropped because their schema could not be registered.
    pub catalog_errors: u64,
    /// Records emitted after the lane was closed ([`Publisher::close`]).
    pub closed: u64,
    /// Records of a forked process that could not create a lane of its own.
    pub no_lane: u64,
    /// Records in a lane no broker was ever handed when the process closed it, and that no
    /// parent process took over (see `foster`): lost with the process.
    pub unadopted: u64,
    /// Whether a broker is connected now (it welcomed this producer).
    pub connected: bool,
}

impl PublisherStats {
    /// Records not written, for any reason.
    pub fn not_written(&self) -> u64 {
        self.oversize
            + self.lapped
            + self.encode_errors
            + self.catalog_errors
            + self.closed
            + self.no_lane
            + self.unadopted
    }
}

type FilterHook = Arc<dyn Fn(&str) + Send + Sync>;

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
    /// Why the broker last refused this producer (said once on stderr per distinct reason).
    refused: Mutex<Option<String>>,
    /// The broker's id for this producer (0: none yet), said again when rejoining a restarted
    /// broker, which gives it back.
    broker_id: AtomicU64,
    encode_errors: AtomicU64,
    catalog_errors: AtomicU64,
    closed_drops: AtomicU64,
    no_lane_drops: AtomicU64,
    /// Whether a broker was handed this lane (a hello was sent and not refused).
    introduced: AtomicBool,
    /// Whether the lane was handed to the parent process's keeper (no hello is sent after).
    handed: AtomicBool,
    /// Records lost with a lane no broker was handed (see [`foster`]).
    unadopted: AtomicU64,
    /// This publisher's keeper of its forked children's lanes.
    keeper: Option<Arc<foster::Keeper>>,
    /// In a forked child: the keeper of the parent's publisher.
    parent_keeper: Option<Arc<foster::Keeper>>,
    /// Whether large payloads go into the lane with non-temporal stores (the lane is larger
    /// than the last-level cache): decided when the lane is made, so that no emit reads
    /// `/sys` (nor waits for another thread doing so, which a fork could leave waiting).
    streams: bool,
    info: ProducerInfo,
    dir: BusDir,
    config: PublisherConfig,
    on_filter: Mutex<Option<FilterHook>>,
    /// The last directives the broker sent, for a hook registered after they came.
    last_directives: Mutex<Option<String>>,
    /// The (own, effective) filters to report to the broker, and a count of their changes.
    filter_report: Mutex<Option<(String, String)>>,
    filter_gen: AtomicU64,
    stop: AtomicBool,
    /// The [`crate::fork::generation`] of the process that created this publisher.
    fork_gen: u64,
    /// In a forked child: the child's own publisher (`None` if it could not be created).
    forked: OnceLock<Option<Publisher>>,
}

/// A process's presence on a bus. Cheap to share (`Arc` inside); dropping the last handle
/// closes the lane (consumers see the end of the stream) and stops the connection thread.
pub struct Publisher {
    inner: Arc<Inner>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Publisher {
    /// Creates this process's lane and catalog and starts looking for the broker of `dir`.
    pub fn start(dir: BusDir, config: PublisherConfig) -> Result<Publisher, PublisherError> {
        Self::start_with(dir, config, HashMap::new(), None, None)
    }

    fn start_with(
        dir: BusDir,
        config: PublisherConfig,
        emitters: HashMap<String, u16>,
        on_filter: Option<FilterHook>,
        parent_keeper: Option<Arc<foster::Keeper>>,
    ) -> Result<Publisher, PublisherError> {
        crate::fork::install();
        let fork_gen = crate::fork::generation();
        // Rings then need no full fence per record (see `doorbell`); register before the
        // first record rather than during it.
        crate::doorbell::register_producer();
        let lane = ShmLane::create("snapbus-lane", &config.lane)?;
        let writer = lane
            .lane()
            .shared_writer()
            .ok_or_else(|| LaneOpenError::Segment("lane mapped read-only".into()))?;
        let mut catalog = CatalogWriter::create()?;
        // A forked child keeps its parent's emitter ids (handles cache them).
        for (name, &id) in &emitters {
            catalog
                .add_emitter(id, name)
                .map_err(|e| LaneOpenError::Segment(format!("copying emitter names: {e}")))?;
        }
        let cmdline: Vec<String> = std::env::args().collect();
        let info = ProducerInfo {
            pid: std::process::id(),
            name: config.name.clone(),
            cmdline,
            session_tag: config.session_tag.clone(),
            perf_tag: config.perf_tag.clone(),
            lane_id: lane.lane().geometry().salt,
            started_nanos: now_realtime_nanos(),
            relayed: config.relayed,
        };
        let streams = crate::stream::worth_streaming(
            usize::try_from(lane.lane().geometry().capacity).unwrap_or(usize::MAX),
        );
        let inner = Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            lane,
            writer,
            keys: Mutex::new(Keys {
                catalog,
                by_ptr: HashMap::new(),
                by_fingerprint: HashMap::new(),
                emitters,
            }),
            wake: Mutex::new(Wake {
                page: None,
                mask: 0,
            }),
            wake_gen: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            refused: Mutex::new(None),
            broker_id: AtomicU64::new(0),
            encode_errors: AtomicU64::new(0),
            catalog_errors: AtomicU64::new(0),
            closed_drops: AtomicU64::new(0),
            no_lane_drops: AtomicU64::new(0),
            introduced: AtomicBool::new(false),
            handed: AtomicBool::new(false),
            unadopted: AtomicU64::new(0),
            keeper: foster::Keeper::new().map(Arc::new),
            parent_keeper,
            streams,
            info,
            dir,
            config,
            on_filter: Mutex::new(on_filter),
            last_directives: Mutex::new(None),
            filter_report: Mutex::new(None),
            filter_gen: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            fork_gen,
            forked: OnceLock::new(),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("snapbus-connection".into())
            .spawn(move || connection_thread(weak))?;
        Ok(Publisher { inner })
    }

    /// Whether this publisher belongs to this process (not to a process this one was forked
    /// from). One relaxed load.
    #[inline]
    fn is_own(&self) -> bool {
        self.inner.fork_gen == crate::fork::generation()
    }

    /// The publisher of this process: `self`, or in a forked child the child's own (created
    /// on first use; `None` if that failed).
    #[inline]
    fn here(&self) -> Option<&Publisher> {
        if self.is_own() {
            Some(self)
        } else {
            self.forked()
        }
    }

    /// As [`here`](Self::here), for questions (`info`, `stats`, …): in a forked child that
    /// has not emitted yet, `None` rather than a new lane, thread and connection.
    fn existing(&self) -> Option<&Publisher> {
        if self.is_own() {
            Some(self)
        } else {
            self.inner.forked.get()?.as_ref()?.existing()
        }
    }

    #[cold]
    #[inline(never)]
    fn forked(&self) -> Option<&Publisher> {
        self.inner
            .forked
            .get_or_init(|| self.start_forked())
            .as_ref()
            .and_then(Publisher::here)
    }

    /// Creates a forked child's own publisher. The parent's connection thread does not exist
    /// here, and its locks may have been held by a thread that does not exist either: only
    /// `try_lock` them.
    fn start_forked(&self) -> Option<Publisher> {
        // The child's membarrier registration is not inherited by every kernel; registering
        // again is harmless where it is.
        let _ =
            rustix::thread::membarrier(rustix::thread::MembarrierCommand::RegisterGlobalExpedited);
        let emitters = self
            .inner
            .keys
            .try_lock()
            .map(|k| k.emitters.clone())
            .unwrap_or_default();
        let hook = self.inner.on_filter.try_lock().ok().and_then(|h| h.clone());
        if let Some(k) = &self.inner.keeper {
            k.forget_in_child();
        }
        match Self::start_with(
            self.inner.dir.clone(),
            self.inner.config.clone(),
            emitters,
            hook,
            self.inner.keeper.clone(),
        ) {
            Ok(p) => Some(p),
            Err(e) => {
                crate::say!("snapbus: this forked process could not create its own lane: {e}");
                None
            }
        }
    }

    /// Calls `hook` with the directives whenever the broker sets a level filter (empty
    /// directives: the bus filter was reset, go back to your own), and at once with the last
    /// directives the broker sent, if they came before the hook.
    pub fn on_filter(&self, hook: impl Fn(&str) + Send + Sync + 'static) {
        let Some(p) = self.here() else { return };
        // Under the hook's lock: directives stored before it are applied here, and those
        // stored after it wait for the lock and go to the new hook (`apply_filter`).
        if let Ok(mut h) = p.inner.on_filter.lock() {
            let last = p.inner.last_directives.lock().ok().and_then(|d| d.clone());
            if let Some(d) = last {
                hook(&d);
            }
            *h = Some(Arc::new(hook));
        }
    }

    /// Tells the broker (now, and again after reconnecting) which level filters are in force
    /// here, for `snapbus ls`: `own` (the process's, e.g. `SNAPBUS_FILTER`) and `effective`.
    pub fn report_filter(&self, own: &str, effective: &str) {
        let Some(p) = self.here() else { return };
        if let Ok(mut r) = p.inner.filter_report.lock() {
            *r = Some((own.to_owned(), effective.to_owned()));
        }
        p.inner.filter_gen.fetch_add(1, Ordering::Relaxed);
    }

    /// What this publisher tells the broker about itself.
    pub fn info(&self) -> &ProducerInfo {
        &self.existing().unwrap_or(self).inner.info
    }

    /// The lane (for tests and benches).
    pub fn lane(&self) -> &ShmLane {
        &self.existing().unwrap_or(self).inner.lane
    }

    /// The bus this publisher joins.
    pub fn dir(&self) -> &BusDir {
        &self.inner.dir
    }

    /// Whether a broker is connected now.
    pub fn is_connected(&self) -> bool {
        self.existing()
            .is_some_and(|p| p.inner.connected.load(Ordering::Relaxed))
    }

    /// Why the broker refused this producer when it last tried to join (a protocol version
    /// of another snapbus release, a lane it could not map), if it did and has not welcomed
    /// it since: the lane is written, but no consumer is handed it.
    pub fn refusal(&self) -> Option<String> {
        self.existing()?.inner.refused.lock().ok()?.clone()
    }

    /// Whether large payloads should be written into this process's lane with stores that
    /// bypass the caches ([`crate::stream`]): the lane is larger than the last-level cache.
    pub fn streams_large_payloads(&self) -> bool {
        self.existing().is_some_and(|p| p.inner.streams)
    }

    /// Counters: records written, and records not written by reason.
    pub fn stats(&self) -> PublisherStats {
        let Some(p) = self.existing() else {
            return PublisherStats {
                no_lane: self.inner.no_lane_drops.load(Ordering::Relaxed),
                ..PublisherStats::default()
            };
        };
        let inner = &p.inner;
        let lane = inner.lane.lane().stats();
        let encode_errors = inner.encode_errors.load(Ordering::Relaxed);
        let unadopted = inner.unadopted.load(Ordering::Relaxed);
        PublisherStats {
            // Counted at claim time; aborted claims (encode errors) are taken back. Records
            // lost with a lane no broker ever had are not written.
            written: lane.frames_committed.saturating_sub(unadopted),
            unadopted,
            oversize: lane.dropped_oversize,
            lapped: lane.dropped_wrap,
            encode_errors,
            catalog_errors: inner.catalog_errors.load(Ordering::Relaxed),
            closed: inner.closed_drops.load(Ordering::Relaxed),
            no_lane: self.inner.no_lane_drops.load(Ordering::Relaxed),
            connected: inner.connected.load(Ordering::Relaxed),
        }
    }

    /// The emitter id of the handle named `name` (registered in the catalog once).
    pub fn emitter(&self, name: &str) -> u16 {
        let Some(p) = self.here() else { return 0 };
        let mut keys = p.keys();
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
    /// with `ClaimError::Closed` (and are counted). In a forked child this closes the child's
    /// own lane (if it has one), never the parent's.
    pub fn close(&self) {
        if self.is_own() {
            self.inner.writer.close();
            self.ring();
            foster::on_close(&self.inner);
        } else if let Some(Some(p)) = self.inner.forked.get() {
            p.close();
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        // In a forked child the parent's lane is left alone; the child's own publisher (in
        // `forked`) closes its lane when it is dropped with this one's state.
        if self.is_own() {
            self.inner.stop.store(true, Ordering::Relaxed);
            self.close();
        }
    }
}

/// Finds the broker, introduces the lane, and follows its messages; reconnects when it goes.
fn connection_thread(weak: Weak<Inner>) {
    // After a refusal, the next try waits twice as long (up to REFUSED_BACKOFF_MAX), so that a
    // broker of another release is not asked, and does not log, five times a second.
    let mut wait = RETRY;
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
            let refused = serve(&inner, conn) == Ended::Refused;
            inner.connected.store(false, Ordering::Relaxed);
            // The doorbells stay as they were: consumers that mapped the lane keep reading it
            // while no broker is up, and are woken rather than left to their timeouts. The
            // next broker's welcome replaces them.
            wait = if refused {
                (wait * 2).min(REFUSED_BACKOFF_MAX)
            } else {
                RETRY
            };
        }
        drop(inner);
        // In steps of RETRY, so that a dropped publisher's thread ends promptly.
        let until = std::time::Instant::now() + wait;
        while std::time::Instant::now() < until {
            std::thread::sleep(RETRY);
            let Some(inner) = weak.upgrade() else { return };
            if inner.stop.load(Ordering::Relaxed) {
                return;
            }
            if let Some(k) = &inner.keeper {
                k.tend(&inner);
            }
        }
    }
}

/// The longest wait between tries after refusals (see `connection_thread`).
const REFUSED_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// How a broker connection ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The broker refused this producer.
    Refused,
    /// Anything else: the broker went, the publisher was dropped, a send failed.
    Other,
}

/// One broker connection: hello, then messages until it closes or the publisher is dropped.
fn serve(inner: &Inner, mut conn: Conn) -> Ended {
    let Ok(keys) = inner.keys.lock() else {
        return Ended::Other;
    };
    if inner.handed.load(Ordering::Relaxed) {
        // The lane went to the parent process, which introduces it.
        return Ended::Other;
    }
    let previous = inner.broker_id.load(Ordering::Relaxed);
    let hello = ToBroker::HelloProducer {
        version: PROTOCOL_VERSION,
        info: inner.info.clone(),
        previous_id: (previous != 0).then_some(previous),
    };
    let sent = conn.send(&hello, &[inner.lane.fd().as_fd(), keys.catalog.fd()]);
    if sent.is_ok() {
        inner.introduced.store(true, Ordering::Relaxed);
    }
    drop(keys);
    if sent.is_err() {
        return Ended::Other;
    }
    // Connected once welcomed: a broker that refuses the hello (another protocol version, a
    // lane it cannot map) answers with an error instead.
    let mut reported_gen = None;
    loop {
        if inner.stop.load(Ordering::Relaxed) {
            return Ended::Other;
        }
        if let Some(k) = &inner.keeper {
            k.tend(inner);
        }
        let filter_gen = inner.filter_gen.load(Ordering::Relaxed);
        if reported_gen != Some(filter_gen) {
            let report = inner.filter_report.lock().ok().and_then(|r| r.clone());
            if let Some((own, effective)) = report {
                if conn
                    .send(&ToBroker::ProducerFilter { own, effective }, &[])
                    .is_err()
                {
                    return Ended::Other;
                }
            }
            reported_gen = Some(filter_gen);
        }
        match conn.recv::<FromBroker>(Some(RETRY)) {
            Ok(None) => {}
            Ok(Some((msg, mut fds))) => match msg {
                FromBroker::WelcomeProducer {
                    producer_id,
                    filter,
                    wake_mask,
                    ..
                } => {
                    inner.broker_id.store(producer_id, Ordering::Relaxed);
                    let page = fds
                        .pop()
                        .and_then(|fd| DoorbellPage::open(fd).ok())
                        .map(Arc::new);
                    Publisher::set_wake(inner, page, Some(wake_mask));
                    // Every welcome says what holds: a bus filter, or none (a new broker, or one
                    // reset while we were away: back to our own).
                    apply_filter(inner, &filter);
                    inner.connected.store(true, Ordering::Relaxed);
                    if let Ok(mut r) = inner.refused.lock() {
                        *r = None;
                    }
                }
                FromBroker::Error { message } => {
                    inner.introduced.store(false, Ordering::Relaxed);
                    refused(inner, message);
                    return Ended::Refused;
                }
                FromBroker::Filter { directives } => apply_filter(inner, &directives),
                FromBroker::WakeMask { mask } => Publisher::set_wake(inner, None, Some(mask)),
                _ => {}
            },
            Err(_) => return Ended::Other,
        }
    }
}

/// Keeps why the broker refused this producer, and says it on stderr (once per reason: the
/// connection thread retries every [`RETRY`]).
fn refused(inner: &Inner, message: String) {
    let new = match inner.refused.lock() {
        Ok(mut last) if last.as_deref() != Some(message.as_str()) => {
            *last = Some(message.clone());
            true
        }
        _ => false,
    };
    // Said after the lock is released: a blocked stderr must not block `stats()`.
    if new {
        crate::say!(
            "snapbus: the broker of bus '{}' refused this producer ({message}); its records are \
             written to its lane but no consumer can read them until a broker accepts it",
            inner.dir.name(),
        );
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
