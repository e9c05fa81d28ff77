//! The broker: one process per bus (`snapbus up`) that introduces producers to consumers.
//!
//! It is a control plane only: producers hand it their lane and catalog fds, it hands them on
//! to consumers, and payload bytes never pass through it. It keeps the registry `snapbus ls`
//! shows, forwards level filters, assigns doorbells, and notices deaths from socket EOF and
//! pidfds (never by polling pids). If it dies, producers keep writing and consumers keep
//! reading the lanes they have; a new broker re-adopts both when they reconnect.
//!
//! One thread, one `poll` loop; every socket is non-blocking, and a peer whose socket is full
//! (it stopped reading) is dropped rather than waited for.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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

/// A consumer process the broker started (`snapbus attach`) and watches.
struct Supervised {
    kind: String,
    exe: PathBuf,
    args: Vec<String>,
    cwd: String,
    /// Restart it when it fails (exits non-zero or is killed), up to [`MAX_RESTARTS`] times.
    restart: bool,
    restarts: u32,
    /// When a failed consumer is due to be started again.
    respawn_at: Option<Instant>,
    /// A detach or the shutdown asked it to stop: never restarted.
    stopping: bool,
    child: Child,
    pid: u32,
    pidfd: Option<OwnedFd>,
    log: PathBuf,
    /// The `attach` request waiting for the consumer to subscribe, and its deadline.
    attach: Option<(Conn, Instant)>,
    /// Its consumer id once it has said hello.
    consumer_id: Option<u64>,
    /// How it ended, once it has.
    status: Option<String>,
    ended_at: Option<Instant>,
    /// Its counters when its connection closed.
    last: Option<ConsumerState>,
}

/// A `detach` request waiting for a consumer process to exit.
struct Detaching {
    pid: u32,
    pidfd: Option<OwnedFd>,
    conn: Conn,
    deadline: Instant,
    killed: bool,
}

