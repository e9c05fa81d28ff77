//! The live plotter's CPU use while it follows 10 series at 10 kHz and a page watches.
//!
//! Setup: an in-process broker (a thread of this process) on a bus in a temporary directory;
//! the plotter in a **child process** (this binary re-executed with `SNAPBUS_BENCH_PLOTTER`
//! set: `Plotter` + `serve` on a free port + the consumer run loop, as `snapbus plot` runs
//! them); in this process a producer thread emitting `Ten` (10 `f64` fields = 10 series) at
//! 10,000 records/s (paced in 1 ms batches of 10), and a client reading the page's stream
//! (`/api/stream?ids=0..9&x=time&span=30&width=1000`: what a page showing 10 series on a
//! 1000-px plot receives, 4 messages a second).
//!
//! Measured over `MEASURE` (after 2 s of warm-up): the plotter process's CPU time (user +
//! system, from `/proc/<pid>/stat`) divided by the wall time, in % of one core; beside it the
//! same for a child that only counts the records (the floor any consumer of this stream
//! pays), the records the producer emitted, what the plotter received and lost, and the
//! stream messages and bytes the client got. Printed as a table; the figure is in
//! `BENCHMARKS.md`.
//!
//! Run: `cargo bench -p snapbus-benches --bench plotter_cpu` (about 30 s). With `--test`
//! (`cargo bench -- --test`, as CI runs every bench), 1 s per child and no warm-up.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use snapbus_benches::{TempDir, connected_publisher};
use snapbus_bus::Level;
use snapbus_bus::broker;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::lane::StartAt;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_consumers::Record;
use snapbus_consumers::plotter::{Plotter, PlotterOptions, serve};
use snapbus_consumers::{Consumer, Flow, HookError, RunOptions, run};
use snapbus_schemas::Snapshot;

const RATE_HZ: u64 = 10_000;
const MEASURE: Duration = Duration::from_secs(10);
const ENV: &str = "SNAPBUS_BENCH_PLOTTER";

/// Ten series.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "bench.ten", version = 1)]
struct Ten {
    a: f64,
    b: f64,
    c: f64,
    d: f64,
    e: f64,
    f: f64,
    g: f64,
    h: f64,
    i: f64,
    j: f64,
}

fn ten(i: u64) -> Ten {
    let x = i as f64 * 1e-3;
    Ten {
        a: x.sin(),
        b: x.cos(),
        c: (x * 3.0).sin(),
        d: x % 1.0,
        e: (i % 100) as f64,
        f: -x,
        g: (x * 0.1).tanh(),
        h: (i % 7) as f64 * 0.5,
        i: x * x % 10.0,
        j: ((i * 7919) % 1000) as f64,
    }
}

/// A consumer that only counts (the floor).
#[derive(Default)]
struct Count(u64);

impl Consumer for Count {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.0 += u64::from(!r.payload.is_empty());
        Ok(Flow::Continue)
    }
}

/// The child: `SNAPBUS_BENCH_PLOTTER=<plotter|count> <bus root>`; prints its URL (or `-`).
fn child(kind: &str, root: &Path) {
    let dir = BusDir::locate_in(root, &BusName::new("bench").unwrap());
    let mut opts = RunOptions::new(kind);
    opts.subscribe.start = StartAt::Latest;
    opts.handle_signals = true;
    if kind == "plotter" {
        let mut plotter = Plotter::new(PlotterOptions::default());
        let server = serve(plotter.store(), 0).unwrap();
        println!("{}", server.url());
        std::io::stdout().flush().unwrap();
        opts.flush_every = Duration::from_millis(200);
        run(&dir, &opts, &mut plotter, None).unwrap();
    } else {
        println!("-");
        std::io::stdout().flush().unwrap();
        run(&dir, &opts, &mut Count::default(), None).unwrap();
    }
}

/// User + system CPU seconds of process `pid`.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // /proc counts in USER_HZ ticks, 100 per second on Linux.
    ticks as f64 / 100.0
}

struct Outcome {
    cpu_percent: f64,
    emitted: u64,
    stream_messages: u64,
    stream_bytes: u64,
    received: u64,
    lost: u64,
}

