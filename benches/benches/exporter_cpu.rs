//! The Prometheus exporter's reader: events per second and CPU per event over a real lane,
//! beside the recorder and a consumer that only counts, measured in one run.
//!
//! Setup, once: an in-process broker (a thread of this process) on a bus in a temporary
//! directory, a `Publisher` with a 128 MiB lane holding [`N`] = 1,000,000 64-byte events
//! (`Event::sample(i)` of `benches/src`: 14 numeric leaves, so 14 gauges), then
//! `publisher.close()`. Per repetition and consumer, timed: `snapbus_consumers::run` from the
//! oldest record until the lane's end (`until_end`), on this thread: subscribing, reading the
//! whole lane, and the final flush:
//!
//! - `count`: a consumer that only counts (the floor of reading);
//! - `prometheus`: `Exporter` (default options, publishing every 250 ms) with its `/metrics`
//!   served on a free port and a scraper thread fetching it every 100 ms during the run;
//! - `recorder`: `Recorder` writing an MCAP file into the temporary directory (page cache, no
//!   fsync).
//!
//! Reported per consumer (median of [`REPS`] repetitions, rotated order): events/s (wall),
//! the reading thread's CPU time per event (`CLOCK_THREAD_CPUTIME_ID`), and that as % of one
//! core per 100,000 events/s. The scrapes' own CPU (another thread) is reported apart, as
//! the whole process's CPU minus the reading thread's. Issue #18 target: the exporter keeps up
//! with ≥ 1 M events/s of 64 B-class events using ≤ 1 core, i.e. ≤ 10 % of a core per
//! 100 k events/s.
//!
//! A second bus holds [`NF`] = 10,000 records of 64 KiB ([`Frame`]: two scalars and a 128 × 128
//! `f32` tensor, 5 gauges: the tensor reduced to mean, min and max): `count, 64 KiB frames`
//! and `prometheus, 64 KiB frames` read it the same way. The exporter reads records of
//! `fields::IN_PLACE_MIN_BYTES` (1 KiB) or more where they lie in the ring, smaller ones from
//! a copy: the frames rows are the in-place path, the 64-byte rows the copying one.
//!
//! Run: `cargo bench -p snapbus-benches --bench exporter_cpu` (about 2 minutes). With `--test`
//! (as `cargo bench -- --test` runs every bench), one repetition.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use snapbus_benches::{Event, TempDir, connected_publisher};
use snapbus_bus::Level;
use snapbus_bus::broker;
use snapbus_bus::lane::{LaneConfig, StartAt};
use snapbus_bus::publisher::Publisher;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_consumers::prometheus::{Exporter, PrometheusOptions};
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::WriterOptions;
use snapbus_consumers::{Consumer, Flow, HookError, Record, RunOptions, run};
use snapbus_schemas::{Snapshot, Tensor};

/// Events in the lane.
const N: u64 = 1_000_000;
/// Frames in the frames lane.
const NF: u64 = 10_000;

/// A 64 KiB record: a camera-like frame with two scalars.
#[derive(Snapshot)]
#[snapshot(id = "bench.frame", version = 1)]
struct Frame {
    step: u64,
    reward: f64,
    obs: Tensor<f32>,
}

impl Frame {
    fn sample(i: u64) -> Frame {
        let px: Vec<f32> = (0..128 * 128)
            .map(|k| ((k as u64 + i) % 251) as f32)
            .collect();
        Frame {
            step: i,
            reward: i as f64 * 0.5,
            obs: Tensor::new(vec![128, 128], px).unwrap(),
        }
    }
}
/// Repetitions per consumer.
const REPS: usize = 5;

#[derive(Default)]
struct Count(u64);

impl Consumer for Count {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        self.0 += 1;
        std::hint::black_box(r);
        Ok(Flow::Continue)
    }
}

