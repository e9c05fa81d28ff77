//! The broker: one process per bus (`snapbus up`) that introduces producers to consumers.
//!
//! It is a control plane only: producers hand it their lane and catalog fds, it hands them on
//! to consumers, and payload bytes never pass through it. It keeps the registry `snapbus ls`
//! shows, forwards level filters, assigns doorbells, and notices deaths from socket EOF and
//! pidfds (never by polling pids). If it dies, producers keep writing and consumers keep
//! reading the lanes they have; a new broker re-adopts both when they reconnect, with the ids
//! they had, and takes over the consumers the old one supervised (from the state file
//! `broker.state`; see `broker/supervision.rs`). `snapbus down` stops supervised consumers
//! first, unless asked to keep them; it never deletes logs.
//!
//! One thread, one `poll` loop; every socket is non-blocking, and a peer whose socket is full
//! (it stopped reading) is dropped rather than waited for.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use thiserror::Error;

use crate::catalog::Catalog;
use crate::control::{
    BusState, Conn, ConsumerInfo, ConsumerState, ControlError, FromBroker, LaneCursor, LaneInfo,
    Listener, PROTOCOL_VERSION, ProducerInfo, ProducerState, RefusedLane, SchemaState, ToBroker,
};
use crate::doorbell::{BELLS_PER_PAGE, DoorbellPage};
use crate::lane::{LaneState, ShmLane, StartAt, now_realtime_nanos};
use crate::runtime::{BusDir, RuntimeError};

mod supervision;

pub use supervision::{DEFAULT_KEEP_ENDED, KEEP_ENDED_ENV, SUPERVISED_ENV, report_exit};
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
/// How long a detached consumer may take to flush and exit before it is killed.
const DETACH_GRACE: Duration = Duration::from_secs(10);
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
}

struct Producer {
    id: u64,
    info: ProducerInfo,
    conn: Option<Conn>,
    lane: ShmLane,
    catalog_fd: OwnedFd,
    catalog: Option<Catalog>,
    pidfd: Option<OwnedFd>,
    status: &'static str,
    gone_at: Option<Instant>,
    /// Its (own, effective) level filters, as it last reported them.
    filters: Option<(String, String)>,
}

struct Consumer {
    id: u64,
    info: ConsumerInfo,
    conn: Conn,
    bell: u32,
    delivered: u64,
    lost: u64,
    damaged: u64,
    garbage: u64,
    /// Its cursors as last reported.
    cursors: Vec<LaneCursor>,
    refused: Vec<RefusedLane>,
    /// When it last reported (or joined).
    last_report: Instant,
}

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
    producers: Vec<Producer>,
    consumers: Vec<Consumer>,
    /// Connections that have not said what they are yet, with when they were accepted.
    pending: Vec<(Conn, Instant)>,
    shutdown: bool,
    /// `down --keep-consumers`: leave supervised consumers running for the next broker.
    keep_consumers: bool,
}

