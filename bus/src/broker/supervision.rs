//! Consumers the broker starts (`snapbus attach`) and watches, and the state file that lets a
//! restarted broker take them over.
//!
//! - **Ids.** A consumer's id is allocated when it is attached (its log is
//!   `consumer-<id>.log`) and kept across its restarts. The id counter never goes back: it is in
//!   the state file, so a new broker never hands out an id an earlier one gave to a process
//!   that is still running (producers and consumers say their old id when they rejoin and get
//!   it back).
//! - **State file.** `broker.state` (0600, in the bus directory) holds the id counter and, per
//!   supervised consumer, its command, restart policy and count, pid and process start time (so
//!   a reused pid is never mistaken for it) and log. It is rewritten (write + rename) whenever
//!   one of these changes.
//! - **Re-adoption.** A new broker loads the file and watches the consumers that are still
//!   running through pidfds. They are not its children, so it cannot read their exit status;
//!   a supervised consumer therefore says its exit code (`ToBroker::Exiting`) just before it
//!   exits. A re-adopted consumer that ends without a word was killed, and counts as failed. A
//!   consumer that ended while no broker was running counts as failed too (its status is
//!   unknown).
//! - **Restarts.** Policy `on-failure` restarts a consumer that exits non-zero or is killed,
//!   after 1, 2, 4, 8, 16 s, at most [`MAX_RESTARTS`] times, except when it exited
//!   [`EXIT_NO_RESTART`] (a full disk, an unwritable path: a restart would fail the same way)
//!   or ended before it subscribed (it would fail the same way too). A first start that fails
//!   before subscribing fails the `attach` and leaves nothing behind (the log's tail is in the
//!   error).
//! - **Ended consumers** stay in `ls` with how they ended, and keep their logs; only the newest
//!   [`DEFAULT_KEEP_ENDED`] (or `$SNAPBUS_KEEP_ENDED`) are kept, older ones and their logs go.

use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use super::{ATTACH_TIMEOUT, Broker, DETACH_GRACE, MAX_RESTARTS};
use crate::control::{
    Conn, ConsumerInfo, ConsumerState, FromBroker, Listener, PROTOCOL_VERSION, ToBroker,
};
use crate::lane::now_realtime_nanos;
use crate::runtime::{BusDir, EXIT_NO_RESTART};

/// How many ended supervised consumers (and their logs) `ls` keeps by default.
pub const DEFAULT_KEEP_ENDED: usize = 16;
/// The environment variable that overrides [`DEFAULT_KEEP_ENDED`].
pub const KEEP_ENDED_ENV: &str = "SNAPBUS_KEEP_ENDED";
/// Set in a supervised consumer's environment: the broker's socket, where
/// [`report_exit`] says the exit code.
pub const SUPERVISED_ENV: &str = "SNAPBUS_SUPERVISED_BY";
/// Format version of the state file.
const STATE_FORMAT: u32 = 2;

/// A consumer process the broker started (`snapbus attach`) and watches.
pub(super) struct Supervised {
    /// Its consumer id (allocated at `attach`, kept across restarts).
    pub(super) id: u64,
    kind: String,
    exe: PathBuf,
    args: Vec<String>,
    cwd: String,
    /// Restart it when it fails, up to [`MAX_RESTARTS`] times.
    restart: bool,
    restarts: u32,
    /// When a failed consumer is due to be started again.
    respawn_at: Option<Instant>,
    /// A detach or the shutdown asked it to stop: never restarted.
    stopping: bool,
    /// The process, if this broker started it (`None`: re-adopted from an earlier broker).
    child: Option<Child>,
    pub(super) pid: u32,
    /// The process's start time (clock ticks after boot), against pid reuse.
    start_time: u64,
    pidfd: Option<OwnedFd>,
    pub(super) log: PathBuf,
    /// The `attach` request waiting for the first start to subscribe, and its deadline.
    attach: Option<(Conn, Instant)>,
    /// This run of the process has subscribed.
    subscribed: bool,
    /// The exit code the process said it is exiting with.
    said_exit: Option<i32>,
    /// How it ended, once it has (with what happens next).
    pub(super) status: Option<String>,
    /// When it ended for good (CLOCK_REALTIME ns; orders the ended entries).
    ended_nanos: Option<u64>,
    /// Its counters when its connection closed.
    pub(super) last: Option<ConsumerState>,
    /// Its first start failed: the entry goes.
    forget: bool,
}

