//! The machine's own limits, measured in the same run as the peers: memcpy bandwidth for
//! 1 MiB blocks, the round trip of one cache line between two processes on the two CPUs, and
//! how fast bytes one of them writes reach the other (a reader following a writer through a
//! ring, as a consumer reading in batches follows its producer).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use snapbus_bus::lane::{LaneConfig, ShmLane};
use snapbus_bus::mem::LaneMem;

use crate::common::{mono_nanos, pin, process_cpu_nanos, say};

/// `child memcpy`'s result.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct MemcpyReport {
    /// 1 MiB blocks copied into a rotating 64 MiB destination (memory bandwidth), GB/s.
    pub(crate) rotating_gbytes_per_sec: f64,
    /// The same into a rotating 16 MiB and 8 MiB destination (the sizes of a ring meant to
    /// fit the cache), GB/s.
    #[serde(default)]
    pub(crate) rotating_16m_gbytes_per_sec: f64,
    #[serde(default)]
    pub(crate) rotating_8m_gbytes_per_sec: f64,
    /// 1 MiB copied again and again into the same 1 MiB (cache bandwidth), GB/s.
    pub(crate) resident_gbytes_per_sec: f64,
    /// One copy of 1 MiB every [`PACE_NANOS`] (the pace of the 1 MiB latency runs), into a
    /// rotating 8 MiB destination (a ring's next frame), median nanoseconds a copy: what the
    /// caches keep between two messages that far apart.
    #[serde(default)]
    pub(crate) paced_8m_nanos: f64,
    /// The same into the same 1 MiB every time (a sample reused, as a pool of one does).
    #[serde(default)]
    pub(crate) paced_resident_nanos: f64,
    /// CPU time of the process, nanoseconds.
    pub(crate) cpu_nanos: u64,
}

/// `child ping`'s result.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct PingReport {
    /// Median over batches of the time for one round trip of the line, nanoseconds.
    pub(crate) round_trip_nanos: f64,
    /// Bytes the ping side wrote, 64 KiB at a time, into an 8 MiB ring that the pong side
    /// read behind it, every word, per second of the second half of the phase (GB/s).
    #[serde(default)]
    pub(crate) stream_gbytes_per_sec: f64,
    /// CPU time of both processes, nanoseconds.
    pub(crate) cpu_nanos: u64,
}

/// `child pong`'s result.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct PongReport {
    /// CPU time of the process, nanoseconds.
    pub(crate) cpu_nanos: u64,
}

const BLOCK: usize = 1 << 20;
/// The pace of the paced copies: the 1 MiB latency runs' interval
/// ([`Plan::latency_shape`](crate::run::Plan::latency_shape)).
pub(crate) const PACE_NANOS: u64 = 5_000_000;
/// Paced copies timed per destination (the first tenth not counted).
const PACED_COPIES: usize = 110;

/// Copies 1 MiB blocks for `secs` seconds in each of two ways.
pub(crate) fn memcpy(cpu: Option<usize>, secs: f64) -> Result<()> {
    pin(cpu)?;
    let src = vec![7u8; BLOCK];
    let mut dst = vec![0u8; 64 * BLOCK];
    let rate = |dst: &mut [u8], rotate: bool| {
        // Touch everything once so page faults stay out of the measurement.
        dst.fill(1);
        let blocks = dst.len() / BLOCK;
        let t0 = mono_nanos();
        let deadline = t0 + (secs * 1e9) as u64;
        let mut n = 0usize;
        loop {
            let at = if rotate { n % blocks } else { 0 };
            dst[at * BLOCK..(at + 1) * BLOCK].copy_from_slice(&src);
            n += 1;
            std::hint::black_box(&dst[at * BLOCK]);
            if n % 16 == 0 && mono_nanos() >= deadline {
                break;
            }
        }
        (n * BLOCK) as f64 / (mono_nanos() - t0) as f64
    };
    let rotating = rate(&mut dst, true);
    let rotating_16m = rate(&mut dst[..16 * BLOCK], true);
    let rotating_8m = rate(&mut dst[..8 * BLOCK], true);
    let resident = rate(&mut dst[..BLOCK], false);
    let paced_8m = paced(&src, &mut dst[..8 * BLOCK]);
    let paced_resident = paced(&src, &mut dst[..BLOCK]);
    say(&format!(
        "result {}",
        serde_json::to_string(&MemcpyReport {
            rotating_gbytes_per_sec: rotating,
            rotating_16m_gbytes_per_sec: rotating_16m,
            rotating_8m_gbytes_per_sec: rotating_8m,
            resident_gbytes_per_sec: resident,
            paced_8m_nanos: paced_8m,
            paced_resident_nanos: paced_resident,
            cpu_nanos: process_cpu_nanos("self"),
        })?
    ))
}

