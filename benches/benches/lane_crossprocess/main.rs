//! Lanes across processes: throughput, one-way latency and idle CPU of a consumer, with a Unix
//! domain socket as the peer reference. A custom `harness = false` main (these scenarios need
//! two processes, which criterion's model does not fit) that prints Markdown tables.
//!
//! The bench process is the **producer**, pinned to CPU 0. For every scenario it re-executes
//! itself (`SNAPBUS_LANE_CHILD=<role>`) as the **consumer**, pinned to CPU 1 (the pinning is
//! skipped with a note if the machine has one CPU). The consumer opens the producer's lane
//! memfd read-only through `/proc/<producer pid>/fd/<n>` (a socket scenario gets its end of a
//! `UnixStream` pair as stdin), prints `ready`, and at the end one line of `key=value` results
//! on its stdout pipe.
//!
//! Scenarios (one row each; see `BENCHMARKS.md` for the definitions of the columns):
//!
//! - throughput, 64 B: lane with a spinning `poll()` consumer (with and without a doorbell
//!   subscribed, and written through the `SharedLaneWriter` a `Publisher` uses), and UDS with
//!   one `write` per message and through a 64 KiB `BufWriter`;
//! - throughput, 1 MiB: lane, consumer touching header + last byte (`read_in_place` +
//!   `PayloadView::byte(len - 1)`) and consumer copying every byte (`poll()`); plus in-process
//!   `memcpy` reference rows (1 MiB into a 64 MiB and into a 1 MiB rotating destination);
//! - one-way latency (payload carries a CLOCK_MONOTONIC stamp, one 64 B record every 50 µs,
//!   busy-wait pacing): lane with a spinning reader, lane with a sleeping reader (doorbell,
//!   0 and 100 spins), UDS with a blocking `read`;
//! - idle: a consumer waiting on its doorbell with no data, CPU time from
//!   `/proc/<pid>/schedstat` over ~2 s (and a spinning reader as the reference).
//!
//! Loss is counted at the consumer from the lane's sequence numbers (`ReaderStats`); the
//! throughput figure is records **delivered** per second at the consumer, over the consumer's
//! window (first record to end of stream). Every record's payload is checked against its
//! sequence number (`bad` must be 0).
//!
//! Run: `cargo bench -p snapbus-benches --bench lane_crossprocess` (about 1.5 min);
//! `... -- --quick` or `SNAPBUS_BENCH_QUICK=1` for a < 30 s run; `-- --test` (CI) for a smoke
//! run of every scenario. Extra arguments are substring filters on scenario names.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::hint::spin_loop;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use snapbus_bus::doorbell::DoorbellPage;
use snapbus_bus::lane::{
    LaneConfig, LaneReader, LaneWriter, NoFrame, Poll, RecordMeta, SharedLaneWriter, ShmLane,
    StartAt,
};
use snapbus_bus::mem::{LaneMem, ShmMem};

mod child;
mod scenarios;

use child::child_main;
use scenarios::{idle_cpu, lane_latency, lane_tput, memcpy_ref, uds_latency, uds_tput};

const META: RecordMeta = snapbus_benches::LANE_META;
const SMALL: usize = 64;
const LARGE: usize = 1 << 20;
const PRODUCER_CPU: usize = 0;
const CONSUMER_CPU: usize = 1;
/// Latency: one record every this many nanoseconds.
const LAT_INTERVAL_NS: u64 = 50_000;
/// Doorbell sleep timeout (a safety net; the producer's ring is what wakes the consumer).
const BELL_TIMEOUT: Duration = Duration::from_millis(100);

// ---------------------------------------------------------------------------------------------
// Run settings.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Full,
    Quick,
    Test,
}

#[derive(Clone, Copy, Debug)]
struct Settings {
    mode: Mode,
    /// Producer run time of one throughput repetition.
    tput: Duration,
    /// Throughput repetitions (the median by delivered records/s is reported).
    reps: usize,
    /// Latency run time.
    lat: Duration,
    /// Idle measurement window.
    idle: Duration,
}

