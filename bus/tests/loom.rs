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
//!   `single_writer_wraps_under_run_reader` (CI): the same race against a reader of runs
//!   (`read_run_in_place`, the subscriber's drain), falling back to `read_in_place`.
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
//! The models are in `tests/loom/`, a file per area: `single_writer.rs` (a),
//! `shared_writers.rs` (b), `doorbell.rs` (c), `abort.rs` (d) and `runs.rs` (e). This file holds
//! what they share: the tiny lane, [`check`], the records and the reader checks ([`Seen`]).
//!
//! loom caveats: it does not explore load-buffering executions and models SeqCst accesses as
//! AcqRel (the protocol uses SeqCst *fences* for its Dekker points, which loom models), so
//! these models complement, not replace, the stress tests on weakly ordered hardware.
#![cfg(loom)]

#[path = "loom/abort.rs"]
mod abort;
#[path = "loom/doorbell.rs"]
mod doorbell;
#[path = "loom/runs.rs"]
mod runs;
#[path = "loom/shared_writers.rs"]
mod shared_writers;
#[path = "loom/single_writer.rs"]
mod single_writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::time::Instant;

use snapbus_bus::lane::layout::{FRAME_ALIGN, FRAME_HEADER_LEN};
use snapbus_bus::lane::{
    ClaimError, Frame, LaneConfig, LaneReader, Poll, RecordMeta, SharedLaneWriter,
};
use snapbus_bus::mem::HeapMem;

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
