//! The OTLP exporter's CPU use per 100 k events/s of 64 B-class events, beside the recorder's
//! and a counting consumer's, and whether it keeps up with 1 M events/s; and the producer's
//! rate with the exporter's receiver dead (the isolation claim).
//!
//! Setup: an in-process broker (a thread of this process) on a bus in a temporary directory;
//! the consumer in a **child process** (this binary re-executed with `SNAPBUS_BENCH_OTLP`
//! set: the consumer run loop with `OtlpExporter` as `snapbus otlp` runs it, `Recorder` as
//! `snapbus record` runs it, or a counter); a tiny OTLP/HTTP receiver in this process that
//! answers 200 (or, for `otlp-dead`, a closed port); in this process a producer thread
//! emitting `Small` (7 × 8-byte fields: a 56-byte payload, a 64 B-class record) paced at the
//! scenario's rate in 1 ms batches, or as fast as it can (`max`).
//!
//! Measured over `MEASURE` (after 1 s of warm-up): the child's CPU time (user + system, from
//! `/proc/<pid>/stat`) / wall time in % of one core, that per 100 k received events/s, the
//! events emitted and received per second, and the events the child lost (lapped). Then the
//! producer's unpaced rate beside `count` and beside `otlp-dead`, in interleaved rounds (their
//! medians). Printed; the figures are in `BENCHMARKS.md`.
//!
//! Run: `cargo bench -p snapbus-benches --bench otlp_cpu` (about a minute). With `--test`
//! (as CI runs every bench), 1 s per scenario and no warm-up.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use snapbus_benches::{TempDir, connected_publisher};
use snapbus_bus::Level;
use snapbus_bus::broker;
use snapbus_bus::lane::{LaneConfig, StartAt};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_consumers::otlp::{Endpoints, OtlpExporter, OtlpOptions};
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::WriterOptions;
use snapbus_consumers::{Consumer, Flow, HookError, Record, RunOptions, run};
use snapbus_schemas::Snapshot;

const MEASURE: Duration = Duration::from_secs(5);
const ENV: &str = "SNAPBUS_BENCH_OTLP";

/// A 56-byte payload.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "bench.small", version = 1)]
struct Small {
    step: u64,
    reward: f64,
    loss: f64,
    x: f64,
    y: f64,
    z: f64,
    w: f64,
}

fn small(i: u64) -> Small {
    let x = i as f64;
    Small {
        step: i,
        reward: (i % 11) as f64 * 0.1,
        loss: 1.0 / (x + 1.0),
        x,
        y: -x,
        z: x * 0.5,
        w: (i % 3) as f64,
    }
}

#[derive(Default)]
struct Count(u64);

impl Consumer for Count {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.0 += u64::from(!r.payload.is_empty());
        Ok(Flow::Continue)
    }
}

/// The child: `SNAPBUS_BENCH_OTLP=<count|recorder|otlp|otlp-dead> <bus root> <url> <tmp>`.
fn child(kind: &str, root: &Path, url: &str, tmp: &Path) {
    let dir = BusDir::locate_in(root, &BusName::new("bench").unwrap());
    let mut opts = RunOptions::new(kind);
    opts.subscribe.start = StartAt::Latest;
    println!("ready");
    std::io::stdout().flush().unwrap();
    match kind {
        "recorder" => {
            let mut rec = Recorder::create(RecorderOptions {
                path: tmp.join(format!("bench-{}.mcap", std::process::id())),
                rotate_bytes: None,
                writer: WriterOptions::new("recorder", "bench"),
                start: StartAt::Latest,
            })
            .unwrap();
            let o = rec.run_options(kind);
            run(&dir, &o, &mut rec, None).unwrap();
            let (files, _) = rec.finish().unwrap();
            for f in files {
                let _ = std::fs::remove_file(f);
            }
        }
        "otlp" | "otlp-dead" => {
            let mut o = OtlpOptions::new(Endpoints::from_base(url).unwrap());
            // As `snapbus otlp --interval 1s`: ten exports per measurement.
            o.interval = Duration::from_secs(1);
            let mut x = OtlpExporter::start(o).unwrap();
            opts.flush_every = Duration::from_millis(500);
            run(&dir, &opts, &mut x, None).unwrap();
            x.shutdown();
        }
        _ => {
            run(&dir, &opts, &mut Count::default(), None).unwrap();
        }
    }
}

/// User + system CPU seconds of process `pid`.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

struct Outcome {
    cpu_percent: f64,
    emitted_per_s: f64,
    received_per_s: f64,
    lost: u64,
}

