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
// Consumer process.
// ---------------------------------------------------------------------------------------------

/// Opens the producer's lane (`/proc/<ppid>/fd/<fd>`, read-only) and faults in every page of
/// the mapping, so the first lap does not pay for the consumer's page faults.
fn open_lane() -> ShmLane {
    let path = format!(
        "/proc/{}/fd/{}",
        env_u64("SNAPBUS_LANE_PID"),
        env_u64("SNAPBUS_LANE_FD")
    );
    let lane = ShmLane::open(OwnedFd::from(File::open(path).unwrap())).unwrap();
    let mem: &ShmMem = lane.lane().mem();
    let mut sum = 0u64;
    for i in (0..mem.len_words()).step_by(512) {
        sum = sum.wrapping_add(
            mem.get(i)
                .map_or(0, |w| w.load(std::sync::atomic::Ordering::Relaxed)),
        );
    }
    std::hint::black_box(sum);
    lane
}

fn open_bells() -> DoorbellPage {
    let path = format!(
        "/proc/{}/fd/{}",
        env_u64("SNAPBUS_LANE_PID"),
        env_u64("SNAPBUS_BELL_FD")
    );
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    DoorbellPage::open(OwnedFd::from(file)).unwrap()
}

fn ready() {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
}

fn report(kv: &[(&str, String)]) {
    let line: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", line.join(" ")).unwrap();
    out.flush().unwrap();
}

fn reader_report(
    reader: &LaneReader<ShmMem>,
    window: Duration,
    bad: u64,
    extra: &[(&str, String)],
) {
    let s = reader.stats();
    let mut kv = vec![
        ("delivered", s.delivered.to_string()),
        ("lost", s.lost.to_string()),
        ("lapped", s.lapped.to_string()),
        ("torn", s.torn.to_string()),
        ("garbage", s.garbage.to_string()),
        ("holes", s.holes.to_string()),
        ("bad", bad.to_string()),
        ("secs", window.as_secs_f64().to_string()),
    ];
    kv.extend_from_slice(extra);
    report(&kv);
}

/// Consumer: `poll()` every record (copies the payload), spinning when there is nothing.
fn child_lane_poll() {
    let lane = open_lane();
    let mut reader = lane.lane().reader(StartAt::Oldest);
    ready();
    let mut first: Option<Instant> = None;
    let mut bad = 0u64;
    loop {
        match reader.poll() {
            Poll::Frame(f) => {
                if first.is_none() {
                    first = Some(Instant::now());
                }
                let p = f.payload;
                let ok = p.len() >= 8
                    && p[..8] == f.meta.seq.to_le_bytes()
                    && p[p.len() - 1] == f.meta.seq as u8;
                bad += u64::from(!ok);
            }
            Poll::Lagged(_) => {}
            Poll::Empty | Poll::Pending => spin_loop(),
            Poll::Closed => break,
        }
    }
    let window = first.map_or(Duration::ZERO, |t| t.elapsed());
    reader_report(&reader, window, bad, &[]);
}

/// Consumer: header + last byte of every record, in place.
fn child_lane_touch() {
    let lane = open_lane();
    let mut reader = lane.lane().reader(StartAt::Oldest);
    ready();
    let mut first: Option<Instant> = None;
    let mut bad = 0u64;
    loop {
        match reader.read_in_place(|m, v| v.byte(m.payload_len.wrapping_sub(1))) {
            Ok((meta, last)) => {
                if first.is_none() {
                    first = Some(Instant::now());
                }
                bad += u64::from(last != Some(meta.seq as u8));
            }
            Err(NoFrame::Closed) => break,
            Err(_) => spin_loop(),
        }
    }
    let window = first.map_or(Duration::ZERO, |t| t.elapsed());
    reader_report(&reader, window, bad, &[]);
}