impl Settings {
    fn new(mode: Mode) -> Settings {
        match mode {
            Mode::Full => Settings {
                mode,
                tput: Duration::from_secs(2),
                reps: 3,
                lat: Duration::from_secs(3),
                idle: Duration::from_secs(2),
            },
            Mode::Quick => Settings {
                mode,
                tput: Duration::from_millis(500),
                reps: 1,
                lat: Duration::from_millis(1000),
                idle: Duration::from_millis(1000),
            },
            Mode::Test => Settings {
                mode,
                tput: Duration::from_millis(50),
                reps: 1,
                lat: Duration::from_millis(50),
                idle: Duration::from_millis(100),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Results of the scenarios (rows of the tables).
// ---------------------------------------------------------------------------------------------

/// One throughput measurement.
#[derive(Clone, Debug)]
struct Tput {
    /// Records delivered per second at the consumer.
    delivered_per_s: f64,
    /// Payload bytes per second at the consumer (records/s × payload size).
    bytes_per_s: f64,
    /// Lost records, % of delivered + lost.
    loss_pct: f64,
    /// Records written per second by the producer.
    produced_per_s: f64,
    bad: u64,
    lapped: u64,
    torn: u64,
}

/// Latency percentiles (nanoseconds), from an exactly sorted sample.
#[derive(Clone, Debug)]
struct Lat {
    n: usize,
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
    lost: u64,
    /// Voluntary context switches (sleeps) of the consumer per record.
    sleeps_per_rec: f64,
}

// ---------------------------------------------------------------------------------------------
// Small system helpers (all safe: rustix and /proc).
// ---------------------------------------------------------------------------------------------

/// CPUs this process may run on, as first seen (before pinning narrows the affinity mask).
fn n_cpus() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Pins the calling thread (and the processes it spawns later) to `cpu`; `false` if not possible.
fn pin(cpu: usize) -> bool {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

fn mono_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// On-CPU time of a process in nanoseconds (`/proc/<pid>/schedstat`, field 1), or from
/// `/proc/<pid>/stat` utime + stime (10 ms ticks) if schedstat is missing.
fn cpu_ns(pid: u32) -> Option<u64> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok()) {
            return Some(ns);
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 10_000_000)
}

/// Voluntary context switches of a process (each one is a sleep).
fn voluntary_switches(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn env_u64(key: &str) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key} missing"))
}

// ---------------------------------------------------------------------------------------------
// Output.
// ---------------------------------------------------------------------------------------------

fn si(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2} G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1000.0)
}

/// Runs a throughput scenario `reps` times; returns the median run (by delivered/s) and the
/// range of delivered/s.
fn repeat(reps: usize, mut f: impl FnMut() -> Tput) -> (Tput, f64, f64) {
    let mut runs: Vec<Tput> = (0..reps).map(|_| f()).collect();
    runs.sort_by(|a, b| a.delivered_per_s.total_cmp(&b.delivered_per_s));
    let lo = runs[0].delivered_per_s;
    let hi = runs[runs.len() - 1].delivered_per_s;
    (runs[runs.len() / 2].clone(), lo, hi)
}

struct Filter(Vec<String>);

impl Filter {
    fn wants(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|f| name.contains(f.as_str()))
    }
}

