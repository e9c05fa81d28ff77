//! Claims still in flight: a reader never delivers the old bytes under an unwritten claim, and
//! never skips a live claim whose header is not written yet.

use snapbus_bus::lane::layout::{FRAME_ALIGN, FRAME_HEADER_LEN};
use snapbus_bus::lane::{Lane, Poll, StartAt};
use snapbus_bus::mem::{HeapMem, LaneMem};

use super::{CONFIG, meta, payload, store_commit_word};

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
