//! Running the real binary with a watchdog.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_consumers::recording::RecordingWriter;
use snapbus_consumers::{Producer, RecordHeader};
use snapbus_schemas::SchemaDescriptor;

/// How long any single `snapbus` invocation in these tests may take before it is killed.
pub(crate) const WATCHDOG: Duration = Duration::from_secs(60);

/// A runtime directory for this test process (under cargo's per-target tmp dir), so tests
/// never touch a user's real buses and run in parallel without meeting.
pub(crate) fn runtime_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rt-{}", std::process::id()))
}

static NEXT_BUS: AtomicU64 = AtomicU64::new(0);

/// A bus name no other test of this process uses.
pub(crate) fn unique_bus() -> String {
    format!("t{}", NEXT_BUS.fetch_add(1, Ordering::Relaxed))
}

/// `snapbus` with the test runtime directory and, unless the caller passes `--bus`, a bus of
/// its own (so a `demo` that starts and stops a bus meets no other test).
pub(crate) fn snapbus() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snapbus"));
    c.env("SNAPBUS_RUNTIME_DIR", runtime_root())
        .env("SNAPBUS_BUS", unique_bus())
        .env_remove("SNAPBUS_FILTER");
    c
}

pub(crate) struct Output {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Output {
    /// Asserts that stderr contains `needle` (and shows stderr if not).
    #[track_caller]
    pub(crate) fn assert_stderr_has(&self, needle: &str) {
        assert!(self.stderr.contains(needle), "{}", self.stderr);
    }

    /// Asserts that stdout contains `needle` (and shows stdout if not).
    #[track_caller]
    pub(crate) fn assert_stdout_has(&self, needle: &str) {
        assert!(self.stdout.contains(needle), "{}", self.stdout);
    }

    /// Stdout as JSON lines (`echo`, `replay --print`); panics at a line that is not JSON.
    #[track_caller]
    pub(crate) fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    }
}

/// Waits for `child`, killing it if the watchdog expires (then panics: a hung CLI is a bug).
pub(crate) fn wait_with_watchdog(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("snapbus did not exit within {WATCHDOG:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `snapbus ARGS`, capturing output, under the watchdog.
pub(crate) fn run(args: &[&str]) -> Output {
    run_cmd(snapbus().args(args))
}

/// Starts a prepared `snapbus` command with no stdin and its stdout and stderr piped.
pub(crate) fn spawn_piped(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn snapbus")
}

/// Sends SIGKILL to process `pid` (with kill(1)), asserting that it was sent.
#[track_caller]
pub(crate) fn kill9(pid: u64) {
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -9 {pid}");
}

/// Runs a prepared `snapbus` command, capturing output, under the watchdog.
pub(crate) fn run_cmd(cmd: &mut Command) -> Output {
    let mut child = spawn_piped(cmd);
    let mut stdout_pipe = child.stdout.take().expect("stdout");
    let mut stderr_pipe = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout_pipe.read_to_string(&mut s).expect("read stdout");
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr_pipe.read_to_string(&mut s).expect("read stderr");
        s
    });
    let status = wait_with_watchdog(&mut child);
    // Buses remove their own directories; the root goes once the last one is gone.
    let _ = std::fs::remove_dir(runtime_root());
    Output {
        status,
        stdout: out_reader.join().expect("stdout thread"),
        stderr: err_reader.join().expect("stderr thread"),
    }
}

/// `GET target` (a path and query) from the HTTP server at `addr`: status and body.
pub(crate) fn http_get(addr: &str, target: &str) -> (u16, String) {
    http_get_with(addr, target, "")
}

/// [`http_get`] with extra header lines (each ending in `\r\n`).
pub(crate) fn http_get_with(addr: &str, target: &str, headers: &str) -> (u16, String) {
    let mut s =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let request = format!("GET {target} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n");
    std::io::Write::write_all(&mut s, request.as_bytes()).expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    (status.expect("status"), body.to_owned())
}

/// Percent-encodes a query value.
pub(crate) fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A producer as a recording names it (process `pid`, lane `lane_id`, started at 1 ns).
pub(crate) fn producer_info(pid: u32, name: &str, lane_id: u64) -> ProducerInfo {
    ProducerInfo {
        pid,
        name: name.into(),
        cmdline: vec![name.into()],
        session_tag: None,
        perf_tag: None,
        lane_id,
        started_nanos: 1,
        relayed: false,
    }
}

/// Writes record `seq` of `producer` (producer id 1; schema key and version 1) stamped
/// `t_nanos`.
pub(crate) fn write_record(
    w: &mut RecordingWriter,
    producer: &ProducerInfo,
    desc: &Arc<SchemaDescriptor>,
    (seq, t_nanos): (u64, u64),
    payload: &[u8],
) {
    let header = RecordHeader {
        payload_len: payload.len(),
        seq,
        t_nanos,
        level: Level::INFO,
        emitter_id: 0,
        schema_key: 1,
        schema_version: 1,
    };
    let producer = Producer::from(producer);
    w.write(1, producer, desc, None, &header, payload)
        .expect("write");
}
