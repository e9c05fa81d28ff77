//! loom models of the lane protocol and the doorbell.
//!
//! # Running
//!
//! ```text
//! # reduced set (CI):
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" \
//!     cargo test -p snapbus-bus --test loom --release -- --test-threads=1 --skip full_
//! # full set:
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" \
//!     cargo test -p snapbus-bus --test loom --release -- --test-threads=1
//! ```
//!
//! `CARGO_TARGET_DIR=target/loom` keeps the `--cfg loom` build from invalidating the normal build
//! cache. Each model prints how many executions loom explored and how long it took (visible with
//! `--nocapture`). The models set their own preemption bound (2 or 3); `LOOM_MAX_PREEMPTIONS`
//! overrides it, and the other `LOOM_*` variables (`LOOM_MAX_BRANCHES`, `LOOM_LOG`,
//! `LOOM_CHECKPOINT_FILE`, …) work as usual.
//!
//! Tests named `full_*` are the slow, wider models; everything else is the **reduced set for
//! CI** (`-- --skip full_`).
//!
//! # Geometry
//!
//! Under `--cfg loom` every lane word is a loom atomic, so the models use a tiny lane: capacity
//! 512 B, `max_frame` 64 B (`capacity / 8`, the default lane's ratio; the rule allows up to
//! `capacity / 4`, which changes no step of the protocol, only how far a lapped reader
//! resumes), anchor blocks of 128 B. The minimum capacity (64 KiB) and block size (4 KiB), and
//! the page alignment of the data area, are relaxed under `cfg(loom)` only (`lane/layout.rs`);
//! a 72 KiB lane costs ~2.5 ms per loom execution just to allocate. Frames are 64 B (16-byte payload) or 48 B (empty payload), so a
//! lap is 8 to 10 records.
//!
//! # What the models check
//!
//! Every delivered frame is checked against what its writer wrote: its position (from the
//! sequence number), header fields and every payload word are functions of the sequence number
//! (and writer thread), so a torn or stale copy fails. Per reader: sequence numbers strictly
//! increase (nothing twice), each gap between two delivered records is exactly the preceding
//! `Poll::Lagged` values (plus aborted sequence numbers), `ReaderStats::lost` equals the sum of
//! the `Lagged` values, nothing is counted as garbage or a hole, and once the writers finished
//! (and closed the lane) a drain reaches `Poll::Closed` with no `Pending` on the way:
//! `delivered + lost == written - first`, where `first` is the sequence number of the first
//! record the reader saw (loss is counted from there on; see the note in
//! `single_writer_wraps_under_reader`). A reader that was never lapped saw every record.
//!
//! - (a) `single_writer_wraps_under_reader` (CI): a `LaneWriter` wraps the ring (with an explicit
//!   PAD frame at the physical end) while a reader polls; the first lap is written before the
//!   threads start so the model spends its interleavings on the overwrite race.
//!   `full_single_writer_all_concurrent`: the whole run, 10 records, is concurrent.
//!   `single_writer_wraps_under_in_place_reader` (CI): the same race against a reader that
//!   reads the payload where it lies (`read_in_place`, word by word through the ring view).
//! - (b) `shared_writers_wrap_under_reader` (CI): two threads claim concurrently through one
//!   `SharedLaneWriter`, wrapping over the record a reader is reading.
//!   `full_shared_writers_concurrent`: two threads of 5 records each from an empty lane (they
//!   wrap), against a reader.
//! - (b, lap guard) `lap_guard_drops_claim_over_inflight` (CI): one thread holds a claim while
//!   another writes a lap: the claim that would reach the held one's bytes returns
//!   `ClaimError::Lapped` (and counts in `dropped_wrap`), and the held claim's header and
//!   payload words are intact; it is delivered after commit.
//!   `full_lap_guard_concurrent_commit`: the held claim is committed concurrently, so the
//!   wrapping claim may either be refused or succeed after the commit; every delivered frame
//!   must still be intact and the lane must drain (an overwritten in-flight claim would leave a
//!   frame with a foreign commit tag or payload).
//! - (c) `doorbell_no_lost_wakeup` (CI): a producer commits a record and rings; the consumer
//!   polls, `prepare_sleep`s, re-checks `has_pending_bytes`, then `sleep`s or `cancel`s. The
//!   loom futex has no timeout, so a lost wakeup is a loom deadlock.
//!   `full_doorbell_two_records_wait_until`: two records and rings against a consumer using
//!   `Doorbell::wait_until`.
//! - (d) `abort_is_skipped_not_lost` (CI): a claim dropped without commit becomes an ABORTED frame
//!   that the reader skips, and its sequence number is not counted as lost.
//!   `full_shared_abort_concurrent`: one thread aborts while another commits, through a shared
//!   writer.
//!
//! - (e) `run_wraps_under_reader` (CI): a run of records (`write_run`), cut in two by its
//!   span limit, wraps the ring over the record a reader is reading.
//!   `run_pads_between_its_records_under_reader` (CI): a run with a PAD frame between its
//!   records, the second overwriting the record a reader is reading.
//!   `full_run_beside_claims`: a run and single claims of another thread through one shared
//!   writer, from an empty lane, against a reader: a run's records are never interleaved.
//!
//! loom caveats: it does not explore load-buffering executions and models SeqCst accesses as
//! AcqRel (the protocol uses SeqCst *fences* for its Dekker points, which loom models), so
//! these models complement, not replace, the stress tests on weakly ordered hardware.
#![cfg(loom)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::time::{Duration, Instant};

