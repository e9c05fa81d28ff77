//! Child processes for the multi-process tests: the test binary re-executes itself
//! (`--exact multiprocess::child_role`) with [`ROLE_ENV`] naming the role to play. Children talk
//! to the test over pipes: commands on stdin, `@mp <word> key=value…` lines on stdout.
//!
//! Cleanup and watchdog:
//! - every wait takes a deadline and panics past it (with the children's output);
//! - [`Proc`] kills (SIGKILL) and reaps its child on drop, so a failing test leaks nothing;
//! - children ask for SIGKILL when the test thread that spawned them goes away
//!   (`PR_SET_PDEATHSIG`), so even an aborted test binary leaves no process behind;
//! - [`Watchdog`] aborts the whole test binary if a test overruns its budget by 30 s (a hang
//!   the deadlines did not catch must fail CI, not stall it).
//!
//! Segments need no cleanup: memfds die with their last fd and mapping.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use snapbus_bus::doorbell::DoorbellPage;
use snapbus_bus::lane::ShmLane;

/// Names the role a re-executed test binary plays.
pub(super) const ROLE_ENV: &str = "SNAPBUS_MP_ROLE";
/// The pid of the test process that spawned a child.
pub(super) const PARENT_ENV: &str = "SNAPBUS_MP_PARENT";
/// The test a child runs (the entry point that dispatches on [`ROLE_ENV`]).
const ENTRY: &str = "multiprocess::child_role";
/// Prefix of the protocol lines a child prints on stdout.
pub(super) const PREFIX: &str = "@mp ";

/// A time budget shared by every wait of one test.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline(pub(super) Instant);

impl Deadline {
    pub(super) fn after(budget: Duration) -> Deadline {
        Deadline(Instant::now() + budget)
    }

    pub(super) fn left(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    pub(super) fn passed(self) -> bool {
        Instant::now() >= self.0
    }

    /// Polls `cond` (with a short backoff) until it holds; panics with `what` past the deadline.
    pub(super) fn wait_for(self, what: &str, mut cond: impl FnMut() -> bool) {
        let mut nap = Duration::from_micros(50);
        while !cond() {
            assert!(!self.passed(), "deadline passed waiting for {what}");
            thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }
}

/// Last-resort watchdog: aborts the test binary if the test is still running `budget + 30 s`
/// after it started. Disarmed on drop.
pub(super) struct Watchdog {
    _disarm: mpsc::Sender<()>,
    pub(super) deadline: Deadline,
}

impl Watchdog {
    pub(super) fn new(test: &'static str, budget: Duration) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        let hard = budget + Duration::from_secs(30);
        thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(hard) {
                eprintln!(
                    "WATCHDOG: {test} still running {hard:?} after it started: aborting the test \
                     binary (its children die with it)"
                );
                std::process::abort();
            }
        });
        Watchdog {
            _disarm: tx,
            deadline: Deadline::after(budget),
        }
    }
}

/// A `key=value` protocol line.
#[derive(Debug, Clone)]
pub(super) struct Msg {
    pub(super) word: String,
    pub(super) kv: HashMap<String, String>,
    pub(super) line: String,
}

impl Msg {
    fn parse(line: &str) -> Msg {
        let mut it = line.split_whitespace();
        let word = it.next().unwrap_or_default().to_owned();
        let kv = it
            .filter_map(|t| t.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Msg {
            word,
            kv,
            line: line.to_owned(),
        }
    }

    /// Field `key` as a number; panics (with the line) if missing or not a number.
    pub(super) fn num(&self, key: &str) -> u64 {
        self.kv
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no numeric `{key}` in `{}`", self.line))
    }

    pub(super) fn str(&self, key: &str) -> &str {
        self.kv
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no `{key}` in `{}`", self.line))
    }
}

/// A child process playing a role. Killed and reaped on drop.
pub(super) struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    log: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
}

/// Spawns the test binary as a child playing `role`, with `env` added to its environment.
pub(super) fn spawn(name: &str, role: &str, env: &[(&str, String)]) -> Proc {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        ENTRY,
        "--nocapture",
        "--test-threads=1",
        "--quiet",
    ])
    .env(ROLE_ENV, role)
    .env(PARENT_ENV, std::process::id().to_string())
    .env_remove("SNAPBUS_CRASH_AT")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    {
        let (log, name) = (Arc::clone(&log), name.to_owned());
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut l) = log.lock() {
                    l.push_str(&format!("[{name}] {line}\n"));
                }
                if let Some(msg) = line.strip_prefix(PREFIX) {
                    let _ = tx.send(msg.to_owned());
                }
            }
        });
    }
    {
        let (log, name) = (Arc::clone(&log), name.to_owned());
        thread::spawn(move || {
            let mut buf = Vec::new();
            let mut stderr = stderr;
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=i).collect();
                    if let Ok(mut l) = log.lock() {
                        l.push_str(&format!(
                            "[{name} stderr] {}",
                            String::from_utf8_lossy(&line)
                        ));
                    }
                }
            }
        });
    }
    let stdin = child.stdin.take();
    Proc {
        name: name.to_owned(),
        child,
        stdin,
        lines: rx,
        log,
        status: None,
    }
}