fn cpu(id: rustix::time::ClockId) -> Duration {
    let t = rustix::time::clock_gettime(id);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One timed run: (wall, this thread's CPU, the process's CPU).
fn timed(f: impl FnOnce()) -> (Duration, Duration, Duration) {
    use rustix::time::ClockId::{ProcessCPUTime, ThreadCPUTime};
    let (w0, t0, p0) = (Instant::now(), cpu(ThreadCPUTime), cpu(ProcessCPUTime));
    f();
    (
        w0.elapsed(),
        cpu(ThreadCPUTime) - t0,
        cpu(ProcessCPUTime) - p0,
    )
}

fn opts(kind: &str) -> RunOptions {
    let mut o = RunOptions {
        until_end: true,
        handle_signals: false,
        ..RunOptions::new(kind)
    };
    o.subscribe.start = StartAt::Oldest;
    o
}

fn run_count(dir: &BusDir, n: u64) -> (Duration, Duration, Duration) {
    let mut c = Count::default();
    let t = timed(|| {
        let s = run(dir, &opts("count"), &mut c, None).unwrap();
        assert_eq!((s.delivered, s.lost), (n, 0));
    });
    assert_eq!(c.0, n);
    t
}

/// The bearer token the bench's exporter takes and its scraper sends.
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn run_prometheus(dir: &BusDir, n: u64, series: u64) -> (Duration, Duration, Duration) {
    let mut e = Exporter::new(PrometheusOptions::default());
    let server = e
        .serve("127.0.0.1:0".parse().unwrap(), None, TOKEN.into())
        .unwrap();
    let addr = server.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let scrapes = Arc::new(AtomicU64::new(0));
    let scraper = {
        let (stop, scrapes) = (Arc::clone(&stop), Arc::clone(&scrapes));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(
                    format!("GET /metrics HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n\r\n")
                        .as_bytes(),
                )
                .unwrap();
                let mut body = String::new();
                s.read_to_string(&mut body).unwrap();
                assert!(body.contains("# EOF"), "{body}");
                scrapes.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let mut o = e.run_options();
    o.subscribe.start = StartAt::Oldest;
    o.until_end = true;
    o.handle_signals = false;
    let t = timed(|| {
        let s = run(dir, &o, &mut e, None).unwrap();
        assert_eq!((s.delivered, s.lost), (n, 0));
    });
    stop.store(true, Ordering::Relaxed);
    scraper.join().unwrap();
    assert!(scrapes.load(Ordering::Relaxed) >= 1);
    assert_eq!(e.counters().series, series, "{:?}", e.counters());
    t
}

fn run_recorder(dir: &BusDir, tmp: &TempDir, rep: usize) -> (Duration, Duration, Duration) {
    let path = tmp.path().join(format!("rec-{rep}.mcap"));
    let mut r = Recorder::create(RecorderOptions {
        path: path.clone(),
        rotate_bytes: None,
        writer: WriterOptions::new("recorder", "bench"),
        start: StartAt::Oldest,
    })
    .unwrap();
    let mut o = r.run_options("recorder");
    o.until_end = true;
    o.handle_signals = false;
    let t = timed(|| {
        let s = run(dir, &o, &mut r, None).unwrap();
        assert_eq!((s.delivered, s.lost), (N, 0));
    });
    drop(r);
    let _ = std::fs::remove_file(path);
    t
}

/// A bus of its own in `tmp` (an in-process broker) with one producer `name` of a
/// `capacity`-byte lane, filled by `fill`, then closed.
fn filled_bus(
    tmp: &TempDir,
    name: &str,
    capacity: usize,
    fill: impl FnOnce(&Publisher),
) -> (BusDir, broker::InProcess, Publisher) {
    let dir = BusDir::locate_in(&tmp.path().join(name), &BusName::new(name).unwrap());
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(600)).unwrap();
    let lane = LaneConfig {
        capacity,
        max_frame: 1 << 20,
        block_size: 64 << 10,
    };
    let publisher = connected_publisher(dir.clone(), name, lane).unwrap();
    fill(&publisher);
    publisher.close();
    (dir, broker, publisher)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test");
    let reps = if quick { 1 } else { REPS };
    let tmp = TempDir::new("bench-exporter").unwrap();
    let (dir, broker, publisher) = filled_bus(&tmp, "steps", 128 << 20, |p| {
        for i in 0..N {
            p.emit(Level::INFO, 0, &Event::sample(i)).unwrap();
        }
    });
    // The frames, on a bus of their own (a 1 GiB lane: sparse, only what is written is used).
    let (fdir, fbroker, frames) = filled_bus(&tmp, "frames", 1 << 30, |p| {
        for i in 0..NF {
            p.emit(Level::INFO, 0, &Frame::sample(i)).unwrap();
        }
    });

    let names = [
        "count",
        "prometheus",
        "recorder",
        "count, 64 KiB frames",
        "prometheus, 64 KiB frames",
    ];
    let counts = [N, N, N, NF, NF];
    let mut rows: Vec<Vec<(Duration, Duration, Duration)>> = vec![Vec::new(); names.len()];
    for rep in 0..reps {
        for k in 0..names.len() {
            let which = (k + rep) % names.len();
            let t = match which {
                0 => run_count(&dir, N),
                1 => run_prometheus(&dir, N, 14),
                2 => run_recorder(&dir, &tmp, rep),
                3 => run_count(&fdir, NF),
                _ => run_prometheus(&fdir, NF, 5),
            };
            rows[which].push(t);
        }
    }
    println!(
        "{:<26} {:>12} {:>14} {:>22} {:>16}",
        "consumer", "events/s", "CPU ns/event", "% core per 100k ev/s", "other threads %"
    );
    for ((name, ts), &n) in names.iter().zip(&rows).zip(&counts) {
        let rate = median(ts.iter().map(|t| n as f64 / t.0.as_secs_f64()).collect());
        let ns = median(
            ts.iter()
                .map(|t| t.1.as_nanos() as f64 / n as f64)
                .collect(),
        );
        let other = median(
            ts.iter()
                .map(|t| (t.2.saturating_sub(t.1)).as_secs_f64() / t.0.as_secs_f64() * 100.0)
                .collect(),
        );
        // CPU per event × 100,000 events/s, as a share of one core.
        let per_100k = ns * 1e-9 * 100_000.0 * 100.0;
        println!("{name:<26} {rate:>12.0} {ns:>14.1} {per_100k:>21.2}% {other:>15.1}%");
    }
    drop((publisher, frames));
    broker.stop().unwrap();
    fbroker.stop().unwrap();
}