use loom::sync::atomic::AtomicU32;
use loom::thread;
use snapbus_bus::doorbell::Doorbell;
use snapbus_bus::lane::layout::{FRAME_ALIGN, FRAME_HEADER_LEN};
use snapbus_bus::lane::{
    ClaimError, Frame, Lane, LaneConfig, LaneReader, NoFrame, Poll, RecordMeta, SharedLaneWriter,
    StartAt,
};
use snapbus_bus::mem::{HeapMem, LaneMem};

const SALT: u64 = 0x5eed_0bad_cafe_f00d;

/// The tiny lane: 512 B, frames up to 64 B, 4 anchor blocks.
const CONFIG: LaneConfig = LaneConfig {
    capacity: 512,
    max_frame: 64,
    block_size: 128,
};

const HEADER: u64 = FRAME_HEADER_LEN as u64;

/// Runs `f` under loom with `preemptions` as the preemption bound (unless
/// `LOOM_MAX_PREEMPTIONS` is set) and prints the number of executions and the time taken.
fn check(name: &str, preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 10_000;
    }
    let executions = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&executions);
    let start = Instant::now();
    builder.check(move || {
        counter.fetch_add(1, StdOrdering::Relaxed);
        f();
    });
    eprintln!(
        "loom model {name}: {} executions in {:.2?} (preemption bound {:?})",
        executions.load(StdOrdering::Relaxed),
        start.elapsed(),
        builder.preemption_bound,
    );
}

// ---- records: everything a reader sees is a function of (seq, writer) ----

