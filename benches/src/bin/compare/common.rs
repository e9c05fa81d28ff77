//! What every peer shares: the message layout, the clock, pinning, CPU time, the producer's
//! send loop and the consumer's tally.
//!
//! Every message is `size` bytes: the sequence number (`u64` LE) at 0, the send time
//! (`CLOCK_MONOTONIC` nanoseconds, `u64` LE; 0 in throughput runs) at 8, and the sequence
//! number again in the last 8 bytes (sizes ≥ 24), so a consumer checks both ends of every
//! message it receives. The end of a run is a message whose sequence number is [`END_SEQ`].

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// Bytes of the message header (sequence number, send time).
pub(crate) const HEADER_LEN: usize = 16;
/// The sequence number of the end-of-run message.
pub(crate) const END_SEQ: u64 = u64::MAX;
/// Latency samples discarded at the start of a run (connection set-up, first page faults),
/// for every peer alike.
pub(crate) const WARMUP_FRACTION: f64 = 0.05;

/// What a run measures.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize, Deserialize,
)]
pub(crate) enum Mode {
    /// As many messages as possible for `--secs`; delivered messages per second.
    Throughput,
    /// `--count` messages, one every `--interval-nanos`; one-way latency of each.
    Latency,
}

/// How a consumer waits for the next message.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize, Deserialize,
)]
pub(crate) enum Wait {
    /// Busy-polls (burns its core).
    Spin,
    /// Blocks in the kernel (futex, `read`, …) when there is nothing to read.
    Sleep,
}

impl Wait {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Wait::Spin => "spin",
            Wait::Sleep => "sleep",
        }
    }
}

/// One side of one run (the arguments of `compare child …`).
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct RunArgs {
    /// The peer (see `compare --help`).
    #[arg(long)]
    pub(crate) peer: String,
    /// Message size in bytes (at least 16).
    #[arg(long)]
    pub(crate) size: usize,
    /// Throughput or latency.
    #[arg(long, value_enum)]
    pub(crate) mode: Mode,
    /// How the consumer waits.
    #[arg(long, value_enum, default_value = "sleep")]
    pub(crate) wait: Wait,
    /// Throughput: how long the producer sends, in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) secs: f64,
    /// Latency: how many messages.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) count: u64,
    /// Latency: nanoseconds between two messages.
    #[arg(long, default_value_t = 50_000)]
    pub(crate) interval_nanos: u64,
    /// The CPU to pin this process to.
    #[arg(long)]
    pub(crate) cpu: Option<usize>,
    /// The other CPU (for peers that run both sides in one process).
    #[arg(long)]
    pub(crate) other_cpu: Option<usize>,
    /// Where to meet: what the consumer printed on its `ready` line.
    #[arg(long, default_value = "")]
    pub(crate) rendezvous: String,
    /// A private directory for sockets and bus directories, removed by the parent.
    #[arg(long)]
    pub(crate) scratch: PathBuf,
    /// The consumer reads every byte of every message (a checksum it verifies), not only the
    /// words it checks: what a consumer that uses the whole payload pays.
    #[arg(long)]
    pub(crate) every_byte: bool,
}

impl RunArgs {
    /// These arguments as a `compare child <role>` command line.
    pub(crate) fn to_argv(&self) -> Vec<String> {
        use clap::ValueEnum;
        let name = |v: Option<clap::builder::PossibleValue>| {
            v.map(|v| v.get_name().to_owned()).unwrap_or_default()
        };
        let mut v = vec![
            "--peer".into(),
            self.peer.clone(),
            "--size".into(),
            self.size.to_string(),
            "--mode".into(),
            name(self.mode.to_possible_value()),
            "--wait".into(),
            name(self.wait.to_possible_value()),
            "--secs".into(),
            self.secs.to_string(),
            "--count".into(),
            self.count.to_string(),
            "--interval-nanos".into(),
            self.interval_nanos.to_string(),
            "--scratch".into(),
            self.scratch.display().to_string(),
        ];
        for (flag, cpu) in [("--cpu", self.cpu), ("--other-cpu", self.other_cpu)] {
            if let Some(c) = cpu {
                v.extend([flag.to_owned(), c.to_string()]);
            }
        }
        if !self.rendezvous.is_empty() {
            v.extend(["--rendezvous".to_owned(), self.rendezvous.clone()]);
        }
        if self.every_byte {
            v.push("--every-byte".to_owned());
        }
        v
    }
}