fn measure(kind: &str, root: &Path, dir: &BusDir, warm: Duration, span: Duration) -> Outcome {
    let mut child: Child = Command::new(std::env::current_exe().unwrap())
        .env(ENV, kind)
        .arg(root)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().unwrap().unwrap();
    // Wait until the child has subscribed: the broker lists it.
    std::thread::sleep(Duration::from_millis(500));
    let publisher = connected_publisher(dir.clone(), "ten", LaneConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let emitted = Arc::new(AtomicU64::new(0));
    let producer = {
        let (stop, emitted) = (Arc::clone(&stop), Arc::clone(&emitted));
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // 10 records per millisecond.
                let due = t0 + Duration::from_micros(i * 1_000_000 / RATE_HZ);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                for _ in 0..10 {
                    publisher.emit(Level::INFO, 0, &ten(i)).unwrap();
                    i += 1;
                }
                emitted.store(i, Ordering::Relaxed);
            }
            publisher.close();
        })
    };
    // The page's stream, read as fast as it comes.
    let stream_stats = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let reader = (url != "-").then(|| {
        let (stop, stats) = (Arc::clone(&stop), Arc::clone(&stream_stats));
        let (addr, token) = url
            .trim_start_matches("http://")
            .split_once("/?token=")
            .map(|(a, t)| (a.to_owned(), t.to_owned()))
            .unwrap();
        std::thread::spawn(move || {
            // The series appear with the first record.
            std::thread::sleep(Duration::from_millis(300));
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            write!(
                s,
                "GET /api/stream?ids=0,1,2,3,4,5,6,7,8,9&x=time&span=30&width=1000&token={token} \
                 HTTP/1.1\r\nHost: bench\r\n\r\n"
            )
            .unwrap();
            let mut buf = vec![0u8; 1 << 16];
            while !stop.load(Ordering::Relaxed) {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        stats.1.fetch_add(n as u64, Ordering::Relaxed);
                        let events = buf[..n].windows(6).filter(|w| w == b"data: ").count();
                        stats.0.fetch_add(events as u64, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
            }
        })
    });
    std::thread::sleep(warm);
    let (cpu0, t0, e0) = (
        cpu_secs(child.id()),
        Instant::now(),
        emitted.load(Ordering::Relaxed),
    );
    let (m0, b0) = (
        stream_stats.0.load(Ordering::Relaxed),
        stream_stats.1.load(Ordering::Relaxed),
    );
    std::thread::sleep(span);
    let (cpu1, wall) = (cpu_secs(child.id()), t0.elapsed().as_secs_f64());
    let e1 = emitted.load(Ordering::Relaxed);
    let (m1, b1) = (
        stream_stats.0.load(Ordering::Relaxed),
        stream_stats.1.load(Ordering::Relaxed),
    );
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    if let Some(r) = reader {
        r.join().unwrap();
    }
    // The child's own counters, from the broker (what it received and lost).
    std::thread::sleep(Duration::from_millis(700));
    let (received, lost) = consumer_counters(dir, kind);
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
    Outcome {
        cpu_percent: (cpu1 - cpu0) / wall * 100.0,
        emitted: e1 - e0,
        stream_messages: m1 - m0,
        stream_bytes: b1 - b0,
        received,
        lost,
    }
}

/// (delivered, lost) the broker last heard from the consumer of `kind`.
fn consumer_counters(dir: &BusDir, kind: &str) -> (u64, u64) {
    use snapbus_bus::client::{BusClient, Census};
    let Ok(state) = BusClient::connect(dir).and_then(|c| c.state_with(Census::Skip)) else {
        return (0, 0);
    };
    state
        .consumers
        .iter()
        .find(|c| c.info.kind == kind)
        .map_or((0, 0), |c| (c.delivered, c.lost))
}

fn main() {
    if let Ok(kind) = std::env::var(ENV) {
        let root = PathBuf::from(std::env::args().nth(1).unwrap());
        child(&kind, &root);
        return;
    }
    let quick = std::env::args().any(|a| a == "--test");
    let (warm, span) = if quick {
        (Duration::from_millis(200), Duration::from_secs(1))
    } else {
        (Duration::from_secs(2), MEASURE)
    };
    let tmp = TempDir::new("plotter-cpu").unwrap();
    let root = tmp.path().join("bus");
    let dir = BusDir::locate_in(&root, &BusName::new("bench").unwrap());
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(10)).unwrap();
    println!(
        "plotter_cpu: 10 series at {RATE_HZ} Hz, {:.0} s per child{}",
        span.as_secs_f64(),
        if quick { " (--test: quick)" } else { "" }
    );
    println!(
        "{:<10} {:>8} {:>10} {:>10} {:>8} {:>9} {:>11}",
        "consumer", "CPU %", "emitted", "received", "lost", "messages", "stream KB/s"
    );
    for kind in ["count", "plotter"] {
        let o = measure(kind, &root, &dir, warm, span);
        println!(
            "{:<10} {:>8.1} {:>10} {:>10} {:>8} {:>9} {:>11.1}",
            kind,
            o.cpu_percent,
            o.emitted,
            o.received,
            o.lost,
            o.stream_messages,
            o.stream_bytes as f64 / 1024.0 / span.as_secs_f64()
        );
    }
    drop(broker);
}