/// Payload word `k` of record `seq` written by `writer`.
fn payload_word(seq: u64, writer: u16, k: u64) -> u64 {
    (seq + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(writer) << 48 ^ k << 40 ^ 0xa5
}

fn payload(seq: u64, writer: u16, len: usize) -> Vec<u8> {
    (0..len.div_ceil(8) as u64)
        .flat_map(|k| payload_word(seq, writer, k).to_le_bytes())
        .take(len)
        .collect()
}

/// Payload length of record `seq` of the single-writer models: 16 bytes (64-byte frames), but
/// none (48-byte frames) for records 5..8 so that record 8 needs an explicit PAD frame at the
/// physical end of the ring (the tail is then at 464 and 48 bytes are left).
fn single_len(seq: u64) -> usize {
    if (5..8).contains(&seq) { 0 } else { 16 }
}

fn single_meta(seq: u64) -> RecordMeta {
    RecordMeta {
        schema_key: seq as u16,
        schema_version: 3,
        level: 2,
        emitter: 9,
    }
}

/// Where the single writer puts record `seq` (same arithmetic as the writer, from an empty lane).
fn single_pos(seq: u64) -> u64 {
    let cap = CONFIG.capacity as u64;
    let mut tail = 0;
    for s in 0..=seq {
        let aligned = (HEADER + single_len(s) as u64).next_multiple_of(FRAME_ALIGN as u64);
        if tail % cap + aligned > cap {
            tail += cap - tail % cap;
        }
        if s == seq {
            return tail;
        }
        tail += aligned;
    }
    unreachable!()
}

/// Writes record `seq` with the single writer's sizes and meta.
fn write_single(writer: &mut snapbus_bus::lane::LaneWriter<HeapMem>, seq: u64) {
    let len = single_len(seq);
    let mut claim = writer.claim(len, single_meta(seq)).expect("claim");
    assert_eq!(claim.seq(), seq);
    claim.write_payload(&payload(seq, 9, len));
    claim.commit();
}

/// Checks a frame delivered in a single-writer model.
fn validate_single(f: &Frame<'_>) {
    let seq = f.meta.seq;
    assert!(seq < 64, "bogus seq {seq}");
    let len = single_len(seq);
    assert_eq!(f.meta.pos, single_pos(seq), "seq {seq} at a wrong position");
    assert_eq!(f.meta.payload_len, len, "seq {seq}: length");
    assert_eq!(
        (
            f.meta.schema_key,
            f.meta.schema_version,
            f.meta.level,
            f.meta.emitter
        ),
        (seq as u16, 3, 2, 9),
        "seq {seq}: header"
    );
    assert_eq!(
        f.payload,
        &payload(seq, 9, len)[..],
        "seq {seq}: torn payload"
    );
}

/// Shared-writer records: all 16-byte payloads (64-byte frames, so record `seq` is at
/// `64 * seq`: sequence numbers and positions are handed out together under the claim lock),
/// `emitter` = writer thread, `schema_key` = index within that thread.
const SHARED_LEN: usize = 16;

fn shared_meta(thread: u16, i: u16) -> RecordMeta {
    RecordMeta {
        schema_key: i,
        schema_version: 5,
        level: 1,
        emitter: thread,
    }
}

/// Claims, fills and commits one shared-writer record; `None` if the claim was refused.
fn write_shared(w: &SharedLaneWriter<HeapMem>, thread: u16, i: u16) -> Option<u64> {
    match w.claim(SHARED_LEN, shared_meta(thread, i)) {
        Ok(mut claim) => {
            let seq = claim.seq();
            claim.write_payload(&payload(seq, thread, SHARED_LEN));
            claim.commit();
            Some(seq)
        }
        Err(ClaimError::Lapped) => None,
        Err(e) => panic!("claim failed: {e}"),
    }
}

fn validate_shared(f: &Frame<'_>) {
    let seq = f.meta.seq;
    assert!(seq < 64, "bogus seq {seq}");
    assert_eq!(f.meta.pos, 64 * seq, "seq {seq} at a wrong position");
    assert_eq!(f.meta.payload_len, SHARED_LEN, "seq {seq}: length");
    assert_eq!(
        (f.meta.schema_version, f.meta.level),
        (5, 1),
        "seq {seq}: header"
    );
    assert_eq!(
        f.payload,
        &payload(seq, f.meta.emitter, SHARED_LEN)[..],
        "seq {seq}: torn payload"
    );
}

// ---- what a reader saw ----

/// One reader's view: delivered sequence numbers and `Lagged` totals, checked as they come.
#[derive(Default, Debug)]
struct Seen {
    delivered: Vec<u64>,
    /// Sum of all `Lagged(n)`.
    lagged: u64,
    /// `Lagged` reported since the last delivered record.
    gap: u64,
    /// Whether the reader started at position 0, where the first record is number 0: it then
    /// accounts for every sequence number from 0 (set at its first poll).
    from_zero: Option<bool>,
}

impl Seen {
    /// Checks one poll result. `aborted`: sequence numbers of aborted claims (never delivered,
    /// not reported lost unless the reader was lapped past them).
    fn on(&mut self, poll: Poll<'_>, aborted: &[u64], validate: fn(&Frame<'_>)) {
        match poll {
            Poll::Frame(f) => {
                validate(&f);
                let seq = f.meta.seq;
                assert!(!aborted.contains(&seq), "aborted seq {seq} delivered");
                if let Some(&prev) = self.delivered.last() {
                    assert!(seq > prev, "seq {seq} delivered after {prev}");
                    let skipped = seq - prev - 1;
                    let aborted_between =
                        aborted.iter().filter(|&&a| a > prev && a < seq).count() as u64;
                    assert!(
                        self.gap <= skipped && skipped <= self.gap + aborted_between,
                        "{prev} -> {seq}: Lagged({}) does not account for the gap",
                        self.gap
                    );
                } else if self.from_zero == Some(true) {
                    // A reader that started at position 0 expects record 0 first, so every
                    // record it missed before its first delivery was reported.
                    let aborted_before = aborted.iter().filter(|&&a| a < seq).count() as u64;
                    assert!(
                        self.gap <= seq && seq <= self.gap + aborted_before,
                        "first record {seq}: Lagged({}) does not account for the gap",
                        self.gap
                    );
                } else if aborted.is_empty() {
                    // Elsewhere the first record a reader sees sets its baseline.
                    assert_eq!(self.gap, 0, "Lagged before the first record");
                }
                self.gap = 0;
                self.delivered.push(seq);
            }
            Poll::Lagged(n) => {
                assert!(n > 0, "Lagged(0)");
                self.lagged += n;
                self.gap += n;
            }
            Poll::Empty | Poll::Pending | Poll::Closed => {}
        }
    }

    /// `n` polls concurrently with the writers.
    fn poll_n(
        &mut self,
        reader: &mut LaneReader<HeapMem>,
        n: usize,
        aborted: &[u64],
        validate: fn(&Frame<'_>),
    ) {
        self.from_zero.get_or_insert(reader.position() == 0);
        for _ in 0..n {
            let p = reader.poll();
            self.on(p, aborted, validate);
        }
    }

    /// After every writer finished and the lane was closed: read to the end.
    fn drain(
        &mut self,
        reader: &mut LaneReader<HeapMem>,
        aborted: &[u64],
        validate: fn(&Frame<'_>),
    ) {
        self.from_zero.get_or_insert(reader.position() == 0);
        for _ in 0..100 {
            match reader.poll() {
                Poll::Closed => return,
                Poll::Pending => panic!("Pending after every claim finished: {self:?}"),
                Poll::Empty => panic!("Empty before the end of a closed lane: {self:?}"),
                p => self.on(p, aborted, validate),
            }
        }
        panic!("drain did not reach the end: {self:?}");
    }

    /// Final accounting once drained. `written`: sequence numbers handed out (data and
    /// aborted), `0..written`.
    fn finish(&self, reader: &LaneReader<HeapMem>, written: u64, aborted: &[u64]) {
        let stats = reader.stats();
        assert_eq!(stats.delivered, self.delivered.len() as u64, "{stats:?}");
        assert_eq!(stats.lost, self.lagged, "stats.lost vs Lagged: {stats:?}");
        assert_eq!(
            (stats.garbage, stats.holes),
            (0, 0),
            "garbage or holes: {stats:?}"
        );
        assert_eq!(self.gap, 0, "trailing Lagged without a record: {self:?}");
        let &first = self.delivered.first().expect("nothing delivered");
        let &last = self.delivered.last().expect("nothing delivered");
        let last_data = (0..written).rev().find(|s| !aborted.contains(s));
        assert_eq!(Some(last), last_data, "the newest record was not delivered");
        // Exact loss from the first delivered record on: every later sequence number was
        // delivered, reported lost, or aborted (an aborted one counts as lost only if the reader
        // was lapped past it).
        let (after, aborted_after) = if self.from_zero == Some(true) {
            (written, aborted.len() as u64)
        } else {
            (
                written - first,
                aborted.iter().filter(|&&a| a > first).count() as u64,
            )
        };
        let accounted = self.delivered.len() as u64 + self.lagged;
        assert!(
            accounted <= after && after <= accounted + aborted_after,
            "delivered {} + lost {} vs {after} records from seq {first} ({aborted_after} aborted): {stats:?}",
            self.delivered.len(),
            self.lagged,
        );
        if stats.lapped == 0 {
            // Never lapped: it saw every record, from the first.
            let first_data = (0..written).find(|s| !aborted.contains(s));
            assert_eq!(Some(first), first_data, "unlapped reader missed the start");
            assert_eq!(self.lagged, 0, "unlapped reader reported loss");
        }
    }
}

// ---- (a) single writer vs reader ----

/// (a, CI) The first 8 records (one lap less 48 bytes) are written before the threads start;
/// then the writer adds record 8 (PAD frame at 464, frame at 512: overwrites record 0) and
/// record 9 (overwrites record 1) while the reader, positioned at record 0, polls 3 times. The
/// copy of record 0 or 1 races with its overwrite: it must be delivered intact or discarded
/// and counted lost.
///
/// Note on `first`: the reader starts at position 0 (`StartAt::Oldest` on a lane that has not
/// wrapped), but if it is lapped before it delivers anything (e.g. its first poll already sees
/// `claim_tail = 576`), it resyncs to record 2 and counts records 0 and 1 as neither delivered
/// nor lost: loss is counted from the first record a reader sees.
#[test]
fn single_writer_wraps_under_reader() {
    check("single_writer_wraps_under_reader", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        for seq in 0..8 {
            write_single(&mut writer, seq);
        }
        let producer = thread::spawn(move || {
            write_single(&mut writer, 8);
            write_single(&mut writer, 9);
            writer
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_single);
        let mut writer = producer.join().expect("writer");
        writer.close();
        seen.drain(&mut reader, &[], validate_single);
        seen.finish(&reader, 10, &[]);
        assert_eq!(lane.stats().frames_committed, 10);
    });
}

/// One read in place, as the `Poll` a copying read gives: the payload is read word by word
/// through the ring view (atomic loads) inside the closure, and kept only if delivered.
fn poll_in_place<'b>(reader: &mut LaneReader<HeapMem>, buf: &'b mut Vec<u8>) -> Poll<'b> {
    let read = reader.read_in_place(|m, view| {
        (0..m.payload_len.div_ceil(8))
            .flat_map(|k| view.word(k).unwrap_or(u64::MAX).to_le_bytes())
            .take(m.payload_len)
            .collect::<Vec<u8>>()
    });
    match read {
        Ok((meta, bytes)) => {
            *buf = bytes;
            Poll::Frame(Frame { meta, payload: buf })
        }
        Err(no) => Poll::from(no),
    }
}