/// The consumer's result line (`result {json}`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ConsumerReport {
    /// Messages received intact (not counting the end message).
    pub(crate) delivered: u64,
    /// Messages missing from the sequence (overwritten or dropped by the transport).
    pub(crate) lost: u64,
    /// Messages with a wrong length, header or trailer, or out of order.
    pub(crate) bad: u64,
    /// From the first message received to the end message, nanoseconds.
    pub(crate) window_nanos: u64,
    /// Latency runs: percentiles of the one-way latency (after the warm-up), nanoseconds.
    pub(crate) p50_nanos: Option<u64>,
    /// 99th percentile.
    pub(crate) p99_nanos: Option<u64>,
    /// Latency samples behind the percentiles.
    pub(crate) samples: u64,
    /// CPU time of the whole process, nanoseconds.
    pub(crate) cpu_nanos: u64,
    /// Throughput runs with a producer process: messages it sent per second of its sending
    /// time (filled in by the parent from the producer's report). Above the delivered rate,
    /// the consumer is the slower side.
    #[serde(default)]
    pub(crate) sent_per_sec: Option<f64>,
}

/// The producer's result line (`done {json}`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct ProducerReport {
    /// Messages sent (not counting the end message).
    pub(crate) sent: u64,
    /// CPU time of the whole process, nanoseconds.
    pub(crate) cpu_nanos: u64,
}

/// `CLOCK_MONOTONIC` in nanoseconds (the same clock as Python's `time.monotonic_ns`, so the
/// send time in a message means the same in every process).
#[inline]
pub(crate) fn mono_nanos() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Pins the calling thread (and threads it starts later) to `cpu`.
pub(crate) fn pin(cpu: Option<usize>) -> Result<()> {
    if let Some(cpu) = cpu {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set)
            .with_context(|| format!("cannot pin to CPU {cpu}"))?;
    }
    Ok(())
}

/// CPU time (user + system, every thread) of process `pid` ("self" for this one), in
/// nanoseconds, from `/proc/<pid>/stat` (clock ticks of 10 ms).
pub(crate) fn process_cpu_nanos(pid: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (tick(11) + tick(12)) * 10_000_000
}

/// A message of `len` bytes before its stamp: a byte pattern that is not zero anywhere but
/// where [`stamp`] writes (the header's two words, and the trailer of a message of 24 bytes or
/// more). Real data: a zero-filled buffer of 1 MiB is, untouched, the kernel's one zero page
/// mapped 256 times, which a producer reads from its L1 cache, as no camera frame or array
/// could be read.
pub(crate) fn unstamped(len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 | 1)
        .collect();
    m[..len.min(HEADER_LEN)].fill(0);
    if len >= 24 {
        m[len - 8..].fill(0);
    }
    m
}

/// Writes the message header (and trailer) for sequence number `seq` sent at `t_nanos`.
#[inline]
pub(crate) fn stamp(buf: &mut [u8], seq: u64, t_nanos: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&t_nanos.to_le_bytes());
    let n = buf.len();
    if n >= 24 {
        buf[n - 8..].copy_from_slice(&seq.to_le_bytes());
    }
}

/// Prints one protocol line to the parent.
pub(crate) fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// The producer's side of a run, for every peer: announce `armed`, wait for the parent's
/// `go` (the consumer is connected by then), send, then the end message.
///
/// `send` gets `prefix` followed by the message (a transport's own framing, e.g. a length,
/// so that sending is one copy) and copies it into the transport; `flush` pushes out anything
/// a batching transport still holds.
pub(crate) fn run_producer(
    args: &RunArgs,
    prefix: &[u8],
    mut send: impl FnMut(&[u8]) -> Result<()>,
    mut flush: impl FnMut() -> Result<()>,
) -> Result<ProducerReport> {
    if args.size < HEADER_LEN {
        bail!("--size must be at least {HEADER_LEN} bytes");
    }
    let mut buf = [prefix, &unstamped(args.size)].concat();
    let at = prefix.len();
    armed_then_go()?;
    let mut sent = 0u64;
    match args.mode {
        Mode::Throughput => {
            let deadline = mono_nanos() + (args.secs * 1e9) as u64;
            loop {
                for _ in 0..64 {
                    stamp(&mut buf[at..], sent, 0);
                    send(&buf)?;
                    sent += 1;
                }
                if mono_nanos() >= deadline {
                    break;
                }
            }
        }
        Mode::Latency => {
            let mut next = mono_nanos() + args.interval_nanos;
            while sent < args.count {
                let mut now = mono_nanos();
                while now < next {
                    std::hint::spin_loop();
                    now = mono_nanos();
                }
                stamp(&mut buf[at..], sent, now);
                send(&buf)?;
                flush()?;
                sent += 1;
                // A transport that fell far behind does not get a burst to catch up with.
                next = (next + args.interval_nanos).max(now);
            }
        }
    }
    stamp(&mut buf[at..], END_SEQ, 0);
    send(&buf)?;
    flush()?;
    Ok(ProducerReport {
        sent,
        cpu_nanos: process_cpu_nanos("self"),
    })
}