/// One 1 MiB copy of `src` into `dst` (rotating through it) every [`PACE_NANOS`], spinning in
/// between as the latency runs' producers do: the median nanoseconds a copy took.
fn paced(src: &[u8], dst: &mut [u8]) -> f64 {
    let blocks = dst.len() / BLOCK;
    let mut took = Vec::with_capacity(PACED_COPIES);
    let mut next = mono_nanos();
    for n in 0..PACED_COPIES {
        next += PACE_NANOS;
        while mono_nanos() < next {
            std::hint::spin_loop();
        }
        let at = n % blocks;
        let t0 = mono_nanos();
        dst[at * BLOCK..(at + 1) * BLOCK].copy_from_slice(src);
        std::hint::black_box(&dst[at * BLOCK]);
        took.push(mono_nanos() - t0);
    }
    let mut took = took.split_off(PACED_COPIES / 10);
    took.sort_unstable();
    took[took.len() / 2] as f64
}

/// The word both processes write: the first of the lane's data area (a fresh lane's data is
/// never written by a lane writer here; the lane is only a shared, sealed memfd).
fn shared_word(lane: &ShmLane) -> Result<&AtomicU64> {
    let word = lane.lane().geometry().data_off as usize / 8;
    lane.lane()
        .mem()
        .get(word)
        .context("word out of the mapping")
}

/// A value the pong side never answers: stop the round trips, and read the stream.
const STOP: u64 = u64::MAX - 1;

/// The stream's ring: `STREAM_RING` bytes at `STREAM_AT` in the lane's data area, written
/// `STREAM_CHUNK` bytes at a time, never more than half the ring ahead of the reader.
const STREAM_AT: usize = 64 << 10;
const STREAM_RING: usize = 8 << 20;
const STREAM_CHUNK: usize = 64 << 10;

/// The stream's shared words, each on a line of its own (word indices from the data area's
/// start): the writer's tail, the reader's head, and the tail the writer stopped at (0 while
/// it writes), all in words.
const TAIL_WORD: usize = 8;
const HEAD_WORD: usize = 16;
const END_WORD: usize = 24;

/// The stream's shared words and ring of `lane`.
struct Stream<'a> {
    tail: &'a AtomicU64,
    head: &'a AtomicU64,
    end: &'a AtomicU64,
    ring: &'a [AtomicU64],
}

impl Stream<'_> {
    fn of(lane: &ShmLane) -> Result<Stream<'_>> {
        let base = lane.lane().geometry().data_off as usize / 8;
        let mem = lane.lane().mem();
        let word = |i: usize| mem.get(base + i).context("word out of the mapping");
        Ok(Stream {
            tail: word(TAIL_WORD)?,
            head: word(HEAD_WORD)?,
            end: word(END_WORD)?,
            ring: mem
                .span(base + STREAM_AT / 8, STREAM_RING / 8)
                .context("ring out of the mapping")?,
        })
    }

    /// The writer: chunks for `secs` seconds (flow-controlled by the reader's head); GB/s over
    /// the second half.
    fn write(&self, secs: f64) -> f64 {
        let (words, chunk) = (STREAM_RING / 8, STREAM_CHUNK / 8);
        let mask = words - 1;
        let (t0, mut pos) = (mono_nanos(), 0usize);
        let half = t0 + (secs * 0.5e9) as u64;
        let end = t0 + (secs * 1e9) as u64;
        let mut from = None;
        loop {
            let now = mono_nanos();
            if now >= end {
                break;
            }
            if from.is_none() && now >= half {
                from = Some((now, pos));
            }
            while pos - self.head.load(Ordering::Acquire) as usize > words / 2 - chunk {
                std::hint::spin_loop();
            }
            for i in pos..pos + chunk {
                // Data, not zeros (lines of zeros reach memory faster than data).
                self.ring[i & mask].store(i as u64 | 1, Ordering::Relaxed);
            }
            pos += chunk;
            self.tail.store(pos as u64, Ordering::Release);
        }
        self.end.store(pos as u64, Ordering::Release);
        let (t, p) = from.unwrap_or((t0, 0));
        (pos - p) as f64 * 8.0 / (mono_nanos() - t) as f64
    }

    /// The reader: every word up to the writer's tail, until the tail it stopped at.
    fn read(&self) -> u64 {
        let mask = STREAM_RING / 8 - 1;
        let (mut pos, mut sum) = (0u64, 0u64);
        loop {
            let tail = self.tail.load(Ordering::Acquire);
            for i in pos..tail {
                sum = sum.wrapping_add(self.ring[i as usize & mask].load(Ordering::Relaxed));
            }
            pos = tail;
            self.head.store(pos, Ordering::Release);
            let end = self.end.load(Ordering::Acquire);
            if end != 0 && pos >= end {
                return sum;
            }
            std::hint::spin_loop();
        }
    }
}

