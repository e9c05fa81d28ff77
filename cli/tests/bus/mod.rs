//! End-to-end tests of a real bus: `up`, `demo`, `echo`, `ls`, `filter`, `down`, with
//! processes killed on purpose. Every test has its own bus (and the test process its own
//! runtime directory); every process is under a watchdog and is killed and reaped on drop,
//! and every bus is taken down on drop. Here: the bus, the background processes and the checks
//! the tests share.

mod broker;
mod crashes;
mod damage;
mod echo;
mod filter;
mod lifecycle;
mod ls;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{Output, WATCHDOG, run_cmd, snapbus, unique_bus};

/// A bus for one test; `down` on drop.
pub(crate) struct TestBus {
    pub(crate) name: String,
}

impl TestBus {
    pub(crate) fn up() -> TestBus {
        let bus = TestBus { name: unique_bus() };
        let out = bus.run(&["up"]);
        assert!(out.status.success(), "up: {}", out.stderr);
        assert!(out.stdout.contains("is up"), "{}", out.stdout);
        bus
    }

    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        let mut c = snapbus();
        c.env("SNAPBUS_BUS", &self.name).args(args);
        c
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        run_cmd(&mut self.cmd(args))
    }

    pub(crate) fn spawn(&self, name: &str, args: &[&str]) -> Bg {
        Bg::spawn(name, self.cmd(args))
    }

    /// [`Self::spawn`] of a subscriber (`echo`), once it says it has subscribed.
    pub(crate) fn spawn_subscribed(&self, name: &str, args: &[&str]) -> Bg {
        let bg = self.spawn(name, args);
        bg.expect_stderr("subscribed");
        bg
    }

    /// The command of `snapbus demo --no-echo` of `episodes` × `steps` at `rate` steps/s (0: at
    /// once).
    pub(crate) fn demo_cmd(&self, episodes: &str, steps: &str, rate: &str) -> Command {
        self.cmd(&[
            "demo",
            "--no-echo",
            "--episodes",
            episodes,
            "--steps",
            steps,
            "--rate",
            rate,
        ])
    }

    /// The command of a demo that runs until killed, with episodes of `steps` steps, emitting
    /// `rate` steps per second.
    pub(crate) fn endless_demo(&self, steps: &str, rate: &str) -> Command {
        self.demo_cmd("1000000", steps, rate)
    }

    /// A demo that runs until killed, emitting `rate` steps per second, once it is live.
    pub(crate) fn spawn_demo(&self, rate: &str) -> Bg {
        let demo = Bg::spawn("demo", self.endless_demo("10", rate));
        let pid = demo.pid();
        wait_until("the demo is live", WATCHDOG, || {
            self.producer(pid).is_some_and(|p| p["status"] == "live")
        });
        demo
    }

    /// `snapbus demo --no-echo` of `episodes` × `steps` at `rate` steps/s (0: at once) with
    /// extra environment variables, run to its end.
    pub(crate) fn demo(&self, episodes: u32, steps: u32, rate: u32, env: &[(&str, &str)]) {
        let (e, s, r) = (episodes.to_string(), steps.to_string(), rate.to_string());
        let mut cmd = self.demo_cmd(&e, &s, &r);
        cmd.envs(env.iter().copied());
        let out = run_cmd(&mut cmd);
        assert!(out.status.success(), "demo: {}", out.stderr);
    }

    /// Kills this bus's broker with SIGKILL and waits until it is gone.
    pub(crate) fn kill9_broker(&self) {
        let pid = self.ls()["broker_pid"].as_u64().expect("broker pid") as i32;
        let pid = rustix::process::Pid::from_raw(pid).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill broker");
        wait_until("the broker is gone", WATCHDOG, || {
            !self.run(&["ls"]).status.success()
        });
    }

    pub(crate) fn ls(&self) -> Value {
        let out = self.run(&["ls", "--json"]);
        assert!(out.status.success(), "ls: {}", out.stderr);
        serde_json::from_str(out.stdout.trim()).expect("ls --json is JSON")
    }

    /// Runs `snapbus ARGS` (an `attach` or `spawn`), asserting success; what it printed (the
    /// ids or URL), trimmed.
    #[track_caller]
    pub(crate) fn attach(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", out.stderr);
        out.stdout.trim().to_owned()
    }

    /// The consumers in `ls --json`.
    pub(crate) fn consumers(&self) -> Vec<Value> {
        self.ls()["consumers"]
            .as_array()
            .expect("consumers")
            .clone()
    }

    /// The first consumer in `ls --json` that `pick` picks.
    pub(crate) fn consumer_where(&self, pick: impl Fn(&Value) -> bool) -> Option<Value> {
        self.consumers().into_iter().find(|c| pick(c))
    }

    /// The consumer with id `id` (as `attach` prints it) in `ls --json`.
    pub(crate) fn consumer_by_id(&self, id: &str) -> Option<Value> {
        self.consumer_where(|c| c["id"].as_u64().map(|n| n.to_string()).as_deref() == Some(id))
    }

    /// Kills the producer `p` with SIGKILL and waits until `ls` shows it dead.
    pub(crate) fn kill9_producer(&self, p: &mut Bg) {
        let pid = p.pid();
        p.kill9();
        wait_until("ls shows the producer dead", WATCHDOG, || {
            self.producer(pid).is_some_and(|p| p["status"] == "dead")
        });
    }

    pub(crate) fn producer(&self, pid: u32) -> Option<Value> {
        find_producer(&self.ls(), pid)
    }

    /// The producer with process id `pid` in `ls --json --history`: the history its ring holds
    /// now (a plain `ls` shows a count up to a few seconds old).
    pub(crate) fn producer_history(&self, pid: u32) -> Option<Value> {
        let out = self.run(&["ls", "--json", "--history"]);
        assert!(out.status.success(), "ls: {}", out.stderr);
        let ls = serde_json::from_str(out.stdout.trim()).expect("ls --json is JSON");
        find_producer(&ls, pid)
    }
}