#[allow(clippy::too_many_arguments)]
fn measure(
    kind: &str,
    rate: Option<u64>,
    root: &Path,
    dir: &BusDir,
    url: &str,
    tmp: &Path,
    warm: Duration,
    span: Duration,
) -> Outcome {
    let mut child: Child = Command::new(std::env::current_exe().unwrap())
        .env(ENV, kind)
        .arg(root)
        .arg(url)
        .arg(tmp)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _ready = lines.next().unwrap().unwrap();
    // Until the broker lists it as subscribed.
    let t = Instant::now();
    while consumer_counters(dir, kind).is_none() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let publisher = connected_publisher(dir.clone(), "small", LaneConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let emitted = Arc::new(AtomicU64::new(0));
    let producer = {
        let (stop, emitted) = (Arc::clone(&stop), Arc::clone(&emitted));
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let per_ms = rate.map_or(1000, |r| r / 1000);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if let Some(r) = rate {
                    let due = t0 + Duration::from_nanos(i * 1_000_000_000 / r);
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                }
                for _ in 0..per_ms {
                    let _ = publisher.emit(Level::INFO, 0, &small(i));
                    i += 1;
                }
                emitted.store(i, Ordering::Relaxed);
            }
            publisher.close();
        })
    };
    std::thread::sleep(warm);
    let (d0, l0) = consumer_counters(dir, kind).unwrap_or((0, 0));
    let (cpu0, t0, e0) = (
        cpu_secs(child.id()),
        Instant::now(),
        emitted.load(Ordering::Relaxed),
    );
    std::thread::sleep(span);
    let (cpu1, wall) = (cpu_secs(child.id()), t0.elapsed().as_secs_f64());
    let e1 = emitted.load(Ordering::Relaxed);
    // The counters reach the broker about twice a second.
    std::thread::sleep(Duration::from_millis(700));
    let (d1, l1) = consumer_counters(dir, kind).unwrap_or((0, 0));
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
    // The 0.7 s wait above adds to the received count: scale to the measured span.
    let span_rx = wall + 0.7;
    Outcome {
        cpu_percent: (cpu1 - cpu0) / wall * 100.0,
        emitted_per_s: (e1 - e0) as f64 / wall,
        received_per_s: d1.saturating_sub(d0) as f64 / span_rx,
        lost: l1.saturating_sub(l0),
    }
}

/// (delivered, lost) the broker last heard from the consumer of `kind`.
fn consumer_counters(dir: &BusDir, kind: &str) -> Option<(u64, u64)> {
    use snapbus_bus::client::{BusClient, Census};
    let state = BusClient::connect(dir)
        .and_then(|c| c.state_with(Census::Skip))
        .ok()?;
    state
        .consumers
        .iter()
        .find(|c| c.info.kind == kind)
        .map(|c| (c.delivered, c.lost))
}

/// A receiver that answers 200 to every request; its URL.
fn receiver() -> (String, Arc<AtomicU64>) {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.server_addr().to_ip().unwrap());
    let bytes = Arc::new(AtomicU64::new(0));
    let b = Arc::clone(&bytes);
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let mut body = Vec::new();
            let _ = std::io::Read::read_to_end(req.as_reader(), &mut body);
            b.fetch_add(body.len() as u64, Ordering::Relaxed);
            let _ = req.respond(tiny_http::Response::from_data(Vec::new()));
        }
    });
    (url, bytes)
}

fn main() {
    if let Ok(kind) = std::env::var(ENV) {
        let a: Vec<String> = std::env::args().collect();
        child(&kind, &PathBuf::from(&a[1]), &a[2], &PathBuf::from(&a[3]));
        return;
    }
    let quick = std::env::args().any(|a| a == "--test");
    let (warm, span) = if quick {
        (Duration::ZERO, Duration::from_secs(1))
    } else {
        (Duration::from_secs(1), MEASURE)
    };
    let tmp = TempDir::new("otlp-cpu").unwrap();
    let root = tmp.path().join("bus");
    let dir = BusDir::locate_in(&root, &BusName::new("bench").unwrap());
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(10)).unwrap();
    let (live, received_bytes) = receiver();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    println!(
        "otlp_cpu: 64 B-class events (56 B payload), {:.0} s per scenario{}",
        span.as_secs_f64(),
        if quick { " (--test: quick)" } else { "" }
    );
    println!(
        "{:<10} {:>9} {:>8} {:>16} {:>12} {:>12} {:>10}",
        "consumer", "rate", "CPU %", "CPU % per 100k/s", "emitted/s", "received/s", "lost"
    );
    let scenarios: &[(&str, Option<u64>)] = &[
        ("count", Some(100_000)),
        ("recorder", Some(100_000)),
        ("otlp", Some(100_000)),
        ("count", Some(1_000_000)),
        ("recorder", Some(1_000_000)),
        ("otlp", Some(1_000_000)),
        ("otlp-dead", Some(1_000_000)),
        ("count", None),
        ("otlp-dead", None),
    ];
    for (kind, rate) in scenarios {
        let url = if *kind == "otlp-dead" { &dead } else { &live };
        let o = measure(kind, *rate, &root, &dir, url, tmp.path(), warm, span);
        let per_100k = o.cpu_percent / (o.received_per_s / 100_000.0).max(1e-9);
        println!(
            "{:<10} {:>9} {:>8.1} {:>16.2} {:>12.0} {:>12.0} {:>10}",
            kind,
            rate.map_or("max".to_owned(), |r| r.to_string()),
            o.cpu_percent,
            per_100k,
            o.emitted_per_s,
            o.received_per_s,
            o.lost
        );
    }
    // The producer's unpaced rate beside a lapped counter and beside the exporter with a dead
    // receiver, interleaved (this machine's other load drifts): the medians.
    let rounds = if quick { 1 } else { 3 };
    let (mut with_count, mut with_dead) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        with_count
            .push(measure("count", None, &root, &dir, &live, tmp.path(), warm, span).emitted_per_s);
        with_dead.push(
            measure(
                "otlp-dead",
                None,
                &root,
                &dir,
                &dead,
                tmp.path(),
                warm,
                span,
            )
            .emitted_per_s,
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "producer, unpaced, {rounds} interleaved rounds: median {:.0}/s beside count, {:.0}/s \
         beside otlp with a dead receiver (rounds: {with_count:.0?} / {with_dead:.0?})",
        median(&mut with_count.clone()),
        median(&mut with_dead.clone()),
    );
    println!(
        "receiver: {:.1} KiB of OTLP requests in all",
        received_bytes.load(Ordering::Relaxed) as f64 / 1024.0
    );
    drop(broker);
}
