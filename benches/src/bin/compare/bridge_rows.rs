//! The cross-namespace rows (issue 41): `snapbus bridge` against Zenoh's own pub/sub, in one
//! run, between two network namespaces joined by a veth pair (root only, `ip` from
//! iproute2). For 64 B and 64 KiB: one-way latency p50/p99 of a paced stream, and throughput
//! at the receiving end. Zenoh's row is a publisher in one namespace and a subscriber in the
//! other (TCP, blocking congestion control, what the bridge uses); the bridge's row is a
//! `Publisher` on the node's bus, `snapbus bridge --send` there, `snapbus bridge --receive`
//! on the workstation's bus and a `Subscriber` on it: bus to bus, two bridges and the two
//! rings in the way. A third row, the reference, is one bus alone (a `Publisher` and a
//! `Subscriber` on the workstation's bus): what one bus hop costs in the same run. Throughput
//! runs hold the sender to a window of unacknowledged messages on every path ([`Window`]).
//! Each message carries its send time (CLOCK_REALTIME, one clock: one machine).
//! `compare --bridge` runs only these rows; it needs a `snapbus` built with
//! `--features bridge` (`--snapbus PATH`, default beside the harness).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use snapbus_bus::Level;
use snapbus_bus::lane::{LaneConfig, now_realtime_nanos};
use snapbus_bus::publisher::{EmitMeta, Publisher, PublisherConfig};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::Event;
use snapbus_schemas::Snapshot;
use zenoh::Wait;

use crate::peers::snapbus::Blob;

/// A warm-up message (sent until the receiver has seen one).
const WARM: u64 = u64::MAX;
/// The end of a run.
const END: u64 = u64::MAX - 1;
/// How long a receiver waits for more before it gives up on a run.
const IDLE: Duration = Duration::from_secs(3);

/// One side of a cross-namespace run.
#[derive(Args, Debug, Clone)]
pub(crate) struct SideArgs {
    /// `zenoh` or `bridge`.
    #[arg(long)]
    path: String,
    /// Message size in bytes (at least 16).
    #[arg(long)]
    size: usize,
    /// Latency: messages, paced; 0: throughput (as fast as possible for `secs`).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Latency: microseconds between messages.
    #[arg(long, default_value_t = 1000)]
    interval_micros: u64,
    /// Throughput: seconds of sending.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// zenoh: the endpoint (the subscriber, started first, listens; the publisher connects).
    #[arg(long, default_value = "")]
    endpoint: String,
    /// bridge: the bus's runtime directory.
    #[arg(long)]
    rt: Option<PathBuf>,
    /// The run's name (the producer's name on the bus).
    #[arg(long, default_value = "run")]
    name: String,
    /// The file the receiver creates once it has seen a message.
    #[arg(long)]
    ready: PathBuf,
    /// Throughput: at most this many messages in flight (sent, not yet acknowledged by the
    /// receiver); 0, no limit.
    #[arg(long, default_value_t = 0)]
    window: u64,
    /// Throughput with a window: the sender's datagram socket, where the receiver
    /// acknowledges what it has received (a Unix socket: the namespaces share the file
    /// system).
    #[arg(long)]
    acks: Option<PathBuf>,
}

/// What a receiver measured.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Measured {
    received: u64,
    lost: u64,
    p50_micros: f64,
    p99_micros: f64,
    msgs_per_sec: f64,
}

fn message(size: usize, index: u64) -> Vec<u8> {
    let mut m = vec![0u8; size];
    m[..8].copy_from_slice(&now_realtime_nanos().to_le_bytes());
    m[8..16].copy_from_slice(&index.to_le_bytes());
    m
}

fn bus_of(rt: &Path) -> Result<BusDir> {
    let name = BusName::new("lab").map_err(|e| anyhow!("{e}"))?;
    Ok(BusDir::locate_in(rt, &name))
}

/// Sends one message.
type Put = Box<dyn FnMut(&[u8]) -> Result<()>>;

