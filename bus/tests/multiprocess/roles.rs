//! What a child process does, by role, and the checksummed records every role agrees on.
//!
//! Record `seq` is fully determined by `seq`: its payload length (8 B–4 KiB, log-uniform, and
//! 64 KiB once in a thousand), its metadata, and its payload bytes (a splitmix64 stream seeded
//! by `seq`). A reader recomputes all of it for every delivered frame.

use std::fs::File;
use std::io::BufRead;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rustix::process::Signal;
use snapbus_bus::doorbell::DoorbellPage;
use snapbus_bus::lane::layout::{FRAME_ALIGN, FRAME_HEADER_LEN};
use snapbus_bus::lane::{
    Claim, ClaimError, Frame, FrameMeta, LaneConfig, LaneWriter, Poll, ReaderStats, RecordMeta,
    RunWritten, SharedLaneWriter, ShmLane, StartAt,
};
use snapbus_bus::mem::{LaneMem, ShmMem};

use super::harness::{PREFIX, open_bells, open_lane};

/// Frame header bytes.
pub(super) const FRAME_HEADER: u64 = FRAME_HEADER_LEN as u64;
/// Frame alignment.
const ALIGN: u64 = FRAME_ALIGN as u64;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A splitmix64 stream.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Payload length of record `seq`: 8 B to 4 KiB log-uniform, 64 KiB once in a thousand.
pub(super) fn payload_len(seq: u64) -> usize {
    let h = mix(seq ^ 0x0005_eed1_e550_f5e9_u64);
    if h % 1000 == 0 {
        return 64 << 10;
    }
    let base = 8u64 << ((h >> 16) % 10); // 8 ..= 4096
    (base + (h >> 32) % (base + 1)).min(4096) as usize
}

/// Ring bytes record `seq` takes (header + payload, aligned).
pub(super) fn frame_bytes(seq: u64) -> u64 {
    (FRAME_HEADER + payload_len(seq) as u64).next_multiple_of(ALIGN)
}

/// Metadata of record `seq`.
pub(super) fn meta(seq: u64) -> RecordMeta {
    RecordMeta {
        schema_key: (seq as u16) ^ 0x5a5a,
        schema_version: (seq >> 16) as u16,
        level: (seq % 7) as u8,
        emitter: 0x1234,
    }
}

fn seed(seq: u64) -> u64 {
    mix(seq.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0xc0ff_ee00_d15e_a5e5)
}

/// Fills `buf` with the payload bytes of record `seq` (any prefix of them if shorter).
pub(super) fn fill(seq: u64, buf: &mut [u8]) {
    let mut rng = Rng(seed(seq));
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&rng.next().to_le_bytes());
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&rng.next().to_le_bytes()[..n]);
}

/// Metadata of record `seq` written in runs of `run_len` records (`write_run`: a run's
/// records share the metadata of its first, `seq - seq % run_len`); 0: one record at a time.
pub(super) fn run_meta(seq: u64, run_len: u64) -> RecordMeta {
    meta(if run_len == 0 {
        seq
    } else {
        seq - seq % run_len
    })
}

/// Checks a delivered frame against record `meta.seq` (written in runs of `run_len`).
pub(super) fn verify(meta: &FrameMeta, payload: &[u8], run_len: u64) -> Result<(), String> {
    let seq = meta.seq;
    let want = run_meta(seq, run_len);
    let got = RecordMeta {
        schema_key: meta.schema_key,
        schema_version: meta.schema_version,
        level: meta.level,
        emitter: meta.emitter,
    };
    if got != want {
        return Err(format!("seq {seq}: meta {got:?}, expected {want:?}"));
    }
    if payload.len() != payload_len(seq) || meta.payload_len != payload.len() {
        return Err(format!(
            "seq {seq}: payload of {} bytes (meta says {}), expected {}",
            payload.len(),
            meta.payload_len,
            payload_len(seq)
        ));
    }
    let mut rng = Rng(seed(seq));
    let mut chunks = payload.chunks_exact(8);
    for (i, c) in (&mut chunks).enumerate() {
        if c != rng.next().to_le_bytes() {
            return Err(format!("seq {seq}: payload differs in word {i}"));
        }
    }
    let rest = chunks.remainder();
    if rest != &rng.next().to_le_bytes()[..rest.len()] {
        return Err(format!("seq {seq}: payload differs in its last bytes"));
    }
    Ok(())
}

