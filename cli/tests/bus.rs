//! End-to-end tests of a real bus: `up`, `demo`, `echo`, `ls`, `filter`, `down`, with
//! processes killed on purpose. Every test has its own bus (and the test process its own
//! runtime directory); every process is under a watchdog and is killed and reaped on drop,
//! and every bus is taken down on drop.

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

#[test]
fn echo_receives_exactly_the_demo_events_in_order() {
    let bus = TestBus::up();
    let (episodes, steps) = (4u64, 5u64);
    let n = (episodes * (steps + 1)) as usize;
    // Subscribed (from the latest record) before the experiment starts.
    let echo = bus.spawn_subscribed("echo", &["echo", "--count", &n.to_string()]);
    bus.demo(4, 5, 0, &[]);
    let lines = echo.json_lines(n);
    check_demo_grid(&lines, episodes, steps);
    let mut echo = echo;
    let (status, rest) = echo.wait();
    assert!(status.success(), "{}", echo.log());
    assert!(rest.is_empty(), "echo printed more than --count: {rest:?}");
}

#[test]
fn a_late_echo_from_oldest_gets_the_history() {
    let bus = TestBus::up();
    bus.demo(3, 4, 0, &[]);
    // The demo has exited; its lane is kept and read from its oldest record.
    let out = bus.run(&["echo", "--from", "oldest", "--until-end", "demo.step"]);
    assert!(out.status.success(), "echo: {}", out.stderr);
    let lines = out.json_lines();
    let expected: Vec<_> = demo_order(3, 4)
        .into_iter()
        .filter(|(_, s)| s.is_some())
        .collect();
    assert_eq!(lines.len(), expected.len(), "{}", out.stdout);
    for (line, (e, s)) in lines.iter().zip(expected) {
        check_demo_line(line, e, s);
    }
    assert!(out.stderr.contains("ended"), "{}", out.stderr);
    // `ls` describes the schemas it saw.
    let state = bus.ls();
    let step = state["schemas"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "demo.step"))
        .expect("demo.step in ls")
        .clone();
    assert_eq!(step["version"], 1);
    assert_eq!(step["conflict"], false);
    assert!(
        step["descriptor"]
            .as_str()
            .is_some_and(|d| d.contains("observation")),
        "{step}"
    );
    // A glob nothing matches is waited for, with a warning.
    let out = bus.run(&["echo", "--until-end", "no.such.schema"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("no schema on bus") && out.stderr.contains("'no.such.schema'"),
        "{}",
        out.stderr
    );
    // A late echo from the latest record gets nothing and ends at once with --until-end.
    let out = bus.run(&["echo", "--until-end"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "");
}

#[test]
fn a_killed_producer_is_shown_dead_and_echo_ends_cleanly() {
    let bus = TestBus::up();
    let mut demo = bus.spawn_demo("200");
    let echo = bus.spawn_subscribed("echo", &["echo", "--until-end", "--from", "oldest"]);
    let first = echo.json_lines(5);
    assert_eq!(first[0]["seq"], 0);
    bus.kill9_producer(&mut demo);
    let mut echo = echo;
    let (status, _) = echo.wait();
    assert!(status.success(), "{}", echo.log());
    let log = echo.log();
    assert!(log.contains("died"), "{log}");
    assert!(log.contains("ended"), "{log}");
    // The broker lives on.
    let state = bus.ls();
    assert!(state["broker_pid"].as_u64().is_some());
}

#[test]
fn a_killed_broker_is_replaced_and_the_producer_readopted() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("200");
    let pid = demo.pid();
    // A consumer attached before the broker dies keeps reading, and rejoins the new broker.
    let echo = bus.spawn_subscribed("echo", &["echo"]);
    echo.json_lines(3);
    bus.kill9_broker();
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    // The demo kept running and rejoins the new broker with its lane (and its count).
    let mut frames = 0;
    wait_until("the demo is re-adopted", WATCHDOG, || {
        bus.producer(pid).is_some_and(|p| {
            frames = p["frames"].as_u64().unwrap_or(0);
            p["status"] == "live"
        })
    });
    wait_until("the re-adopted demo keeps emitting", WATCHDOG, || {
        bus.producer(pid)
            .is_some_and(|p| p["frames"].as_u64().unwrap_or(0) > frames)
    });
    let seqs: Vec<u64> = echo
        .json_lines(200)
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "the old echo goes on in order"
    );
    wait_until("the old echo rejoins the new broker", WATCHDOG, || {
        bus.ls()["consumers"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["info"]["pid"] == echo.pid()))
    });
    let late = bus.run(&["echo", "--count", "3"]);
    assert!(late.status.success(), "{}", late.stderr);
    assert_eq!(late.stdout.lines().count(), 3);
    drop(echo);
    drop(demo);
}

