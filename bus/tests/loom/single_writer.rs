//! (a) Single writer vs reader: a `LaneWriter` wraps the ring while a reader polls.

use loom::thread;
use std::ops::ControlFlow;
use std::sync::Arc;

use snapbus_bus::lane::{
    Frame, FrameMeta, Lane, LaneReader, LaneWriter, NoFrame, PayloadView, Poll, StartAt, Visit,
};
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
        let (lane, mut reader, producer) = wrap_race();
        let mut seen = Seen::default();
        seen.poll_n(&mut reader, 3, &[], validate_single);
        let mut writer = producer.join().expect("writer");
        writer.close();
        seen.drain(&mut reader, &[], validate_single);
        seen.finish(&reader, 10, &[]);
        assert_eq!(lane.stats().frames_committed, 10);
    });
}

/// The race of the (a) models: a lane with its first lap written (records 0 to 7), a reader at
/// its oldest record, and a thread that writes records 8 and 9 over records 0 and 1 (returning
/// the writer).
fn wrap_race() -> (
    Arc<Lane<HeapMem>>,
    LaneReader<HeapMem>,
    thread::JoinHandle<LaneWriter<HeapMem>>,
) {
    let lane = Lane::heap(&CONFIG, SALT).expect("lane");
    let mut writer = lane.writer().expect("writer");
    let reader = lane.reader(StartAt::Oldest);
    for seq in 0..8 {
        write_single(&mut writer, seq);
    }
    let producer = thread::spawn(move || {
        write_single(&mut writer, 8);
        write_single(&mut writer, 9);
        writer
    });
    (lane, reader, producer)
}

/// One read in place, as the `Poll` a copying read gives: the payload is read word by word
/// through the ring view (atomic loads) inside the closure, and kept only if delivered.
fn poll_in_place<'b>(reader: &mut LaneReader<HeapMem>, buf: &'b mut Vec<u8>) -> Poll<'b> {
    let read = reader.read_in_place(words_of);
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
        let (_, mut reader, producer) = wrap_race();
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

/// The payload of a frame read where it lies, word by word through the ring view.
fn words_of(m: &FrameMeta, view: &PayloadView<'_, HeapMem>) -> Vec<u8> {
    (0..m.payload_len.div_ceil(8))
        .flat_map(|k| view.word(k).unwrap_or(u64::MAX).to_le_bytes())
        .take(m.payload_len)
        .collect()
}

/// One read as the subscriber's drain makes it: a run of up to `max` records
/// (`read_run_in_place`), each handed to `seen` once validated; if the run read nothing, one
/// read in place for whatever ended it. `false` once the lane is closed and read; `closed`: the
/// writer has closed it (so nothing is pending or missing any more).
fn read_run(reader: &mut LaneReader<HeapMem>, seen: &mut Seen, max: usize, closed: bool) -> bool {
    let mut got = Vec::new();
    let end = reader.read_run_in_place(
        max,
        |m, view| Visit::Take(words_of(m, view)),
        |meta, bytes| {
            got.push((meta, bytes));
            ControlFlow::Continue(())
        },
    );
    assert_eq!(end.read, got.len(), "every record of the run taken");
    for (meta, bytes) in &got {
        let f = Frame {
            meta: *meta,
            payload: bytes,
        };
        seen.on(Poll::Frame(f), &[], validate_single);
    }
    if !got.is_empty() {
        return true;
    }
    let mut buf = Vec::new();
    match poll_in_place(reader, &mut buf) {
        Poll::Closed => false,
        p @ (Poll::Empty | Poll::Pending) if closed => {
            panic!("{p:?} before the end of a closed lane: {seen:?}")
        }
        p => {
            seen.on(p, &[], validate_single);
            true
        }
    }
}

/// (a'', CI) As `single_writer_wraps_under_reader`, with a reader that reads runs
/// (`read_run_in_place`, the path of `Subscriber::drain_in_place`), validated once per record
/// without the general loop: what it read of record 0 while the writer overwrote it must be
/// delivered intact or left to the general loop, which discards it and counts it lost.
#[test]
fn single_writer_wraps_under_run_reader() {
    run_reader_model("single_writer_wraps_under_run_reader", &[1]);
}

/// (a'', full) As `single_writer_wraps_under_run_reader`, with two runs of up to two records
/// each during the overwrite.
#[test]
fn full_single_writer_wraps_under_run_reader() {
    run_reader_model("full_single_writer_wraps_under_run_reader", &[2, 2]);
}

/// The model of the run readers: the first lap written before the threads start, then records
/// 8 and 9 written while the reader makes a run of each size in `runs`; then the rest read.
fn run_reader_model(name: &'static str, runs: &'static [usize]) {
    check(name, 2, move || {
        let (_, mut reader, producer) = wrap_race();
        let mut seen = Seen::default();
        seen.from_zero.get_or_insert(reader.position() == 0);
        for &max in runs {
            read_run(&mut reader, &mut seen, max, false);
        }
        let mut writer = producer.join().expect("writer");
        writer.close();
        let mut reads = 0;
        while read_run(&mut reader, &mut seen, 4, true) {
            reads += 1;
            assert!(reads < 64, "no end of a closed lane: {seen:?}");
        }
        seen.finish(&reader, 10, &[]);
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