/// Checks what a reader of checksummed records delivers: content, order, exact loss.
#[derive(Debug, Default)]
pub(super) struct Checker {
    /// Last delivered seq.
    pub(super) last: Option<u64>,
    /// `Lagged` reported since the last frame.
    lag: u64,
    /// Sum of all `Lagged` reports.
    pub(super) lagged: u64,
    pub(super) delivered: u64,
    /// Frames whose metadata or payload differ from the record of their seq.
    pub(super) corrupt: u64,
    /// Frames whose seq did not increase.
    pub(super) order_err: u64,
    /// Frames whose seq is not `last + 1 + lagged since`: loss not reported exactly.
    pub(super) acct_err: u64,
    pub(super) first_err: Option<String>,
    /// Reads made (the crash cases alternate the copying and the in-place path by it).
    pub(super) steps: u64,
    /// The producer writes runs of this many records (`MP_MODE=runs`); 0: one at a time.
    pub(super) run_len: u64,
}

impl Checker {
    /// Records one poll outcome; returns `true` for a delivered frame.
    pub(super) fn on(&mut self, poll: &Poll<'_>) -> bool {
        match poll {
            Poll::Frame(f) => {
                self.frame(f);
                true
            }
            Poll::Lagged(n) => {
                if *n == 0 {
                    self.err(self.last.unwrap_or(0), "Lagged(0)".into(), |c| {
                        &mut c.acct_err
                    });
                }
                self.lag += n;
                self.lagged += n;
                false
            }
            _ => false,
        }
    }

    fn err(&mut self, _seq: u64, msg: String, counter: impl FnOnce(&mut Checker) -> &mut u64) {
        *counter(self) += 1;
        if self.first_err.is_none() {
            self.first_err = Some(msg);
        }
    }

    fn frame(&mut self, f: &Frame<'_>) {
        let seq = f.meta.seq;
        // The lane is fresh and every reader delivered seq 0 first (the tests' handshake), so
        // the first record of the lane is 0.
        let expected = self.last.map_or(self.lag, |l| l + 1 + self.lag);
        if self.last.is_some_and(|l| seq <= l) {
            let msg = format!("seq {seq} delivered after {:?}", self.last);
            self.err(seq, msg, |c| &mut c.order_err);
        } else if seq != expected {
            let msg = format!(
                "seq {seq} after {:?} and Lagged({}): expected {expected}",
                self.last, self.lag
            );
            self.err(seq, msg, |c| &mut c.acct_err);
        }
        if let Err(e) = verify(&f.meta, f.payload, self.run_len) {
            self.err(seq, e, |c| &mut c.corrupt);
        }
        self.lag = 0;
        self.last = Some(self.last.map_or(seq, |l| l.max(seq)));
        self.delivered += 1;
    }

    /// `key=value` summary, with the reader's own stats.
    pub(super) fn summary(&self, stats: &ReaderStats) -> String {
        format!(
            "delivered={} lost={} lagged={} lapped={} torn={} garbage={} holes={} last_seq={} \
             corrupt={} order_err={} acct_err={} my_delivered={}",
            stats.delivered,
            stats.lost,
            self.lagged,
            stats.lapped,
            stats.torn,
            stats.garbage,
            stats.holes,
            self.last.map_or(-1, |l| l as i64),
            self.corrupt,
            self.order_err,
            self.acct_err,
            self.delivered,
        )
    }
}

