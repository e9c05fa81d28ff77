//! Property tests of a lane against a reference model: random record sizes (wrapping the ring
//! many times), aborted claims, readers of different speeds and start points, schema filters,
//! and garbage written over the ring. Asserted: every delivered record is exactly what was
//! written under that sequence number (nothing torn, nothing from an older lap), sequence
//! numbers strictly increase (nothing twice), and loss is exact.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use snapbus_bus::lane::layout::{FRAME_ALIGN, FRAME_HEADER_LEN};
use snapbus_bus::lane::{
    Lane, LaneConfig, LaneReader, NoFrame, Poll, ReaderSet, RecordMeta, StartAt,
};
use snapbus_bus::mem::{HeapMem, LaneMem};

use crate::common::{record_positions, store_frame_word};

const CONFIG: LaneConfig = LaneConfig {
    capacity: 64 << 10,
    max_frame: 8 << 10,
    block_size: 4 << 10,
};

/// A lane whose frames may be a quarter of it, the largest the lane allows (a lane that fits
/// the cache, taking large records): a lapped reader's slack is then one largest frame.
const QUARTER: LaneConfig = LaneConfig {
    capacity: 64 << 10,
    max_frame: 16 << 10,
    block_size: 4 << 10,
};

/// Deterministic payload of record `seq` with length `len`.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ len as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn meta(key: u16) -> RecordMeta {
    RecordMeta {
        schema_key: key,
        schema_version: 1,
        level: 2,
        emitter: 3,
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Write a record of this payload length and schema key.
    Write(usize, u16),
    /// Claim and drop without committing.
    Abort(usize),
    /// Let reader `i` poll up to `n` times.
    Read(usize, usize),
}

/// Operations on a lane whose largest frame is `max_frame` bytes.
fn op(max_frame: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (prop_oneof![0usize..64, 64usize..1024, 1024usize..max_frame - FRAME_HEADER_LEN], 0u16..4).prop_map(|(l, k)| Op::Write(l, k)),
        1 => (0usize..256).prop_map(Op::Abort),
        6 => (0usize..3, 1usize..40).prop_map(|(i, n)| Op::Read(i, n)),
    ]
}

/// What a reader saw.
#[derive(Default, Debug)]
struct Seen {
    delivered: Vec<u64>,
    lagged: u64,
}

/// Polls `reader` up to `n` times, checking every delivered record against `written`.
fn drive(
    reader: &mut LaneReader<HeapMem>,
    n: usize,
    written: &BTreeMap<u64, (Vec<u8>, u16)>,
    seen: &mut Seen,
) -> Result<(), TestCaseError> {
    for _ in 0..n {
        match reader.poll() {
            Poll::Frame(f) => {
                let (expected, key) = written.get(&f.meta.seq).ok_or_else(|| {
                    TestCaseError::fail(format!("delivered unknown seq {}", f.meta.seq))
                })?;
                prop_assert_eq!(
                    f.payload,
                    expected.as_slice(),
                    "payload of seq {} differs",
                    f.meta.seq
                );
                prop_assert_eq!(f.meta.schema_key, *key);
                prop_assert_eq!(
                    (f.meta.level, f.meta.emitter, f.meta.schema_version),
                    (2, 3, 1)
                );
                if let Some(&last) = seen.delivered.last() {
                    prop_assert!(f.meta.seq > last, "seq {} after {}", f.meta.seq, last);
                }
                seen.delivered.push(f.meta.seq);
            }
            Poll::Lagged(k) => {
                prop_assert!(k > 0);
                seen.lagged += k;
            }
            Poll::Empty | Poll::Closed => break,
            Poll::Pending => {}
        }
    }
    Ok(())
}