#[test]
fn two_buses_side_by_side_stay_isolated() {
    let a = TestBus::up();
    let b = TestBus::up();
    a.demo(2, 2, 0, &[]);
    assert_eq!(a.ls()["producers"].as_array().map(Vec::len), Some(1));
    assert_eq!(b.ls()["producers"].as_array().map(Vec::len), Some(0));
    let out = b.run(&["echo", "--from", "oldest", "--until-end"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "", "bus b saw bus a's events");
    let out = a.run(&["echo", "--from", "oldest", "--until-end"]);
    assert_eq!(out.stdout.lines().count(), 6, "{}", out.stderr);
}

#[test]
fn filter_changes_what_a_running_producer_emits() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("500");
    let pid = demo.pid();
    let frames = |bus: &TestBus| {
        bus.producer(pid)
            .and_then(|p| p["frames"].as_u64())
            .unwrap_or(0)
    };
    wait_until("the demo emits", WATCHDOG, || frames(&bus) > 10);
    // Everything the demo emits is INFO: `warn` stops it, within 100 ms by the spec.
    let out = bus.run(&["filter", "warn"]);
    assert!(out.status.success(), "{}", out.stderr);
    std::thread::sleep(Duration::from_millis(300));
    let before = frames(&bus);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(frames(&bus), before, "records emitted after `filter warn`");
    assert_eq!(bus.ls()["filter"], "warn");
    let out = bus.run(&["filter", "warn,demo=info"]);
    assert!(out.status.success(), "{}", out.stderr);
    wait_until("the demo emits again", WATCHDOG, || frames(&bus) > before);
    drop(demo);
}

#[test]
fn up_twice_says_so_and_down_removes_the_socket_and_keeps_the_log() {
    let bus = TestBus::up();
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("already running"), "{}", out.stdout);
    let dir = crate::util::runtime_root().join(&bus.name);
    assert!(dir.join("broker.sock").exists());
    let out = bus.run(&["down"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!dir.join("broker.sock").exists(), "down left the socket");
    assert!(!dir.join("broker.lock").exists(), "down left the lock file");
    // The broker's log stays for the user to read, and `down` says where.
    assert!(
        dir.join("broker.log").exists(),
        "down removed the broker's log"
    );
    assert!(
        out.stdout.contains(&dir.display().to_string()),
        "{}",
        out.stdout
    );
    let out = bus.run(&["down"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("no bus"), "{}", out.stderr);
}

#[test]
fn verbs_without_a_bus_fail_with_a_clear_message() {
    let name = unique_bus();
    for args in [
        &["ls"][..],
        &["echo"][..],
        &["hz"][..],
        &["down"][..],
        &["filter", "info"][..],
    ] {
        let out = run_cmd(snapbus().env("SNAPBUS_BUS", &name).args(args));
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            out.stderr.contains(&format!(
                "no bus '{name}' is running — start one with `snapbus up"
            )),
            "{args:?}: {}",
            out.stderr
        );
    }
}