fn env_u64(key: &str) -> Option<u64> {
    std::env::var(key).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{key}={v} is not a number"))
    })
}

fn env_str(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

/// Lane sizes from the environment (`MP_CAP`, `MP_MAX_FRAME`, `MP_BLOCK`).
fn lane_config() -> LaneConfig {
    LaneConfig {
        capacity: env_u64("MP_CAP").unwrap_or(1 << 20) as usize,
        max_frame: env_u64("MP_MAX_FRAME").unwrap_or(128 << 10) as usize,
        block_size: env_u64("MP_BLOCK").unwrap_or(64 << 10) as usize,
    }
}

/// Runs `role` in this (child) process.
pub(super) fn run(role: &str) {
    match role {
        "producer" => producer(),
        "reader" => reader(),
        "garbage_writer" => garbage_writer(),
        "garbage_reader" => garbage_reader(),
        "open_check" => open_check(),
        other => panic!("unknown role {other}"),
    }
}

fn kill_self() -> ! {
    let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::KILL);
    std::process::abort()
}

/// The producer's writer: the single `LaneWriter`, or (`MP_WRITER=shared`) the
/// `SharedLaneWriter` every `Publisher` writes through (which rings no doorbells itself: the
/// role rings them after each commit, as the publisher does).
enum Writer {
    Single(LaneWriter<ShmMem>),
    Shared(SharedLaneWriter<ShmMem>, Option<(Arc<DoorbellPage>, u64)>),
}

impl Writer {
    fn claim(&mut self, len: usize, meta: RecordMeta) -> Result<Claim<'_, ShmMem>, ClaimError> {
        match self {
            Writer::Single(w) => w.claim(len, meta),
            Writer::Shared(w, _) => w.claim(len, meta),
        }
    }

    fn write_run(&mut self, meta: RecordMeta, payloads: &[Vec<u8>]) -> RunWritten {
        match self {
            Writer::Single(w) => w.write_run(meta, payloads),
            Writer::Shared(w, _) => w.write_run(meta, payloads),
        }
    }

    fn ring(&self) {
        match self {
            Writer::Single(w) => w.ring(),
            Writer::Shared(_, Some((page, mask))) => page.ring_mask(*mask),
            Writer::Shared(_, None) => {}
        }
    }

    fn close(&mut self) {
        match self {
            Writer::Single(w) => w.close(),
            Writer::Shared(w, _) => w.close(),
        }
    }
}

/// Writes record `seq`: through `write_bytes` (every crash point, incl. `mid_payload`), or in
/// place through `claim` / `payload_mut` / `commit` (odd seqs in `mixed` mode; always with
/// the shared writer).
fn write_one(
    w: &mut Writer,
    seq: u64,
    in_place: bool,
    buf: &mut Vec<u8>,
) -> Result<(), ClaimError> {
    let len = payload_len(seq);
    if let (false, Writer::Single(single)) = (in_place, &mut *w) {
        buf.resize(len, 0);
        fill(seq, buf);
        let got = single.write_bytes(meta(seq), buf)?;
        assert_eq!(got, seq, "the lane numbers records like the test");
        return Ok(());
    }
    let mut claim = w.claim(len, meta(seq))?;
    assert_eq!(claim.seq(), seq, "the lane numbers records like the test");
    fill(seq, claim.payload_mut());
    claim.commit();
    w.ring();
    Ok(())
}

/// Without the `testpoints` feature: die like a writer killed at `point` while writing `seq`,
/// using only the public claim API (every point but `after_intent`, which is inside `claim`).
fn crash_emulated(w: &mut Writer, seq: u64, point: &str) -> ! {
    let len = payload_len(seq);
    let mut bytes = vec![0u8; len];
    fill(seq, &mut bytes);
    let mut claim = w.claim(len, meta(seq)).expect("claim");
    match point {
        "after_busy" => {}
        "mid_payload" => claim.payload_mut()[..len / 2].copy_from_slice(&bytes[..len / 2]),
        "before_commit" => claim.payload_mut().copy_from_slice(&bytes),
        "after_commit" => {
            claim.payload_mut().copy_from_slice(&bytes);
            claim.commit();
        }
        other => panic!("cannot emulate a crash at {other}"),
    }
    kill_self()
}