fn main() {
    if let Ok(role) = std::env::var("SNAPBUS_LANE_CHILD") {
        child_main(&role);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick_env = std::env::var("SNAPBUS_BENCH_QUICK").is_ok_and(|v| v == "1");
    let mode = if args.iter().any(|a| a == "--test") {
        Mode::Test
    } else if quick_env || args.iter().any(|a| a == "--quick") {
        Mode::Quick
    } else if args.iter().any(|a| a == "--bench") {
        Mode::Full
    } else {
        // Run without `--bench` (e.g. `cargo test --benches`): smoke only.
        Mode::Test
    };
    let filter = Filter(args.into_iter().filter(|a| !a.starts_with("--")).collect());
    let s = Settings::new(mode);
    let pinned = n_cpus() > CONSUMER_CPU && pin(PRODUCER_CPU);
    let started = Instant::now();
    println!(
        "lane_crossprocess: mode {:?}, {} CPUs, producer on CPU {PRODUCER_CPU}{}; load average \
         at start {}",
        s.mode,
        n_cpus(),
        if pinned {
            format!(", consumer on CPU {CONSUMER_CPU}")
        } else {
            " (consumer not pinned)".into()
        },
        load_average()
    );

    // ---- throughput -------------------------------------------------------------------------
    println!(
        "\n### Throughput (producer {:.1} s per run, median of {} runs; GB = 1e9 bytes of payload)\n",
        s.tput.as_secs_f64(),
        s.reps
    );
    println!(
        "| scenario | delivered records/s (range) | payload GB/s | loss | producer records/s | \
         ratio vs UDS | lapped / torn / bad |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    let mut uds_ref: Option<f64> = None;
    let mut uds_buf_ref: Option<f64> = None;
    let mut rows: Vec<(&str, Tput, f64, f64)> = Vec::new();
    let small: [(&str, &dyn Fn() -> Tput); 5] = [
        ("uds 64 B write per msg", &|| uds_tput(false, s.tput)),
        ("uds 64 B BufWriter 64 KiB", &|| uds_tput(true, s.tput)),
        ("lane 64 B poll", &|| {
            lane_tput(SMALL, "lane-poll", false, false, s.tput)
        }),
        ("lane 64 B poll, doorbell subscribed", &|| {
            lane_tput(SMALL, "lane-poll", true, false, s.tput)
        }),
        ("lane 64 B poll, shared writer (a Publisher's)", &|| {
            lane_tput(SMALL, "lane-poll", false, true, s.tput)
        }),
    ];
    for (name, f) in small {
        if !filter.wants(name) {
            continue;
        }
        let (t, lo, hi) = repeat(s.reps, f);
        if name == "uds 64 B write per msg" {
            uds_ref = Some(t.delivered_per_s);
        }
        if name == "uds 64 B BufWriter 64 KiB" {
            uds_buf_ref = Some(t.delivered_per_s);
        }
        rows.push((name, t, lo, hi));
    }
    let large: [(&str, &dyn Fn() -> Tput); 2] = [
        ("lane 1 MiB touch (header + last byte)", &|| {
            lane_tput(LARGE, "lane-touch", false, false, s.tput)
        }),
        ("lane 1 MiB poll (copy every byte)", &|| {
            lane_tput(LARGE, "lane-poll", false, false, s.tput)
        }),
    ];
    for (name, f) in large {
        if filter.wants(name) {
            let (t, lo, hi) = repeat(s.reps, f);
            rows.push((name, t, lo, hi));
        }
    }
    for (name, t, lo, hi) in &rows {
        let ratio = if name.starts_with("lane 64") {
            match (uds_ref, uds_buf_ref) {
                (Some(a), Some(b)) => format!(
                    "{:.1}× / {:.1}×",
                    t.delivered_per_s / a,
                    t.delivered_per_s / b
                ),
                _ => "–".into(),
            }
        } else if name.starts_with("uds 64 B Buf") {
            uds_ref.map_or("–".into(), |a| {
                format!("{:.1}× (vs per msg)", t.delivered_per_s / a)
            })
        } else {
            "–".into()
        };
        println!(
            "| {name} | {} ({}–{}) | {:.2} | {:.2} % | {} | {ratio} | {} / {} / {} |",
            si(t.delivered_per_s),
            si(*lo),
            si(*hi),
            t.bytes_per_s / 1e9,
            t.loss_pct,
            si(t.produced_per_s),
            t.lapped,
            t.torn,
            t.bad
        );
        assert_eq!(t.bad, 0, "{name}: corrupt records delivered");
    }
    if filter.wants("memcpy") {
        let d = s.tput.min(Duration::from_secs(1));
        println!(
            "| memcpy 1 MiB → rotating 64 MiB (in-process reference) | – | {:.2} | – | – | – | – |",
            memcpy_ref(64 << 20, d) / 1e9
        );
        println!(
            "| memcpy 1 MiB → same 1 MiB (in-process reference) | – | {:.2} | – | – | – | – |",
            memcpy_ref(LARGE, d) / 1e9
        );
    }
    println!("\n(ratio vs UDS: lane / UDS one write per message, lane / UDS BufWriter.)");

    // ---- latency ----------------------------------------------------------------------------
    println!(
        "\n### One-way latency, 64 B records every {} µs for {:.1} s (µs; first 2 % dropped)\n",
        LAT_INTERVAL_NS / 1000,
        s.lat.as_secs_f64()
    );
    println!(
        "| scenario | p50 | p90 | p99 | p99.9 | max | samples | lost | consumer sleeps / record | \
         p50 ratio vs UDS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let lat_cases: [(&str, &dyn Fn() -> Lat); 4] = [
        ("uds blocking read", &|| uds_latency(s.lat)),
        ("lane spinning reader", &|| {
            lane_latency("lane-lat-spin", false, s.lat)
        }),
        ("lane doorbell reader, 0 spins", &|| {
            lane_latency("lane-lat-bell0", true, s.lat)
        }),
        ("lane doorbell reader, 100 spins", &|| {
            lane_latency("lane-lat-bell100", true, s.lat)
        }),
    ];
    let mut uds_p50: Option<u64> = None;
    for (name, f) in lat_cases {
        if !filter.wants(name) {
            continue;
        }
        let l = f();
        if name.starts_with("uds") {
            uds_p50 = Some(l.p50);
        }
        let ratio = match uds_p50 {
            Some(u) if !name.starts_with("uds") && l.p50 > 0 => {
                format!("{:.1}× lower", u as f64 / l.p50 as f64)
            }
            _ => "–".into(),
        };
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {ratio} |",
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.p999),
            us(l.max),
            l.n,
            l.lost,
            l.sleeps_per_rec
        );
    }

    // ---- idle -------------------------------------------------------------------------------
    println!(
        "\n### Idle consumer ({:.1} s, no data; CPU from /proc/<pid>/schedstat)\n",
        s.idle.as_secs_f64()
    );
    println!("| scenario | consumer CPU | wakeups/s |");
    println!("|---|---:|---:|");
    if filter.wants("idle doorbell") {
        let (cpu, wk) = idle_cpu("idle-bell", s.idle);
        println!(
            "| idle doorbell reader (100 spins, {} ms timeout) | {cpu:.3} % | {wk:.1} |",
            BELL_TIMEOUT.as_millis()
        );
    }
    if filter.wants("idle spinning") {
        let (cpu, _) = idle_cpu("idle-spin", s.idle.min(Duration::from_millis(500)));
        println!("| idle spinning reader (reference) | {cpu:.1} % | – |");
    }
    println!(
        "\nload average at end {}; total {:.1} s",
        load_average(),
        started.elapsed().as_secs_f64()
    );
}