/// The producer with process id `pid` in the `ls --json` output `ls`.
fn find_producer(ls: &Value, pid: u32) -> Option<Value> {
    ls["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .find(|p| p["info"]["pid"] == pid)
        .cloned()
}

impl Drop for TestBus {
    fn drop(&mut self) {
        let _ = self.run(&["down"]);
        // `down` keeps the logs and the state file.
        let _ = std::fs::remove_dir_all(crate::util::runtime_root().join(&self.name));
        let _ = std::fs::remove_dir(crate::util::runtime_root());
    }
}

/// A background `snapbus` process whose output lines are collected as they come.
pub(crate) struct Bg {
    name: String,
    child: Child,
    stdout: Receiver<String>,
    stderr: Receiver<String>,
    log: Arc<Mutex<String>>,
    started: Instant,
}

impl Bg {
    pub(crate) fn spawn(name: &str, mut cmd: Command) -> Bg {
        let mut child = crate::util::spawn_piped(&mut cmd);
        let log = Arc::new(Mutex::new(String::new()));
        let pipe = |r: Box<dyn std::io::Read + Send>, tag: &'static str| {
            let (tx, rx) = channel();
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    if let Ok(mut l) = log.lock() {
                        l.push_str(&format!("[{tag}] {line}\n"));
                    }
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            rx
        };
        let stdout = pipe(Box::new(child.stdout.take().expect("stdout")), "out");
        let stderr = pipe(Box::new(child.stderr.take().expect("stderr")), "err");
        Bg {
            name: name.to_owned(),
            child,
            stdout,
            stderr,
            log,
            started: Instant::now(),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn left(&self) -> Duration {
        WATCHDOG.saturating_sub(self.started.elapsed())
    }

    /// Waits for a stderr line containing `needle`.
    pub(crate) fn expect_stderr(&self, needle: &str) -> String {
        loop {
            match self.stderr.recv_timeout(self.left()) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!(
                    "{}: no stderr line with {needle:?} ({e:?})\n{}",
                    self.name,
                    self.log()
                ),
            }
        }
    }

    /// The next `n` stdout lines, parsed as JSON.
    pub(crate) fn json_lines(&self, n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| match self.stdout.recv_timeout(self.left()) {
                Ok(line) => serde_json::from_str(&line).expect("a JSON line"),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => panic!(
                    "{}: only {i} of {n} lines before the watchdog or exit\n{}",
                    self.name,
                    self.log()
                ),
            })
            .collect()
    }

    /// Waits for the process to exit (under the watchdog); returns its status and the rest of
    /// its stdout.
    pub(crate) fn wait(&mut self) -> (ExitStatus, Vec<String>) {
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let mut rest = Vec::new();
                while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(5)) {
                    rest.push(line);
                }
                // Until its stderr reader has seen the end too, so `log()` holds every line.
                while self.stderr.recv_timeout(Duration::from_secs(5)).is_ok() {}
                return (status, rest);
            }
            assert!(
                !self.left().is_zero(),
                "{}: still running after the watchdog\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Polls `cond` until it holds, or panics after `timeout` with `what`.
pub(crate) fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < timeout, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checks one `echo` line against the demo's documented values.
pub(crate) fn check_demo_line(line: &Value, episode: u64, step: Option<u64>) {
    let p = &line["payload"];
    assert_eq!(p["episode"], episode, "{line}");
    match step {
        Some(s) => {
            assert_eq!(line["schema"], "demo.step", "{line}");
            assert_eq!(p["step"], s, "{line}");
            let reward = ((31 * episode + 17 * s) % 11) as f64 / 10.0 - 0.5;
            assert_eq!(p["reward"].as_f64(), Some(reward), "{line}");
        }
        None => assert_eq!(line["schema"], "demo.episode_end", "{line}"),
    }
    assert_eq!(line["level"], "info", "{line}");
    assert_eq!(line["producer"]["name"], "demo", "{line}");
}

/// Checks that `lines` are the demo's records of `episodes` × `steps`, each as the demo makes
/// it, in order, numbered from 0 with nothing lost and nothing twice.
#[track_caller]
pub(crate) fn check_demo_grid(lines: &[Value], episodes: u64, steps: u64) {
    let order = demo_order(episodes, steps);
    assert_eq!(lines.len(), order.len(), "one line per record of the grid");
    for (line, (e, s)) in lines.iter().zip(order) {
        check_demo_line(line, e, s);
    }
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(
        seqs,
        (0..lines.len() as u64).collect::<Vec<_>>(),
        "nothing lost, nothing twice"
    );
}

/// The demo's events in order: (episode, Some(step)) for steps, (episode, None) for ends.
pub(crate) fn demo_order(episodes: u64, steps: u64) -> Vec<(u64, Option<u64>)> {
    (0..episodes)
        .flat_map(|e| (0..steps).map(move |s| (e, Some(s))).chain([(e, None)]))
        .collect()
}

/// The consumer with process id `pid` in `ls --json`.
fn consumer(bus: &TestBus, pid: u32) -> Option<Value> {
    bus.consumer_where(|c| c["info"]["pid"] == pid)
}

/// A lane's memfd as the broker holds it, opened read-write through `/proc` (what a stray
/// write or a bad DIMM could do to the ring).
pub(crate) fn broker_lane_file(broker: u32) -> std::fs::File {
    let fds = std::fs::read_dir(format!("/proc/{broker}/fd")).expect("broker fds");
    for e in fds.map_while(Result::ok) {
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        if target.to_string_lossy().contains("memfd:snapbus-lane") {
            return std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(e.path())
                .expect("open the lane read-write");
        }
    }
    panic!("no lane memfd in the broker");
}

fn word_at(f: &std::fs::File, off: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, off).expect("read the lane");
    u64::from_le_bytes(b)
}

pub(crate) fn set_word_at(f: &std::fs::File, off: u64, value: u64) {
    use std::os::unix::fs::FileExt;
    f.write_all_at(&value.to_le_bytes(), off)
        .expect("write the lane");
}