/// Creates a lane, prints `ready pid= fd=`, then obeys stdin: `write <n>` writes the next `n`
/// records and prints `wrote total= errors=`; `close` closes the lane, prints `closed` and
/// returns. `MP_MODE=bytes` writes everything with `write_bytes`; `MP_WRITER=shared` writes
/// through the shared writer instead (every record in place); `MP_BELL`/`MP_BELL_MASK` ring
/// consumers' doorbells; `MP_SELFKILL=<point>:<n>` emulates a crash at the n-th record.
fn producer() {
    let lane = ShmLane::create("snapbus-mp-producer", &lane_config()).expect("create lane");
    let bells = env_str("MP_BELL").map(|path| {
        let mask = env_u64("MP_BELL_MASK").unwrap_or(1);
        (Arc::new(open_bells(&path)), mask)
    });
    let mut w = if env_str("MP_WRITER").as_deref() == Some("shared") {
        Writer::Shared(lane.lane().shared_writer().expect("writer"), bells)
    } else {
        let mut w = lane.lane().writer().expect("writer");
        w.set_doorbells(bells);
        Writer::Single(w)
    };
    let mixed = !matches!(env_str("MP_MODE").as_deref(), Some("bytes" | "runs"));
    // `MP_MODE=runs`: records written `MP_RUN` at a time (`write_run`), runs starting at
    // multiples of `MP_RUN`, each with the metadata of its first record.
    let run_len = match env_str("MP_MODE").as_deref() {
        Some("runs") => env_u64("MP_RUN").unwrap_or(4),
        _ => 0,
    };
    let selfkill = env_str("MP_SELFKILL").map(|v| {
        let (point, n) = v.split_once(':').expect("MP_SELFKILL=<point>:<n>");
        (point.to_owned(), n.parse::<u64>().expect("n"))
    });
    println!(
        "{PREFIX}ready pid={} fd={}",
        std::process::id(),
        lane.fd().as_raw_fd()
    );
    let mut seq = 0u64;
    let mut errors = 0u64;
    let mut buf = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        let mut words = line.split_whitespace();
        match words.next() {
            Some("write") => {
                let n: u64 = words
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("write <n>");
                let end = seq + n;
                while run_len > 0 && seq < end {
                    let r = (run_len - seq % run_len).min(end - seq);
                    let payloads: Vec<Vec<u8>> = (seq..seq + r)
                        .map(|s| {
                            let mut b = vec![0u8; payload_len(s)];
                            fill(s, &mut b);
                            b
                        })
                        .collect();
                    let run = w.write_run(run_meta(seq, run_len), &payloads);
                    assert_eq!(
                        (run.first_seq, run.written, run.refused),
                        (seq, r as usize, None),
                        "a run of {r} from seq {seq}"
                    );
                    w.ring();
                    seq += r;
                }
                for _ in 0..if run_len > 0 { 0 } else { n } {
                    if let Some((point, k)) = &selfkill {
                        if seq + 1 == *k {
                            crash_emulated(&mut w, seq, point);
                        }
                    }
                    match write_one(&mut w, seq, mixed && seq % 2 == 1, &mut buf) {
                        Ok(()) => seq += 1,
                        Err(e) => {
                            if errors < 5 {
                                eprintln!("write of seq {seq} failed: {e}");
                            }
                            errors += 1;
                        }
                    }
                }
                println!("{PREFIX}wrote total={seq} errors={errors}");
            }
            Some("close") => {
                w.close();
                w.ring();
                let stats = lane.lane().stats();
                println!(
                    "{PREFIX}closed total={seq} errors={errors} committed={}",
                    stats.frames_committed
                );
                return;
            }
            other => panic!("producer: unknown command {other:?}"),
        }
    }
}