impl Supervised {
    /// Running (or starting): not ended, not waiting to be restarted.
    pub(super) fn running(&self) -> bool {
        self.status.is_none()
    }

    /// The `ls` status of a running supervised consumer.
    pub(super) fn running_text(&self) -> String {
        match (self.restarts, self.child.is_none()) {
            (0, false) => "running".into(),
            (0, true) => "running (re-adopted)".into(),
            (n, false) => format!("running (restarted {n}x)"),
            (n, true) => format!("running (restarted {n}x, re-adopted)"),
        }
    }

    fn signal(&self, sig: Signal) {
        match &self.pidfd {
            Some(fd) => {
                let _ = rustix::process::pidfd_send_signal(fd, sig);
            }
            // Without a pidfd only a child of ours is signalled by pid (a child's pid cannot be
            // reused before we reap it).
            None if self.child.is_some() => {
                if let Some(p) = rustix::process::Pid::from_raw(self.pid as i32) {
                    let _ = rustix::process::kill_process(p, sig);
                }
            }
            None => {}
        }
    }

    /// How the process ended, if it has: (text, exit code if known).
    fn reap(&mut self) -> Option<(String, Option<i32>)> {
        if let Some(child) = &mut self.child {
            return match child.try_wait() {
                Ok(Some(status)) => Some((exit_text(status), status.code())),
                _ => None,
            };
        }
        let gone = self.pidfd.as_ref().is_none_or(has_exited);
        gone.then(|| match self.said_exit {
            Some(code) => (format!("exited {code}"), Some(code)),
            None => ("ended without saying how (killed?)".to_owned(), None),
        })
    }
}

/// A `detach` request waiting for a consumer process to exit.
pub(super) struct Detaching {
    /// A supervised consumer (by id), or an unsupervised one (its pidfd).
    target: Target,
    pidfd: Option<OwnedFd>,
    conn: Conn,
    deadline: Instant,
    killed: bool,
}

enum Target {
    Supervised(u64),
    Unsupervised,
}

/// The state file's content.
#[derive(Serialize, Deserialize)]
struct SavedState {
    format: u32,
    next_id: u64,
    /// The bus filter (`snapbus filter`): it outlives a broker crash and `down
    /// --keep-consumers`, not a plain `down`.
    filter: String,
    supervised: Vec<SavedSupervised>,
}

#[derive(Serialize, Deserialize)]
struct SavedSupervised {
    id: u64,
    kind: String,
    exe: PathBuf,
    args: Vec<String>,
    cwd: String,
    restart: bool,
    restarts: u32,
    respawn: bool,
    pid: u32,
    start_time: u64,
    log: PathBuf,
    subscribed: bool,
    status: Option<String>,
    ended_nanos: Option<u64>,
    last: Option<ConsumerState>,
}

/// The state file of the bus in `dir`.
pub(super) fn state_path(dir: &BusDir) -> PathBuf {
    dir.path().join("broker.state")
}

/// The log of consumer `id`.
fn log_path(dir: &BusDir, id: u64) -> PathBuf {
    dir.path().join(format!("consumer-{id}.log"))
}

/// How many ended entries to keep.
pub(super) fn keep_ended() -> usize {
    std::env::var(KEEP_ENDED_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_KEEP_ENDED)
}

/// Called by a supervised consumer just before it exits with `exit_code`: tells the broker
/// that started it (see [`SUPERVISED_ENV`]), so that a broker that re-adopted it knows whether
/// it failed. Does nothing in a process the broker did not start, or when no broker listens.
///
/// With no broker running, it leaves the word in a file of the bus directory
/// (`exit-<pid>`), which the next broker reads.
pub fn report_exit(exit_code: i32) {
    let Some(sock) = std::env::var_os(SUPERVISED_ENV) else {
        return;
    };
    let sock = PathBuf::from(sock);
    let said = Conn::connect(&sock).is_ok_and(|conn| {
        conn.send(
            &ToBroker::Exiting {
                version: PROTOCOL_VERSION,
                exit_code,
            },
            &[],
        )
        .is_ok()
    });
    if said {
        return;
    }
    let pid = std::process::id();
    if let (Some(dir), Some(start)) = (sock.parent(), proc_start_time(pid)) {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(format!("exit-{pid}")))
            .and_then(|mut f| {
                use std::io::Write;
                writeln!(f, "{start} {exit_code}")
            });
    }
}

