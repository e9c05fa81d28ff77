//! Loss after a reader is lapped: where it resumes, what it reads next, and how much it counts
//! as lost.

use snapbus_bus::lane::layout::FRAME_HEADER_LEN;
use snapbus_bus::lane::{Lane, LaneReader, NoFrame, Poll, StartAt};
use snapbus_bus::mem::HeapMem;

use super::{CONFIG, QUARTER, filled_lane, meta, payload};

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