/// (a', CI) As `single_writer_wraps_under_reader`, with a reader that reads in place
/// (`read_in_place`, the path of `Subscriber::next_in_place`): what it read of record 0 or 1
/// while the writer overwrote it must be delivered intact or discarded and counted lost.
#[test]
fn single_writer_wraps_under_in_place_reader() {
    check("single_writer_wraps_under_in_place_reader", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        for seq in 0..8 {
            write_single(&mut writer, seq);
        }
        let producer = thread::spawn(move || {
            write_single(&mut writer, 8);
            write_single(&mut writer, 9);
            writer
        });
        let mut seen = Seen::default();
        seen.from_zero.get_or_insert(reader.position() == 0);
        let mut buf = Vec::new();
        for _ in 0..3 {
            let p = poll_in_place(&mut reader, &mut buf);
            seen.on(p, &[], validate_single);
        }
        let mut writer = producer.join().expect("writer");
        writer.close();
        loop {
            match poll_in_place(&mut reader, &mut buf) {
                Poll::Closed => break,
                p @ (Poll::Frame(_) | Poll::Lagged(_)) => seen.on(p, &[], validate_single),
                p => panic!("{p:?} before the end of a closed lane: {seen:?}"),
            }
        }
        seen.finish(&reader, 10, &[]);
        assert!(matches!(
            reader.read_in_place(|_, _| ()),
            Err(NoFrame::Closed)
        ));
    });
}

