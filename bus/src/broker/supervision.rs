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
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use super::{ATTACH_TIMEOUT, Broker, DETACH_GRACE, MAX_RESTARTS};
use crate::control::{
    AfterEnd, AttachRequest, Attached, Conn, ConsumerInfo, ConsumerState, ConsumerStatus, End,
    Ending, FromBroker, Listener, Run,
};
use crate::lane::now_realtime_nanos;
use crate::runtime::{BusDir, EXIT_NO_RESTART};

mod detach;
mod process;
mod state;

pub(super) use detach::Detaching;
pub use process::SUPERVISED_ENV;
pub(super) use process::has_exited;
use process::{exit_end, proc_start_time, spawn_consumer};
use state::exit_note;
pub use state::report_exit;
pub(super) use state::state_path;

/// How many ended supervised consumers (and their logs) `ls` keeps by default.
pub const DEFAULT_KEEP_ENDED: usize = 16;
/// The environment variable that overrides [`DEFAULT_KEEP_ENDED`].
pub const KEEP_ENDED_ENV: &str = "SNAPBUS_KEEP_ENDED";

/// A consumer process the broker started (`snapbus attach`) and watches.
pub(super) struct Supervised {
    /// What the state file keeps of it.
    pub(super) kept: Kept,
    /// When a failed consumer is due to be started again.
    respawn_at: Option<Instant>,
    /// A detach or the shutdown asked it to stop: never restarted.
    stopping: bool,
    /// The process, if this broker started it (`None`: re-adopted from an earlier broker).
    child: Option<Child>,
    pidfd: Option<OwnedFd>,
    /// The `attach` request waiting for the first start to subscribe, and its deadline.
    attach: Option<(Conn, Instant)>,
    /// The exit code the process said it is exiting with.
    said_exit: Option<i32>,
    /// Its first start failed: the entry goes.
    forget: bool,
}

/// What the state file keeps of a supervised consumer (the rest of [`Supervised`] lives and
/// dies with one broker).
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct Kept {
    /// Its consumer id (allocated at `attach`, kept across restarts).
    pub(super) id: u64,
    kind: String,
    exe: PathBuf,
    args: Vec<String>,
    cwd: String,
    /// Restart it when it fails, up to [`MAX_RESTARTS`] times.
    restart: bool,
    restarts: u32,
    pub(super) pid: u32,
    /// The process's start time (clock ticks after boot), against pid reuse.
    start_time: u64,
    pub(super) log: PathBuf,
    /// This run of the process has subscribed.
    subscribed: bool,
    /// How it ended, once it has (with what happens next).
    pub(super) status: Option<Ending>,
    /// When it ended for good (CLOCK_REALTIME ns; orders the ended entries).
    ended_nanos: Option<u64>,
    /// Its counters when its connection closed.
    pub(super) last: Option<ConsumerState>,
}

impl Supervised {
    /// An entry for `kept`, with no process yet (`child`, `pidfd`) and nothing pending.
    fn new(kept: Kept) -> Supervised {
        Supervised {
            kept,
            respawn_at: None,
            stopping: false,
            child: None,
            pidfd: None,
            attach: None,
            said_exit: None,
            forget: false,
        }
    }

    /// Running (or starting): not ended, not waiting to be restarted.
    pub(super) fn running(&self) -> bool {
        self.kept.status.is_none()
    }

    /// How it runs (for the `ls` status of a running supervised consumer).
    pub(super) fn run(&self) -> Run {
        Run {
            restarts: self.kept.restarts,
            readopted: self.child.is_none(),
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
                if let Some(p) = rustix::process::Pid::from_raw(self.kept.pid as i32) {
                    let _ = rustix::process::kill_process(p, sig);
                }
            }
            None => {}
        }
    }

    /// How the process ended, if it has (with its exit code if known).
    fn reap(&mut self) -> Option<(End, Option<i32>)> {
        if let Some(child) = &mut self.child {
            return match child.try_wait() {
                Ok(Some(status)) => Some((exit_end(status), status.code())),
                _ => None,
            };
        }
        let gone = self.pidfd.as_ref().is_none_or(has_exited);
        gone.then_some(match self.said_exit {
            Some(code) => (End::Exited(code), Some(code)),
            None => (End::Unsaid, None),
        })
    }

    /// How its last run ended (a consumer waiting for its restart has ended).
    fn how_it_ended(&self) -> End {
        self.kept
            .status
            .as_ref()
            .map_or(End::Ended, |e| e.how.clone())
    }

    /// Ended for good now: `how`, then `next` (returned).
    fn end(&mut self, how: End, next: AfterEnd) -> Ending {
        let ending = Ending { how, next };
        self.kept.status = Some(ending.clone());
        self.kept.ended_nanos = Some(now_realtime_nanos());
        ending
    }
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

