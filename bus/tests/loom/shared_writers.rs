//! (b) Shared writer: two claiming threads vs reader; the lap guard.

use std::sync::Arc;

use loom::thread;
use snapbus_bus::lane::{Lane, StartAt};
use snapbus_bus::mem::{HeapMem, LaneMem};

use super::{
    CONFIG, HEADER, SALT, SHARED_LEN, Seen, check, payload, payload_word, shared_meta,
    validate_shared, write_shared,
};

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
