//! Garbage in a lane: corrupt headers, bad claim tails, impossible sequence numbers, zeroed
//! memory and overwritten commit words. Readers never panic or hang on it, and count it exactly.

use std::time::{Duration, Instant};

use snapbus_bus::lane::layout::FRAME_HEADER_LEN;
use snapbus_bus::lane::{Lane, NoFrame, Poll, StartAt};
use snapbus_bus::mem::{HeapMem, LaneMem};

use super::{CONFIG, filled_lane, meta, payload, store_commit_word};
use crate::common::record_positions;

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

/// Word index of `claim_tail` in the lane header.
const CLAIM_TAIL_WORD: usize = 128 / 8;

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