#[test]
fn bad_globs_directives_and_bus_names_are_refused() {
    let bus = TestBus::up();
    for (args, needle) in [
        (&["echo", "demo/*"][..], "bad glob"),
        (&["hz", "a b"][..], "bad glob"),
        (&["filter", "info,monty=loud"][..], "unknown level"),
        (&["filter", "=debug"][..], "target before '=' is empty"),
        (&["filter", "a=b=c"][..], "more than one '='"),
        (&["ls", "--bus", "../etc"][..], "invalid bus name"),
    ] {
        let out = bus.run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn hz_reports_per_schema_rates_of_a_running_producer() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("400");
    let out = bus.run(&["hz", "--period-secs", "0.5", "--reports", "2", "demo.step"]);
    assert!(out.status.success(), "{}", out.stderr);
    // The second report covers a full period of steady emission.
    let report = out.stdout.split("\n\n").nth(1).expect("two reports");
    let row = report
        .lines()
        .find(|l| l.starts_with("demo.step"))
        .unwrap_or_else(|| panic!("no demo.step row: {}", out.stdout));
    let cols: Vec<&str> = row.split_whitespace().collect();
    let rate: f64 = cols[1].parse().expect("rate");
    let records: u64 = cols.last().expect("records").parse().expect("records");
    assert!(rate > 0.0 && records > 0, "{row}");
    // The rate is the period's records over its length (0.5 s, give or take a poll).
    assert!(
        (rate * 0.5 - records as f64).abs() <= records as f64 * 0.2 + 2.0,
        "{row}"
    );
    assert!(
        !report.contains("demo.episode_end"),
        "unsubscribed schema shown: {report}"
    );
    drop(demo);
}

/// A raw connection to the broker's socket (`SOCK_SEQPACKET`, one message per packet), for a
/// client that misbehaves: the control protocol is private to the bus.
fn raw_connect(sock: &std::path::Path) -> std::os::fd::OwnedFd {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .expect("socket");
    let addr = SocketAddrUnix::new(sock).expect("socket address");
    rustix::net::connect(&fd, &addr).expect("connect");
    fd
}

/// What the broker did to connection `fd` within `timeout`: `None`, nothing (still open,
/// nothing to read); `Some(true)`, closed it without a word; `Some(false)`, sent a message.
fn closed_within(fd: &std::os::fd::OwnedFd, timeout: Duration) -> Option<bool> {
    use rustix::event::{PollFd, PollFlags};
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    if rustix::event::poll(&mut fds, Some(&ts)).expect("poll") == 0 {
        return None;
    }
    let mut buf = [0u8; 256];
    match rustix::net::recv(fd, &mut buf, rustix::net::RecvFlags::DONTWAIT) {
        Ok((0, _)) | Err(rustix::io::Errno::CONNRESET) => Some(true),
        Ok(_) => Some(false),
        Err(e) => panic!("recv: {e}"),
    }
}

#[test]
fn the_broker_survives_garbage_and_silent_clients() {
    let bus = TestBus::up();
    let sock = crate::util::runtime_root()
        .join(&bus.name)
        .join("broker.sock");
    // A message that is not a control message: the broker drops that connection, nothing else.
    let garbage = raw_connect(&sock);
    let mut packet = vec![0xff_u8; 8];
    packet.extend_from_slice(b"not a message");
    packet.extend_from_slice(&[7u8; 32]);
    rustix::net::send(&garbage, &packet, rustix::net::SendFlags::empty()).expect("send");
    let closed = closed_within(&garbage, WATCHDOG);
    assert_eq!(closed, Some(true), "garbage: {closed:?}");
    // A client that never speaks does not hold the broker up, and is dropped after a while.
    let silent = raw_connect(&sock);
    assert!(
        bus.ls()["producers"].as_array().is_some(),
        "ls works meanwhile"
    );
    bus.demo(1, 2, 0, &[]);
    let closed = closed_within(&silent, WATCHDOG);
    assert_eq!(closed, Some(true), "silent: {closed:?}");
}

/// The resident memory of process `pid` in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn idle_connections_cost_the_broker_little_and_the_oldest_are_dropped() {
    let bus = TestBus::up();
    let broker = bus.ls()["broker_pid"].as_u64().expect("broker pid") as u32;
    let sock = crate::util::runtime_root()
        .join(&bus.name)
        .join("broker.sock");
    // Warm the broker up (a few requests of every size it serves), then measure.
    for _ in 0..5 {
        bus.ls();
    }
    let before = rss_kib(broker);
    let idle: Vec<_> = (0..500).map(|_| raw_connect(&sock)).collect();
    // A real client is served meanwhile (and, once it has been, every idle one was accepted).
    assert!(bus.ls()["producers"].as_array().is_some());
    let grown = rss_kib(broker).saturating_sub(before);
    assert!(
        grown < 8 * 1024,
        "500 idle connections grew the broker by {grown} KiB"
    );
    // At most 256 are kept: the oldest was dropped.
    let closed = closed_within(&idle[0], WATCHDOG);
    assert_eq!(closed, Some(true), "oldest: {closed:?}");
    let newest = closed_within(idle.last().expect("connections"), Duration::ZERO);
    assert_eq!(newest, None, "newest: {newest:?}");
}