/// The ping side: creates the shared page, prints `ready <pid>:<fd>`, then for `secs`
/// seconds writes odd numbers and waits for the pong side's next even one.
pub(crate) fn ping(cpu: Option<usize>, secs: f64) -> Result<()> {
    pin(cpu)?;
    let lane = ShmLane::create(
        "compare-pingpong",
        &LaneConfig {
            capacity: 16 << 20,
            max_frame: 8 << 10,
            block_size: 64 << 10,
        },
    )?;
    let word = shared_word(&lane)?;
    say(&format!(
        "ready {}:{}",
        std::process::id(),
        lane.fd().as_raw_fd()
    ))?;
    // The pong side says hello by writing 2.
    let t0 = mono_nanos();
    while word.load(Ordering::Acquire) != 2 {
        if mono_nanos() - t0 > 30_000_000_000 {
            bail!("the pong side never answered");
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    const BATCH: u64 = 10_000;
    let mut v = 2u64;
    let mut per_trip = Vec::new();
    let deadline = mono_nanos() + (secs * 1e9) as u64;
    while mono_nanos() < deadline || per_trip.is_empty() {
        let b0 = mono_nanos();
        for _ in 0..BATCH {
            word.store(v + 1, Ordering::Release);
            while word.load(Ordering::Acquire) != v + 2 {
                std::hint::spin_loop();
            }
            v += 2;
        }
        per_trip.push((mono_nanos() - b0) as f64 / BATCH as f64);
    }
    word.store(STOP, Ordering::Release);
    per_trip.sort_by(f64::total_cmp);
    let stream_gbytes_per_sec = Stream::of(&lane)?.write(secs);
    say(&format!(
        "result {}",
        serde_json::to_string(&PingReport {
            round_trip_nanos: per_trip[per_trip.len() / 2],
            stream_gbytes_per_sec,
            cpu_nanos: process_cpu_nanos("self"),
        })?
    ))
}

/// The pong side: maps the ping side's page read-write and answers every odd number with the
/// next even one; then reads the ping side's stream.
pub(crate) fn pong(cpu: Option<usize>, rendezvous: &str) -> Result<()> {
    pin(cpu)?;
    let (pid, fd) = rendezvous
        .split_once(':')
        .with_context(|| format!("bad rendezvous {rendezvous:?}"))?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))?;
    let lane = ShmLane::open_rw(OwnedFd::from(file))?;
    let word = shared_word(&lane)?;
    word.store(2, Ordering::Release);
    loop {
        let v = word.load(Ordering::Acquire);
        if v == STOP {
            break;
        }
        if v % 2 == 1 {
            word.store(v + 1, Ordering::Release);
        } else {
            std::hint::spin_loop();
        }
    }
    std::hint::black_box(Stream::of(&lane)?.read());
    say(&format!(
        "done {}",
        serde_json::to_string(&PongReport {
            cpu_nanos: process_cpu_nanos("self"),
        })?
    ))
}