/// Maps `MP_LANE` read-only and reads it from the oldest record until the lane is closed,
/// checking every frame; sleeps on doorbell `MP_BELL_INDEX` of `MP_BELL` when idle. Prints
/// `ready`, `reading` (first frame), `milestone` (after `MP_MILESTONE` frames) and `result`.
fn reader() {
    let lane = open_lane(&env_str("MP_LANE").expect("MP_LANE"));
    let page = env_str("MP_BELL").map(|p| open_bells(&p));
    let bell = page.as_ref().map(|p| {
        p.bell(env_u64("MP_BELL_INDEX").unwrap_or(0) as usize)
            .expect("bell")
    });
    let nap = Duration::from_millis(env_u64("MP_SLEEP_MS").unwrap_or(50));
    let milestone = env_u64("MP_MILESTONE");
    // Print `progress delivered=<n>` whenever the count of delivered records reaches a
    // multiple of this (the paced stream waits for it before writing more).
    let progress = env_u64("MP_PROGRESS").filter(|&k| k > 0);
    let mut r = lane.lane().reader(StartAt::Oldest);
    let mut chk = Checker::default();
    let (mut idle_empty, mut idle_pending) = (0u64, 0u64);
    println!("{PREFIX}ready");
    loop {
        let poll = r.poll();
        let idle = matches!(poll, Poll::Empty | Poll::Pending);
        idle_empty += u64::from(matches!(poll, Poll::Empty));
        idle_pending += u64::from(matches!(poll, Poll::Pending));
        let closed = matches!(poll, Poll::Closed);
        if chk.on(&poll) {
            if chk.delivered == 1 {
                println!("{PREFIX}reading seq={}", chk.last.unwrap_or(0));
            }
            if Some(chk.delivered) == milestone {
                println!("{PREFIX}milestone delivered={}", chk.delivered);
            }
            if progress.is_some_and(|k| chk.delivered % k == 0) {
                println!("{PREFIX}progress delivered={}", chk.delivered);
            }
        }
        if closed {
            break;
        }
        if idle {
            match &bell {
                // Returns at once while a frame is being written (`Pending`); spins, then
                // sleeps until rung when there is nothing at all (`Empty`).
                Some(bell) => bell.wait_until(|| r.has_pending_bytes(), 100, nap),
                None => std::thread::yield_now(),
            }
        }
    }
    if let Some(e) = &chk.first_err {
        eprintln!("first error: {e}");
    }
    println!(
        "{PREFIX}result {} idle_empty={idle_empty} idle_pending={idle_pending}",
        chk.summary(&r.stats())
    );
}