/// (a, full) 10 records, all written concurrently with 4 reader polls.
#[test]
fn full_single_writer_all_concurrent() {
    check("full_single_writer_all_concurrent", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        let producer = thread::spawn(move || {
            for seq in 0..10 {
                write_single(&mut writer, seq);
            }
            writer
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 4, &[], validate_single);
        let mut writer = producer.join().expect("writer");
        writer.close();
        seen.drain(&mut reader, &[], validate_single);
        seen.finish(&reader, 10, &[]);
    });
}

// ---- (b) shared writer: two claiming threads vs reader; the lap guard ----

/// (b, CI) 7 records are written first (tail 448); then two threads each claim, fill and commit
/// one record through the shared writer ([448, 512) and [512, 576), which overwrites record 0)
/// while the reader, positioned at record 0, polls 3 times.
#[test]
fn shared_writers_wrap_under_reader() {
    check("shared_writers_wrap_under_reader", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        for i in 0..7 {
            assert_eq!(write_shared(&writer, 0, i), Some(u64::from(i)));
        }
        let threads: Vec<_> = (1..=2)
            .map(|t| {
                let w = Arc::clone(&writer);
                thread::spawn(move || write_shared(&w, t, 0).expect("no lap possible"))
            })
            .collect();
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_shared);
        let mut seqs: Vec<u64> = threads
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect();
        seqs.sort_unstable();
        assert_eq!(seqs, [7, 8]);
        writer.close();
        seen.drain(&mut reader, &[], validate_shared);
        seen.finish(&reader, 9, &[]);
        assert_eq!(lane.stats().dropped_wrap, 0);
    });
}