/// The exit code process `pid` (started at `start_time`) left in `exit-<pid>` when no broker
/// was there to tell; the file is removed.
fn exit_note(dir: &BusDir, pid: u32, start_time: u64) -> Option<i32> {
    let path = dir.path().join(format!("exit-{pid}"));
    let text = std::fs::read_to_string(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    let (start, code) = text.trim().split_once(' ')?;
    (start.parse::<u64>().ok()? == start_time)
        .then(|| code.parse().ok())
        .flatten()
}

impl Broker {
    /// Loads the state file an earlier broker of this bus left: the id counter, and the
    /// supervised consumers, re-adopting those still running.
    pub(super) fn load_state(&mut self) {
        let path = state_path(&self.dir);
        let Ok(bytes) = std::fs::read(&path) else {
            return;
        };
        let saved: SavedState = match postcard::from_bytes::<SavedState>(&bytes) {
            Ok(s) if s.format == STATE_FORMAT => s,
            _ => {
                eprintln!(
                    "snapbus broker: {} is unreadable; starting without it (consumers \
                     supervised by the earlier broker are not re-adopted)",
                    path.display()
                );
                return;
            }
        };
        self.next_id = self.next_id.max(saved.next_id);
        self.filter = saved.filter;
        let now = Instant::now();
        for v in saved.supervised {
            let mut s = Supervised {
                id: v.id,
                kind: v.kind,
                exe: v.exe,
                args: v.args,
                cwd: v.cwd,
                restart: v.restart,
                restarts: v.restarts,
                respawn_at: None,
                stopping: false,
                child: None,
                pid: v.pid,
                start_time: v.start_time,
                pidfd: None,
                log: v.log,
                attach: None,
                subscribed: v.subscribed,
                said_exit: None,
                status: v.status,
                ended_nanos: v.ended_nanos,
                last: v.last,
                forget: false,
            };
            if v.respawn {
                s.respawn_at = Some(now);
            } else if s.running() {
                // The pidfd first, then the start time: if it matches, the pidfd is of the
                // process we started (a pid reused later is never signalled through it).
                s.pidfd = pidfd(s.pid).filter(|_| proc_start_time(s.pid) == Some(s.start_time));
                if s.pidfd.is_some() {
                    eprintln!(
                        "snapbus broker: re-adopted {} {} (pid {})",
                        s.kind, s.id, s.pid
                    );
                } else {
                    let code = exit_note(&self.dir, s.pid, s.start_time);
                    let text = match code {
                        Some(code) => format!("exited {code} while no broker was running"),
                        None => "ended while no broker was running (exit status unknown)".into(),
                    };
                    eprintln!("snapbus broker: {} {} (pid {}) {text}", s.kind, s.id, s.pid);
                    self.ended(&mut s, text, code, now);
                }
            }
            self.supervised.push(s);
        }
        // Notes of processes that are not ours (any more).
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for e in entries.filter_map(Result::ok) {
                if e.file_name().to_string_lossy().starts_with("exit-") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        self.dirty = true;
    }

    /// Writes the state file (write a temporary file, then rename over the old one).
    pub(super) fn save_state(&mut self) {
        self.dirty = false;
        let saved = SavedState {
            format: STATE_FORMAT,
            next_id: self.next_id,
            filter: self.filter.clone(),
            supervised: self
                .supervised
                .iter()
                .map(|s| SavedSupervised {
                    id: s.id,
                    kind: s.kind.clone(),
                    exe: s.exe.clone(),
                    args: s.args.clone(),
                    cwd: s.cwd.clone(),
                    restart: s.restart,
                    restarts: s.restarts,
                    respawn: s.respawn_at.is_some(),
                    pid: s.pid,
                    start_time: s.start_time,
                    log: s.log.clone(),
                    subscribed: s.subscribed,
                    status: s.status.clone(),
                    ended_nanos: s.ended_nanos,
                    last: s.last.clone(),
                })
                .collect(),
        };
        let path = state_path(&self.dir);
        let tmp = path.with_extension("state.tmp");
        let written = postcard::to_allocvec(&saved)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                f.write_all(&bytes)?;
                std::fs::rename(&tmp, &path)
            });
        if let Err(e) = written {
            eprintln!("snapbus broker: writing {}: {e}", path.display());
        }
    }

    /// A new consumer id (never one an earlier broker of this bus gave out).
    pub(super) fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.dirty = true;
        self.next_id - 1
    }

    /// The pidfds to wake the loop: running supervised consumers, detached ones.
    pub(super) fn watched_pidfds(&self) -> impl Iterator<Item = &OwnedFd> {
        let sup = self.supervised.iter().filter(|s| s.running());
        sup.filter_map(|s| s.pidfd.as_ref())
            .chain(self.detaching.iter().filter_map(|d| d.pidfd.as_ref()))
    }

    /// The running supervised consumer with this id.
    pub(super) fn supervised_by_id(&self, id: u64) -> Option<&Supervised> {
        self.supervised.iter().find(|s| s.id == id && s.running())
    }

    /// The id a joining consumer gets: its supervised entry's if the broker started (or
    /// re-adopted) it, else the id it had if no one else holds it, else a new one.
    pub(super) fn id_for(&mut self, pid: u32, previous: Option<u64>) -> u64 {
        if let Some(s) = self.supervised.iter().find(|s| s.pid == pid && s.running()) {
            return s.id;
        }
        if let Some(id) = previous {
            let taken = self.consumers.iter().any(|c| c.id == id)
                || self.producers.iter().any(|p| p.id == id)
                || self.supervised.iter().any(|s| s.id == id);
            if !taken {
                if id >= self.next_id {
                    self.next_id = id + 1;
                    self.dirty = true;
                }
                return id;
            }
        }
        self.new_id()
    }

    /// A supervised consumer has subscribed: answer its `attach`.
    pub(super) fn subscribed(&mut self, id: u64, pid: u32) {
        if let Some(s) = self
            .supervised
            .iter_mut()
            .find(|s| s.id == id && s.pid == pid && s.running())
        {
            s.subscribed = true;
            self.dirty = true;
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

    /// A supervised process says the code it is exiting with (`peer`: the kernel's pid).
    pub(super) fn exiting(&mut self, peer: Option<u32>, exit_code: i32) {
        if let Some(s) = self
            .supervised
            .iter_mut()
            .find(|s| Some(s.pid) == peer && s.running())
        {
            s.said_exit = Some(exit_code);
        }
    }

    /// Starts a supervised consumer; the reply waits until it has subscribed.
    pub(super) fn attach(
        &mut self,
        conn: Conn,
        kind: String,
        args: Vec<String>,
        cwd: String,
        restart: bool,
    ) {
        let Some(exe) = self.consumer_exe.clone() else {
            let message =
                "this broker cannot start consumers (it was not started by `snapbus up`)".into();
            let _ = conn.send(&FromBroker::Error { message }, &[]);
            return;
        };
        let id = self.new_id();
        let log = log_path(&self.dir, id);
        let (child, pidfd) = match spawn_consumer(&exe, &args, &cwd, &log, 0, &self.dir) {
            Ok(c) => c,
            Err(message) => {
                let _ = std::fs::remove_file(&log);
                let _ = conn.send(&FromBroker::Error { message }, &[]);
                return;
            }
        };
        let pid = child.id();
        eprintln!(
            "snapbus broker: started {kind} {id} (pid {pid}): {} {}",
            exe.display(),
            args.join(" ")
        );
        self.supervised.push(Supervised {
            id,
            kind,
            exe,
            args,
            cwd,
            restart,
            restarts: 0,
            respawn_at: None,
            stopping: false,
            child: Some(child),
            pid,
            start_time: proc_start_time(pid).unwrap_or(0),
            pidfd,
            log,
            attach: Some((conn, Instant::now() + ATTACH_TIMEOUT)),
            subscribed: false,
            said_exit: None,
            status: None,
            ended_nanos: None,
            last: None,
            forget: false,
        });
    }

    /// SIGTERM to a consumer; the reply waits until its process has exited. An id that names
    /// no running consumer is refused (never guessed).
    pub(super) fn detach(&mut self, conn: Conn, consumer_id: u64) {
        let refuse = |conn: &Conn, message: String| {
            let _ = conn.send(&FromBroker::Error { message }, &[]);
        };
        if let Some(s) = self.supervised.iter_mut().find(|s| s.id == consumer_id) {
            // Waiting to be restarted: it is simply not restarted.
            if s.respawn_at.is_some() {
                s.respawn_at = None;
                s.stopping = true;
                s.ended_nanos = Some(now_realtime_nanos());
                let status = s.status.clone().unwrap_or_default();
                let status = format!("{}; not restarted", status.split(';').next().unwrap_or(""));
                s.status = Some(status.clone());
                self.dirty = true;
                let _ = conn.send(&FromBroker::Detached { status }, &[]);
                return;
            }
            if let Some(status) = &s.status {
                return refuse(
                    &conn,
                    format!("consumer {consumer_id} has already ended ({status})"),
                );
            }
            if s.attach.is_some() {
                return refuse(
                    &conn,
                    format!("consumer {consumer_id} is still starting; try again"),
                );
            }
            s.stopping = true;
            s.signal(Signal::TERM);
            eprintln!(
                "snapbus broker: detaching {} {consumer_id} (pid {})",
                s.kind, s.pid
            );
            self.detaching.push(Detaching {
                target: Target::Supervised(consumer_id),
                pidfd: None,
                conn,
                deadline: Instant::now() + DETACH_GRACE,
                killed: false,
            });
            return;
        }
        // An unsupervised consumer: the one connected with this id, signalled through a
        // pidfd (a pid that was reused in the meantime is never signalled).
        let Some(pid) = self
            .consumers
            .iter()
            .find(|c| c.id == consumer_id)
            .map(|c| c.info.pid)
        else {
            return refuse(
                &conn,
                format!(
                    "no consumer {consumer_id} on bus '{}' (`snapbus ls` lists them)",
                    self.dir.name()
                ),
            );
        };
        let Some(fd) = pidfd(pid) else {
            return refuse(
                &conn,
                format!("consumer {consumer_id} (pid {pid}) has already exited"),
            );
        };
        let _ = rustix::process::pidfd_send_signal(&fd, Signal::TERM);
        eprintln!("snapbus broker: detaching consumer {consumer_id} (pid {pid})");
        self.detaching.push(Detaching {
            target: Target::Unsupervised,
            pidfd: Some(fd),
            conn,
            deadline: Instant::now() + DETACH_GRACE,
            killed: false,
        });
    }

    /// One run of supervised consumer `s` ended: restart it, or record how it ended.
    /// `code`: its exit code if it exited (rather than was killed).
    fn ended(&mut self, s: &mut Supervised, text: String, code: Option<i32>, now: Instant) {
        self.dirty = true;
        s.pidfd = None;
        s.child = None;
        s.said_exit = None;
        if let Some((conn, _)) = s.attach.take() {
            // The first start failed: the `attach` fails, and nothing is left behind.
            let log = std::fs::read_to_string(&s.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let _ = conn.send(
                &FromBroker::Error {
                    message: format!(
                        "the {} {text} before it subscribed; its output:\n{}",
                        s.kind,
                        tail.join("\n")
                    ),
                },
                &[],
            );
            let _ = std::fs::remove_file(&s.log);
            s.status = Some("failed to start".into());
            s.forget = true;
            return;
        }
        let failed = code != Some(0);
        let final_text = if !failed || !s.restart || s.stopping {
            text
        } else if code == Some(EXIT_NO_RESTART) {
            format!("{text} (a restart cannot fix this; see its log); not restarted")
        } else if !s.subscribed {
            format!("{text} before it subscribed; not restarted")
        } else if s.restarts >= MAX_RESTARTS {
            format!("{text}; not restarted again after {MAX_RESTARTS} restarts")
        } else {
            let backoff = Duration::from_secs(1 << s.restarts);
            s.respawn_at = Some(now + backoff);
            s.status = Some(format!(
                "{text}; restart {} of {MAX_RESTARTS} in {}s",
                s.restarts + 1,
                backoff.as_secs()
            ));
            return;
        };
        s.status = Some(final_text);
        s.ended_nanos = Some(now_realtime_nanos());
    }

    /// Restarts, reaps and times out supervised consumers; answers `detach` requests that are
    /// due; forgets the oldest ended entries. `listener`: to hear an exiting consumer's last
    /// word before deciding it was killed.
    pub(super) fn supervise(&mut self, listener: &Listener) {
        let now = Instant::now();
        let mut list = std::mem::take(&mut self.supervised);
        // A re-adopted consumer that has exited may have said its exit code on a connection
        // not accepted yet (it sent it before it exited): serve those first.
        if list
            .iter()
            .any(|s| s.running() && s.child.is_none() && s.pidfd.as_ref().is_some_and(has_exited))
        {
            self.supervised = std::mem::take(&mut list);
            while let Ok(Some(conn)) = listener.accept() {
                self.pending.push((conn, now));
            }
            // (`serve_new` puts back a connection that has not sent anything yet.)
            for (conn, since) in std::mem::take(&mut self.pending) {
                self.serve_new(conn, since);
            }
            list = std::mem::take(&mut self.supervised);
        }
        for s in &mut list {
            if s.respawn_at.is_some_and(|t| now >= t) {
                s.respawn_at = None;
                s.restarts += 1;
                self.dirty = true;
                match spawn_consumer(&s.exe, &s.args, &s.cwd, &s.log, s.restarts, &self.dir) {
                    Ok((child, pidfd)) => {
                        eprintln!(
                            "snapbus broker: restarted {} {} (pid {}, restart {})",
                            s.kind,
                            s.id,
                            child.id(),
                            s.restarts
                        );
                        s.pid = child.id();
                        s.start_time = proc_start_time(s.pid).unwrap_or(0);
                        s.child = Some(child);
                        s.pidfd = pidfd;
                        s.subscribed = false;
                        s.status = None;
                    }
                    Err(e) => {
                        s.status = Some(format!("could not be restarted: {e}"));
                        s.ended_nanos = Some(now_realtime_nanos());
                    }
                }
            }
            if !s.running() {
                continue;
            }
            if let Some((text, code)) = s.reap() {
                eprintln!(
                    "snapbus broker: {} {} (pid {}) {text}; log {}",
                    s.kind,
                    s.id,
                    s.pid,
                    s.log.display()
                );
                self.ended(s, text, code, now);
            } else if s.attach.as_ref().is_some_and(|(_, t)| now > *t) {
                s.signal(Signal::KILL);
                if let Some((conn, _)) = s.attach.take() {
                    let _ = conn.send(
                        &FromBroker::Error {
                            message: format!(
                                "the {} did not subscribe within {ATTACH_TIMEOUT:?}; killed it \
                                 (its log: {})",
                                s.kind,
                                s.log.display()
                            ),
                        },
                        &[],
                    );
                }
                // Not restarted: it never subscribed.
                s.stopping = true;
            }
        }
        // Failed first starts leave nothing.
        list.retain(|s| !s.forget);
        self.supervised = list;
        let mut k = 0;
        while k < self.detaching.len() {
            let d = &mut self.detaching[k];
            let exited = match d.target {
                Target::Supervised(id) => self
                    .supervised
                    .iter()
                    .find(|s| s.id == id)
                    .and_then(|s| s.status.clone()),
                Target::Unsupervised => d
                    .pidfd
                    .as_ref()
                    .is_none_or(has_exited)
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
                match d.target {
                    Target::Supervised(id) => {
                        if let Some(s) = self.supervised.iter().find(|s| s.id == id) {
                            s.signal(Signal::KILL);
                        }
                    }
                    Target::Unsupervised => {
                        if let Some(fd) = &d.pidfd {
                            let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
                        }
                    }
                }
                d.killed = true;
                d.deadline = now + Duration::from_secs(5);
            } else if now > d.deadline {
                let _ = d.conn.send(
                    &FromBroker::Error {
                        message: "the consumer's process did not exit".to_owned(),
                    },
                    &[],
                );
                self.detaching.swap_remove(k);
                continue;
            }
            k += 1;
        }
        self.forget_ended();
        if self.dirty {
            self.save_state();
        }
    }

    /// Keeps the newest [`keep_ended`] ended entries; older ones go with their logs.
    fn forget_ended(&mut self) {
        let mut ended: Vec<(u64, u64)> = self
            .supervised
            .iter()
            .filter(|s| s.respawn_at.is_none())
            .filter_map(|s| Some((s.ended_nanos?, s.id)))
            .collect();
        if ended.len() <= self.keep_ended {
            return;
        }
        ended.sort_unstable();
        let drop: Vec<u64> = ended[..ended.len() - self.keep_ended]
            .iter()
            .map(|&(_, id)| id)
            .collect();
        self.supervised.retain(|s| {
            let keep = !drop.contains(&s.id);
            if !keep {
                let _ = std::fs::remove_file(&s.log);
            }
            keep
        });
        self.dirty = true;
    }

    /// `ls` rows of the supervised consumers that are not connected: ended, waiting to be
    /// restarted, or re-adopted and not rejoined yet.
    pub(super) fn unconnected_supervised(&self) -> Vec<ConsumerState> {
        self.supervised
            .iter()
            .filter(|s| s.attach.is_none())
            .filter(|s| !self.consumers.iter().any(|c| c.id == s.id))
            .map(|s| {
                let mut st = s.last.clone().unwrap_or_else(|| ConsumerState {
                    id: s.id,
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
                    log: None,
                });
                st.id = s.id;
                st.supervised = true;
                st.log = Some(s.log.display().to_string());
                st.status = match &s.status {
                    Some(status) => status.clone(),
                    None => format!("{} (not connected)", s.running_text()),
                };
                st
            })
            .collect()
    }

    /// At shutdown: unless `keep`, SIGTERM to every supervised consumer (they flush and exit),
    /// SIGKILL to those still running after the grace period. Then the state is saved (with
    /// `keep`, the next broker re-adopts the consumers).
    pub(super) fn stop_supervised(&mut self, keep: bool) {
        if keep {
            for s in &self.supervised {
                if s.running() {
                    eprintln!(
                        "snapbus broker: leaving {} {} (pid {}) running",
                        s.kind, s.id, s.pid
                    );
                }
            }
            self.save_state();
            return;
        }
        for s in &mut self.supervised {
            s.stopping = true;
            if s.respawn_at.take().is_some() {
                let status = s.status.clone().unwrap_or_default();
                let status = status.split(';').next().unwrap_or("").to_owned();
                s.status = Some(format!("{status}; not restarted (bus stopped)"));
                s.ended_nanos = Some(now_realtime_nanos());
            }
            if s.running() {
                s.signal(Signal::TERM);
            }
        }
        let deadline = Instant::now() + DETACH_GRACE;
        let mut list = std::mem::take(&mut self.supervised);
        for s in &mut list {
            if !s.running() {
                continue;
            }
            let text = loop {
                if let Some((text, _)) = s.reap() {
                    break text;
                }
                if Instant::now() >= deadline {
                    s.signal(Signal::KILL);
                    if let Some(c) = &mut s.child {
                        let _ = c.wait();
                    }
                    break "killed: it did not exit within 10 s of SIGTERM".to_owned();
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let text = if s.child.is_none() && s.said_exit.is_none() {
                "stopped".to_owned()
            } else {
                text
            };
            eprintln!("snapbus broker: {} {} (pid {}) {text}", s.kind, s.id, s.pid);
            s.status = Some(format!("{text} (by `snapbus down`)"));
            s.ended_nanos = Some(now_realtime_nanos());
            s.pidfd = None;
            s.child = None;
        }
        self.supervised = list;
        self.save_state();
    }
}

/// Starts `exe args` in `cwd`, its output appended to `log`, in its own process group (a Ctrl-C
/// meant for the broker's terminal is not its), with `SNAPBUS_RESTART` set to how many times
/// it was restarted and [`SUPERVISED_ENV`] to the broker's socket.
fn spawn_consumer(
    exe: &Path,
    args: &[String],
    cwd: &str,
    log: &Path,
    restart: u32,
    dir: &BusDir,
) -> Result<(Child, Option<OwnedFd>), String> {
    use std::os::unix::process::CommandExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(|e| format!("creating {}: {e}", log.display()))?;
    if restart > 0 {
        use std::io::Write;
        let _ = writeln!(&file, "snapbus broker: restart {restart} of this consumer");
    }
    let out = file
        .try_clone()
        .map_err(|e| format!("creating {}: {e}", log.display()))?;
    let child = Command::new(exe)
        .args(args)
        .current_dir(cwd)
        .env("SNAPBUS_RESTART", restart.to_string())
        .env(SUPERVISED_ENV, dir.socket_path())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(file)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting {} {args:?}: {e}", exe.display()))?;
    let pidfd = pidfd(child.id());
    Ok((child, pidfd))
}

fn pidfd(pid: u32) -> Option<OwnedFd> {
    rustix::process::Pid::from_raw(pid as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
}

/// Whether the process of `fd` has exited (its pidfd is readable).
pub(super) fn has_exited(fd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
}

/// The start time of process `pid` (clock ticks after boot, field 22 of `/proc/PID/stat`);
/// `None` if it is not running (gone, or a zombie nobody has reaped yet).
fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything: count from the last
    // ')'; the field after it is field 3, the state.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    fields.nth(22 - 4)?.parse().ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_this_process_is_read_and_stable() {
        let t = proc_start_time(std::process::id()).expect("start time");
        assert_eq!(proc_start_time(std::process::id()), Some(t));
    }
}