impl Proc {
    pub(super) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Everything the child printed so far.
    pub(super) fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Sends one command line to the child's stdin.
    pub(super) fn send(&mut self, line: &str) {
        let name = &self.name;
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{name}: write `{line}` to stdin: {e}"));
    }

    /// The next protocol line whose first word is `word` (other lines are skipped; they stay
    /// in the log).
    pub(super) fn expect(&mut self, word: &str, deadline: Deadline) -> Msg {
        loop {
            match self.lines.recv_timeout(deadline.left()) {
                Ok(line) => {
                    let msg = Msg::parse(&line);
                    if msg.word == word {
                        return msg;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no `{word}` line before the deadline\n{}",
                    self.name,
                    self.log()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait(Deadline::after(Duration::from_secs(5)));
                    panic!(
                        "{}: exited ({status}) without a `{word}` line\n{}",
                        self.name,
                        self.log()
                    )
                }
            }
        }
    }

    /// A protocol line `word` if one already arrived (non-blocking).
    pub(super) fn try_expect(&mut self, word: &str) -> Option<Msg> {
        while let Ok(line) = self.lines.try_recv() {
            let msg = Msg::parse(&line);
            if msg.word == word {
                return Some(msg);
            }
        }
        None
    }

    /// Sends a signal, unless the child was already reaped (its pid cannot have been reused
    /// before that: an unreaped child stays a zombie).
    pub(super) fn signal(&mut self, sig: Signal) {
        if self.status.is_none() {
            let pid = Pid::from_raw(self.pid()).expect("child pid");
            rustix::process::kill_process(pid, sig)
                .unwrap_or_else(|e| panic!("{}: kill({sig:?}): {e}", self.name));
        }
    }

    /// Its exit status if it has exited (reaps it).
    pub(super) fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("waitpid");
        }
        self.status
    }

    /// Waits for it to exit (polling `waitpid`), panicking past the deadline.
    pub(super) fn wait(&mut self, deadline: Deadline) -> ExitStatus {
        let name = self.name.clone();
        deadline.wait_for(&format!("{name} to exit"), || self.try_status().is_some());
        self.status.expect("reaped")
    }

    /// Waits for it to exit and asserts it succeeded.
    pub(super) fn wait_success(&mut self, deadline: Deadline) {
        self.stdin = None;
        let status = self.wait(deadline);
        assert!(
            status.success(),
            "{} failed: {status}\n{}",
            self.name,
            self.log()
        );
    }

    /// Its scheduler state from `/proc/<pid>/stat` (`R`, `S`, `T`, `Z`, …).
    pub(super) fn sched_state(&self) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        stat.rsplit_once(')')?.1.trim_start().chars().next()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stdin = None;
        if self.status.is_none() {
            self.signal(Signal::KILL);
            self.status = self.child.wait().ok();
        }
    }
}

/// `/proc/<pid>/fd/<fd>`: how another process of the same user opens a memfd.
pub(super) fn proc_fd_path(pid: i32, fd: i32) -> String {
    format!("/proc/{pid}/fd/{fd}")
}

/// Maps a lane read-only through `/proc/<pid>/fd/<fd>` (what a consumer does).
pub(super) fn open_lane(path: &str) -> ShmLane {
    let file = File::open(path).unwrap_or_else(|e| panic!("open {path}: {e}"));
    ShmLane::open(OwnedFd::from(file)).unwrap_or_else(|e| panic!("ShmLane::open {path}: {e}"))
}

/// Maps a doorbell page read-write through its `/proc` path.
pub(super) fn open_bells(path: &str) -> DoorbellPage {
    let file = File::options()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    DoorbellPage::open(OwnedFd::from(file)).unwrap_or_else(|e| panic!("DoorbellPage::open: {e}"))
}

/// Reads doorbell word `i` of a page through its fd (`pread`, no mapping needed).
pub(super) fn bell_word(page: &DoorbellPage, i: usize) -> u32 {
    let file = File::from(page.fd().try_clone_to_owned().expect("dup"));
    let mut b = [0u8; 4];
    file.read_exact_at(&mut b, (i * 128) as u64)
        .expect("pread doorbell");
    u32::from_ne_bytes(b)
}