/// Runs the broker of `config.dir` until `snapbus down`, SIGINT or SIGTERM. `ready` is called
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
        producers: Vec::new(),
        consumers: Vec::new(),
        pending: Vec::new(),
        shutdown: false,
        keep_consumers: false,
    };
    // Ids and supervised consumers of an earlier broker of this bus (killed, or stopped with
    // `--keep-consumers`).
    broker.load_state();
    broker.save_state();
    eprintln!(
        "snapbus broker: bus '{}' ready at {} (pid {})",
        dir.name(),
        sock.display(),
        std::process::id()
    );
    ready();
    while !broker.shutdown && !stop.load(Ordering::Relaxed) {
        broker.turn(&listener);
    }
    eprintln!("snapbus broker: bus '{}' shutting down", dir.name());
    if !broker.keep_consumers {
        // A plain `down` ends the bus filter; a crash or `down --keep-consumers` does not.
        broker.filter.clear();
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
    /// One turn of the loop: wait for any socket (or 250 ms), then serve what is ready.
    fn turn(&mut self, listener: &Listener) {
        let mut ready_pending = Vec::new();
        let mut ready_producers = Vec::new();
        let mut ready_consumers = Vec::new();
        let mut exited_producers = Vec::new();
        {
            let mut fds = vec![PollFd::from_borrowed_fd(listener.fd(), PollFlags::IN)];
            for (c, _) in &self.pending {
                fds.push(PollFd::from_borrowed_fd(c.fd(), PollFlags::IN));
            }
            for p in &self.producers {
                if let Some(c) = &p.conn {
                    fds.push(PollFd::from_borrowed_fd(c.fd(), PollFlags::IN));
                }
            }
            for c in &self.consumers {
                fds.push(PollFd::from_borrowed_fd(c.conn.fd(), PollFlags::IN));
            }
            // A producer whose connection closed before its process had fully exited: its
            // pidfd becomes readable when it has.
            for p in &self.producers {
                if let (None, "disconnected", Some(fd)) = (&p.conn, p.status, &p.pidfd) {
                    fds.push(PollFd::new(fd, PollFlags::IN));
                }
            }
            // Consumer processes we watch: readable when they exit (served in `supervise`).
            for fd in self.watched_pidfds() {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            let ts = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 250_000_000,
            };
            if rustix::event::poll(&mut fds, Some(&ts)).is_err() {
                return;
            }
            let readable = |f: &PollFd<'_>| !f.revents().is_empty();
            let mut i = 1;
            for k in 0..self.pending.len() {
                if readable(&fds[i]) {
                    ready_pending.push(k);
                }
                i += 1;
            }
            for (k, p) in self.producers.iter().enumerate() {
                if p.conn.is_some() {
                    if readable(&fds[i]) {
                        ready_producers.push(k);
                    }
                    i += 1;
                }
            }
            for k in 0..self.consumers.len() {
                if readable(&fds[i]) {
                    ready_consumers.push(k);
                }
                i += 1;
            }
            for (k, p) in self.producers.iter().enumerate() {
                if let (None, "disconnected", Some(_)) = (&p.conn, p.status, &p.pidfd) {
                    if readable(&fds[i]) {
                        exited_producers.push(k);
                    }
                    i += 1;
                }
            }
        }
        for k in exited_producers {
            self.producer_exited(k);
        }
        let mut accepted = Vec::new();
        while let Ok(Some(conn)) = listener.accept() {
            accepted.push(conn);
        }
        // Serve in reverse index order so removals do not shift what is still to serve.
        for k in ready_consumers.into_iter().rev() {
            self.serve_consumer(k);
        }
        for k in ready_producers.into_iter().rev() {
            self.serve_producer(k);
        }
        for k in ready_pending.into_iter().rev() {
            let (conn, since) = self.pending.swap_remove(k);
            self.serve_new(conn, since);
        }
        // A new connection's first message is usually there already.
        for conn in accepted {
            self.serve_new(conn, Instant::now());
        }
        // At most MAX_PENDING connections that have not said what they are: the oldest go.
        if self.pending.len() > MAX_PENDING {
            self.pending.sort_by_key(|(_, since)| *since);
            let excess = self.pending.len() - MAX_PENDING;
            self.pending.drain(..excess);
        }
        self.supervise(listener);
        self.housekeeping();
    }

    /// The first message on a connection says what it is.
    fn serve_new(&mut self, mut conn: Conn, since: Instant) {
        let (msg, fds) = match conn.try_recv::<ToBroker>() {
            Ok(Some(m)) => m,
            Ok(None) => {
                self.pending.push((conn, since));
                return;
            }
            Err(_) => return,
        };
        let version = match &msg {
            ToBroker::HelloProducer { version, .. }
            | ToBroker::HelloConsumer { version, .. }
            | ToBroker::Ls { version }
            | ToBroker::SetFilter { version, .. }
            | ToBroker::Shutdown { version, .. }
            | ToBroker::Attach { version, .. }
            | ToBroker::Detach { version, .. }
            | ToBroker::Exiting { version, .. } => Some(*version),
            ToBroker::ConsumerStats { .. }
            | ToBroker::Subscribed
            | ToBroker::ProducerFilter { .. } => None,
        };
        if version != Some(PROTOCOL_VERSION) {
            let _ = conn.send(
                &FromBroker::Error {
                    message: format!(
                        "protocol version {version:?} is not this broker's ({PROTOCOL_VERSION}); \
                         use matching snapbus versions"
                    ),
                },
                &[],
            );
            return;
        }
        match msg {
            ToBroker::HelloProducer {
                info, previous_id, ..
            } => self.add_producer(conn, info, fds, previous_id),
            ToBroker::HelloConsumer {
                info, previous_id, ..
            } => self.add_consumer(conn, info, previous_id),
            ToBroker::Ls { .. } => {
                let state = self.state();
                let _ = conn.send(&FromBroker::State(Box::new(state)), &[]);
            }
            ToBroker::SetFilter { directives, .. } => {
                self.filter = directives.clone();
                self.dirty = true;
                for p in &self.producers {
                    if let Some(c) = &p.conn {
                        let _ = c.send(
                            &FromBroker::Filter {
                                directives: directives.clone(),
                            },
                            &[],
                        );
                    }
                }
                let _ = conn.send(&FromBroker::Ok, &[]);
            }
            ToBroker::Shutdown { keep_consumers, .. } => {
                let _ = conn.send(&FromBroker::Ok, &[]);
                self.shutdown = true;
                self.keep_consumers = keep_consumers;
            }
            ToBroker::Exiting { exit_code, .. } => self.exiting(conn.peer_pid(), exit_code),
            ToBroker::Attach {
                kind,
                args,
                cwd,
                restart,
                ..
            } => self.attach(conn, kind, args, cwd, restart),
            ToBroker::Detach { consumer_id, .. } => self.detach(conn, consumer_id),
            ToBroker::ConsumerStats { .. }
            | ToBroker::Subscribed
            | ToBroker::ProducerFilter { .. } => {}
        }
    }

    fn add_producer(
        &mut self,
        conn: Conn,
        mut info: ProducerInfo,
        mut fds: Vec<OwnedFd>,
        previous_id: Option<u64>,
    ) {
        let refuse = |conn: &Conn, why: String| {
            let _ = conn.send(&FromBroker::Error { message: why }, &[]);
        };
        let n = fds.len();
        let Ok::<[OwnedFd; 2], _>([lane_fd, catalog_fd]) = std::mem::take(&mut fds).try_into()
        else {
            return refuse(&conn, format!("expected 2 fds (lane, catalog), got {n}"));
        };
        let lane = match ShmLane::open_rw(lane_fd) {
            Ok(l) => l,
            Err(e) => return refuse(&conn, format!("lane refused: {e}")),
        };
        if lane.lane.geometry().salt != info.lane_id {
            return refuse(&conn, "lane id does not match the lane".into());
        }
        // The kernel's word for who is on the other end, not the message's.
        if let Some(pid) = conn.peer_pid() {
            info.pid = pid;
        }
        let pidfd = rustix::process::Pid::from_raw(info.pid as i32).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        let catalog = catalog_fd
            .try_clone()
            .ok()
            .and_then(|fd| Catalog::open(fd).ok());
        let wake_mask = self.wake_mask();
        let existing = self
            .producers
            .iter()
            .position(|p| p.info.lane_id == info.lane_id && p.info.pid == info.pid);
        let id = match existing {
            Some(k) => self.producers[k].id,
            None => self.id_for(0, previous_id),
        };
        let welcome = |id: u64| FromBroker::WelcomeProducer {
            producer_id: id,
            bus: self.dir.name().to_string(),
            filter: self.filter.clone(),
            wake_mask,
        };
        // A producer that reconnects keeps its entry (a dropped connection) or the id it
        // says it had (a broker restart).
        if conn.send(&welcome(id), &[self.page.fd()]).is_err() {
            return;
        }
        let entry = Producer {
            id,
            info,
            conn: Some(conn),
            lane,
            catalog_fd,
            catalog,
            pidfd,
            status: "live",
            gone_at: None,
            filters: None,
        };
        eprintln!(
            "snapbus broker: producer {id} '{}' (pid {}) joined",
            entry.info.name, entry.info.pid
        );
        match existing {
            Some(k) => self.producers[k] = entry,
            None => {
                self.producers.push(entry);
                let k = self.producers.len() - 1;
                for c in 0..self.consumers.len() {
                    self.send_lane(c, k);
                }
            }
        }
    }

    /// Sends producer `p`'s lane to consumer `c` and rings its bell.
    fn send_lane(&mut self, c: usize, p: usize) -> bool {
        let prod = &self.producers[p];
        let (Ok(lane_fd), Ok(cat_fd)) = (prod.lane.read_only_fd(), prod.catalog_fd.try_clone())
        else {
            return false;
        };
        let msg = FromBroker::Lane(LaneInfo {
            producer_id: prod.id,
            producer: prod.info.clone(),
            dead: prod.status == "dead",
        });
        let cons = &self.consumers[c];
        let ok = cons
            .conn
            .send(&msg, &[lane_fd.as_fd(), cat_fd.as_fd()])
            .is_ok();
        if let Some(bell) = self.page.bell(cons.bell as usize) {
            bell.ring();
        }
        ok
    }

    fn add_consumer(&mut self, conn: Conn, mut info: ConsumerInfo, previous_id: Option<u64>) {
        if let Some(pid) = conn.peer_pid() {
            info.pid = pid;
        }
        let used: u64 = self.consumers.iter().fold(0, |m, c| m | 1 << c.bell);
        let Some(bell) = (0..BELLS_PER_PAGE as u32).find(|b| used & (1 << b) == 0) else {
            let _ = conn.send(
                &FromBroker::Error {
                    message: format!("the bus has its maximum of {BELLS_PER_PAGE} consumers"),
                },
                &[],
            );
            return;
        };
        let id = self.id_for(info.pid, previous_id);
        let welcome = FromBroker::WelcomeConsumer {
            consumer_id: id,
            bus: self.dir.name().to_string(),
            bell,
        };
        if conn.send(&welcome, &[self.page.fd()]).is_err() {
            return;
        }
        eprintln!(
            "snapbus broker: consumer {id} '{}' (pid {}) joined, subscriptions {:?}",
            info.kind, info.pid, info.subscriptions
        );
        self.consumers.push(Consumer {
            id,
            info,
            conn,
            bell,
            delivered: 0,
            lost: 0,
            damaged: 0,
            garbage: 0,
            cursors: Vec::new(),
            refused: Vec::new(),
            last_report: Instant::now(),
        });
        let c = self.consumers.len() - 1;
        for p in 0..self.producers.len() {
            self.send_lane(c, p);
        }
        // Tell the consumer it has every lane there is (an empty Lane list is a valid state).
        let _ = self.consumers[c].conn.send(&FromBroker::Ok, &[]);
        self.update_wake_masks();
    }

    fn wake_mask(&self) -> u64 {
        self.consumers.iter().fold(0, |m, c| m | 1 << c.bell)
    }

    fn update_wake_masks(&self) {
        let mask = self.wake_mask();
        for p in &self.producers {
            if let Some(c) = &p.conn {
                let _ = c.send(&FromBroker::WakeMask { mask }, &[]);
            }
        }
    }

    fn serve_producer(&mut self, k: usize) {
        loop {
            let Some(conn) = self.producers[k].conn.as_mut() else {
                return;
            };
            match conn.try_recv::<ToBroker>() {
                Ok(Some((ToBroker::ProducerFilter { own, effective }, _))) => {
                    self.producers[k].filters = Some((own, effective));
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(_) => break,
            }
        }
        // EOF: the producer died, or closed its connection.
        let p = &mut self.producers[k];
        p.conn = None;
        p.gone_at = Some(Instant::now());
        let exited = p.pidfd.as_ref().is_none_or(|fd| {
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let zero = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            rustix::event::poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
        });
        let closed = p.lane.lane.stats().state == Some(LaneState::Closed);
        if closed {
            p.status = "closed";
        } else if exited {
            self.producer_exited(k);
            return;
        } else {
            p.status = "disconnected";
        }
        eprintln!(
            "snapbus broker: producer {} '{}' (pid {}) {}",
            p.id, p.info.name, p.info.pid, p.status
        );
    }

    /// Producer `k`'s process is gone: mark its lane dead (readers skip what it left
    /// half-written) and tell the consumers.
    fn producer_exited(&mut self, k: usize) {
        let p = &mut self.producers[k];
        p.conn = None;
        p.gone_at.get_or_insert_with(Instant::now);
        if p.lane.lane.stats().state == Some(LaneState::Closed) {
            p.status = "closed";
            return;
        }
        p.lane.lane.mark_dead();
        p.status = "dead";
        eprintln!(
            "snapbus broker: producer {} '{}' (pid {}) died",
            p.id, p.info.name, p.info.pid
        );
        let id = p.id;
        for c in &self.consumers {
            let _ = c.conn.send(&FromBroker::LaneDead { producer_id: id }, &[]);
            if let Some(bell) = self.page.bell(c.bell as usize) {
                bell.ring();
            }
        }
    }

    fn serve_consumer(&mut self, k: usize) {
        loop {
            match self.consumers[k].conn.try_recv::<ToBroker>() {
                Ok(Some((
                    ToBroker::ConsumerStats {
                        delivered,
                        lost,
                        damaged,
                        garbage,
                        lanes,
                        refused,
                    },
                    _,
                ))) => {
                    let c = &mut self.consumers[k];
                    (c.delivered, c.lost, c.damaged, c.garbage) =
                        (delivered, lost, damaged, garbage);
                    c.cursors = lanes;
                    c.refused = refused;
                    c.last_report = Instant::now();
                }
                Ok(Some((ToBroker::Subscribed, _))) => {
                    let c = &self.consumers[k];
                    self.subscribed(c.id, c.info.pid);
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let c = self.consumers.swap_remove(k);
        let last = self.consumer_state(&c);
        if let Some(s) = self.supervised.iter_mut().find(|s| s.id == c.id) {
            s.last = Some(last);
            self.dirty = true;
        }
        eprintln!(
            "snapbus broker: consumer {} '{}' (pid {}) left",
            c.id, c.info.kind, c.info.pid
        );
        self.update_wake_masks();
    }

    /// Forgetting dead producers after the retention period, and dropping connections that
    /// never said what they are.
    fn housekeeping(&mut self) {
        let now = Instant::now();
        self.pending
            .retain(|(_, since)| now.duration_since(*since) < PENDING_TIMEOUT);
        let retention = self.retention;
        self.producers
            .retain(|p| p.gone_at.is_none_or(|t| now.duration_since(t) < retention));
    }

    fn consumer_state(&self, c: &Consumer) -> ConsumerState {
        let sup = self.supervised_by_id(c.id);
        // Lag and loss from its last cursors and the lanes as they are now: a consumer that
        // stopped reading (or reporting) is still seen falling behind and being lapped.
        let (mut lag_bytes, mut overwritten) = (0u64, 0u64);
        for cur in &c.cursors {
            let Some(p) = self
                .producers
                .iter()
                .find(|p| p.info.lane_id == cur.lane_id)
            else {
                continue;
            };
            let (lag, lost) = behind(&p.lane, cur);
            lag_bytes = lag_bytes.saturating_add(lag);
            overwritten = overwritten.saturating_add(lost);
        }
        let age = c.last_report.elapsed();
        let running = sup.map_or_else(|| "running".into(), |s| s.running_text());
        let status = if age > STALE_AFTER {
            format!("stale (no report for {} s; {running})", age.as_secs())
        } else {
            running
        };
        ConsumerState {
            id: c.id,
            info: c.info.clone(),
            delivered: c.delivered,
            lost: c.lost.saturating_add(overwritten),
            damaged: c.damaged,
            garbage: c.garbage,
            lag_bytes,
            report_age_secs: age.as_secs_f64(),
            refused: c
                .refused
                .iter()
                .map(|r| format!("producer {}: {}", r.producer, r.reason))
                .collect(),
            supervised: sup.is_some(),
            status,
            log: sup.map(|s| s.log.display().to_string()),
        }
    }

    fn state(&mut self) -> BusState {
        let now_nanos = now_realtime_nanos();
        let mut schemas: HashMap<(String, u32, u64), SchemaState> = HashMap::new();
        let mut producers = Vec::new();
        for p in &mut self.producers {
            let stats = p.lane.lane.stats();
            // Rates come from the frame timestamps in the ring, the same for the producer and
            // its schemas; a producer that closed its lane or died writes nothing: rate 0.
            let writing = !matches!(p.status, "closed" | "dead");
            let census = ring_census(&p.lane, now_nanos);
            let rate_of = |recent: u64, first_recent: u64| {
                if !writing || recent == 0 {
                    return 0.0;
                }
                // Over the window, or over the part of it the records cover (a producer that
                // started 2 s ago has a 2 s rate, not 2/5 of it).
                let span = now_nanos.saturating_sub(first_recent).max(1_000_000_000);
                let span = span.min(RATE_WINDOW_NANOS);
                recent as f64 / (span as f64 / 1e9)
            };
            let (recent, first_recent) = census
                .values()
                .fold((0, u64::MAX), |(n, t), &(_, r, f)| (n + r, t.min(f)));
            producers.push(ProducerState {
                id: p.id,
                info: p.info.clone(),
                status: p.status.to_owned(),
                frames: stats.frames_committed,
                rate_hz: rate_of(recent, first_recent),
                dropped: stats.dropped_wrap + stats.dropped_oversize + stats.aborted,
                lane_bytes: p.lane.lane.geometry().capacity,
                filter: p.filters.as_ref().map(|(_, effective)| effective.clone()),
                own_filter: p.filters.as_ref().map(|(own, _)| own.clone()),
            });
            let Some(cat) = p.catalog.as_mut() else {
                continue;
            };
            cat.refresh();
            for (key, d) in cat.schemas() {
                let s = schemas
                    .entry((d.id().to_owned(), d.version(), d.fingerprint()))
                    .or_insert_with(|| SchemaState {
                        id: d.id().to_owned(),
                        version: d.version(),
                        fingerprint: format!("{:016x}", d.fingerprint()),
                        descriptor: d.root().to_string(),
                        conflict: false,
                        producers: Vec::new(),
                        rate_hz: 0.0,
                        in_rings: 0,
                    });
                s.producers.push(p.id);
                if let Some(&(total, recent, first_recent)) = census.get(&key) {
                    s.in_rings += total;
                    s.rate_hz += rate_of(recent, first_recent);
                }
            }
        }
        let mut schemas: Vec<SchemaState> = schemas.into_values().collect();
        schemas.sort_by(|a, b| {
            (&a.id, a.version, &a.fingerprint).cmp(&(&b.id, b.version, &b.fingerprint))
        });
        // Two producers that disagree about (id, version) are reported, not mixed.
        for i in 1..schemas.len() {
            if (&schemas[i].id, schemas[i].version) == (&schemas[i - 1].id, schemas[i - 1].version)
            {
                schemas[i].conflict = true;
                schemas[i - 1].conflict = true;
            }
        }
        BusState {
            bus: self.dir.name().to_string(),
            broker_pid: std::process::id(),
            filter: self.filter.clone(),
            producers,
            consumers: self
                .consumers
                .iter()
                .map(|c| self.consumer_state(c))
                .chain(self.unconnected_supervised())
                .collect(),
            schemas,
        }
    }
}

/// How far a consumer whose cursor in `lane` is `cur` is behind: bytes up to the claim tail,
/// and records the ring has overwritten past the cursor (from the sequence number of the
/// oldest record still readable; 0 while the cursor's record is intact or its expected number
/// is unknown).
fn behind(lane: &ShmLane, cur: &LaneCursor) -> (u64, u64) {
    let tail = lane.lane.stats().claim_tail;
    let lag = tail.saturating_sub(cur.position);
    let cap = lane.lane.geometry().capacity;
    let Some(expected) = cur.expected_seq else {
        return (lag, 0);
    };
    if lag <= cap {
        return (lag, 0);
    }
    let mut r = lane.lane.reader(StartAt::Oldest);
    r.set_writer_gone(true);
    for _ in 0..64 {
        match r.read_in_place(|m, _| m.seq) {
            Ok((_, seq)) => return (lag, seq.saturating_sub(expected)),
            Err(crate::lane::NoFrame::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    (lag, 0)
}

/// Per schema key: records in the ring now, those of the last [`RATE_WINDOW_NANOS`], and the
/// time of the first of those (headers only; no payload is copied).
fn ring_census(lane: &ShmLane, now_nanos: u64) -> HashMap<u16, (u64, u64, u64)> {
    let mut out: HashMap<u16, (u64, u64, u64)> = HashMap::new();
    let mut r = lane.lane.reader(StartAt::Oldest);
    r.set_writer_gone(true);
    let since = now_nanos.saturating_sub(RATE_WINDOW_NANOS);
    // Bounded: a 64 MiB ring holds at most ~1.7 M frames.
    for _ in 0..4_000_000 {
        match r.read_in_place(|m, _| (m.schema_key, m.t_nanos)) {
            Ok((_, (key, t))) => {
                let e = out.entry(key).or_insert((0, 0, u64::MAX));
                e.0 += 1;
                if t >= since {
                    e.1 += 1;
                    e.2 = e.2.min(t);
                }
            }
            Err(crate::lane::NoFrame::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    out
}

/// A broker running on a thread of this process (tests, benches, and programs that want their
/// own bus). Dropping it shuts the broker down and waits for it.
pub struct InProcess {
    dir: BusDir,
    thread: Option<std::thread::JoinHandle<Result<(), BrokerError>>>,
}

impl InProcess {
    /// Starts a broker for `dir` and returns once it accepts connections.
    pub fn start(dir: BusDir, retention: Duration) -> Result<InProcess, BrokerError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.clone();
        let thread = std::thread::Builder::new()
            .name("snapbus-broker".into())
            .spawn(move || {
                let config = BrokerConfig {
                    dir: d,
                    retention,
                    consumer_exe: None,
                };
                run(config, || {
                    let _ = tx.send(());
                })
            })
            .map_err(|e| BrokerError::Setup(format!("broker thread: {e}")))?;
        if rx.recv().is_err() {
            // The broker returned before it was ready: that is its error.
            return match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(BrokerError::Setup("the broker thread ended early".into())),
            };
        }
        Ok(InProcess {
            dir,
            thread: Some(thread),
        })
    }

    /// The bus's directory.
    pub fn dir(&self) -> &BusDir {
        &self.dir
    }

    /// Shuts the broker down and returns how it ended.
    pub fn stop(mut self) -> Result<(), BrokerError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), BrokerError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        if let Ok(mut c) = Conn::connect(&self.dir.socket_path()) {
            let _ = c.request::<_, FromBroker>(
                &ToBroker::Shutdown {
                    version: PROTOCOL_VERSION,
                    keep_consumers: false,
                },
                Duration::from_secs(5),
            );
        }
        let result = thread
            .join()
            .map_err(|_| BrokerError::Setup("the broker thread panicked".into()))?;
        // It supervised no consumer and wrote no log: nothing in its directory is worth keeping.
        let _ = std::fs::remove_file(supervision::state_path(&self.dir));
        let _ = std::fs::remove_dir(self.dir.path());
        result
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