/// Writes `MP_VALID` checksummed records into a new lane, then corrupts it as `MP_GARBAGE`
/// says (seeded by `MP_SEED`) with raw word stores, prints `ready pid= fd=` and waits for EOF
/// on stdin. Modes: `words` (random words anywhere past the header), `frames` (fake frame
/// headers with valid commit tags and insane contents), `noise` (the whole data area random),
/// `noise_all` (and the anchors), `counters` (garbage claim tail and final tail; `MP_VARIANT`
/// picks the tail). Every mode also writes a random state word.
fn garbage_writer() {
    let lane = ShmLane::create("snapbus-mp-garbage", &lane_config()).expect("create lane");
    let mut w = lane.lane().writer().expect("writer");
    let valid = env_u64("MP_VALID").unwrap_or(1000);
    let mut buf = Vec::new();
    let max_payload = lane.lane().geometry().max_frame as usize - FRAME_HEADER as usize;
    let mut last_len = 0;
    for seq in 0..valid {
        // Keep records within the lane's largest frame (no 64 KiB ones in a small lane).
        let len = payload_len(seq).min(max_payload);
        buf.resize(len, 0);
        fill(seq, &mut buf);
        w.write_bytes(meta(seq), &buf).expect("write");
        last_len = len as u64;
    }
    let mut rng = Rng(env_u64("MP_SEED").unwrap_or(1));
    let g = *lane.lane().geometry();
    let mem = lane.lane().mem();
    let store = |word: usize, v: u64| {
        if let Some(a) = mem.get(word) {
            a.store(v, Ordering::Relaxed);
        }
    };
    const CLAIM_TAIL: usize = 128 / 8;
    const STATE: usize = 256 / 8;
    const FINAL_TAIL: usize = 264 / 8;
    let tail = lane.lane().stats().claim_tail;
    let first = 4096 / 8; // anchors, then data
    let words = mem.len_words() - first;
    let data_word = |pos: u64| ((g.data_off + (pos & (g.capacity - 1))) / 8) as usize;
    let mode = env_str("MP_GARBAGE").unwrap_or_else(|| "words".into());
    match mode.as_str() {
        "words" => {
            for _ in 0..1 + rng.below(300) {
                let at = first + rng.below(words as u64) as usize;
                store(at, rng.next());
            }
        }
        "frames" => {
            // The last record's frame ends at the tail (any padding lies before it).
            let last_pos = tail - (FRAME_HEADER + last_len).next_multiple_of(ALIGN);
            for _ in 0..1 + rng.below(60) {
                let back = rng.below(g.capacity.min(tail.max(ALIGN))) & !(ALIGN - 1);
                let pos = tail.saturating_sub(back + ALIGN);
                let busy = rng.below(3) == 0;
                store(data_word(pos), g.tag(pos) ^ u64::from(busy));
                let len = match rng.below(6) {
                    0 => rng.next(),
                    1 => rng.below(FRAME_HEADER),
                    2 => g.max_frame + 8 + rng.below(1 << 20),
                    3 => g.capacity - (pos & (g.capacity - 1)) + 8 + rng.below(4096),
                    _ => FRAME_HEADER + rng.below(2048),
                };
                let kind = rng.below(7);
                store(
                    data_word(pos) + 1,
                    (len & 0xffff_ffff) | kind << 32 | rng.next() << 40,
                );
                store(data_word(pos) + 2, rng.next());
                store(
                    data_word(pos) + 3,
                    if rng.below(2) == 0 {
                        rng.next()
                    } else {
                        rng.below(valid + 10)
                    },
                );
                store(data_word(pos) + 4, rng.next());
            }
            // Most fake frames land inside payloads, where a reader never looks; one always
            // replaces a real frame's header (the last record's: every reader from the oldest
            // record reaches it), with a length no frame can have, committed or left busy.
            let busy = rng.below(2);
            store(data_word(last_pos), g.tag(last_pos) ^ busy);
            store(data_word(last_pos) + 1, rng.below(FRAME_HEADER) | 1 << 32);
        }
        "noise" | "noise_all" => {
            // `noise` keeps the anchors, so readers start inside the random data.
            let from = if mode == "noise" {
                g.data_off as usize / 8
            } else {
                first
            };
            for i in from..mem.len_words() {
                store(i, rng.next());
            }
        }
        "counters" => {
            let variant = env_u64("MP_VARIANT").unwrap_or_else(|| rng.below(9));
            let t = match variant {
                0 => 0,
                1 => tail.saturating_sub(8 + rng.below(4096) * 8),
                2 => tail + 8 * (1 + rng.below(64)),
                3 => tail + 3 * g.capacity + 8 * rng.below(g.capacity / 8),
                4 => u64::MAX,
                5 => u64::MAX - 8 * rng.below(1 << 14),
                6 => u64::MAX - g.capacity / 2,
                7 => 1 << 63,
                _ => rng.next(),
            };
            store(CLAIM_TAIL, t);
            store(FINAL_TAIL, if rng.below(2) == 0 { rng.next() } else { t });
        }
        other => panic!("unknown garbage mode {other}"),
    }
    // The state word: live, closed, dead, or garbage.
    store(STATE, [1, 2, 3, rng.next()][rng.below(4) as usize]);
    println!(
        "{PREFIX}ready pid={} fd={} mode={mode}",
        std::process::id(),
        lane.fd().as_raw_fd()
    );
    // Keep the lane (and this process) alive until the test closes stdin.
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
}