/// Consumer: one-way latency. `bell_spins = None`: spin on `poll()`; `Some(n)`: sleep on the
/// doorbell (`wait_until` with `n` spins) whenever the lane is empty.
fn child_lane_latency(bell_spins: Option<u32>) {
    let lane = open_lane();
    let bells = bell_spins.map(|_| open_bells());
    let bell = bells.as_ref().map(|p| p.bell(0).unwrap());
    let mut reader = lane.lane().reader(StartAt::Oldest);
    let mut lat: Vec<u64> = Vec::with_capacity(1 << 20);
    let mut bad = 0u64;
    let me = std::process::id();
    let sw0 = voluntary_switches(me);
    ready();
    let t0 = Instant::now();
    'outer: loop {
        if let (Some(bell), Some(spins)) = (&bell, bell_spins) {
            bell.wait_until(|| reader.has_pending_bytes(), spins, BELL_TIMEOUT);
        }
        loop {
            match reader.poll() {
                Poll::Frame(f) => {
                    let now = mono_ns();
                    let p = f.payload;
                    if p.len() >= 16 && p[8..16] == f.meta.seq.to_le_bytes() {
                        let stamp = u64::from_le_bytes(p[..8].try_into().unwrap());
                        lat.push(now.saturating_sub(stamp));
                    } else {
                        bad += 1;
                    }
                }
                Poll::Lagged(_) | Poll::Pending => {}
                Poll::Empty if bell.is_some() => break,
                Poll::Empty => spin_loop(),
                Poll::Closed => break 'outer,
            }
        }
    }
    let sleeps = voluntary_switches(me) - sw0;
    reader_report(
        &reader,
        t0.elapsed(),
        bad,
        &[
            ("lat", encode_samples(&lat)),
            ("sleeps", sleeps.to_string()),
        ],
    );
}

/// Consumer: waits on its doorbell (or spins, `spins = None`) until the lane closes; counts
/// how often it woke up.
fn child_idle(bell_spins: Option<u32>) {
    let lane = open_lane();
    let bells = open_bells();
    let bell = bells.bell(0).unwrap();
    let mut reader = lane.lane().reader(StartAt::Latest);
    ready();
    let t0 = Instant::now();
    let mut wakeups = 0u64;
    'outer: loop {
        match bell_spins {
            Some(spins) => {
                bell.wait_until(|| reader.has_pending_bytes(), spins, BELL_TIMEOUT);
                wakeups += 1;
            }
            None => spin_loop(),
        }
        loop {
            match reader.poll() {
                Poll::Frame(_) | Poll::Lagged(_) | Poll::Pending => {}
                Poll::Empty => break,
                Poll::Closed => break 'outer,
            }
        }
    }
    report(&[
        ("wakeups", wakeups.to_string()),
        ("secs", t0.elapsed().as_secs_f64().to_string()),
    ]);
}

/// Consumer of the socket (stdin): counts bytes until EOF.
fn child_uds_tput() {
    let mut sock = std::io::stdin().lock();
    let mut buf = vec![0u8; 256 << 10];
    ready();
    let mut first: Option<Instant> = None;
    let mut total = 0u64;
    let mut bad = 0u64;
    loop {
        let n = sock.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if first.is_none() {
            first = Some(Instant::now());
        }
        // Spot check: every message is 64 bytes and starts with its index.
        if total % SMALL as u64 == 0 && n >= 8 {
            let idx = u64::from_le_bytes(buf[..8].try_into().unwrap());
            bad += u64::from(idx != total / SMALL as u64);
        }
        total += n as u64;
    }
    let window = first.map_or(Duration::ZERO, |t| t.elapsed());
    report(&[
        ("delivered", (total / SMALL as u64).to_string()),
        ("lost", "0".into()),
        ("bad", bad.to_string()),
        ("secs", window.as_secs_f64().to_string()),
    ]);
}

