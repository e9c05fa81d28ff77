//! The broker: one process per bus (`snapbus up`) that introduces producers to consumers.
//!
//! It is a control plane only: producers hand it their lane and catalog fds, it hands them on
//! to consumers, and payload bytes never pass through it. It keeps the registry `snapbus ls`
//! shows, forwards level filters, assigns doorbells, and notices deaths from socket EOF and
//! pidfds (never by polling pids). If it dies, producers keep writing and consumers keep
//! reading the lanes they have; a new broker re-adopts both when they reconnect, with the ids
//! they had, and takes over the consumers the old one supervised (from the state file
//! `broker.state`; see `broker/supervision.rs`). `snapbus down` stops supervised consumers
//! first, unless asked to keep them, and leaves the logs: `broker.log` always, a consumer's
//! log until it is one of more than [`DEFAULT_KEEP_ENDED`] ended consumers (the oldest go, with
//! their logs), or when its `attach` failed before it subscribed (nothing is left of it).
//!
//! One thread, one `poll` loop; every socket is non-blocking, and a peer whose socket is full
//! (it stopped reading) is dropped rather than waited for.
//!
//! The parts, each an `impl Broker` block over the state below:
//! - `poll`: the loop's turn (a poll set with a token per entry, served by token), the first
//!   message of a connection, housekeeping;
//! - `registry`: producers and consumers joining, leaving and dying, lanes handed on, wake
//!   masks;
//! - `supervision`: consumers the broker starts and watches, and the state file;
//! - `census`: what `ls` shows (rates from lane counters, the ring census when asked for, lag
//!   and loss from cursors), from what `readings` keeps per producer;
//! - `harness`: [`InProcess`], a broker on a thread of this process.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::control::{Conn, ControlError, DETACH_GRACE, Listener};
use crate::doorbell::DoorbellPage;
use crate::runtime::{BusDir, RuntimeError};

mod census;
mod fds;
mod harness;
mod poll;
mod readings;
mod registry;
mod supervision;

pub use harness::InProcess;
pub use supervision::{DEFAULT_KEEP_ENDED, KEEP_ENDED_ENV, SUPERVISED_ENV, report_exit};

use registry::{Consumer, Producer};
use supervision::{Detaching, Supervised};