impl Broker {
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
        self.supervised
            .iter()
            .find(|s| s.kept.id == id && s.running())
    }

    /// The id a joining consumer gets: its supervised entry's if the broker started (or
    /// re-adopted) it, else the id it had if no one else holds it, else a new one.
    pub(super) fn id_for(&mut self, pid: u32, previous: Option<u64>) -> u64 {
        if let Some(s) = self
            .supervised
            .iter()
            .find(|s| s.kept.pid == pid && s.running())
        {
            return s.kept.id;
        }
        if let Some(id) = previous {
            let taken = self.consumers.values().any(|c| c.id == id)
                || self.producers.values().any(|p| p.id == id)
                || self.supervised.iter().any(|s| s.kept.id == id);
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
            .find(|s| s.kept.id == id && s.kept.pid == pid && s.running())
        {
            s.kept.subscribed = true;
            self.dirty = true;
            if let Some((conn, _)) = s.attach.take() {
                let _ = conn.send(
                    &FromBroker::Attached(Attached {
                        id,
                        pid,
                        log: s.kept.log.display().to_string(),
                    }),
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
            .find(|s| Some(s.kept.pid) == peer && s.running())
        {
            s.said_exit = Some(exit_code);
        }
    }

    /// Starts a supervised consumer; the reply waits until it has subscribed.
    pub(super) fn attach(&mut self, conn: Conn, request: AttachRequest) {
        let AttachRequest {
            kind,
            args,
            cwd,
            restart,
        } = request;
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
        crate::say!(
            "snapbus broker: started {kind} {id} (pid {pid}): {} {}",
            exe.display(),
            args.join(" ")
        );
        let mut s = Supervised::new(Kept {
            id,
            kind,
            exe,
            args,
            cwd,
            restart,
            restarts: 0,
            pid,
            start_time: proc_start_time(pid).unwrap_or(0),
            log,
            subscribed: false,
            status: None,
            ended_nanos: None,
            last: None,
        });
        s.child = Some(child);
        s.pidfd = pidfd;
        s.attach = Some((conn, Instant::now() + ATTACH_TIMEOUT));
        self.supervised.push(s);
    }

    /// One run of supervised consumer `s` ended: restart it, or record how it ended.
    /// `code`: its exit code if it exited (rather than was killed).
    fn ended(&mut self, s: &mut Supervised, how: End, code: Option<i32>, now: Instant) {
        self.dirty = true;
        s.pidfd = None;
        s.child = None;
        s.said_exit = None;
        if let Some((conn, _)) = s.attach.take() {
            // The first start failed: the `attach` fails, and nothing is left behind.
            let log = std::fs::read_to_string(&s.kept.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let _ = conn.send(
                &FromBroker::Error {
                    message: format!(
                        "the {} {how} before it subscribed; its output:\n{}",
                        s.kept.kind,
                        tail.join("\n")
                    ),
                },
                &[],
            );
            let _ = std::fs::remove_file(&s.kept.log);
            s.kept.status = Some(Ending {
                how: End::FailedToStart,
                next: AfterEnd::Nothing,
            });
            s.forget = true;
            return;
        }
        let failed = code != Some(0);
        let next = if !failed || !s.kept.restart || s.stopping {
            AfterEnd::Nothing
        } else if code == Some(EXIT_NO_RESTART) {
            AfterEnd::Unfixable
        } else if !s.kept.subscribed {
            AfterEnd::BeforeSubscribed
        } else if s.kept.restarts >= MAX_RESTARTS {
            AfterEnd::RestartsExhausted(MAX_RESTARTS)
        } else {
            let backoff = Duration::from_secs(1 << s.kept.restarts);
            s.respawn_at = Some(now + backoff);
            s.kept.status = Some(Ending {
                how,
                next: AfterEnd::Restart {
                    restart: s.kept.restarts + 1,
                    of: MAX_RESTARTS,
                    in_secs: backoff.as_secs(),
                },
            });
            return;
        };
        s.end(how, next);
    }

    /// Restarts, reaps and times out supervised consumers; answers `detach` requests that are
    /// due; forgets the oldest ended entries. `listener`: to hear an exiting consumer's last
    /// word before deciding it was killed.
    pub(super) fn supervise(&mut self, listener: &Listener) {
        let now = Instant::now();
        self.hear_last_words(listener, now);
        let mut list = std::mem::take(&mut self.supervised);
        for s in &mut list {
            if s.respawn_at.is_some_and(|t| now >= t) {
                self.respawn(s);
            }
            if !s.running() {
                continue;
            }
            if let Some((mut how, mut code)) = s.reap() {
                if matches!(how, End::Unsaid) {
                    // It may have left its code in a note while no broker was listening.
                    if let Some(c) = exit_note(&self.dir, s.kept.pid, s.kept.start_time) {
                        (how, code) = (End::Exited(c), Some(c));
                    }
                }
                crate::say!(
                    "snapbus broker: {} {} (pid {}) {how}; log {}",
                    s.kept.kind,
                    s.kept.id,
                    s.kept.pid,
                    s.kept.log.display()
                );
                self.ended(s, how, code, now);
            } else if s.attach.as_ref().is_some_and(|(_, t)| now > *t) {
                attach_timed_out(s);
            }
        }
        // Failed first starts leave nothing.
        list.retain(|s| !s.forget);
        self.supervised = list;
        self.serve_detaching(now);
        self.forget_ended();
        if self.dirty {
            self.save_state();
        }
    }

    /// A re-adopted consumer that has exited may have said its exit code on a connection not
    /// accepted yet (it sent it before it exited): serve those first.
    fn hear_last_words(&mut self, listener: &Listener, now: Instant) {
        let exited_unheard = self
            .supervised
            .iter()
            .any(|s| s.running() && s.child.is_none() && s.pidfd.as_ref().is_some_and(has_exited));
        if !exited_unheard {
            return;
        }
        while let Ok(Some(conn)) = listener.accept() {
            self.add_pending(conn, now);
        }
        // (`serve_new` puts back a connection that has not sent anything yet.)
        for (_, (conn, since)) in std::mem::take(&mut self.pending) {
            self.serve_new(conn, since);
        }
    }

    /// Starts a failed consumer again, whose restart is due.
    fn respawn(&mut self, s: &mut Supervised) {
        s.respawn_at = None;
        s.kept.restarts += 1;
        self.dirty = true;
        match spawn_consumer(
            &s.kept.exe,
            &s.kept.args,
            &s.kept.cwd,
            &s.kept.log,
            s.kept.restarts,
            &self.dir,
        ) {
            Ok((child, pidfd)) => {
                crate::say!(
                    "snapbus broker: restarted {} {} (pid {}, restart {})",
                    s.kept.kind,
                    s.kept.id,
                    child.id(),
                    s.kept.restarts
                );
                s.kept.pid = child.id();
                s.kept.start_time = proc_start_time(s.kept.pid).unwrap_or(0);
                s.child = Some(child);
                s.pidfd = pidfd;
                s.kept.subscribed = false;
                s.kept.status = None;
            }
            Err(e) => {
                s.end(End::RestartFailed(e), AfterEnd::Nothing);
            }
        }
    }

    /// Keeps the newest [`keep_ended`] ended entries; older ones go with their logs.
    fn forget_ended(&mut self) {
        let mut ended: Vec<(u64, u64)> = self
            .supervised
            .iter()
            .filter(|s| s.respawn_at.is_none())
            .filter_map(|s| Some((s.kept.ended_nanos?, s.kept.id)))
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
            let keep = !drop.contains(&s.kept.id);
            if !keep {
                let _ = std::fs::remove_file(&s.kept.log);
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
            .filter(|s| !self.consumers.values().any(|c| c.id == s.kept.id))
            .map(|s| {
                let status = match &s.kept.status {
                    Some(ending) => ConsumerStatus::Ended(ending.clone()),
                    None => ConsumerStatus::NotConnected(s.run()),
                };
                let mut st = s.kept.last.clone().unwrap_or_else(|| ConsumerState {
                    id: s.kept.id,
                    info: ConsumerInfo {
                        pid: s.kept.pid,
                        kind: s.kept.kind.clone(),
                        subscriptions: Vec::new(),
                    },
                    delivered: 0,
                    lost: 0,
                    damaged: 0,
                    garbage: 0,
                    unknown_keys: 0,
                    lag_bytes: 0,
                    report_age_secs: 0.0,
                    refused: Vec::new(),
                    supervised: true,
                    status: status.clone(),
                    log: None,
                    board: Vec::new(),
                });
                st.id = s.kept.id;
                st.supervised = true;
                st.log = Some(s.kept.log.display().to_string());
                st.status = status;
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
                    crate::say!(
                        "snapbus broker: leaving {} {} (pid {}) running",
                        s.kept.kind,
                        s.kept.id,
                        s.kept.pid
                    );
                }
            }
            self.save_state();
            return;
        }
        for s in &mut self.supervised {
            s.stopping = true;
            if s.respawn_at.take().is_some() {
                s.end(s.how_it_ended(), AfterEnd::BusStopped);
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
            let how = loop {
                if let Some((how, _)) = s.reap() {
                    break how;
                }
                if Instant::now() >= deadline {
                    s.signal(Signal::KILL);
                    if let Some(c) = &mut s.child {
                        let _ = c.wait();
                    }
                    break End::KilledAfterTerm;
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let how = if s.child.is_none() && s.said_exit.is_none() {
                End::Stopped
            } else {
                how
            };
            crate::say!(
                "snapbus broker: {} {} (pid {}) {how}",
                s.kept.kind,
                s.kept.id,
                s.kept.pid
            );
            s.end(how, AfterEnd::ByDown);
            s.pidfd = None;
            s.child = None;
        }
        self.supervised = list;
        self.save_state();
    }
}

/// The first start of `s` did not subscribe in time: it is killed (and not restarted), and
/// the `attach` fails.
fn attach_timed_out(s: &mut Supervised) {
    s.signal(Signal::KILL);
    if let Some((conn, _)) = s.attach.take() {
        let _ = conn.send(
            &FromBroker::Error {
                message: format!(
                    "the {} did not subscribe within {ATTACH_TIMEOUT:?}; killed it (its log: {})",
                    s.kept.kind,
                    s.kept.log.display()
                ),
            },
            &[],
        );
    }
    // Not restarted: it never subscribed.
    s.stopping = true;
}