/// The sending side: warm-up until the receiver is ready, then the run, then the end.
pub(crate) fn send(a: &SideArgs) -> Result<()> {
    let mut put: Put = if a.path == "zenoh" {
        let s = session(&a.endpoint, false)?;
        let p = s
            .declare_publisher("bench/blob")
            .congestion_control(zenoh::qos::CongestionControl::Block)
            .wait()
            .map_err(|e| anyhow!("{e}"))?;
        // The session lives as long as its publisher (dropping it closes both).
        Box::new(move |m| {
            let _ = &s;
            p.put(m.to_vec()).wait().map_err(|e| anyhow!("{e}"))
        })
    } else {
        let dir = bus_of(a.rt.as_deref().context("--rt")?)?;
        let p = Publisher::start(
            dir,
            PublisherConfig {
                name: a.name.clone(),
                lane: LaneConfig::default(),
                session_tag: None,
                perf_tag: None,
                relayed: false,
            },
        )?;
        let meta = EmitMeta {
            schema_key: p.register_schema(Blob::descriptor())?,
            schema_version: 1,
            level: Level::INFO,
            emitter: 0,
        };
        Box::new(move |m| {
            // `Blob`'s wire form: the length, then the bytes.
            let len = (m.len() as u64).to_le_bytes();
            p.emit_with(meta, 8 + m.len(), |w| {
                w.put(&len)?;
                Ok(w.put(m)?)
            })?;
            Ok(())
        })
    };
    let t0 = Instant::now();
    while !a.ready.exists() {
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("the receiver never saw a warm-up message");
        }
        put(&message(a.size, WARM))?;
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut window = Window::new(a)?;
    let start = Instant::now();
    let mut i = 0u64;
    if a.count > 0 {
        for i in 0..a.count {
            let due = start + Duration::from_micros(a.interval_micros * i);
            while Instant::now() < due {
                std::hint::spin_loop();
            }
            put(&message(a.size, i))?;
        }
    } else {
        let secs = Duration::from_secs_f64(a.secs);
        while start.elapsed() < secs {
            window.wait_for_room(i)?;
            put(&message(a.size, i))?;
            i += 1;
        }
    }
    for _ in 0..20 {
        put(&message(a.size, END))?;
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// The sender's side of the window: the receiver acknowledges the highest index it has seen
/// every quarter window; the sender waits while a window's worth is unacknowledged. Both
/// paths are measured through the same window, which stands for what Zenoh's blocking
/// congestion control does inside its own queues: a sender held back rather than one whose
/// messages are overwritten unread (the bus's producer never waits, so without it the
/// throughput run measures how much of a flood survives rather than how fast the path goes).
struct Window {
    size: u64,
    socket: Option<std::os::unix::net::UnixDatagram>,
    acked: u64,
}

impl Window {
    fn new(a: &SideArgs) -> Result<Window> {
        let socket = match (&a.acks, a.window) {
            (Some(path), 1..) => {
                let _ = std::fs::remove_file(path);
                let s = std::os::unix::net::UnixDatagram::bind(path)
                    .with_context(|| format!("bind {}", path.display()))?;
                s.set_read_timeout(Some(Duration::from_millis(100)))?;
                Some(s)
            }
            _ => None,
        };
        Ok(Window {
            size: a.window,
            socket,
            acked: 0,
        })
    }

    /// Waits until message `i` fits in the window (or 100 ms pass with no acknowledgement:
    /// a lost message never holds the run up).
    fn wait_for_room(&mut self, i: u64) -> Result<()> {
        let Some(s) = &self.socket else {
            return Ok(());
        };
        if i < self.acked + self.size {
            return Ok(());
        }
        let mut buf = [0u8; 8];
        s.set_nonblocking(false)?;
        match s.recv(&mut buf) {
            Ok(8) => self.acked = self.acked.max(u64::from_le_bytes(buf) + 1),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        // Take every acknowledgement already queued.
        s.set_nonblocking(true)?;
        while let Ok(8) = s.recv(&mut buf) {
            self.acked = self.acked.max(u64::from_le_bytes(buf) + 1);
        }
        Ok(())
    }
}

/// The receiver's side of the window.
struct Acks {
    every: u64,
    socket: Option<(std::os::unix::net::UnixDatagram, PathBuf)>,
    since: u64,
}

impl Acks {
    fn new(a: &SideArgs) -> Result<Acks> {
        let socket = match (&a.acks, a.window) {
            (Some(path), 1..) => Some((std::os::unix::net::UnixDatagram::unbound()?, path.clone())),
            _ => None,
        };
        Ok(Acks {
            every: (a.window / 4).max(1),
            socket,
            since: 0,
        })
    }

    /// Message `index` arrived.
    fn received(&mut self, index: u64) {
        let Some((s, to)) = &self.socket else {
            return;
        };
        self.since += 1;
        if self.since >= self.every {
            self.since = 0;
            // The sender may not be listening yet (the warm-up) or any more (the end).
            let _ = s.send_to(&index.to_le_bytes(), to);
        }
    }
}

/// The receiving side: prints `result {Measured}`.
pub(crate) fn receive(a: &SideArgs) -> Result<()> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(1 << 16);
    // Zenoh's callbacks hand each message over; the bus is read on this thread.
    let _keep: Option<(zenoh::Session, zenoh::pubsub::Subscriber<()>)>;
    let mut sub = None;
    if a.path == "zenoh" {
        let s = session(&a.endpoint, true)?;
        let z = s
            .declare_subscriber("bench/blob")
            .callback(move |s| {
                let _ = tx.send(s.payload().to_bytes().into_owned());
            })
            .wait()
            .map_err(|e| anyhow!("{e}"))?;
        _keep = Some((s, z));
    } else {
        _keep = None;
        let dir = bus_of(a.rt.as_deref().context("--rt")?)?;
        sub = Some(crate::peers::snapbus::subscribe(&dir)?);
        println!("subscribed");
        std::io::stdout().flush()?;
    }
    // The bridge names a remote producer `<name>@<host>`; a local one keeps its name.
    let want = format!("{}@", a.name);
    let wanted = |name: &str| name.starts_with(&want) || name == a.name;
    let mut acks = Acks::new(a)?;
    let mut next = |timeout: Duration| -> Result<Option<(u64, u64)>> {
        let stamp = |m: &[u8]| -> (u64, u64) {
            let w = |o: usize| u64::from_le_bytes(m[o..o + 8].try_into().unwrap_or([0; 8]));
            (w(0), w(8))
        };
        match &mut sub {
            None => match rx.recv_timeout(timeout) {
                Ok(m) if m.len() >= 16 => Ok(Some(stamp(&m))),
                Ok(_) | Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => bail!("zenoh went away"),
            },
            Some(s) => match s.next(timeout)? {
                Some(Event::Record(r))
                    if wanted(r.producer.name.as_ref()) && r.payload.len() >= 24 =>
                {
                    Ok(Some(stamp(&r.payload[8..])))
                }
                _ => Ok(None),
            },
        }
    };
    let mut lat = Vec::new();
    let (mut first, mut last, mut received, mut max_index) = (None, None, 0u64, 0u64);
    let mut idle = Instant::now();
    loop {
        let Some((sent, index)) = next(Duration::from_millis(100))? else {
            if idle.elapsed() > IDLE && received + u64::from(first.is_some()) > 0 {
                break;
            }
            if idle.elapsed() > Duration::from_secs(60) {
                bail!("nothing arrived");
            }
            continue;
        };
        idle = Instant::now();
        match index {
            WARM => {
                if !a.ready.exists() {
                    std::fs::write(&a.ready, b"")?;
                }
            }
            END => break,
            i => {
                let now = now_realtime_nanos();
                lat.push(now.saturating_sub(sent));
                first.get_or_insert(Instant::now());
                last = Some(Instant::now());
                received += 1;
                max_index = max_index.max(i);
                acks.received(i);
            }
        }
    }
    lat.sort_unstable();
    let q = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p) as usize)
            .map_or(f64::NAN, |&v| v as f64 / 1e3)
    };
    let span = match (first, last) {
        (Some(f), Some(l)) if l > f => (l - f).as_secs_f64(),
        _ => f64::NAN,
    };
    let sent = if a.count > 0 { a.count } else { max_index + 1 };
    let m = Measured {
        received,
        lost: sent.saturating_sub(received),
        p50_micros: q(0.5),
        p99_micros: q(0.99),
        msgs_per_sec: received as f64 / span,
    };
    println!("result {}", serde_json::to_string(&m)?);
    Ok(())
}

