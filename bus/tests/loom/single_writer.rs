//! (a) Single writer vs reader: a `LaneWriter` wraps the ring while a reader polls.

use loom::thread;
use snapbus_bus::lane::{Frame, Lane, LaneReader, NoFrame, Poll, StartAt};
use snapbus_bus::mem::HeapMem;

use super::{CONFIG, SALT, Seen, check, validate_single, write_single};

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