/// Tells the parent the producer is armed, then waits for its `go`.
fn armed_then_go() -> Result<()> {
    say("armed")?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim() != "go" {
        bail!("expected `go` from the parent, got {line:?}");
    }
    Ok(())
}

/// [`run_producer`] for a producer that sends `batch` messages at a time (`send_many` gets
/// them, each with `prefix` before it): throughput mode only (a batching transport holds
/// messages back, so it has no latency row). The end message goes alone.
pub(crate) fn run_producer_batched(
    args: &RunArgs,
    prefix: &[u8],
    batch: usize,
    mut send_many: impl FnMut(&[Vec<u8>]) -> Result<()>,
) -> Result<ProducerReport> {
    if args.size < HEADER_LEN {
        bail!("--size must be at least {HEADER_LEN} bytes");
    }
    if args.mode != Mode::Throughput {
        bail!("a batching producer has no latency run");
    }
    let mut bufs = vec![[prefix, &unstamped(args.size)].concat(); batch];
    let at = prefix.len();
    armed_then_go()?;
    let mut sent = 0u64;
    let deadline = mono_nanos() + (args.secs * 1e9) as u64;
    loop {
        for b in &mut bufs {
            stamp(&mut b[at..], sent, 0);
            sent += 1;
        }
        send_many(&bufs)?;
        if mono_nanos() >= deadline {
            break;
        }
    }
    stamp(&mut bufs[0][at..], END_SEQ, 0);
    send_many(&bufs[..1])?;
    Ok(ProducerReport {
        sent,
        cpu_nanos: process_cpu_nanos("self"),
    })
}

/// What a consumer read of one message: its length and the words the tally checks (and, with
/// `--every-byte`, the sum of all its words).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Head {
    /// The message's length in bytes.
    pub(crate) len: usize,
    /// Word 0: the sequence number.
    pub(crate) seq: Option<u64>,
    /// Word 1: the send time.
    pub(crate) t_nanos: Option<u64>,
    /// The last word (messages of 24 bytes or more): the sequence number again.
    pub(crate) trailer: Option<u64>,
    /// The wrapping sum of every 8-byte little-endian word (the last one zero-padded).
    pub(crate) sum: Option<u64>,
}

impl Head {
    /// The head of a message in a buffer (the sum only if `every_byte`).
    #[inline]
    pub(crate) fn of(msg: &[u8], every_byte: bool) -> Head {
        let word = |at: usize| {
            msg.get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let n = msg.len();
        Head {
            len: n,
            seq: word(0),
            t_nanos: word(8),
            trailer: if n >= 24 { word(n - 8) } else { None },
            sum: every_byte.then(|| word_sum(msg)),
        }
    }
}

/// The wrapping sum of `bytes` as little-endian 8-byte words, the last one zero-padded.
#[inline]
pub(crate) fn word_sum(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut sum = words
        .by_ref()
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .fold(0u64, u64::wrapping_add);
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        sum = sum.wrapping_add(u64::from_le_bytes(last));
    }
    sum
}

/// The consumer's count of one run.
pub(crate) struct Tally {
    size: usize,
    mode: Mode,
    every_byte: bool,
    /// The word sum of an [`unstamped`] message (with `every_byte`).
    unstamped_sum: u64,
    next_seq: u64,
    delivered: u64,
    lost: u64,
    bad: u64,
    first_nanos: Option<u64>,
    end_nanos: u64,
    latencies: Vec<u64>,
}

impl Tally {
    pub(crate) fn new(args: &RunArgs) -> Tally {
        Tally {
            size: args.size,
            mode: args.mode,
            every_byte: args.every_byte,
            unstamped_sum: if args.every_byte {
                word_sum(&unstamped(args.size))
            } else {
                0
            },
            next_seq: 0,
            delivered: 0,
            lost: 0,
            bad: 0,
            first_nanos: None,
            end_nanos: 0,
            latencies: Vec::with_capacity(match args.mode {
                Mode::Latency => args.count as usize,
                Mode::Throughput => 0,
            }),
        }
    }