fn session(endpoint: &str, listen: bool) -> Result<zenoh::Session> {
    let mut c = zenoh::Config::default();
    let key = if listen {
        "listen/endpoints"
    } else {
        "connect/endpoints"
    };
    c.insert_json5(key, &format!("[\"{endpoint}\"]"))
        .map_err(|e| anyhow!("{e}"))?;
    c.insert_json5("scouting/multicast/enabled", "false")
        .map_err(|e| anyhow!("{e}"))?;
    zenoh::open(c).wait().map_err(|e| anyhow!("{e}"))
}

/// Two namespaces and their veth pair, deleted on drop.
struct Netns([String; 2]);

fn ip(args: &[&str]) -> Result<()> {
    let st = Command::new("ip")
        .args(args)
        .status()
        .context("run ip (iproute2)")?;
    if !st.success() {
        bail!("ip {args:?} failed (root is needed)");
    }
    Ok(())
}

impl Netns {
    fn new(addr: [&str; 2]) -> Result<Netns> {
        let id = std::process::id();
        let ns = Netns([format!("cmp{id}n"), format!("cmp{id}w")]);
        let (va, vb) = (format!("vc{id}n"), format!("vc{id}w"));
        for n in &ns.0 {
            ip(&["netns", "add", n])?;
        }
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        for (i, (n, v)) in ns.0.iter().zip([&va, &vb]).enumerate() {
            ip(&["link", "set", v, "netns", n])?;
            ip(&["-n", n, "addr", "add", &format!("{}/30", addr[i]), "dev", v])?;
            ip(&["-n", n, "link", "set", v, "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// A process killed on drop.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn in_ns(ns: &str, exe: &Path, args: &[String], rt: Option<&Path>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(exe).args(args);
    if let Some(rt) = rt {
        c.env("SNAPBUS_RUNTIME_DIR", rt).env("SNAPBUS_BUS", "lab");
    }
    c.stdin(Stdio::null());
    c
}

/// One measured run: receiver in the workstation's namespace, sender in the node's (or, for
/// the reference hop, in the workstation's too).
fn one(ns: &Netns, scratch: &Path, a: &SideArgs, rts: [&Path; 2]) -> Result<Measured> {
    let exe = std::env::current_exe()?;
    let args = |role: &str, rt: &Path| {
        let mut v = vec!["child".to_owned(), role.to_owned()];
        v.extend([
            "--path".into(),
            a.path.clone(),
            "--size".into(),
            a.size.to_string(),
            "--count".into(),
            a.count.to_string(),
            "--interval-micros".into(),
            a.interval_micros.to_string(),
            "--secs".into(),
            a.secs.to_string(),
            "--endpoint".into(),
            a.endpoint.clone(),
            "--rt".into(),
            rt.display().to_string(),
            "--name".into(),
            a.name.clone(),
            "--ready".into(),
            a.ready.display().to_string(),
            "--window".into(),
            a.window.to_string(),
        ]);
        if let Some(acks) = &a.acks {
            v.extend(["--acks".into(), acks.display().to_string()]);
        }
        v
    };
    let _ = std::fs::remove_file(&a.ready);
    let mut rx = in_ns(&ns.0[1], &exe, &args("bridge-receive", rts[1]), None);
    let mut rx = Kid(rx.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()?);
    let out = BufReader::new(rx.0.stdout.take().context("stdout")?);
    let (tx_lines, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if tx_lines.send(l).is_err() {
                break;
            }
        }
    });
    if a.path != "zenoh" {
        match lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l == "subscribed" => {}
            other => bail!("the receiver did not subscribe: {other:?}"),
        }
    }
    // The reference hop sends on the workstation's own bus.
    let side = usize::from(a.path == "local");
    let mut tx = in_ns(&ns.0[side], &exe, &args("bridge-send", rts[side]), None);
    let mut tx = Kid(tx.stderr(Stdio::inherit()).spawn()?);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => {
                if let Some(r) = l.strip_prefix("result ") {
                    let _ = tx.0.wait();
                    let _ = scratch;
                    return Ok(serde_json::from_str(r)?);
                }
            }
            Err(e) => bail!("no result from the receiver ({e:?})"),
        }
    }
}