/// (b, full) Two threads write 5 records each from an empty lane (10 records: they wrap) while
/// the reader polls 3 times. A claim may be refused by the lap guard if the other thread's
/// claim of a lap earlier is still in flight; refused claims consume no sequence number.
#[test]
fn full_shared_writers_concurrent() {
    check("full_shared_writers_concurrent", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        let threads: Vec<_> = (1..=2)
            .map(|t| {
                let w = Arc::clone(&writer);
                thread::spawn(move || {
                    (0..5)
                        .filter_map(|i| write_shared(&w, t, i))
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_shared);
        let mut seqs: Vec<u64> = threads
            .into_iter()
            .flat_map(|h| h.join().expect("writer thread"))
            .collect();
        seqs.sort_unstable();
        let written = seqs.len() as u64;
        assert!(seqs.iter().copied().eq(0..written), "seqs {seqs:?}");
        assert_eq!(lane.stats().dropped_wrap, 10 - written);
        writer.close();
        seen.drain(&mut reader, &[], validate_shared);
        seen.finish(&reader, written, &[]);
    });
}

// ---- (e) runs: several records in one claim (`write_run`) ----

/// The lane of the run models: twice the others', so a run may span two 64-byte frames
/// (a run spans at most `max_frame`, here 128 B).
const RUN_CONFIG: LaneConfig = LaneConfig {
    capacity: 1024,
    max_frame: 128,
    block_size: 128,
};

/// (e, CI) 14 records are written first (tail 896); then a thread writes a run of 3 records
/// (sequence numbers 14–16) through the shared writer: the run's span limit cuts it into a
/// run of 2 ([896, 1024)) and a run of 1 at the ring's start, which overwrites record 0, while
/// the reader, positioned at record 0, polls 3 times. Every record must arrive intact or be
/// counted lost, and the lane must drain.
#[test]
fn run_wraps_under_reader() {
    check("run_wraps_under_reader", 2, || {
        let lane = Lane::heap(&RUN_CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        for i in 0..14 {
            assert_eq!(write_shared(&writer, 0, i), Some(u64::from(i)));
        }
        let w = Arc::clone(&writer);
        let t = thread::spawn(move || {
            let payloads: Vec<Vec<u8>> = (14..17).map(|s| payload(s, 1, SHARED_LEN)).collect();
            let first = w.write_run(shared_meta(1, 0), &payloads);
            assert_eq!(
                (first.first_seq, first.written, first.refused),
                (14, 2, None)
            );
            let second = w.write_run(shared_meta(1, 0), &payloads[2..]);
            assert_eq!(
                (second.first_seq, second.written, second.refused),
                (16, 1, None)
            );
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_shared);
        t.join().expect("run thread");
        writer.close();
        seen.drain(&mut reader, &[], validate_shared);
        seen.finish(&reader, 17, &[]);
        assert_eq!(lane.stats().frames_committed, 17);
    });
}

/// Any record of the pad model: its payload is its sequence number's, of the length it says
/// (none or 16 bytes), from the writer it names.
fn validate_any_len(f: &Frame<'_>) {
    let seq = f.meta.seq;
    let len = f.meta.payload_len;
    assert!(len == 0 || len == SHARED_LEN, "seq {seq}: length {len}");
    assert_eq!(
        f.payload,
        &payload(seq, f.meta.emitter, len)[..],
        "seq {seq}: torn payload"
    );
}

/// The lane of the pad model: a run's span (at most `max_frame`, 256 B here) holds two frames
/// and an explicit PAD frame (at least a header, 48 B) between them.
const PAD_CONFIG: LaneConfig = LaneConfig {
    capacity: 2048,
    max_frame: 256,
    block_size: 256,
};

/// (e, CI) A run meets the ring's end between its records: 3 empty records (48-byte
/// frames) and 28 of 16 bytes (64-byte frames) are written first (tail 1936); then a thread
/// writes a run of 2: [1936, 2000), a PAD frame to the end (48 bytes), and [2048, 2112), which
/// overwrites record 0 and the start of record 1, while the reader, at record 0, polls 3
/// times.
#[test]
fn run_pads_between_its_records_under_reader() {
    check("run_pads_between_its_records_under_reader", 2, || {
        let lane = Lane::heap(&PAD_CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        for seq in 0..31u64 {
            let len = if seq < 3 { 0 } else { SHARED_LEN };
            let mut c = writer.claim(len, shared_meta(0, 0)).expect("claim");
            assert_eq!(c.seq(), seq);
            c.write_payload(&payload(seq, 0, len));
            c.commit();
        }
        assert_eq!(lane.stats().claim_tail, 1936);
        let w = Arc::clone(&writer);
        let t = thread::spawn(move || {
            let payloads: Vec<Vec<u8>> = (31..33).map(|s| payload(s, 1, SHARED_LEN)).collect();
            let run = w.write_run(shared_meta(1, 0), &payloads);
            assert_eq!((run.first_seq, run.written, run.refused), (31, 2, None));
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_any_len);
        t.join().expect("run thread");
        assert_eq!(
            lane.stats().claim_tail,
            2112,
            "a PAD between the run's records"
        );
        writer.close();
        seen.drain(&mut reader, &[], validate_any_len);
        seen.finish(&reader, 33, &[]);
    });
}

/// Payload of the `k`-th record of a run written by `thread` in [`full_run_beside_claims`]
/// (its sequence number is not known before the run is claimed).
fn run_payload(thread: u16, k: u64) -> Vec<u8> {
    payload(100 + k, thread, SHARED_LEN)
}

/// A run record (emitter 1) is one of the run's payloads, in order; any other record is a
/// single claim's (`validate_shared`).
fn validate_run_or_shared(f: &Frame<'_>) {
    if f.meta.emitter != 1 {
        return validate_shared(f);
    }
    let seq = f.meta.seq;
    assert_eq!(f.meta.pos, 64 * seq, "seq {seq} at a wrong position");
    assert_eq!(f.meta.payload_len, SHARED_LEN, "seq {seq}: length");
    assert!(
        (0..2).any(|k| f.payload == &run_payload(1, k)[..]),
        "seq {seq}: torn or stale run payload"
    );
}

/// (e, full) From an empty lane, one thread writes a run of 2 records while another claims and
/// commits 2 single records, through one shared writer, and the reader polls 3 times: the
/// run's records are claimed back to back (nothing between them), every record arrives intact,
/// and the lane drains.
#[test]
fn full_run_beside_claims() {
    check("full_run_beside_claims", 2, || {
        let lane = Lane::heap(&RUN_CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        let w = Arc::clone(&writer);
        let runner = thread::spawn(move || {
            let payloads: Vec<Vec<u8>> = (0..2).map(|k| run_payload(1, k)).collect();
            let run = w.write_run(shared_meta(1, 0), &payloads);
            assert_eq!((run.written, run.refused), (2, None));
            run.first_seq
        });
        let w = Arc::clone(&writer);
        let single = thread::spawn(move || {
            (0..2)
                .map(|i| write_shared(&w, 2, i).expect("no lap"))
                .collect::<Vec<u64>>()
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_run_or_shared);
        let first = runner.join().expect("run thread");
        let singles = single.join().expect("claim thread");
        assert!(
            !singles.contains(&(first + 1)),
            "a claim between a run's records: run at {first}, claims {singles:?}"
        );
        // The run's records in order: record `first + k` holds the run's `k`-th payload.
        for k in 0..2u64 {
            let g = lane.geometry();
            let base = ((g.data_off + (64 * (first + k)) % g.capacity) / 8) as usize;
            let want = run_payload(1, k);
            for (w, chunk) in want.chunks(8).enumerate() {
                let got = lane
                    .mem()
                    .get(base + (HEADER / 8) as usize + w)
                    .expect("in the lane")
                    .load(StdOrdering::Relaxed);
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                assert_eq!(got, u64::from_le_bytes(word), "run record {k}, word {w}");
            }
        }
        writer.close();
        seen.drain(&mut reader, &[], validate_run_or_shared);
        seen.finish(&reader, 4, &[]);
    });
}

/// Checks, in raw lane memory, that the frame of the claim at `pos` (record `seq` of `thread`)
/// still holds its header words and payload.
fn assert_frame_words(lane: &Lane<HeapMem>, pos: u64, seq: u64, thread: u16, busy: bool) {
    let g = lane.geometry();
    let base = ((g.data_off + pos % g.capacity) / 8) as usize;
    let word = |i: usize| {
        lane.mem()
            .get(base + i)
            .expect("in bounds")
            .load(loom::sync::atomic::Ordering::Acquire)
    };
    let tag = g.tag(pos) ^ u64::from(busy);
    assert_eq!(word(0), tag, "commit word of the held claim overwritten");
    assert_eq!(word(1) as u32, HEADER as u32 + SHARED_LEN as u32, "length");
    assert_eq!((word(1) >> 48) as u16, thread, "emitter");
    assert_eq!(word(3), seq, "seq word of the held claim overwritten");
    for k in 0..(SHARED_LEN / 8) {
        assert_eq!(
            word(HEADER as usize / 8 + k),
            payload_word(seq, thread, k as u64),
            "payload word {k} of the held claim overwritten"
        );
    }
}

/// (b, lap guard, CI) The main thread holds a claim at [0, 64) (record 0) and fills it while
/// another thread writes 8 records: 7 fit in [64, 512); the 8th, [512, 576), would overwrite the
/// held claim and must be refused with `Lapped`. The held claim's words are intact; after its
/// commit a reader delivers all 8 records.
///
/// loom explores a single execution here: filling a claimed payload is not a loom-visible
/// operation, so the main thread does nothing loom can interleave until the join. The model
/// pins the lap-guard arithmetic; `full_lap_guard_concurrent_commit` is the concurrent one.
#[test]
fn lap_guard_drops_claim_over_inflight() {
    check("lap_guard_drops_claim_over_inflight", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut held = writer.claim(SHARED_LEN, shared_meta(1, 0)).expect("claim");
        assert_eq!(held.seq(), 0);
        let w = Arc::clone(&writer);
        let other =
            thread::spawn(move || (0..8).map(|i| write_shared(&w, 2, i)).collect::<Vec<_>>());
        held.write_payload(&payload(0, 1, SHARED_LEN));
        let results = other.join().expect("writer thread");
        let expected: Vec<Option<u64>> = (1..8).map(Some).chain([None]).collect();
        assert_eq!(
            results, expected,
            "the lap guard did not refuse the wrapping claim"
        );
        assert_eq!(lane.stats().dropped_wrap, 1);
        assert_frame_words(&lane, 0, 0, 1, true);
        held.commit();
        assert_frame_words(&lane, 0, 0, 1, false);
        // Read before closing: the end-of-stream frame at 512 overwrites record 0.
        let mut reader = lane.reader(StartAt::Oldest);
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 8, &[], validate_shared);
        assert_eq!(seen.delivered, (0..8).collect::<Vec<u64>>());
        writer.close();
        seen.drain(&mut reader, &[], validate_shared);
        seen.finish(&reader, 8, &[]);
    });
}

/// (b, lap guard, full) As above, but the held claim is filled and committed concurrently with
/// the other thread's 8 records, and a reader polls once meanwhile: the 8th claim is refused if
/// record 0 is still in flight, or succeeds (overwriting record 0) if it was committed. Either
/// way every delivered frame is intact and the lane drains.
#[test]
fn full_lap_guard_concurrent_commit() {
    check("full_lap_guard_concurrent_commit", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        let mut held = writer.claim(SHARED_LEN, shared_meta(1, 0)).expect("claim");
        let w = Arc::clone(&writer);
        let other =
            thread::spawn(move || (0..8).map(|i| write_shared(&w, 2, i)).collect::<Vec<_>>());
        held.write_payload(&payload(0, 1, SHARED_LEN));
        held.commit();
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 1, &[], validate_shared);
        let results = other.join().expect("writer thread");
        assert!(
            results[..7].iter().copied().eq((1..8).map(Some)),
            "{results:?}"
        );
        let lapped = results[7].is_none();
        assert_eq!(lane.stats().dropped_wrap, u64::from(lapped));
        if lapped {
            assert_frame_words(&lane, 0, 0, 1, false);
        }
        writer.close();
        let written = if lapped { 8 } else { 9 };
        seen.drain(&mut reader, &[], validate_shared);
        seen.finish(&reader, written, &[]);
    });
}

// ---- (c) doorbell ----

/// Consumer loop: poll; if nothing, announce sleep, re-check, then sleep or cancel. Returns
/// when `n` records were delivered.
fn consume(reader: &mut LaneReader<HeapMem>, bell: &Doorbell<'_>, n: usize, use_wait_until: bool) {
    let mut seen = Seen::default();
    seen.from_zero = Some(reader.position() == 0);
    while seen.delivered.len() < n {
        match reader.poll() {
            Poll::Pending => {
                // Claimed, not committed yet: the writer is mid-record; look again soon.
                thread::yield_now();
                continue;
            }
            Poll::Empty => {}
            p => {
                seen.on(p, &[], validate_single);
                continue;
            }
        }
        if use_wait_until {
            bell.wait_until(|| reader.has_pending_bytes(), 0, Duration::from_secs(3600));
        } else {
            let d = bell.prepare_sleep();
            if reader.has_pending_bytes() {
                bell.cancel();
                continue;
            }
            // No timeout in the loom futex: if this wakeup were lost, loom reports a deadlock.
            bell.sleep(d, Duration::from_secs(3600));
        }
    }
    assert_eq!(seen.lagged, 0);
    assert!(seen.delivered.iter().copied().eq(0..n as u64));
}

/// (c, CI) Producer: commit record 0, ring. Consumer: poll, prepare_sleep, re-check
/// `has_pending_bytes`, sleep or cancel. No lost wakeup (a lost one deadlocks the model).
#[test]
fn doorbell_no_lost_wakeup() {
    check("doorbell_no_lost_wakeup", 3, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        let word = Arc::new(AtomicU32::new(0));
        let bell_word = Arc::clone(&word);
        let producer = thread::spawn(move || {
            write_single(&mut writer, 0);
            Doorbell::new(&bell_word).ring();
        });
        consume(&mut reader, &Doorbell::new(&word), 1, false);
        producer.join().expect("producer");
    });
}

/// (c, full) Two records, each followed by a ring, against a consumer sleeping through
/// `Doorbell::wait_until` (no spinning).
#[test]
fn full_doorbell_two_records_wait_until() {
    check("full_doorbell_two_records_wait_until", 3, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        let word = Arc::new(AtomicU32::new(0));
        let bell_word = Arc::clone(&word);
        let producer = thread::spawn(move || {
            let bell = Doorbell::new(&bell_word);
            for seq in 0..2 {
                write_single(&mut writer, seq);
                bell.ring();
            }
        });
        consume(&mut reader, &Doorbell::new(&word), 2, true);
        producer.join().expect("producer");
    });
}

// ---- (d) abort ----

/// (d, CI) The writer commits record 0, drops the claim of record 1 (it becomes an ABORTED
/// frame), commits record 2, while the reader polls 3 times. The reader delivers 0 and 2, never
/// 1, and reports no loss.
#[test]
fn abort_is_skipped_not_lost() {
    check("abort_is_skipped_not_lost", 3, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        let producer = thread::spawn(move || {
            write_single(&mut writer, 0);
            let claim = writer.claim(single_len(1), single_meta(1)).expect("claim");
            assert_eq!(claim.seq(), 1);
            drop(claim);
            write_single(&mut writer, 2);
            writer
        });
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[1], validate_single);
        let mut writer = producer.join().expect("writer");
        writer.close();
        seen.drain(&mut reader, &[1], validate_single);
        seen.finish(&reader, 3, &[1]);
        assert_eq!(seen.delivered, [0, 2]);
        assert_eq!(reader.stats().lost, 0);
        let stats = lane.stats();
        assert_eq!((stats.frames_committed, stats.aborted), (2, 1));
    });
}