/// Runs `ops` on a lane of `config`: every record delivered exactly, loss exact.
fn exact_records_and_loss(config: &LaneConfig, ops: &[Op], salt: u64) -> Result<(), TestCaseError> {
    let lane = Lane::heap(config, salt).expect("lane");
    let mut writer = lane.writer().expect("writer");
    // Reader 0 starts at the oldest record, 1 at the latest, 2 is a drain-only reader.
    let mut readers = [
        lane.reader(StartAt::Oldest),
        lane.reader(StartAt::Latest),
        lane.reader(StartAt::Oldest),
    ];
    let mut seen: [Seen; 3] = Default::default();
    let mut written: BTreeMap<u64, (Vec<u8>, u16)> = BTreeMap::new();
    let mut aborted = Vec::new();
    for op in ops {
        match *op {
            Op::Write(len, key) => {
                let mut claim = writer.claim(len, meta(key)).expect("claim");
                let seq = claim.seq();
                let bytes = payload(seq, len);
                claim.write_payload(&bytes);
                claim.commit();
                written.insert(seq, (bytes, key));
            }
            Op::Abort(len) => {
                let claim = writer.claim(len, meta(9)).expect("claim");
                aborted.push(claim.seq());
                drop(claim);
            }
            Op::Read(i, n) => drive(&mut readers[i % 2], n, &written, &mut seen[i % 2])?,
        }
    }
    writer.close();
    for (reader, seen) in readers.iter_mut().zip(seen.iter_mut()) {
        drive(reader, 1_000_000, &written, seen)?;
        prop_assert_eq!(reader.poll(), Poll::Closed);
    }
    let all: Vec<u64> = written.keys().copied().collect();
    let total_seqs = all.len() as u64 + aborted.len() as u64;
    for (i, (reader, seen)) in readers.iter().zip(&seen).enumerate() {
        let stats = reader.stats();
        prop_assert_eq!(stats.lost, seen.lagged, "reader {}: stats vs Lagged", i);
        prop_assert_eq!(stats.delivered, seen.delivered.len() as u64);
        prop_assert_eq!(
            stats.torn + stats.garbage + stats.holes,
            0,
            "reader {}: {:?}",
            i,
            stats
        );
        // Every reader here starts at position 0 (the lane is empty when they are made),
        // so each knows the first record is number 0 and accounts for every sequence
        // number: delivered, counted lost, or an aborted claim (skipped, and counted lost
        // only when the reader was lapped past it).
        let delivered = seen.delivered.len() as u64;
        let aborted_all = aborted.len() as u64;
        prop_assert!(
            stats.lost + delivered + aborted_all >= total_seqs,
            "reader {}: records unaccounted for: {:?}",
            i,
            stats
        );
        prop_assert!(
            stats.lost + delivered <= total_seqs,
            "reader {}: loss overcounted: {:?}",
            i,
            stats
        );
    }
    // The drain-only reader started at the oldest record and was never lapped unless the
    // run wrote more than a ring's worth; when it was not lapped it saw everything.
    if readers[2].stats().lapped == 0 {
        prop_assert_eq!(&seen[2].delivered, &all);
        prop_assert_eq!(seen[2].lagged, 0);
    }
    Ok(())
}