/// Socket latency consumer: blocking 64-byte reads.
fn child_uds_latency() {
    let mut sock = std::io::stdin().lock();
    let mut msg = [0u8; SMALL];
    let mut lat: Vec<u64> = Vec::with_capacity(1 << 20);
    let me = std::process::id();
    let sw0 = voluntary_switches(me);
    ready();
    let mut delivered = 0u64;
    while sock.read_exact(&mut msg).is_ok() {
        let now = mono_ns();
        let stamp = u64::from_le_bytes(msg[..8].try_into().unwrap());
        lat.push(now.saturating_sub(stamp));
        delivered += 1;
    }
    let sleeps = voluntary_switches(me) - sw0;
    report(&[
        ("delivered", delivered.to_string()),
        ("lost", "0".into()),
        ("bad", "0".into()),
        ("lat", encode_samples(&lat)),
        ("sleeps", sleeps.to_string()),
    ]);
}

/// Latency samples travel back as one comma-separated field.
fn encode_samples(v: &[u64]) -> String {
    let s: Vec<String> = v.iter().map(u64::to_string).collect();
    s.join(",")
}

fn child_main(role: &str) {
    if let Ok(cpu) = std::env::var("SNAPBUS_LANE_CPU") {
        if !pin(cpu.parse().unwrap()) {
            eprintln!("lane_crossprocess: could not pin the consumer to CPU {cpu}");
        }
    }
    match role {
        "lane-poll" => child_lane_poll(),
        "lane-touch" => child_lane_touch(),
        "lane-lat-spin" => child_lane_latency(None),
        "lane-lat-bell0" => child_lane_latency(Some(0)),
        "lane-lat-bell100" => child_lane_latency(Some(100)),
        "idle-bell" => child_idle(Some(100)),
        "idle-spin" => child_idle(None),
        "uds-tput" => child_uds_tput(),
        "uds-lat" => child_uds_latency(),
        other => panic!("unknown child role {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Producer side: spawning the consumer.
// ---------------------------------------------------------------------------------------------

struct Consumer {
    child: std::process::Child,
    out: BufReader<ChildStdout>,
}

impl Consumer {
    /// Spawns the consumer and waits until it is ready.
    fn spawn(
        role: &str,
        lane: Option<&ShmLane>,
        bells: Option<&DoorbellPage>,
        stdin: Stdio,
    ) -> Consumer {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.env("SNAPBUS_LANE_CHILD", role)
            .env("SNAPBUS_LANE_PID", std::process::id().to_string())
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if n_cpus() > CONSUMER_CPU {
            cmd.env("SNAPBUS_LANE_CPU", CONSUMER_CPU.to_string());
        }
        if let Some(l) = lane {
            cmd.env("SNAPBUS_LANE_FD", l.fd().as_raw_fd().to_string());
        }
        if let Some(b) = bells {
            cmd.env("SNAPBUS_BELL_FD", b.fd().as_raw_fd().to_string());
        }
        let mut child = cmd.spawn().unwrap();
        // `cmd` (and the child's end of a socket pair in `stdin`) is dropped here.
        drop(cmd);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "consumer {role} did not start");
        Consumer { child, out }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads the consumer's result line and reaps it.
    fn finish(mut self) -> BTreeMap<String, String> {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "consumer failed: {status}");
        line.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

fn num(r: &BTreeMap<String, String>, key: &str) -> f64 {
    r.get(key).and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// Scenarios.
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

fn tput_from(r: &BTreeMap<String, String>, size: usize, produced: u64, prod_secs: f64) -> Tput {
    let delivered = num(r, "delivered");
    let lost = num(r, "lost");
    let secs = num(r, "secs").max(1e-9);
    Tput {
        delivered_per_s: delivered / secs,
        bytes_per_s: delivered * size as f64 / secs,
        loss_pct: if delivered + lost > 0.0 {
            100.0 * lost / (delivered + lost)
        } else {
            0.0
        },
        produced_per_s: produced as f64 / prod_secs,
        bad: num(r, "bad") as u64,
        lapped: num(r, "lapped") as u64,
        torn: num(r, "torn") as u64,
    }
}

/// How `lane_tput` writes: a single-thread `LaneWriter` (with the doorbell page, if any), or
/// the `SharedLaneWriter` a `Publisher` uses (claim, copy into `payload_mut`, commit: what
/// `emit_raw` does; no doorbell).
enum TputWriter {
    Single(LaneWriter<ShmMem>),
    Shared(SharedLaneWriter<ShmMem>),
}

/// Lane throughput: the producer writes `size`-byte records for `dur`, then closes the lane.
fn lane_tput(size: usize, role: &str, with_bell: bool, shared: bool, dur: Duration) -> Tput {
    let lane = ShmLane::create("bench-tput", &LaneConfig::default()).unwrap();
    let bells = with_bell.then(|| Arc::new(DoorbellPage::create("bench-bells").unwrap()));
    let consumer = Consumer::spawn(role, Some(&lane), bells.as_deref(), Stdio::null());
    let mut w = if shared {
        TputWriter::Shared(lane.lane().shared_writer().unwrap())
    } else {
        let mut w = lane.lane().writer().unwrap();
        if let Some(b) = &bells {
            w.set_doorbells(Some((Arc::clone(b), 1)));
        }
        TputWriter::Single(w)
    };
    let mut payload = vec![0xa5u8; size];
    let check_every: u64 = if size <= 4096 { 256 } else { 1 };
    let start = Instant::now();
    let deadline = start + dur;
    let mut n = 0u64;
    loop {
        payload[..8].copy_from_slice(&n.to_le_bytes());
        payload[size - 1] = n as u8;
        match &mut w {
            TputWriter::Single(w) => {
                w.write_bytes(META, &payload).unwrap();
            }
            TputWriter::Shared(w) => {
                let mut claim = w.claim(size, META).unwrap();
                claim.payload_mut().copy_from_slice(&payload);
                claim.commit();
            }
        }
        n += 1;
        if n % check_every == 0 && Instant::now() >= deadline {
            break;
        }
    }
    let prod_secs = start.elapsed().as_secs_f64();
    match w {
        TputWriter::Single(mut w) => {
            w.close();
            w.ring();
        }
        TputWriter::Shared(w) => w.close(),
    }
    let r = consumer.finish();
    tput_from(&r, size, n, prod_secs)
}

/// UDS throughput of 64-byte messages: one `write` each, or through a 64 KiB `BufWriter`.
fn uds_tput(buffered: bool, dur: Duration) -> Tput {
    let (mine, theirs) = UnixStream::pair().unwrap();
    let consumer = Consumer::spawn("uds-tput", None, None, Stdio::from(OwnedFd::from(theirs)));
    let mut msg = [0x5au8; SMALL];
    let start = Instant::now();
    let deadline = start + dur;
    let mut n = 0u64;
    let mut sink: Box<dyn Write> = if buffered {
        Box::new(BufWriter::with_capacity(64 << 10, mine))
    } else {
        Box::new(mine)
    };
    loop {
        msg[..8].copy_from_slice(&n.to_le_bytes());
        sink.write_all(&msg).unwrap();
        n += 1;
        if n % 256 == 0 && Instant::now() >= deadline {
            break;
        }
    }
    sink.flush().unwrap();
    let prod_secs = start.elapsed().as_secs_f64();
    drop(sink);
    let r = consumer.finish();
    tput_from(&r, SMALL, n, prod_secs)
}

/// In-process reference: copy a 1 MiB buffer into a rotating destination of `dst_len` bytes.
fn memcpy_ref(dst_len: usize, dur: Duration) -> f64 {
    let src = vec![0xa5u8; LARGE];
    let mut dst = vec![0u8; dst_len];
    let slots = dst_len / LARGE;
    let start = Instant::now();
    let mut n = 0usize;
    while start.elapsed() < dur {
        let off = (n % slots) * LARGE;
        dst[off..off + LARGE].copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        n += 1;
    }
    (n * LARGE) as f64 / start.elapsed().as_secs_f64()
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

fn lat_from(r: &BTreeMap<String, String>) -> Lat {
    let mut v: Vec<u64> = r
        .get("lat")
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    // Drop the first 2 % (warm-up: first laps, caches, frequency).
    let skip = v.len() / 50;
    v.drain(..skip);
    v.sort_unstable();
    let pct = |p: f64| -> u64 {
        if v.is_empty() {
            return 0;
        }
        let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    };
    let delivered = num(r, "delivered").max(1.0);
    assert_eq!(num(r, "bad"), 0.0, "corrupt latency records");
    Lat {
        n: v.len(),
        p50: pct(0.50),
        p90: pct(0.90),
        p99: pct(0.99),
        p999: pct(0.999),
        max: v.last().copied().unwrap_or(0),
        lost: num(r, "lost") as u64,
        sleeps_per_rec: num(r, "sleeps") / delivered,
    }
}

/// Busy-waits until `deadline` (CLOCK_MONOTONIC ns).
fn pace(deadline: u64) {
    while mono_ns() < deadline {
        spin_loop();
    }
}

/// Lane latency: a 64-byte record with a CLOCK_MONOTONIC stamp every `LAT_INTERVAL_NS`.
fn lane_latency(role: &str, with_bell: bool, dur: Duration) -> Lat {
    let lane = ShmLane::create("bench-lat", &LaneConfig::default()).unwrap();
    let bells = Arc::new(DoorbellPage::create("bench-bells").unwrap());
    let consumer = Consumer::spawn(role, Some(&lane), Some(&bells), Stdio::null());
    let mut w = lane.lane().writer().unwrap();
    if with_bell {
        w.set_doorbells(Some((Arc::clone(&bells), 1)));
    }
    let count = dur.as_nanos() as u64 / LAT_INTERVAL_NS;
    let mut payload = [0u8; SMALL];
    let mut next = mono_ns() + LAT_INTERVAL_NS;
    for i in 0..count {
        pace(next);
        next += LAT_INTERVAL_NS;
        payload[..8].copy_from_slice(&mono_ns().to_le_bytes());
        payload[8..16].copy_from_slice(&i.to_le_bytes());
        w.write_bytes(META, &payload).unwrap();
    }
    w.close();
    w.ring();
    lat_from(&consumer.finish())
}

/// UDS latency: the same records over a socket, one `write` each; blocking reads.
fn uds_latency(dur: Duration) -> Lat {
    let (mut mine, theirs) = UnixStream::pair().unwrap();
    let consumer = Consumer::spawn("uds-lat", None, None, Stdio::from(OwnedFd::from(theirs)));
    let count = dur.as_nanos() as u64 / LAT_INTERVAL_NS;
    let mut msg = [0u8; SMALL];
    let mut next = mono_ns() + LAT_INTERVAL_NS;
    for i in 0..count {
        pace(next);
        next += LAT_INTERVAL_NS;
        msg[..8].copy_from_slice(&mono_ns().to_le_bytes());
        msg[8..16].copy_from_slice(&i.to_le_bytes());
        mine.write_all(&msg).unwrap();
    }
    drop(mine);
    lat_from(&consumer.finish())
}

/// Idle consumer CPU: % of one CPU over `window`, and wakeups/s.
fn idle_cpu(role: &str, window: Duration) -> (f64, f64) {
    let lane = ShmLane::create("bench-idle", &LaneConfig::default()).unwrap();
    let bells = Arc::new(DoorbellPage::create("bench-bells").unwrap());
    let consumer = Consumer::spawn(role, Some(&lane), Some(&bells), Stdio::null());
    let mut w = lane.lane().writer().unwrap();
    w.set_doorbells(Some((Arc::clone(&bells), 1)));
    std::thread::sleep(Duration::from_millis(100));
    let pid = consumer.pid();
    let (c0, t0) = (cpu_ns(pid).unwrap(), Instant::now());
    std::thread::sleep(window);
    let (c1, wall) = (cpu_ns(pid).unwrap(), t0.elapsed());
    w.close();
    w.ring();
    let r = consumer.finish();
    let secs = wall.as_secs_f64();
    (
        100.0 * (c1 - c0) as f64 / 1e9 / secs,
        num(&r, "wakeups") / num(&r, "secs").max(1e-9),
    )
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