/// (d, full) Through a shared writer: one thread claims and aborts, another claims and commits
/// two records, concurrently with 3 reader polls. Only the committed records are delivered and
/// nothing is lost.
#[test]
fn full_shared_abort_concurrent() {
    check("full_shared_abort_concurrent", 2, || {
        let lane = Lane::heap(&CONFIG, SALT).expect("lane");
        let writer = Arc::new(lane.shared_writer().expect("writer"));
        let mut reader = lane.reader(StartAt::Oldest);
        let w = Arc::clone(&writer);
        let aborter = thread::spawn(move || {
            let mut claim = w.claim(SHARED_LEN, shared_meta(1, 0)).expect("claim");
            let seq = claim.seq();
            claim.write_payload(&payload(seq, 1, 8));
            drop(claim);
            seq
        });
        let w = Arc::clone(&writer);
        let committer = thread::spawn(move || {
            let a = write_shared(&w, 2, 0).expect("claim");
            let b = write_shared(&w, 2, 1).expect("claim");
            [a, b]
        });
        // The aborted seq is only known after the join; check the concurrent polls then.
        let mut polled = Vec::new();
        for _ in 0..3 {
            if let Poll::Frame(f) = reader.poll() {
                validate_shared(&f);
                polled.push(f.meta.seq);
            } else {
                assert_eq!(reader.stats().lost, 0);
            }
        }
        let aborted = [aborter.join().expect("aborter")];
        let committed = committer.join().expect("committer");
        assert!(polled.iter().all(|s| committed.contains(s)), "{polled:?}");
        writer.close();
        let mut seen = Seen::default();
        seen.delivered = polled;
        seen.drain(&mut reader, &aborted, validate_shared);
        assert_eq!(seen.delivered, committed);
        seen.finish(&reader, 3, &aborted);
        assert_eq!(reader.stats().lost, 0);
        assert_eq!(lane.stats().aborted, 1);
    });
}