/// In a lane of quarter frames a lapped reader resumes one largest frame (and the writer's
/// limit window) past the oldest byte, so the record it resumes at outlives the next claim of
/// the largest size: it is delivered, not lost to a second lap at once.
#[test]
fn a_lapped_reader_of_quarter_frames_resumes_where_the_next_claim_cannot_reach() {
    let lane = Lane::heap(&QUARTER, 5).expect("lane");
    let mut writer = lane.writer().expect("writer");
    let mut reader = lane.reader(StartAt::Oldest);
    let len = QUARTER.max_frame - FRAME_HEADER_LEN;
    let write = |w: &mut snapbus_bus::lane::LaneWriter<HeapMem>, len: usize| {
        let mut claim = w.claim(len, meta(0)).expect("claim");
        let bytes = payload(claim.seq(), len);
        claim.write_payload(&bytes);
        claim.commit();
    };
    for _ in 0..10 {
        write(&mut writer, len);
    }
    // A 4 KiB frame last: the frame boundaries an eighth of the lane past the oldest byte are
    // then 12 KiB past it, inside the reach of one more largest claim.
    write(&mut writer, (4 << 10) - FRAME_HEADER_LEN);
    let Poll::Lagged(lost) = reader.poll() else {
        panic!("the reader should have been lapped");
    };
    assert!(lost > 0);
    write(&mut writer, len);
    match reader.poll() {
        Poll::Frame(f) => assert_eq!(f.payload, payload(f.meta.seq, f.payload.len()).as_slice()),
        other => panic!("lapped again right after resyncing: {other:?}"),
    }
    assert_eq!(reader.stats().lapped, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn readers_deliver_exact_records_and_exact_loss(ops in prop::collection::vec(op(CONFIG.max_frame), 1..400), salt in 1u64..) {
        exact_records_and_loss(&CONFIG, &ops, salt)?;
    }

    #[test]
    fn readers_of_a_lane_of_quarter_frames_deliver_exact_records_and_exact_loss(ops in prop::collection::vec(op(QUARTER.max_frame), 1..400), salt in 1u64..) {
        exact_records_and_loss(&QUARTER, &ops, salt)?;
    }

    #[test]
    fn filters_skip_other_schemas_without_losing_count(keys in prop::collection::vec(0u16..6, 1..300)) {
        let lane = Lane::heap(&CONFIG, 77).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        reader.set_filter([1, 4]);
        let mut expected = Vec::new();
        for &k in &keys {
            let mut claim = writer.claim(16, meta(k)).expect("claim");
            claim.write_payload(&[k as u8; 16]);
            if k == 1 || k == 4 {
                expected.push(claim.seq());
            }
            claim.commit();
        }
        let mut got = Vec::new();
        loop {
            match reader.poll() {
                Poll::Frame(f) => {
                    prop_assert!(f.meta.schema_key == 1 || f.meta.schema_key == 4);
                    prop_assert_eq!(f.payload, &[f.meta.schema_key as u8; 16][..]);
                    got.push(f.meta.seq);
                }
                Poll::Lagged(n) => prop_assert!(false, "lost {} without any overwrite", n),
                _ => break,
            }
        }
        prop_assert_eq!(got, expected);
        prop_assert_eq!(reader.stats().filtered + reader.stats().delivered, keys.len() as u64);
    }

    #[test]
    fn garbage_words_never_panic_and_are_counted(
        writes in 1usize..600,
        corruptions in prop::collection::vec((any::<prop::sample::Index>(), any::<u64>()), 1..64),
        start in prop_oneof![Just(StartAt::Oldest), Just(StartAt::Latest), Just(StartAt::Time(0))],
    ) {
        let lane = Lane::heap(&CONFIG, 0x5eed).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut written = BTreeMap::new();
        for i in 0..writes {
            let len = (i * 37) % 700;
            let mut claim = writer.claim(len, meta(0)).expect("claim");
            let seq = claim.seq();
            let bytes = payload(seq, len);
            claim.write_payload(&bytes);
            claim.commit();
            written.insert(seq, bytes);
        }
        let mut reader = lane.reader(start);
        reader.set_writer_gone(true);
        // Overwrite random words of the data area and the anchors (not the header: a
        // corrupt header is refused at attach time, tested elsewhere).
        let g = *lane.geometry();
        let first_word = 4096 / 8;
        let words = lane.mem().len_words() - first_word;
        for (at, value) in corruptions {
            if let Some(w) = lane.mem().get(first_word + at.index(words)) {
                w.store(value, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let _ = g;
        let mut delivered = 0u64;
        for _ in 0..100_000 {
            match reader.poll() {
                Poll::Frame(f) => {
                    // A frame can only be delivered if its commit tag is intact; its payload
                    // may have been corrupted (no checksums in the ring), but never its length
                    // beyond the ring or an unknown sequence number with a valid tag.
                    prop_assert!(f.payload.len() <= 8 << 10);
                    delivered += 1;
                }
                Poll::Empty | Poll::Closed => break,
                Poll::Lagged(_) | Poll::Pending => {}
            }
        }
        prop_assert!(delivered <= writes as u64);
    }
}

#[test]
fn start_at_time_skips_older_records() {
    let lane = Lane::heap(&CONFIG, 5).expect("lane");
    let mut writer = lane.writer().expect("writer");
    let mut times = Vec::new();
    for i in 0..100u8 {
        let mut claim = writer.claim(1, meta(0)).expect("claim");
        claim.write_payload(&[i]);
        claim.commit();
        times.push(i);
    }
    // Find the t_nanos of record 60 with an Oldest reader, then start a Time reader there.
    let mut all = lane.reader(StartAt::Oldest);
    let mut t60 = None;
    while let Poll::Frame(f) = all.poll() {
        if f.payload == [60] {
            t60 = Some(f.meta.t_nanos);
        }
    }
    let t60 = t60.expect("record 60");
    let mut from = lane.reader(StartAt::Time(t60));
    let Poll::Frame(first) = from.poll() else {
        panic!("expected a frame")
    };
    // Timestamps are non-decreasing; records before 60 may share its timestamp.
    assert!(first.meta.t_nanos >= t60);
    assert!(first.payload[0] <= 60);
    assert_eq!(from.stats().lost, 0, "skipping by time is not loss");
}

#[test]
fn oversize_records_are_refused_and_counted_not_truncated() {
    let lane = Lane::heap(&CONFIG, 6).expect("lane");
    let mut writer = lane.writer().expect("writer");
    let err = writer.claim(8 << 10, meta(0)).err().expect("oversize");
    assert!(err.to_string().contains("exceeds"), "{err}");
    assert_eq!(lane.stats().dropped_oversize, 1);
    let mut reader = lane.reader(StartAt::Oldest);
    assert_eq!(reader.poll(), Poll::Empty);
}

#[test]
fn shared_writer_lap_guard_drops_instead_of_overwriting() {
    let lane = Lane::heap(&CONFIG, 8).expect("lane");
    let writer = lane.shared_writer().expect("writer");
    let mut held = writer.claim(100, meta(0)).expect("claim");
    held.write_payload(&payload(held.seq(), 100));
    // Another "thread" writes until its next claim would reach the held claim's bytes.
    let mut dropped = false;
    for _ in 0..10_000 {
        match writer.claim(1000, meta(0)) {
            Ok(c) => c.commit(),
            Err(e) => {
                assert!(e.to_string().contains("still writing"), "{e}");
                dropped = true;
                break;
            }
        }
    }
    assert!(dropped, "the lap guard never triggered");
    assert_eq!(lane.stats().dropped_wrap, 1);
    let seq = held.seq();
    held.commit();
    // The held record is intact and readable by a reader that starts before it.
    let _ = seq;
}

#[test]
fn corrupt_headers_are_refused_at_attach() {
    let lane = Lane::heap(&CONFIG, 9).expect("lane");
    let bytes: Vec<u8> = (0..lane.mem().len_words())
        .flat_map(|i| {
            lane.mem()
                .get(i)
                .map_or(0, |w| w.load(std::sync::atomic::Ordering::Relaxed))
                .to_le_bytes()
        })
        .collect();
    assert!(Lane::attach(HeapMem::from_bytes(&bytes)).is_ok());
    for (word, value, needle) in [
        (0usize, 0u64, "not a snapbus lane"),
        (1, 7, "layout version"),
        (2, 3 << 20, "capacity"),
        (3, 1 << 30, "max_frame"),
        (10, 0, "not initialised"),
    ] {
        let mut b = bytes.clone();
        b[word * 8..word * 8 + 8].copy_from_slice(&value.to_le_bytes());
        let err = Lane::attach(HeapMem::from_bytes(&b))
            .err()
            .expect("refused");
        assert!(err.to_string().contains(needle), "word {word}: {err}");
    }
    let short = &bytes[..bytes.len() / 2];
    let err = Lane::attach(HeapMem::from_bytes(short))
        .err()
        .expect("too small");
    assert!(err.to_string().contains("needs"), "{err}");
}

#[test]
fn stale_frames_of_an_older_lap_are_never_delivered() {
    // Wrap the ring, then publish a claim's tail intent without writing its header (what a
    // writer killed right after the intent leaves behind): the bytes at the cursor are an
    // older lap's committed frame, which must not be delivered.
    let lane = Lane::heap(&CONFIG, 0xabc).expect("lane");
    let mut writer = lane.writer().expect("writer");
    let cap = CONFIG.capacity as u64;
    let mut n = 0u64;
    while lane.stats().claim_tail < cap + 100 {
        let mut claim = writer.claim(88, meta(0)).expect("claim");
        claim.write_payload(&payload(n, 88));
        claim.commit();
        n += 1;
    }
    let mut reader = lane.reader(StartAt::Latest);
    let pos = reader.position();
    // The frame of the previous lap at this physical offset is committed (with its own tag).
    let tail_word = 128 / 8;
    lane.mem()
        .get(tail_word)
        .expect("claim_tail")
        .store(pos + 128, std::sync::atomic::Ordering::Release);
    assert_eq!(
        reader.poll(),
        Poll::Pending,
        "an unwritten claim over an old lap's frame"
    );
    reader.set_writer_gone(true);
    assert!(
        matches!(reader.poll(), Poll::Empty),
        "the hole is skipped, nothing delivered"
    );
    assert_eq!(reader.stats().delivered, 0);
    assert_eq!(reader.stats().holes, 1);
}

#[test]
fn a_reader_set_reads_several_lanes_round_robin() {
    let lanes: Vec<_> = (0..3)
        .map(|i| Lane::heap(&CONFIG, 100 + i).expect("lane"))
        .collect();
    let mut set = ReaderSet::new();
    for lane in &lanes {
        set.push(lane.reader(StartAt::Oldest));
    }
    assert!(set.poll().is_none(), "nothing written yet");
    for (i, lane) in lanes.iter().enumerate() {
        let mut w = lane.writer().expect("writer");
        for j in 0..2u8 {
            let mut c = w.claim(2, meta(i as u16)).expect("claim");
            c.write_payload(&[i as u8, j]);
            c.commit();
        }
    }
    let mut got = Vec::new();
    while let Some((i, poll)) = set.poll() {
        if let Poll::Frame(f) = poll {
            assert_eq!(f.payload[0] as usize, i, "frame came from its own lane");
            got.push((i, f.payload[1]));
        }
    }
    // Round-robin: one record per lane in turn.
    assert_eq!(got, [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]);
}

/// Word index of `claim_tail` in the lane header.
const CLAIM_TAIL_WORD: usize = 128 / 8;

/// Writes `n` records of 88 bytes into a fresh heap lane.
fn filled_lane(n: u64) -> std::sync::Arc<Lane<HeapMem>> {
    let lane = Lane::heap(&CONFIG, 0x7a11).expect("lane");
    let mut writer = lane.writer().expect("writer");
    for seq in 0..n {
        let mut claim = writer.claim(88, meta(0)).expect("claim");
        claim.write_payload(&payload(seq, 88));
        claim.commit();
    }
    lane
}

/// A garbage claim tail (near `u64::MAX`, or far past the data) must not keep a reader busy:
/// it goes quiet within a few polls from every start point. (Regression: a tail near
/// `u64::MAX` wrapped the anchor scan, and every poll re-synced to the same position a million
/// times.)
#[test]
fn garbage_claim_tails_never_livelock_a_reader() {
    for tail in [
        u64::MAX,
        u64::MAX - 4096,
        u64::MAX - (CONFIG.capacity as u64) / 2,
        1 << 63,
        3 << 20,
    ] {
        // Less than one lap (anchors near 0) and several laps.
        for (records, start) in [300, 2000].into_iter().flat_map(|n| {
            [StartAt::Oldest, StartAt::Latest, StartAt::Time(0)].map(|start| (n, start))
        }) {
            let lane = filled_lane(records);
            lane.mem()
                .get(CLAIM_TAIL_WORD)
                .expect("claim_tail")
                .store(tail, std::sync::atomic::Ordering::Release);
            let mut reader = lane.reader(start);
            reader.set_writer_gone(true);
            let quiet_after = (1..=20).find(|_| {
                matches!(reader.poll(), Poll::Empty | Poll::Closed) && !reader.has_pending_bytes()
            });
            assert!(
                quiet_after.is_some(),
                "tail {tail:#x}, {records} records, start {start:?}: still busy after 20 polls \
                 ({:?})",
                reader.stats()
            );
        }
    }
}

/// A frame whose commit tag is intact but whose sequence number jumps further than the bytes
/// before it could hold, or goes backwards, is garbage, not loss: the loss count stays exact
/// (here: the one corrupted record) instead of reporting billions of records lost, and the
/// record after it is delivered, whichever way it is read. (Fuzzer finding: `read_in_place`
/// called its closure for the garbage frame, then, having no closure left for the next record,
/// stepped past it and returned `Pending`: that record vanished without being counted.)
#[test]
fn an_impossible_sequence_number_is_garbage_not_loss() {
    for (bad_seq, in_place) in [(1 << 60, false), (1 << 60, true), (6, false), (6, true)] {
        let lane = filled_lane(10);
        let positions = record_positions(&lane);
        assert_eq!(positions.len(), 10);
        let g = *lane.geometry();
        // Record 5 claims a number it cannot have: far ahead, or its successor's (so record
        // 6 then looks like a step backwards).
        let seq_word = ((g.data_off + positions[5]) / 8) as usize + 3;
        lane.mem()
            .get(seq_word)
            .expect("seq word")
            .store(bad_seq, std::sync::atomic::Ordering::Relaxed);
        let mut reader = lane.reader(StartAt::Oldest);
        reader.set_writer_gone(true);
        let mut delivered = Vec::new();
        for _ in 0..100 {
            let seq = if in_place {
                match reader.read_in_place(|m, _| m.seq) {
                    Ok((_, seq)) => Some(seq),
                    Err(NoFrame::Lagged(_)) => None,
                    Err(NoFrame::Empty | NoFrame::Closed) => break,
                    Err(p) => panic!("{p:?} from a lane with its writer gone"),
                }
            } else {
                match reader.poll() {
                    Poll::Frame(f) => Some(f.meta.seq),
                    Poll::Lagged(_) => None,
                    Poll::Empty | Poll::Closed => break,
                    p => panic!("{p:?} from a lane with its writer gone"),
                }
            };
            delivered.extend(seq);
        }
        let stats = reader.stats();
        let label = format!("seq {bad_seq} in place {in_place}: {stats:?}");
        // With 6: the forged 6 is delivered in place of 5 (5 counted lost) and the real 6 is
        // the garbage; the numbers seen are the same.
        assert_eq!(delivered, [0, 1, 2, 3, 4, 6, 7, 8, 9], "{label}");
        // The record behind the garbage is damage, not overwrite; the forged 6 makes 5 look
        // overwritten (nothing before it was garbage).
        let expected = if bad_seq == 6 { (1, 0) } else { (0, 1) };
        assert_eq!((stats.lost, stats.damaged), expected, "{label}");
        assert_eq!(stats.garbage, 1, "{label}");
    }
}

/// After a `Lagged(n)`, the next record is delivered next whichever way it is read: a copy
/// (`poll`) or in place (`read_in_place`), and with its own bytes. (Fuzzer finding: a loss
/// reported by `read_in_place` was followed by a `poll` that delivered the record with the
/// bytes of an older copy, and a loss reported by `poll` was followed by a `read_in_place` that
/// skipped the record, delivering it after its successor.)
#[test]
fn the_record_after_a_loss_is_delivered_next_by_either_read() {
    for (first, second) in [(false, true), (true, false), (false, false), (true, true)] {
        let lane = Lane::heap(&CONFIG, 0x1a9).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let write = |writer: &mut snapbus_bus::lane::LaneWriter<HeapMem>, n: u64| {
            for _ in 0..n {
                let mut claim = writer.claim(200, meta(0)).expect("claim");
                let seq = claim.seq();
                claim.write_payload(&payload(seq, 200));
                claim.commit();
            }
        };
        write(&mut writer, 3);
        let mut reader = lane.reader(StartAt::Oldest);
        let read =
            |reader: &mut LaneReader<HeapMem>, in_place: bool| -> Result<(u64, Vec<u8>), u64> {
                if in_place {
                    match reader.read_in_place(|_, view| {
                        let mut buf = vec![0; view.len()];
                        view.copy_to(&mut buf);
                        buf
                    }) {
                        Ok((m, bytes)) => Ok((m.seq, bytes)),
                        Err(NoFrame::Lagged(n)) => Err(n),
                        Err(other) => panic!("unexpected {other:?}"),
                    }
                } else {
                    match reader.poll() {
                        Poll::Frame(f) => Ok((f.meta.seq, f.payload.to_vec())),
                        Poll::Lagged(n) => Err(n),
                        other => panic!("unexpected {other:?}"),
                    }
                }
            };
        assert_eq!(read(&mut reader, first), Ok((0, payload(0, 200))));
        // Lap the reader: records 1.. are overwritten.
        write(&mut writer, 1000);
        let lost = read(&mut reader, first).expect_err("the reader was lapped");
        let (seq, bytes) = read(&mut reader, second).expect("the record after the gap");
        assert_eq!(seq, 1 + lost, "in place: {first} then {second}");
        assert_eq!(bytes, payload(seq, 200), "the record's own bytes");
        assert_eq!(read(&mut reader, second).map(|(s, _)| s), Ok(seq + 1));
        assert_eq!(reader.stats().lost, lost);
    }
}

/// A reader that starts at the oldest record of a lapped lane counts nothing before it,
/// unless asked to count from the lane's start: then the records already overwritten are
/// reported as lost before the first record (what the aggregator needs), exactly.
#[test]
fn counting_loss_from_the_lane_start_reports_the_overwritten_history_exactly() {
    let lane = filled_lane(2000);
    let first_seq = |count: bool| {
        let mut reader = lane.reader(StartAt::Oldest);
        if count {
            reader.count_loss_from_lane_start();
        }
        let mut lost = 0;
        loop {
            match reader.poll() {
                Poll::Lagged(n) => lost += n,
                Poll::Frame(f) => return (lost, f.meta.seq),
                other => panic!("{other:?}"),
            }
        }
    };
    let (lost, first) = first_seq(false);
    assert_eq!(lost, 0);
    assert!(first > 0, "the lane wrapped");
    assert_eq!(first_seq(true), (first, first));
}

/// Zeroed memory past the tail never reads as a committed frame, whatever the salt (a salt
/// equal to a position made `pos ^ salt` zero before layout version 2): a reader right behind
/// the writer, which peeks at the next commit word before loading the tail, reports `Empty`,
/// counts no garbage and stays on the next frame boundary.
#[test]
fn zeroed_memory_past_the_tail_is_never_a_frame() {
    for salt in [40u64, 48, 80, 4096, 1 << 40] {
        let lane = Lane::heap(&CONFIG, salt).expect("lane");
        let mut writer = lane.writer().expect("writer");
        let mut reader = lane.reader(StartAt::Oldest);
        for seq in 0..4u64 {
            // Empty payloads: header-only frames, so frames start at 48, 96, …
            let claim = writer.claim(0, meta(1)).expect("claim");
            assert_eq!(claim.seq(), seq);
            claim.commit();
            match reader.poll() {
                Poll::Frame(f) => assert_eq!(f.meta.seq, seq, "salt {salt}"),
                other => panic!("salt {salt}: expected record {seq}, got {other:?}"),
            }
            for _ in 0..3 {
                assert_eq!(reader.poll(), Poll::Empty, "salt {salt}");
            }
            assert_eq!(
                reader.position(),
                FRAME_HEADER_LEN as u64 * (seq + 1),
                "salt {salt}"
            );
        }
        let s = reader.stats();
        assert_eq!(
            (s.delivered, s.garbage, s.lost),
            (4, 0, 0),
            "salt {salt}: {s:?}"
        );
    }
}

/// A claim tail that moves back behind a reader waiting on an unfinished frame (garbage in the
/// header: a writer only ever raises it) makes the reader report `Empty`, not underflow; once
/// the tail is sane again the reader goes on where it was. (Fuzzer finding: an overflow panic
/// with overflow checks on, a resync to a bogus tail without them.)
#[test]
fn a_claim_tail_moving_backwards_is_nothing_to_read() {
    let lane = Lane::heap(&CONFIG, 0xbac4).expect("lane");
    let mut writer = lane.writer().expect("writer");
    let write = |writer: &mut snapbus_bus::lane::LaneWriter<HeapMem>| {
        let mut claim = writer.claim(100, meta(0)).expect("claim");
        let seq = claim.seq();
        claim.write_payload(&payload(seq, 100));
        claim.commit();
    };
    write(&mut writer);
    write(&mut writer);
    // Record 2 is left BUSY, as by a writer stopped mid-record; 3 and 4 follow it.
    std::mem::forget(writer.claim(100, meta(0)).expect("claim"));
    write(&mut writer);
    write(&mut writer);
    let tail_word = lane.mem().get(CLAIM_TAIL_WORD).expect("claim_tail");
    let tail = tail_word.load(std::sync::atomic::Ordering::Relaxed);
    let mut reader = lane.reader(StartAt::Oldest);
    for seq in 0..2 {
        assert!(matches!(reader.poll(), Poll::Frame(f) if f.meta.seq == seq));
    }
    // Waiting on record 2, with the tail (past record 4) loaded.
    assert_eq!(reader.poll(), Poll::Pending);
    let at = reader.position();
    tail_word.store(8, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(reader.poll(), Poll::Empty);
    assert!(!reader.has_pending_bytes());
    assert_eq!(reader.position(), at);
    tail_word.store(tail, std::sync::atomic::Ordering::Relaxed);
    reader.set_writer_gone(true);
    let mut rest = Vec::new();
    loop {
        match reader.poll() {
            Poll::Frame(f) => rest.push(f.meta.seq),
            Poll::Lagged(_) | Poll::Pending => {}
            Poll::Empty | Poll::Closed => break,
        }
    }
    assert_eq!(rest, [3, 4]);
    let s = reader.stats();
    assert_eq!((s.holes, s.garbage, s.lost), (1, 0, 1), "{s:?}");
}

/// Record positions of a lane, read from its oldest record.
/// Overwrites the commit word of the frame at `pos` with `value`.
fn store_commit_word(lane: &Lane<HeapMem>, pos: u64, value: u64) {
    store_frame_word(lane, pos, 0, value);
}

/// Garbage commit words in history older than the stall timeout are skipped after a few
/// milliseconds each (the lane's own timestamps prove that no live claim can be that old), not
/// after a stall timeout per spot, and the records they held are counted as damaged, not lost, while the writer is
/// live. (Regression: a new reader took each spot for an in-flight claim and waited 5 s.)
#[test]
fn garbage_in_old_history_is_skipped_at_once_and_counted_as_damage() {
    let lane = filled_lane(200);
    let positions = record_positions(&lane);
    assert_eq!(positions.len(), 200);
    let timeout = Duration::from_millis(1000);
    // The records are older than the stall timeout (aging them is the point, not a wait for
    // another thread).
    std::thread::sleep(timeout + Duration::from_millis(50));
    let spots: Vec<usize> = (0..10).map(|i| 7 + i * 19).collect();
    for &k in &spots {
        store_commit_word(&lane, positions[k], 0xdead_beef_0000_0000 | k as u64);
    }
    let mut reader = lane.reader(StartAt::Oldest);
    reader.set_stall_timeout(timeout);
    let t0 = Instant::now();
    let (mut delivered, mut lagged) = (Vec::new(), 0);
    loop {
        assert!(
            t0.elapsed() < 10 * timeout,
            "still reading after {:?}: {:?}",
            t0.elapsed(),
            reader.stats()
        );
        match reader.poll() {
            Poll::Frame(f) => delivered.push(f.meta.seq),
            Poll::Lagged(n) => lagged += n,
            Poll::Pending => {}
            Poll::Empty | Poll::Closed => break,
        }
    }
    let elapsed = t0.elapsed();
    let expected: Vec<u64> = (0..200u64)
        .filter(|s| !spots.contains(&(*s as usize)))
        .collect();
    assert_eq!(delivered, expected);
    let s = reader.stats();
    assert_eq!(
        (s.damaged, s.lost, s.holes, lagged),
        (10, 0, 0, 10),
        "{s:?}"
    );
    assert_eq!(s.garbage, 10, "{s:?}");
    assert!(
        elapsed < timeout,
        "took {elapsed:?}: a stall timeout per spot"
    );
}

/// A claim of a live writer whose header is not written yet (its commit word still holds
/// whatever was there: in a ring that has wrapped, an older record's bytes; before it wraps,
/// the zero the lane was made with) is never skipped while younger than the stall timeout,
/// even with committed records after it (another thread's claims): the reader waits, and
/// delivers it once committed, with nothing counted lost or damaged.
#[test]
fn a_live_claim_not_yet_begun_is_never_skipped() {
    // After the ring has wrapped: old bytes.
    a_live_claim_not_yet_begun_is_waited_for(1_000, 0x0123_4567_89ab_cdef);
    // Before: zero.
    a_live_claim_not_yet_begun_is_waited_for(0, 0);
}

/// [`a_live_claim_not_yet_begun_is_never_skipped`] after `before` records, with `old` in the
/// claim's commit word.
fn a_live_claim_not_yet_begun_is_waited_for(before: u64, old: u64) {
    let lane = Lane::heap(&CONFIG, 0xfeed).expect("lane");
    let writer = lane.shared_writer().expect("writer");
    let write = |writer: &snapbus_bus::lane::SharedLaneWriter<HeapMem>| {
        let mut claim = writer.claim(64, meta(0)).expect("claim");
        let seq = claim.seq();
        claim.write_payload(&payload(seq, 64));
        claim.commit();
    };
    for _ in 0..before + 5 {
        write(&writer);
    }
    let mut held = writer.claim(64, meta(0)).expect("claim");
    let held_pos = lane.stats().claim_tail - align(FRAME_HEADER_LEN as u64 + 64);
    // As if its writer had not yet stored the header: the commit word holds what was there.
    store_commit_word(&lane, held_pos, old);
    for _ in 0..3 {
        write(&writer);
    }
    let mut reader = lane.reader(StartAt::Oldest);
    let first = reader_first_seq(&lane);
    let mut delivered = Vec::new();
    for _ in 0..20_000 {
        match reader.poll() {
            Poll::Frame(f) => delivered.push(f.meta.seq),
            Poll::Pending => {}
            other => panic!("{other:?} while a live claim is in flight"),
        }
    }
    assert_eq!(delivered, (first..before + 5).collect::<Vec<u64>>());
    assert_eq!(reader.position(), held_pos);
    held.write_payload(&payload(before + 5, 64));
    held.commit();
    loop {
        match reader.poll() {
            Poll::Frame(f) => delivered.push(f.meta.seq),
            Poll::Empty => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(delivered, (first..before + 9).collect::<Vec<u64>>());
    let s = reader.stats();
    assert_eq!(
        (s.lost, s.damaged, s.garbage, s.holes),
        (0, 0, 0, 0),
        "{s:?}"
    );
}

/// The sequence number of the oldest record a new reader from the oldest gets.
fn reader_first_seq(lane: &std::sync::Arc<Lane<HeapMem>>) -> u64 {
    match lane.reader(StartAt::Oldest).poll() {
        Poll::Frame(f) => f.meta.seq,
        other => panic!("{other:?}"),
    }
}

fn align(n: u64) -> u64 {
    n.next_multiple_of(FRAME_ALIGN as u64)
}