/// Maps `MP_LANE` (a lane full of garbage) and polls it until it goes quiet (`Empty` with
/// nothing pending, or `Closed`) or `MP_POLLS` polls; prints the counters. Must not crash.
fn garbage_reader() {
    let lane = open_lane(&env_str("MP_LANE").expect("MP_LANE"));
    let mut rng = Rng(env_u64("MP_SEED").unwrap_or(2));
    let start = match env_str("MP_START")
        .as_deref()
        .unwrap_or(["oldest", "latest", "time"][rng.below(3) as usize])
    {
        "oldest" => StartAt::Oldest,
        "latest" => StartAt::Latest,
        _ => StartAt::Time(rng.below(2) * rng.next()),
    };
    let mut r = lane.lane().reader(start);
    if rng.below(2) == 0 {
        r.set_writer_gone(true);
    } else {
        r.set_stall_timeout(Duration::ZERO);
    }
    let max_polls = env_u64("MP_POLLS").unwrap_or(100_000);
    let (mut polls, mut quiet, mut order_err, mut last) = (0u64, false, 0u64, None);
    let mut kinds = [0u64; 5];
    while polls < max_polls {
        polls += 1;
        match r.poll() {
            Poll::Frame(f) => {
                kinds[0] += 1;
                if last.is_some_and(|l| f.meta.seq <= l) {
                    order_err += 1;
                }
                last = Some(f.meta.seq);
                assert!(f.payload.len() as u64 <= lane.lane().geometry().max_frame);
            }
            Poll::Lagged(_) => kinds[1] += 1,
            Poll::Pending => kinds[2] += 1,
            Poll::Empty => {
                kinds[3] += 1;
                if !r.has_pending_bytes() {
                    quiet = true;
                    break;
                }
            }
            Poll::Closed => {
                kinds[4] += 1;
                quiet = true;
                break;
            }
        }
    }
    let s = r.stats();
    let start = match start {
        StartAt::Oldest => "oldest".to_owned(),
        StartAt::Latest => "latest".to_owned(),
        StartAt::Time(t) => format!("time:{t}"),
    };
    println!(
        "{PREFIX}result start={start} polls={polls} quiet={} delivered={} lost={} lapped={} \
         torn={} garbage={} holes={} order_err={order_err} frames={} lagged_polls={} \
         pending_polls={} empty_polls={} closed_polls={}",
        u8::from(quiet),
        s.delivered,
        s.lost,
        s.lapped,
        s.torn,
        s.garbage,
        s.holes,
        kinds[0],
        kinds[1],
        kinds[2],
        kinds[3],
        kinds[4]
    );
}

/// Tries `ShmLane::open` on each `label=path` of `MP_OPEN` (`,`-separated) and prints
/// `open label= ok=` plus the error text.
fn open_check() {
    for item in env_str("MP_OPEN").expect("MP_OPEN").split(',') {
        let (label, path) = item.split_once('=').expect("label=path");
        let result = File::open(path)
            .map_err(|e| e.to_string())
            .and_then(|f| ShmLane::open(OwnedFd::from(f)).map_err(|e| e.to_string()));
        match result {
            Ok(lane) => {
                // A lane that opens must also be readable without trouble.
                let mut r = lane.lane().reader(StartAt::Oldest);
                let mut n = 0;
                while let Poll::Frame(_) | Poll::Lagged(_) = r.poll() {
                    n += 1;
                }
                println!("{PREFIX}open label={label} ok=1 polled={n}");
            }
            Err(e) => println!(
                "{PREFIX}open label={label} ok=0 err={}",
                e.replace(' ', "_")
            ),
        }
    }
}