/// Sends `sig` to process `pid`.
fn signal(pid: u32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    rustix::process::kill_process(pid, sig).expect("kill");
}

/// The consumer with process id `pid` in `ls --json`.
fn consumer(bus: &TestBus, pid: u32) -> Option<Value> {
    bus.consumer_where(|c| c["info"]["pid"] == pid)
}

/// A SIGSTOPped consumer does not report; `ls` shows it stale, and works out from its last
/// cursor and the ring what it has lost and how far behind it is while a producer laps it.
/// (Regression: it showed `running`, lost 0, lag 0.)
#[test]
fn a_stopped_consumer_is_shown_stale_with_its_loss_and_lag() {
    let bus = TestBus::up();
    let mut cmd = bus.endless_demo("10", "5000");
    cmd.env("SNAPBUS_LANE_BYTES", "65536");
    let demo = Bg::spawn("demo", cmd);
    let demo_pid = demo.pid();
    wait_until("the demo is live", WATCHDOG, || {
        bus.producer(demo_pid)
            .is_some_and(|p| p["status"] == "live")
    });
    let echo = bus.spawn("echo", &["echo", "--from", "latest"]);
    let pid = echo.pid();
    echo.json_lines(10);
    wait_until("the echo reports", WATCHDOG, || {
        consumer(&bus, pid).is_some_and(|c| c["delivered"].as_u64() > Some(0))
    });
    signal(pid, rustix::process::Signal::STOP);
    let mut seen = Value::Null;
    wait_until(
        "ls shows the stopped echo stale, lapped and losing",
        WATCHDOG,
        || {
            seen = consumer(&bus, pid).expect("the echo in ls");
            seen["status"]
                .as_str()
                .is_some_and(|s| s.starts_with("stale (no report for "))
                && seen["lost"].as_u64() > Some(0)
                && seen["lag_bytes"].as_u64() > Some(65536)
        },
    );
    assert!(seen["report_age_secs"].as_f64() > Some(5.0), "{seen}");
    signal(pid, rustix::process::Signal::CONT);
    wait_until("the echo reports again, with its loss", WATCHDOG, || {
        consumer(&bus, pid).is_some_and(|c| {
            c["status"] == "running" && c["lost"].as_u64() > Some(0) && c["damaged"] == 0
        })
    });
    drop(echo);
    drop(demo);
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

/// Ten corrupted commit words in a ring of old records are read past at once (not a stall of
/// seconds per spot), the records they held counted as damaged, not lost, and shown in `ls`;
/// a lane whose header is corrupt is refused loudly (the consumer's stderr and `ls`), not
/// silently left out. (Regression: 10 spots stalled a new reader 42 s, reported as overwrite
/// loss, and a corrupt header made new consumers say "(0 producers)".)
#[test]
fn damaged_frames_are_skipped_fast_and_counted_as_damage() {
    let bus = TestBus::up();
    bus.demo(20, 49, 0, &[]);
    let broker = bus.ls()["broker_pid"].as_u64().expect("broker pid") as u32;
    let lane = broker_lane_file(broker);
    // Header words: capacity (2), data offset (7), claim tail (16).
    let (cap, data_off, tail) = (word_at(&lane, 16), word_at(&lane, 56), word_at(&lane, 128));
    assert!(tail < cap, "the ring wrapped");
    let mut records = Vec::new();
    let mut pos = 0;
    while pos < tail {
        let len_meta = word_at(&lane, data_off + pos + 8);
        if (len_meta >> 32) as u8 == 1 {
            records.push(pos);
        }
        pos += ((len_meta as u32 as u64) + 7) & !7;
    }
    assert_eq!(records.len(), 1000);
    let last_t = word_at(&lane, data_off + records[999] + 32);
    let spots: Vec<u64> = (0..10).map(|i| records[50 + i * 97]).collect();
    for &at in &spots {
        set_word_at(&lane, data_off + at, 0x0bad_0bad_0bad_0bad);
    }
    // The records must be older than a reader's stall timeout (5 s) for their age to prove
    // that no live writer is still writing them: let them age (time is the condition here).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let age = Duration::from_nanos(now.saturating_sub(last_t));
    std::thread::sleep(Duration::from_millis(5_500).saturating_sub(age));
    let t0 = Instant::now();
    let echo = bus.spawn("echo", &["echo", "--from", "oldest"]);
    let pid = echo.pid();
    let first = echo.json_lines(1);
    let t1 = Instant::now();
    let rest = echo.json_lines(989);
    let (all, spread) = (t0.elapsed(), t1.elapsed());
    assert_eq!(first[0]["seq"], 0);
    assert!(
        spread < Duration::from_secs(1) && all < Duration::from_secs(3),
        "10 damaged spots took {spread:?} to read past ({all:?} in all)"
    );
    let seqs: Vec<u64> = first
        .iter()
        .chain(&rest)
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    let damaged: Vec<u64> = (0..10).map(|i| 50 + i * 97).collect();
    let expected: Vec<u64> = (0..1000).filter(|s| !damaged.contains(s)).collect();
    assert_eq!(seqs, expected);
    let mut seen = Value::Null;
    wait_until("ls shows the damage", WATCHDOG, || {
        seen = consumer(&bus, pid).expect("the echo in ls");
        seen["delivered"] == 990
    });
    assert_eq!(
        (&seen["damaged"], &seen["lost"], &seen["garbage"]),
        (&Value::from(10), &Value::from(0), &Value::from(10)),
        "{seen}"
    );
    let text = bus.run(&["ls"]).stdout;
    assert!(
        text.contains("10 (10 spots)"),
        "the text ls shows the damage: {text}"
    );
    // A corrupt header: the lane is refused, and said so.
    set_word_at(&lane, 0, 0x0bad_0bad_0bad_0bad);
    let late = bus.spawn("late echo", &["echo", "--from", "oldest"]);
    let line = late.expect_stderr("not reading producer 'demo'");
    assert!(line.contains("refused"), "{line}");
    wait_until("ls shows the refused lane", WATCHDOG, || {
        consumer(&bus, late.pid()).is_some_and(|c| {
            c["refused"][0]
                .as_str()
                .is_some_and(|r| r.contains("'demo'") && r.contains("magic"))
        })
    });
    bus.run(&["ls"])
        .assert_stdout_has("refuses producer 'demo'");
}

/// A producer's rate and its schemas' rates come from the same ring timestamps, so they agree;
/// a producer that closed its lane writes nothing, so its rate and its schemas' are 0.
/// (Regression: a closed producer's schema still showed ~2000/s, and a live producer 0.0
/// while its schema showed 1255/s.)
#[test]
fn producer_and_schema_rates_agree_and_are_zero_once_closed() {
    let bus = TestBus::up();
    let schema_rates = |ls: &Value, id: u64| -> f64 {
        ls["schemas"]
            .as_array()
            .expect("schemas")
            .iter()
            .filter(|s| {
                s["producers"]
                    .as_array()
                    .is_some_and(|p| p.contains(&id.into()))
            })
            .map(|s| s["rate_hz"].as_f64().expect("rate"))
            .sum()
    };
    let demo = bus.spawn_demo("1000");
    let pid = demo.pid();
    wait_until("the producer's rate matches its schemas'", WATCHDOG, || {
        let ls = bus.ls();
        let Some(p) = ls["producers"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["info"]["pid"] == pid))
        else {
            return false;
        };
        let rate = p["rate_hz"].as_f64().expect("rate");
        let id = p["id"].as_u64().expect("id");
        rate > 500.0 && (rate - schema_rates(&ls, id)).abs() <= rate * 0.15
    });
    drop(demo);
    bus.demo(1, 400, 1000, &[]);
    let ls = bus.ls();
    let closed = ls["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .find(|p| p["status"] == "closed")
        .expect("a closed producer");
    let id = closed["id"].as_u64().expect("id");
    assert_eq!(closed["rate_hz"], 0.0, "{closed}");
    assert_eq!(schema_rates(&ls, id), 0.0, "{ls}");
}

/// The bus filter is in force in producers started after it was set, in place of their own
/// `SNAPBUS_FILTER`, and `ls` says so (the bus filter, each producer's filter in force and its
/// own); `filter --reset` gives them back their own; an empty directive is refused with a
/// pointer to `--reset`. (Regression: the override was invisible, there was no way back, and
/// `filter ''` reset silently.)
#[test]
fn the_bus_filter_overrides_producers_own_visibly_until_reset() {
    let bus = TestBus::up();
    let out = bus.run(&["filter", "info"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("--reset"), "{}", out.stdout);
    // Its own filter would silence the demo (it emits at INFO).
    let mut cmd = bus.endless_demo("10", "500");
    cmd.env("SNAPBUS_FILTER", "warn");
    let demo = Bg::spawn("demo", cmd);
    let pid = demo.pid();
    let frames = |bus: &TestBus| {
        bus.producer(pid)
            .and_then(|p| p["frames"].as_u64())
            .unwrap_or(0)
    };
    wait_until(
        "ls shows the bus filter in force in the demo",
        WATCHDOG,
        || {
            bus.producer(pid)
                .is_some_and(|p| p["filter"] == "info" && p["own_filter"] == "warn")
        },
    );
    assert_eq!(bus.ls()["filter"], "info");
    wait_until("the demo emits under the bus filter", WATCHDOG, || {
        frames(&bus) > 10
    });
    let text = bus.run(&["ls"]).stdout;
    assert!(text.contains("bus filter 'info'"), "{text}");
    // The bus filter outlives a broker crash: the next broker has it and tells the producers.
    bus.kill9_broker();
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        bus.ls()["filter"],
        "info",
        "the restarted broker kept the bus filter"
    );
    wait_until(
        "the rejoined demo is still under the bus filter",
        WATCHDOG,
        || {
            bus.producer(pid)
                .is_some_and(|p| p["status"] == "live" && p["filter"] == "info")
        },
    );
    let out = bus.run(&["filter", "--reset"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("removed"), "{}", out.stdout);
    wait_until("the demo is back on its own filter", WATCHDOG, || {
        bus.producer(pid).is_some_and(|p| p["filter"] == "warn")
    });
    assert_eq!(bus.ls()["filter"], "");
    // It reported `warn` after applying it: nothing more is emitted (a record that passed
    // the old filter a moment before may still be committing: let it land first).
    std::thread::sleep(Duration::from_millis(100));
    let before = frames(&bus);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(frames(&bus), before, "records emitted after the reset");
    for args in [&["filter", ""][..], &["filter", " "][..]] {
        let out = bus.run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            out.stderr.contains("snapbus filter --reset"),
            "{}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
    assert_eq!(bus.ls()["filter"], "");
    drop(demo);
}

/// `ls` sizes its columns to their cells: with `aggregator-1of3` among short kinds, every
/// consumer row still has its PID ending and its STATUS starting under the header's.
/// (Regression: the long kind pushed the rest of its row right.)
#[test]
fn ls_columns_line_up_with_long_kinds() {
    let bus = TestBus::up();
    let out = bus.run(&["spawn", "aggregator", "-n", "3", "--group-by", "step"]);
    assert!(out.status.success(), "{}", out.stderr);
    let echo = bus.spawn("echo", &["echo"]);
    wait_until("four consumers", WATCHDOG, || {
        bus.ls()["consumers"].as_array().map(Vec::len) == Some(4)
    });
    let text = bus.run(&["ls"]).stdout;
    let section = text
        .split("CONSUMERS\n")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .expect("a CONSUMERS section");
    let mut lines = section.lines();
    let header = lines.next().expect("header");
    let pid_end = header.find("PID").expect("PID") + 3;
    let status_at = header.find("STATUS").expect("STATUS");
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(text.contains("aggregator-1of3"), "{text}");
    for row in rows {
        let b = row.as_bytes();
        assert!(
            b[pid_end - 1].is_ascii_digit() && b[pid_end] == b' ',
            "PID not under its header:\n{header}\n{row}"
        );
        assert!(
            b[status_at - 1] == b' ' && b[status_at] != b' ',
            "STATUS not under its header:\n{header}\n{row}"
        );
    }
    drop(echo);
}

/// The client of this test's bus (what `ls` and monitors use).
fn client(bus: &TestBus) -> snapbus_bus::client::BusClient {
    use snapbus_bus::runtime::{BusDir, BusName};
    let name = BusName::new(&bus.name).expect("bus name");
    let dir = BusDir::locate_in(&crate::util::runtime_root(), &name);
    snapbus_bus::client::BusClient::connect(&dir).expect("connect")
}

/// A producer's RECORDS are its lane's commit counter, and its rate the counter's change over
/// the last seconds: a demo of 3 × 40 steps wrote exactly 123 records (steps and episode
/// ends), and one emitting 500 steps/s (550 records/s with its episode ends) is shown at
/// that rate.
#[test]
fn ls_counts_records_and_rates_from_the_lane_counters() {
    let bus = TestBus::up();
    bus.demo(3, 40, 0, &[]);
    let ls = bus.ls();
    let done = &ls["producers"].as_array().expect("producers")[0];
    assert_eq!(done["status"], "closed", "{done}");
    assert_eq!(done["frames"], 3 * 41, "{done}");
    assert_eq!(done["rate_hz"], 0.0, "{done}");
    let demo = bus.spawn_demo("500");
    let pid = demo.pid();
    wait_until("the demo's rate is 550 records/s", WATCHDOG, || {
        let p = bus.producer(pid).expect("the demo");
        let rate = p["rate_hz"].as_f64().expect("rate");
        (rate - 550.0).abs() <= 550.0 * 0.1
    });
}

/// The ring census (a read of every record header of every ring, on the broker's thread)
/// runs for `ls --history`, at most every few seconds for a plain `ls`, and never for a poll of
/// counters (the Prometheus exporter's health thread): polling `ls` is cheap for the broker.
#[test]
fn only_ls_history_and_stale_rings_make_the_broker_run_a_census() {
    use snapbus_bus::client::Census;
    let bus = TestBus::up();
    bus.demo(2, 50, 0, &[]);
    let _demo = bus.spawn_demo("200");
    let runs = |v: &Value| v["census_runs"].as_u64().expect("census_runs");
    let ls = |args: &[&str]| -> Value {
        let out = bus.run(args);
        assert!(out.status.success(), "{args:?}: {}", out.stderr);
        serde_json::from_str(out.stdout.trim()).expect("ls --json is JSON")
    };
    // A fresh census of both rings, which `ls` shows with its age.
    let t0 = Instant::now();
    let fresh = ls(&["ls", "--json", "--history"]);
    let producers = fresh["producers"].as_array().expect("producers");
    assert_eq!(producers.len(), 2, "{fresh}");
    for p in producers {
        assert!(
            p["census_age_secs"].as_f64().is_some_and(|a| a < 1.0),
            "{p}"
        );
        assert!(p["history_records"].as_u64().is_some_and(|n| n > 0), "{p}");
    }
    let after_fresh = runs(&fresh);
    assert!(after_fresh >= 2, "{fresh}");
    let again = ls(&["ls", "--json", "--history"]);
    assert_eq!(runs(&again), after_fresh + 2, "every ring, every time");
    // A plain `ls` soon after uses those censuses.
    let plain = ls(&["ls", "--json"]);
    if t0.elapsed() < Duration::from_secs(4) {
        assert_eq!(runs(&plain), runs(&again), "{plain}");
    }
    let demo_step = plain["schemas"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "demo.step"))
        .expect("demo.step")
        .clone();
    assert!(
        demo_step["in_rings"].as_u64().is_some_and(|n| n > 100),
        "{demo_step}"
    );
    // A poll of counters never runs one, however often, and its rates are current.
    let client = client(&bus);
    let before = runs(&plain);
    for _ in 0..20 {
        let s = client.state_with(Census::Skip).expect("state");
        assert_eq!(s.census_runs, before);
        assert_eq!(s.producers.len(), 2);
    }
    wait_until(
        "the live demo's rate shows without a census",
        WATCHDOG,
        || {
            let s = client.state_with(Census::Skip).expect("state");
            assert_eq!(s.census_runs, before);
            s.producers.iter().any(|p| p.rate_hz > 100.0)
        },
    );
}