/// `compare --bridge`: the rows, printed as a Markdown table.
pub(crate) fn run(snapbus: &Path, quick: bool) -> Result<()> {
    let octet = std::process::id() % 250 + 1;
    let (a, b) = (format!("10.212.{octet}.1"), format!("10.212.{octet}.2"));
    let ns = Netns::new([&a, &b])?;
    let scratch = snapbus_benches::TempDir::new("compare-bridge")?;
    let root = scratch.path().to_path_buf();
    let rts = [root.join("node"), root.join("ws")];
    use std::os::unix::fs::PermissionsExt;
    for rt in &rts {
        std::fs::create_dir_all(rt)?;
        std::fs::set_permissions(rt, std::fs::Permissions::from_mode(0o700))?;
    }
    let cli = |i: usize, args: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns.0[i]])
            .arg(snapbus)
            .args(args)
            .env("SNAPBUS_RUNTIME_DIR", &rts[i])
            .env("SNAPBUS_BUS", "lab")
            .stdin(Stdio::null());
        c
    };
    for i in 0..2 {
        let st = cli(i, &["up"]).stdout(Stdio::null()).status()?;
        if !st.success() {
            bail!("snapbus up failed");
        }
    }
    let listen = format!("tcp/{a}:7447");
    let _node = Kid(cli(
        0,
        &["bridge", "--send", "--host", "node", "--listen", &listen],
    )
    .stderr(Stdio::null())
    .spawn()?);
    let connect = format!("tcp/{a}:7447");
    let _ws = Kid(cli(1, &["bridge", "--receive", "--connect", &connect])
        .stderr(Stdio::null())
        .spawn()?);
    let secs = if quick { 0.5 } else { 2.0 };
    let count = if quick { 300 } else { 2000 };
    let mut rows = Vec::new();
    let mut n = 0;
    for size in [64usize, 64 << 10] {
        for path in ["zenoh", "bridge", "local"] {
            for latency in [true, false] {
                n += 1;
                // At most a quarter of the default 64 MiB ring in flight.
                let window = if size == 64 { 1 << 16 } else { 256 };
                let side = SideArgs {
                    path: path.into(),
                    size,
                    count: if latency { count } else { 0 },
                    interval_micros: 1000,
                    secs,
                    endpoint: format!("tcp/{b}:{}", 7500 + n),
                    rt: None,
                    name: format!("run{n}"),
                    ready: root.join(format!("ready-{n}")),
                    window: if latency { 0 } else { window },
                    acks: Some(root.join(format!("acks-{n}"))),
                };
                let m = one(&ns, &root, &side, [&rts[0], &rts[1]])
                    .with_context(|| format!("{path} {size} B"))?;
                eprintln!(
                    "bridge rows: {path} {size} B {}: {m:?}",
                    if latency { "latency" } else { "throughput" }
                );
                rows.push((size, path, latency, m));
            }
        }
    }
    for i in 0..2 {
        let _ = cli(i, &["down"]).stdout(Stdio::null()).status();
    }
    println!("{}", table(&rows));
    Ok(())
}