    /// Counts one received message; `false` once the end message arrived. Reads the clock
    /// only for the first and the last message of a throughput run (a clock read costs about
    /// what a 64-byte message does), and for every message of a latency run.
    #[inline]
    pub(crate) fn on_message(&mut self, msg: &[u8]) -> bool {
        self.on_head(Head::of(msg, self.every_byte))
    }

    /// Whether this run's consumer reads every byte (`--every-byte`).
    pub(crate) fn every_byte(&self) -> bool {
        self.every_byte
    }

    /// [`Tally::on_message`] of a message the consumer read where it lies (only the words the
    /// tally checks, and the sum with `--every-byte`). Always inlined: in the batch consumers'
    /// drain loop a call per record was a tenth of the consumer's time.
    #[inline(always)]
    pub(crate) fn on_head(&mut self, h: Head) -> bool {
        let Some(seq) = h.seq else {
            self.bad += 1;
            return true;
        };
        if seq == END_SEQ {
            self.end_nanos = mono_nanos();
            return false;
        }
        let n = h.len;
        // The producer sends header and trailer words over an `unstamped` message (zeros
        // where they go: the words' sums add). The trailer at byte n - 8 straddles two words
        // when n is not a multiple of 8: its bits then land in the two words' sum rotated.
        let trailer = if n >= 24 {
            seq.rotate_left(8 * (n % 8) as u32)
        } else {
            0
        };
        let sum_ok = !self.every_byte
            || h.sum
                == Some(
                    seq.wrapping_add(h.t_nanos.unwrap_or(0))
                        .wrapping_add(trailer)
                        .wrapping_add(self.unstamped_sum),
                );
        if n != self.size || (n >= 24 && h.trailer != Some(seq)) || seq < self.next_seq || !sum_ok {
            self.bad += 1;
            return true;
        }
        self.lost += seq - self.next_seq;
        self.next_seq = seq + 1;
        self.delivered += 1;
        match self.mode {
            Mode::Throughput => {
                if self.first_nanos.is_none() {
                    self.first_nanos = Some(mono_nanos());
                }
            }
            Mode::Latency => {
                let now = mono_nanos();
                self.first_nanos.get_or_insert(now);
                self.latencies
                    .push(now.saturating_sub(h.t_nanos.unwrap_or(now)));
            }
        }
        true
    }

    /// Messages lost after the last one received (the end message carries no count, so the
    /// consumer is told the producer's total when it is known).
    pub(crate) fn report(mut self) -> ConsumerReport {
        let window_nanos = self
            .end_nanos
            .saturating_sub(self.first_nanos.unwrap_or(self.end_nanos));
        let skip = (self.latencies.len() as f64 * WARMUP_FRACTION) as usize;
        let lat = &mut self.latencies[skip..];
        lat.sort_unstable();
        let pct =
            |p: f64| (!lat.is_empty()).then(|| lat[((lat.len() - 1) as f64 * p).round() as usize]);
        ConsumerReport {
            delivered: self.delivered,
            lost: self.lost,
            bad: self.bad,
            window_nanos,
            p50_nanos: pct(0.50),
            p99_nanos: pct(0.99),
            samples: lat.len() as u64,
            cpu_nanos: process_cpu_nanos("self"),
            sent_per_sec: None,
        }
    }
}