/// How long a dead producer's lane stays readable (for `snapbus snapshot`) by default.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(300);
/// How long a new connection may take to send its first message.
const PENDING_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections that have not said what they are; beyond it the oldest is dropped (each
/// holds a file descriptor: a flood of silent connections must not starve real clients).
const MAX_PENDING: usize = 256;
/// How long an attached consumer may take to subscribe.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a failing supervised consumer is restarted (after 1, 2, 4, 8, 16 s).
const MAX_RESTARTS: u32 = 5;
/// A consumer that has not reported its counters for this long is shown stale in `ls` (it
/// reports twice a second while it reads).
const STALE_AFTER: Duration = Duration::from_secs(5);
/// Window of the per-schema rates in `ls`.
const RATE_WINDOW_NANOS: u64 = 5_000_000_000;

/// Why the broker could not run.
#[derive(Debug, Error)]
pub enum BrokerError {
    /// Another broker holds this bus.
    #[error("bus '{0}' is already running")]
    AlreadyRunning(String),
    /// The runtime directory is unusable.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The control socket could not be set up.
    #[error("control socket: {0}")]
    Control(#[from] ControlError),
    /// Something else in the setup failed.
    #[error("{0}")]
    Setup(String),
}

/// Broker settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The bus.
    pub dir: BusDir,
    /// How long dead producers' lanes are kept.
    pub retention: Duration,
    /// The snapbus executable, for consumers started with `snapbus attach` (`None`: this
    /// broker refuses to start consumers).
    pub consumer_exe: Option<PathBuf>,
    /// Stop after this long idle: no producer connected and no consumer but the ones this
    /// broker supervises (`None`: run until `snapbus down`). The broker a producer starts
    /// for itself (`snapbus up --idle-exit-secs`) uses it.
    pub idle_exit: Option<Duration>,
}

/// A registry entry's key: stable for the entry's life (never an index that shifts when
/// another entry goes), never reused by this broker.
type Slot = u64;

struct Broker {
    dir: BusDir,
    retention: Duration,
    consumer_exe: Option<PathBuf>,
    supervised: Vec<Supervised>,
    detaching: Vec<Detaching>,
    /// The supervision state changed since the state file was written.
    dirty: bool,
    /// How many ended supervised consumers `ls` keeps.
    keep_ended: usize,
    page: Arc<DoorbellPage>,
    filter: String,
    next_id: u64,
    /// The next registry slot.
    next_slot: Slot,
    producers: BTreeMap<Slot, Producer>,
    consumers: BTreeMap<Slot, Consumer>,
    /// Connections that have not said what they are yet, with when they were accepted.
    pending: BTreeMap<Slot, (Conn, Instant)>,
    shutdown: bool,
    /// `down --keep-consumers`: leave supervised consumers running for the next broker.
    keep_consumers: bool,
    /// Ring censuses run (for `ls`).
    census_runs: u64,
    /// Producers refused, the most recent last (for `ls`).
    refused: std::collections::VecDeque<fds::Refused>,
    /// See [`BrokerConfig::idle_exit`].
    idle_exit: Option<Duration>,
    /// Since when nothing but supervised consumers has been connected.
    idle_since: Option<Instant>,
}

/// Runs the broker of `config.dir` until `snapbus down`, SIGINT, SIGTERM or (with
/// [`BrokerConfig::idle_exit`]) it has been idle that long. `ready` is called
/// once the socket accepts connections.
pub fn run(config: BrokerConfig, ready: impl FnOnce()) -> Result<(), BrokerError> {
    let dir = config.dir.clone();
    dir.create()?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(dir.lock_path())
        .map_err(|e| BrokerError::Setup(format!("open {}: {e}", dir.lock_path().display())))?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(BrokerError::AlreadyRunning(dir.name().to_string()));
    }
    // We hold the lock, so a socket file left here belongs to a dead broker.
    let sock = dir.socket_path();
    let _ = std::fs::remove_file(&sock);
    let listener = Listener::bind(&sock)?;
    let page = DoorbellPage::create("snapbus-bells")
        .map_err(|e| BrokerError::Setup(format!("doorbell page: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| BrokerError::Setup(format!("signal handler: {e}")))?;
    }
    let mut broker = Broker {
        dir: dir.clone(),
        retention: config.retention,
        consumer_exe: config.consumer_exe,
        supervised: Vec::new(),
        detaching: Vec::new(),
        dirty: false,
        keep_ended: supervision::keep_ended(),
        page: Arc::new(page),
        filter: String::new(),
        next_id: 1,
        next_slot: 0,
        producers: BTreeMap::new(),
        consumers: BTreeMap::new(),
        pending: BTreeMap::new(),
        shutdown: false,
        keep_consumers: false,
        census_runs: 0,
        refused: std::collections::VecDeque::new(),
        idle_exit: config.idle_exit,
        idle_since: None,
    };
    fds::raise_limit();
    // Ids and supervised consumers of an earlier broker of this bus (killed, or stopped with
    // `--keep-consumers`).
    broker.load_state();
    broker.save_state();
    crate::say!(
        "snapbus broker: bus '{}' ready at {} (pid {})",
        dir.name(),
        sock.display(),
        std::process::id()
    );
    ready();
    while !broker.shutdown && !stop.load(Ordering::Relaxed) {
        broker.turn(&listener);
    }
    crate::say!("snapbus broker: bus '{}' shutting down", dir.name());
    if !broker.keep_consumers && !broker.filter.is_empty() {
        // A plain `down` ends the bus filter (the producers go back to their own now, not at
        // the next `up`); a crash or `down --keep-consumers` does not.
        broker.set_filter(String::new());
    }
    broker.stop_supervised(broker.keep_consumers);
    // Remove the socket and lock; lanes are memfds and go with their last holder. The logs
    // (broker.log, consumer-<id>.log) stay for the user to read, and the state file for the
    // next broker (ids are never reused; kept consumers are re-adopted).
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(dir.lock_path());
    drop(lock);
    Ok(())
}

impl Broker {
    /// A new registry slot.
    fn new_slot(&mut self) -> Slot {
        self.next_slot += 1;
        self.next_slot
    }
}