struct Broker {
    dir: BusDir,
    retention: Duration,
    consumer_exe: Option<PathBuf>,
    supervised: Vec<Supervised>,
    detaching: Vec<Detaching>,
    next_log: u64,
    page: Arc<DoorbellPage>,
    filter: String,
    next_id: u64,
    producers: Vec<Producer>,
    consumers: Vec<Consumer>,
    /// Connections that have not said what they are yet, with when they were accepted.
    pending: Vec<(Conn, Instant)>,
    shutdown: bool,
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
        next_log: 1,
        page: Arc::new(page),
        filter: String::new(),
        next_id: 1,
        producers: Vec::new(),
        consumers: Vec::new(),
        pending: Vec::new(),
        shutdown: false,
    };
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
    broker.stop_supervised();
    // Remove what we own; lanes are memfds and go with their last holder.
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(dir.lock_path());
    let _ = std::fs::remove_file(dir.log_path());
    let _ = std::fs::remove_dir(dir.path());
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
            for s in &self.supervised {
                if let (None, Some(fd)) = (&s.status, &s.pidfd) {
                    fds.push(PollFd::new(fd, PollFlags::IN));
                }
            }
            for d in &self.detaching {
                if let Some(fd) = &d.pidfd {
                    fds.push(PollFd::new(fd, PollFlags::IN));
                }
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
        while let Ok(Some(conn)) = listener.accept() {
            if self.pending.len() >= MAX_PENDING {
                // Drop the oldest. That shifts the indexes noted as ready: forget them (poll
                // is level-triggered, so they are served next turn).
                if let Some(oldest) = (0..self.pending.len()).min_by_key(|&k| self.pending[k].1) {
                    self.pending.remove(oldest);
                    ready_pending.clear();
                }
            }
            self.pending.push((conn, Instant::now()));
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
        self.supervise();
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
            | ToBroker::Shutdown { version }
            | ToBroker::Attach { version, .. }
            | ToBroker::Detach { version, .. } => Some(*version),
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
            ToBroker::HelloProducer { info, .. } => self.add_producer(conn, info, fds),
            ToBroker::HelloConsumer { info, .. } => self.add_consumer(conn, info),
            ToBroker::Ls { .. } => {
                let state = self.state();
                let _ = conn.send(&FromBroker::State(Box::new(state)), &[]);
            }
            ToBroker::SetFilter { directives, .. } => {
                self.filter = directives.clone();
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
            ToBroker::Shutdown { .. } => {
                let _ = conn.send(&FromBroker::Ok, &[]);
                self.shutdown = true;
            }
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

    /// Starts a supervised consumer; the reply waits until it has subscribed.
    fn attach(&mut self, conn: Conn, kind: String, args: Vec<String>, cwd: String, restart: bool) {
        let Some(exe) = self.consumer_exe.clone() else {
            let message =
                "this broker cannot start consumers (it was not started by `snapbus up`)".into();
            let _ = conn.send(&FromBroker::Error { message }, &[]);
            return;
        };
        let log = self
            .dir
            .path()
            .join(format!("consumer-{}.log", self.next_log));
        self.next_log += 1;
        let (child, pidfd) = match spawn_consumer(&exe, &args, &cwd, &log, 0) {
            Ok(c) => c,
            Err(message) => {
                let _ = conn.send(&FromBroker::Error { message }, &[]);
                return;
            }
        };
        let pid = child.id();
        eprintln!(
            "snapbus broker: started {kind} (pid {pid}): {} {}",
            exe.display(),
            args.join(" ")
        );
        self.supervised.push(Supervised {
            kind,
            exe,
            args,
            cwd,
            restart,
            restarts: 0,
            respawn_at: None,
            stopping: false,
            child,
            pid,
            pidfd,
            log,
            attach: Some((conn, Instant::now() + ATTACH_TIMEOUT)),
            consumer_id: None,
            status: None,
            ended_at: None,
            last: None,
        });
    }

    /// SIGTERM to a consumer; the reply waits until its process has exited.
    fn detach(&mut self, conn: Conn, consumer_id: u64) {
        // A supervised consumer waiting to be restarted: it is simply not restarted.
        if let Some(s) = self
            .supervised
            .iter_mut()
            .find(|s| s.consumer_id == Some(consumer_id) && s.respawn_at.is_some())
        {
            s.respawn_at = None;
            s.stopping = true;
            s.ended_at = Some(Instant::now());
            let status = s.status.clone().unwrap_or_default();
            let status = format!("{}; not restarted", status.split(';').next().unwrap_or(""));
            s.status = Some(status.clone());
            let _ = conn.send(&FromBroker::Detached { status }, &[]);
            return;
        }
        let pid = self
            .consumers
            .iter()
            .find(|c| c.id == consumer_id)
            .map(|c| c.info.pid)
            .or_else(|| {
                self.supervised
                    .iter()
                    .find(|s| s.consumer_id == Some(consumer_id) && s.status.is_none())
                    .map(|s| s.pid)
            });
        let Some(pid) = pid else {
            let _ = conn.send(
                &FromBroker::Error {
                    message: format!(
                        "no consumer {consumer_id} on bus '{}' (`snapbus ls` lists them)",
                        self.dir.name()
                    ),
                },
                &[],
            );
            return;
        };
        let raw = rustix::process::Pid::from_raw(pid as i32);
        let pidfd = raw.and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        if let Some(p) = raw {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        }
        for s in &mut self.supervised {
            if s.pid == pid {
                s.stopping = true;
            }
        }
        eprintln!("snapbus broker: detaching consumer {consumer_id} (pid {pid})");
        self.detaching.push(Detaching {
            pid,
            pidfd,
            conn,
            deadline: Instant::now() + DETACH_GRACE,
            killed: false,
        });
    }

    /// Reaps supervised consumers, answers `attach` and `detach` requests that are due.
    fn supervise(&mut self) {
        let now = Instant::now();
        for s in &mut self.supervised {
            if s.respawn_at.is_some_and(|t| now >= t) {
                s.respawn_at = None;
                s.restarts += 1;
                match spawn_consumer(&s.exe, &s.args, &s.cwd, &s.log, s.restarts) {
                    Ok((child, pidfd)) => {
                        eprintln!(
                            "snapbus broker: restarted {} (pid {}, restart {})",
                            s.kind,
                            child.id(),
                            s.restarts
                        );
                        s.pid = child.id();
                        s.child = child;
                        s.pidfd = pidfd;
                        s.status = None;
                    }
                    Err(e) => {
                        s.status = Some(format!("could not be restarted: {e}"));
                        s.ended_at = Some(now);
                    }
                }
            }
            if s.status.is_some() {
                continue;
            }
            match s.child.try_wait() {
                Ok(Some(status)) => {
                    let text = exit_text(status);
                    eprintln!(
                        "snapbus broker: {} (pid {}) {text}; log {}",
                        s.kind,
                        s.pid,
                        s.log.display()
                    );
                    if let Some((conn, _)) = s.attach.take() {
                        let log = std::fs::read_to_string(&s.log).unwrap_or_default();
                        let tail: Vec<&str> = log.lines().rev().take(10).collect();
                        let tail: Vec<&str> = tail.into_iter().rev().collect();
                        let _ = conn.send(
                            &FromBroker::Error {
                                message: format!(
                                    "the {} {text} before it subscribed:\n{}",
                                    s.kind,
                                    tail.join("\n")
                                ),
                            },
                            &[],
                        );
                    }
                    let failed = !status.success();
                    if failed && s.restart && !s.stopping && s.restarts < MAX_RESTARTS {
                        let backoff = Duration::from_secs(1 << s.restarts);
                        s.respawn_at = Some(now + backoff);
                        s.status = Some(format!(
                            "{text}; restart {} of {MAX_RESTARTS} in {}s",
                            s.restarts + 1,
                            backoff.as_secs()
                        ));
                    } else {
                        s.status = Some(text);
                        s.ended_at = Some(now);
                    }
                    s.pidfd = None;
                }
                Ok(None) => {
                    if s.attach
                        .as_ref()
                        .is_some_and(|(_, deadline)| now > *deadline)
                    {
                        let _ = s.child.kill();
                        if let Some((conn, _)) = s.attach.take() {
                            let _ = conn.send(
                                &FromBroker::Error {
                                    message: format!(
                                        "the {} did not subscribe within {ATTACH_TIMEOUT:?}; \
                                         killed it (log {})",
                                        s.kind,
                                        s.log.display()
                                    ),
                                },
                                &[],
                            );
                        }
                    }
                }
                Err(_) => {}
            }
        }
        let supervised = &self.supervised;
        let mut k = 0;
        while k < self.detaching.len() {
            let d = &mut self.detaching[k];
            let exited = match supervised.iter().find(|s| s.pid == d.pid) {
                Some(s) => s.status.clone(),
                None => d
                    .pidfd
                    .as_ref()
                    .is_none_or(|fd| {
                        let mut fds = [PollFd::new(fd, PollFlags::IN)];
                        let zero = rustix::time::Timespec {
                            tv_sec: 0,
                            tv_nsec: 0,
                        };
                        rustix::event::poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
                    })
                    .then(|| "exited".to_owned()),
            };
            if let Some(status) = exited {
                let status = if d.killed {
                    format!("{status}, killed after {DETACH_GRACE:?} without exiting")
                } else {
                    status
                };
                let _ = d.conn.send(&FromBroker::Detached { status }, &[]);
                self.detaching.swap_remove(k);
                continue;
            }
            if now > d.deadline && !d.killed {
                if let Some(p) = rustix::process::Pid::from_raw(d.pid as i32) {
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                }
                d.killed = true;
                d.deadline = now + Duration::from_secs(5);
            } else if now > d.deadline {
                let _ = d.conn.send(
                    &FromBroker::Error {
                        message: format!("consumer process {} did not exit", d.pid),
                    },
                    &[],
                );
                self.detaching.swap_remove(k);
                continue;
            }
            k += 1;
        }
        let retention = self.retention;
        self.supervised.retain(|s| {
            let keep = s.ended_at.is_none_or(|t| now.duration_since(t) < retention);
            if !keep {
                let _ = std::fs::remove_file(&s.log);
            }
            keep
        });
    }

    /// At shutdown: SIGTERM to every supervised consumer (they flush and exit), then SIGKILL
    /// to those still running after the grace period.
    fn stop_supervised(&mut self) {
        for s in &mut self.supervised {
            s.stopping = true;
            s.respawn_at = None;
        }
        for s in &self.supervised {
            if s.status.is_none() {
                if let Some(p) = rustix::process::Pid::from_raw(s.pid as i32) {
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
                }
            }
        }
        let deadline = Instant::now() + DETACH_GRACE;
        for s in &mut self.supervised {
            if s.status.is_some() {
                continue;
            }
            loop {
                match s.child.try_wait() {
                    Ok(Some(status)) => {
                        eprintln!(
                            "snapbus broker: {} (pid {}) {}",
                            s.kind,
                            s.pid,
                            exit_text(status)
                        );
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    _ => {
                        let _ = s.child.kill();
                        let _ = s.child.wait();
                        eprintln!("snapbus broker: {} (pid {}) killed", s.kind, s.pid);
                        break;
                    }
                }
            }
        }
        for s in &self.supervised {
            let _ = std::fs::remove_file(&s.log);
        }
    }

    fn add_producer(&mut self, conn: Conn, mut info: ProducerInfo, mut fds: Vec<OwnedFd>) {
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
        let welcome = |id: u64| FromBroker::WelcomeProducer {
            producer_id: id,
            bus: self.dir.name().to_string(),
            filter: self.filter.clone(),
            wake_mask,
        };
        // A producer that reconnects (after a broker restart or a dropped connection) keeps
        // its entry.
        let existing = self
            .producers
            .iter()
            .position(|p| p.info.lane_id == info.lane_id && p.info.pid == info.pid);
        let id = match existing {
            Some(k) => self.producers[k].id,
            None => {
                self.next_id += 1;
                self.next_id - 1
            }
        };
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

    fn add_consumer(&mut self, conn: Conn, mut info: ConsumerInfo) {
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
        let id = self.next_id;
        self.next_id += 1;
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
                    let (id, pid) = (c.id, c.info.pid);
                    for s in &mut self.supervised {
                        if s.pid == pid && s.status.is_none() {
                            s.consumer_id = Some(id);
                            if let Some((conn, _)) = s.attach.take() {
                                let _ = conn.send(
                                    &FromBroker::Attached {
                                        consumer_id: id,
                                        pid,
                                        log: s.log.display().to_string(),
                                    },
                                    &[],
                                );
                            }
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(_) => break,
            }
        }
        let c = self.consumers.swap_remove(k);
        let last = self.consumer_state(&c);
        if let Some(s) = self.supervised.iter_mut().find(|s| s.pid == c.info.pid) {
            s.last = Some(last);
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
        let sup = self
            .supervised
            .iter()
            .find(|s| s.pid == c.info.pid && s.status.is_none());
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
        let restarted = sup
            .filter(|s| s.restarts > 0)
            .map(|s| format!("restarted {}x", s.restarts));
        let status = match (age > STALE_AFTER, restarted) {
            (true, None) => format!("stale (no report for {} s)", age.as_secs()),
            (true, Some(r)) => format!("stale (no report for {} s; {r})", age.as_secs()),
            (false, Some(r)) => format!("running ({r})"),
            (false, None) => "running".into(),
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
                .chain(self.supervised.iter().filter_map(|s| {
                    // Supervised consumers that ended: how, and their last counters.
                    let status = s.status.clone()?;
                    let mut st = s.last.clone().unwrap_or_else(|| ConsumerState {
                        id: s.consumer_id.unwrap_or(0),
                        info: ConsumerInfo {
                            pid: s.pid,
                            kind: s.kind.clone(),
                            subscriptions: Vec::new(),
                        },
                        delivered: 0,
                        lost: 0,
                        damaged: 0,
                        garbage: 0,
                        lag_bytes: 0,
                        report_age_secs: 0.0,
                        refused: Vec::new(),
                        supervised: true,
                        status: String::new(),
                        log: Some(s.log.display().to_string()),
                    });
                    st.status = status;
                    Some(st)
                }))
                .collect(),
            schemas,
        }
    }
}

/// Starts `exe args` in `cwd`, its output appended to `log`, in its own process group (a Ctrl-C
/// meant for the broker's terminal is not its), with `SNAPBUS_RESTART` set to how many times
/// it was restarted.
fn spawn_consumer(
    exe: &std::path::Path,
    args: &[String],
    cwd: &str,
    log: &std::path::Path,
    restart: u32,
) -> Result<(Child, Option<OwnedFd>), String> {
    use std::os::unix::process::CommandExt;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(|e| format!("creating {}: {e}", log.display()))?;
    let out = file
        .try_clone()
        .map_err(|e| format!("creating {}: {e}", log.display()))?;
    let child = Command::new(exe)
        .args(args)
        .current_dir(cwd)
        .env("SNAPBUS_RESTART", restart.to_string())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(file)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting {} {args:?}: {e}", exe.display()))?;
    let pidfd = rustix::process::Pid::from_raw(child.id() as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    Ok((child, pidfd))
}

/// `exited 0`, `killed by signal 9`.
fn exit_text(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "ended".to_owned(),
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
            Err(crate::lane::Poll::Lagged(_)) => {}
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
            Err(crate::lane::Poll::Lagged(_)) => {}
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
                },
                Duration::from_secs(5),
            );
        }
        thread
            .join()
            .map_err(|_| BrokerError::Setup("the broker thread panicked".into()))?
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