/// The consumer's side of a run, for every peer: `ready <rendezvous>` (set up before this is
/// called), then receive until the end message, then `result {json}`.
pub(crate) fn finish_consumer(tally: Tally) -> Result<()> {
    let report = tally.report();
    say(&format!("result {}", serde_json::to_string(&report)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(mode: Mode, size: usize) -> RunArgs {
        RunArgs {
            peer: "test".into(),
            size,
            mode,
            wait: Wait::Sleep,
            secs: 1.0,
            count: 100,
            interval_nanos: 1000,
            cpu: None,
            other_cpu: None,
            rendezvous: String::new(),
            scratch: PathBuf::from("/nonexistent"),
            every_byte: false,
        }
    }

    fn msg(size: usize, seq: u64, t: u64) -> Vec<u8> {
        let mut m = unstamped(size);
        stamp(&mut m, seq, t);
        m
    }

    #[test]
    fn tally_counts_gaps_as_lost_and_damage_as_bad() {
        let mut t = Tally::new(&args(Mode::Throughput, 64));
        for seq in [0, 1, 2, 5, 6] {
            assert!(t.on_message(&msg(64, seq, 0)));
        }
        // Wrong trailer, wrong length, a repeat: bad, and not delivered.
        let mut torn = msg(64, 7, 0);
        torn[60] ^= 1;
        assert!(t.on_message(&torn));
        assert!(t.on_message(&msg(32, 7, 0)));
        assert!(t.on_message(&msg(64, 6, 0)));
        assert!(t.on_message(&msg(64, 9, 0)));
        assert!(!t.on_message(&msg(64, END_SEQ, 0)));
        let r = t.report();
        assert_eq!((r.delivered, r.lost, r.bad), (6, 4, 3), "{r:?}");
        assert!(r.p50_nanos.is_none());
    }

    /// A message is data in every byte the stamp does not write (no zero page to read from),
    /// and zeros where it does (the every-byte sum adds the stamp to the message's own).
    #[test]
    fn unstamped_messages_hold_data_but_where_the_stamp_goes() {
        for len in [16, 23, 24, 64, 100, 4096, 1 << 20] {
            let m = unstamped(len);
            assert_eq!(m.len(), len);
            let stamped = |i: usize| i < HEADER_LEN || (len >= 24 && i >= len - 8);
            for (i, b) in m.iter().enumerate() {
                assert_eq!(*b == 0, stamped(i), "byte {i} of {len}: {b}");
            }
        }
        // The pages of a large message differ (each is memory of its own, not a shared page).
        let m = unstamped(1 << 20);
        assert_ne!(m[4096..8192], m[8192..12288]);
    }

    #[test]
    fn every_byte_tally_finds_a_damaged_byte_the_checked_words_miss() {
        let mut a = args(Mode::Throughput, 100);
        a.every_byte = true;
        let mut t = Tally::new(&a);
        assert!(t.every_byte());
        assert!(t.on_message(&msg(100, 0, 5)));
        let mut damaged = msg(100, 1, 5);
        damaged[40] ^= 2; // between header and trailer
        assert!(t.on_message(&damaged));
        // The tail past the last whole word (100 is not a multiple of 8) is summed too.
        let mut tail = msg(100, 2, 5);
        tail[90] ^= 7;
        assert!(t.on_message(&tail));
        assert!(t.on_message(&msg(100, 3, 5)));
        assert!(!t.on_message(&msg(100, END_SEQ, 0)));
        let r = t.report();
        assert_eq!((r.delivered, r.lost, r.bad), (2, 2, 2), "{r:?}");
        // Without --every-byte the same damage goes unseen.
        let mut t = Tally::new(&args(Mode::Throughput, 100));
        assert!(t.on_message(&damaged));
        assert_eq!(t.report().bad, 0);
    }

    #[test]
    fn tally_latency_drops_the_warmup_and_takes_percentiles() {
        let mut t = Tally::new(&args(Mode::Latency, 64));
        let now = mono_nanos();
        // 100 messages sent 1..=100 s ago: the first 5 (the oldest, 96..=100 s) are dropped.
        for seq in 0..100u64 {
            let age = (100 - seq) * 1_000_000_000;
            assert!(t.on_message(&msg(64, seq, now - age)));
        }
        assert!(!t.on_message(&msg(64, END_SEQ, 0)));
        let r = t.report();
        assert_eq!(r.samples, 95);
        let secs = |n: Option<u64>| n.map(|v| v / 1_000_000_000);
        // Latencies 1..=95 s (plus the test's own time): p50 is the 48th, p99 the 94th.
        assert_eq!(secs(r.p50_nanos), Some(48));
        assert_eq!(secs(r.p99_nanos), Some(94));
    }

    #[test]
    fn run_args_survive_the_command_line() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            a: RunArgs,
        }
        let mut a = args(Mode::Latency, 4096);
        a.cpu = Some(1);
        a.rendezvous = "x:1".into();
        a.every_byte = true;
        let argv = std::iter::once("t".to_owned()).chain(a.to_argv());
        let back = Wrap::parse_from(argv).a;
        assert_eq!(back.to_argv(), a.to_argv());
        assert_eq!(
            (back.mode, back.size, back.cpu),
            (Mode::Latency, 4096, Some(1))
        );
    }
}