fn table(rows: &[(usize, &str, bool, Measured)]) -> String {
    let get = |size: usize, path: &str, lat: bool| {
        rows.iter()
            .find(|r| r.0 == size && r.1 == path && r.2 == lat)
            .map(|r| &r.3)
    };
    let mut t = String::from(
        "| size | path | latency p50 | latency p99 | throughput | lost (throughput run) |\n\
         |---|---|---|---|---|---|\n",
    );
    for size in [64usize, 64 << 10] {
        for path in ["zenoh", "bridge", "local"] {
            let (Some(l), Some(th)) = (get(size, path, true), get(size, path, false)) else {
                continue;
            };
            let label = if size == 64 { "64 B" } else { "64 KiB" };
            let what = match path {
                "zenoh" => "Zenoh pub/sub",
                "bridge" => "snapbus bridge (bus to bus)",
                _ => "reference: one bus, publisher to subscriber",
            };
            t += &format!(
                "| {label} | {what} | {:.0} µs | {:.0} µs | {:.0} msg/s ({:.1} MB/s) | {} of {} |\n",
                l.p50_micros,
                l.p99_micros,
                th.msgs_per_sec,
                th.msgs_per_sec * size as f64 / 1e6,
                th.lost,
                th.lost + th.received
            );
        }
        if let (Some(zl), Some(bl), Some(zt), Some(bt)) = (
            get(size, "zenoh", true),
            get(size, "bridge", true),
            get(size, "zenoh", false),
            get(size, "bridge", false),
        ) {
            t += &format!(
                "| | bridge / Zenoh | {:.2}x | {:.2}x | {:.2}x | |\n",
                bl.p50_micros / zl.p50_micros,
                bl.p99_micros / zl.p99_micros,
                bt.msgs_per_sec / zt.msgs_per_sec
            );
            if let Some(hop) = get(size, "local", true) {
                t += &format!(
                    "| | (bridge − Zenoh) ÷ one bus hop | {:.1} hops | | | |\n",
                    (bl.p50_micros - zl.p50_micros) / hop.p50_micros
                );
            }
        }
    }
    t
}
