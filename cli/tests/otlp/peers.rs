//! Real OTLP peers, installed by `.ci/peers/<name>` into `target/peers/` and started here on
//! free loopback ports: VictoriaMetrics (OTLP metrics, read back with its export API) and
//! rotel (an OTLP collector: logs and traces printed, metrics forwarded). A missing peer fails
//! the test with how to install it; every peer is killed and its directory removed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::bus::wait_until;
use crate::util::{WATCHDOG, percent_encode};

/// The workspace root (two levels above this crate's manifest directory's parent).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The binary of peer `name`: `$var` if set, else `target/peers/<rel>`; fails saying how to
/// install it.
fn peer_binary(name: &str, var: &str, rel: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/peers").join(rel));
    assert!(
        path.is_file(),
        "the real peer {name} is missing at {}: install it with `.ci/peers/{name}` (or point \
         ${var} at its binary); this test does not skip",
        path.display()
    );
    path
}

/// A free TCP port on 127.0.0.1 (free when this returns).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A running peer process with its own directory.
pub(crate) struct Peer {
    name: &'static str,
    child: Child,
    dir: PathBuf,
    output: Arc<Mutex<String>>,
}

impl Peer {
    fn spawn(name: &'static str, mut cmd: Command, dir: PathBuf) -> Peer {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let output = Arc::new(Mutex::new(String::new()));
        for r in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let out = Arc::clone(&output);
            std::thread::spawn(move || {
                let mut r = r;
                let mut buf = [0u8; 8192];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut o) = out.lock() {
                        o.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            });
        }
        Peer {
            name,
            child,
            dir,
            output,
        }
    }

    /// Everything it printed so far.
    pub(crate) fn output(&self) -> String {
        self.output.lock().map(|o| o.clone()).unwrap_or_default()
    }

    fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited with {status}:\n{}", self.name, self.output());
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn peer_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "peer-{name}-{}-{}",
        std::process::id(),
        free_port()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("peer dir");
    dir
}

/// VictoriaMetrics 1.112 (Debian trixie) on a free port.
pub(crate) struct Vm {
    /// Kept for its drop: the process stops with it.
    _peer: Peer,
    pub(crate) addr: SocketAddr,
}

impl Vm {
    pub(crate) fn start() -> Vm {
        Vm::start_on(free_port())
    }

    /// On `port` of 127.0.0.1.
    pub(crate) fn start_on(port: u16) -> Vm {
        let bin = peer_binary(
            "victoria-metrics",
            "SNAPBUS_PEER_VICTORIA_METRICS",
            "victoria-metrics/usr/bin/victoria-metrics",
        );
        let dir = peer_dir("vm");
        let mut cmd = Command::new(bin);
        cmd.arg(format!("-httpListenAddr=127.0.0.1:{port}"))
            .arg(format!("-storageDataPath={}", dir.join("data").display()))
            .arg("-retentionPeriod=100y")
            .arg("-search.latencyOffset=0s");
        let mut peer = Peer::spawn("victoria-metrics", cmd, dir);
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_until("VictoriaMetrics answers /health", WATCHDOG, || {
            peer.check_alive();
            http(addr, "GET", "/health", b"").is_some_and(|(s, b)| s == 200 && b.contains("OK"))
        });
        Vm { _peer: peer, addr }
    }

    /// Its OTLP metrics URL.
    pub(crate) fn otlp_url(&self) -> String {
        format!("http://{}/opentelemetry/v1/metrics", self.addr)
    }

    /// `/api/v1/export` of the series matching `selector`: one JSON object per series.
    pub(crate) fn export(&self, selector: &str) -> Vec<serde_json::Value> {
        let body = format!("match[]={}", percent_encode(selector));
        let (status, text) = http(self.addr, "POST", "/api/v1/export", body.as_bytes())
            .expect("VictoriaMetrics export");
        assert_eq!(status, 200, "export {selector}: {text}");
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("an export line"))
            .collect()
    }
}

/// rotel (PyPI) as an agent on a free port: logs and traces printed in detail, metrics
/// forwarded to `metrics_to`.
pub(crate) struct Rotel {
    pub(crate) peer: Peer,
    pub(crate) addr: SocketAddr,
}

impl Rotel {
    pub(crate) fn start(metrics_to: &str) -> Rotel {
        let bin = peer_binary(
            "rotel",
            "SNAPBUS_PEER_ROTEL",
            "rotel/venv/lib/python3.11/site-packages/rotel/rotel-agent",
        );
        let dir = peer_dir("rotel");
        let (port, grpc) = (free_port(), free_port());
        let mut cmd = Command::new(bin);
        cmd.arg("start")
            .args(["--otlp-http-endpoint", &format!("127.0.0.1:{port}")])
            .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{grpc}")])
            .args(["--pid-file", &dir.join("rotel.pid").display().to_string()])
            .args(["--exporter", "otlp", "--otlp-exporter-protocol", "http"])
            .args(["--otlp-exporter-metrics-endpoint", metrics_to])
            // Logs and traces are only printed (nothing listens on the discard port).
            .args([
                "--otlp-exporter-logs-endpoint",
                "http://127.0.0.1:9/v1/logs",
            ])
            .args([
                "--otlp-exporter-traces-endpoint",
                "http://127.0.0.1:9/v1/traces",
            ])
            .args(["--debug-log", "traces", "--debug-log", "logs"])
            .args([
                "--debug-log-verbosity",
                "detailed",
                "--batch-timeout",
                "200ms",
            ]);
        let mut peer = Peer::spawn("rotel", cmd, dir);
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_until("rotel accepts connections", WATCHDOG, || {
            peer.check_alive();
            TcpStream::connect(addr).is_ok()
        });
        Rotel { peer, addr }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// One HTTP/1.0 request (a form body for POST) → (status, body); `None` if it cannot connect.
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: test\r\nContent-Type: \
         application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .ok()?;
    s.write_all(body).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}
