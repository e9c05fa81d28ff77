//! Runs of records in one claim: `LaneWriter::write_run` / `SharedLaneWriter::write_run` (the
//! lane) and `Publisher::emit_many` (the publisher). A run's records arrive like records
//! claimed one at a time (in order, intact, framed on their own, padded at the ring's end);
//! a run stops at its limits (`RUN_RECORDS` records, a span of `max_frame` bytes) and before a
//! refused record, which is counted once; nothing is lost without being counted. And
//! `Subscriber::drain_in_place`, the batch consumer's read: every record, in order, the loss
//! of a lap counted exactly, the lane's end.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use snapbus_bus::lane::{
    ClaimError, Lane, LaneConfig, LaneReader, LaneWriter, Poll, RUN_RECORDS, RecordMeta, StartAt,
};
use snapbus_bus::mem::HeapMem;
use snapbus_bus::publisher::{EmitError, EmitMeta};
use snapbus_bus::subscriber::{Event, InPlaceEvent, RecordRef, Subscriber};

use crate::in_place::{Bus, bytes_schema, emit_bytes, payload};

const WATCHDOG: Duration = Duration::from_secs(60);

const META: RecordMeta = RecordMeta {
    schema_key: 3,
    schema_version: 2,
    level: 4,
    emitter: 9,
};

/// Everything the reader has now: `(seq, t_nanos, payload)`, and the loss it reported.
fn drain(r: &mut LaneReader<HeapMem>) -> (Vec<(u64, u64, Vec<u8>)>, u64) {
    let (mut got, mut lost) = (Vec::new(), 0);
    loop {
        match r.poll() {
            Poll::Frame(f) => {
                assert_eq!(
                    (f.meta.schema_key, f.meta.schema_version, f.meta.level),
                    (3, 2, 4),
                    "seq {}: the run's metadata",
                    f.meta.seq
                );
                assert_eq!(f.meta.emitter, 9);
                got.push((f.meta.seq, f.meta.t_nanos, f.payload.to_vec()));
            }
            Poll::Lagged(n) => lost += n,
            Poll::Empty => return (got, lost),
            p => panic!("unexpected {p:?}"),
        }
    }
}

/// The lanes of these tests, on the heap and in shared memory (the smallest the geometry
/// allows).
const LANE_CONFIG: LaneConfig = LaneConfig {
    capacity: 64 << 10,
    max_frame: 8 << 10,
    block_size: 4 << 10,
};

/// A heap lane of [`LANE_CONFIG`].
fn heap_lane() -> Arc<Lane<HeapMem>> {
    Lane::heap(&LANE_CONFIG, 0x5eed).expect("lane")
}

/// A new [`heap_lane`], its writer and a reader from its oldest record.
fn writer_and_reader() -> (Arc<Lane<HeapMem>>, LaneWriter<HeapMem>, LaneReader<HeapMem>) {
    let lane = heap_lane();
    let w = lane.writer().expect("writer");
    let r = lane.reader(StartAt::Oldest);
    (lane, w, r)
}

#[test]
fn a_run_stops_at_its_record_count_and_its_span() {
    let (lane, mut w, mut r) = writer_and_reader();
    // 100 records of 64 bytes (104-byte frames: 64 of them span 6.5 KiB): a run takes
    // RUN_RECORDS of them.
    let small: Vec<Vec<u8>> = (0..100).map(|i| payload(i, 64)).collect();
    let run = w.write_run(META, &small);
    assert_eq!(
        (run.first_seq, run.written, run.refused),
        (0, RUN_RECORDS, None)
    );
    let rest = w.write_run(META, &small[RUN_RECORDS..]);
    assert_eq!(
        (rest.first_seq, rest.written, rest.refused),
        (RUN_RECORDS as u64, 100 - RUN_RECORDS, None)
    );
    let (got, lost) = drain(&mut r);
    assert_eq!(lost, 0);
    assert_eq!(got.len(), 100);
    for (i, (seq, _, p)) in got.iter().enumerate() {
        assert_eq!((*seq, p), (i as u64, &small[i]));
    }
    // One clock read per run: its records share a time, and times never go backwards.
    assert!(got[..RUN_RECORDS].iter().all(|g| g.1 == got[0].1));
    assert!(got[RUN_RECORDS..].iter().all(|g| g.1 == got[RUN_RECORDS].1));
    assert!(got[RUN_RECORDS].1 >= got[0].1);
    // 3000-byte records (3056-byte frames): two fit a run's 8 KiB span, three do not.
    let big: Vec<Vec<u8>> = (100..105).map(|i| payload(i, 3000)).collect();
    let run = w.write_run(META, &big);
    assert_eq!((run.first_seq, run.written, run.refused), (100, 2, None));
    let (got, _) = drain(&mut r);
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [100, 101]);
    assert_eq!(lane.stats().frames_committed, 102);
}

#[test]
fn runs_wrap_the_ring_and_arrive_whole() {
    let lane = heap_lane();
    let writer = lane.shared_writer().expect("writer");
    let mut r = lane.reader(StartAt::Oldest);
    // Lengths that do not divide the ring, so runs meet its end mid-run (a PAD frame there).
    let mut next = 0u64;
    let mut seen = 0u64;
    for round in 0..200u64 {
        let batch: Vec<Vec<u8>> = (0..(round % 50 + 1))
            .map(|k| payload(next + k, 8 + ((next + k) * 37 % 700) as usize))
            .collect();
        let mut rest = &batch[..];
        while !rest.is_empty() {
            let run = writer.write_run(META, rest);
            assert_eq!(run.refused, None);
            assert_eq!(run.first_seq, next);
            next += run.written as u64;
            rest = &rest[run.written..];
        }
        // The reader keeps up: nothing lost, every payload as written.
        let (got, lost) = drain(&mut r);
        assert_eq!(lost, 0, "round {round}");
        for (seq, _, p) in got {
            assert_eq!(seq, seen, "round {round}");
            assert_eq!(p, payload(seq, 8 + (seq * 37 % 700) as usize), "seq {seq}");
            seen += 1;
        }
    }
    assert_eq!(seen, next);
    assert!(
        lane.stats().claim_tail > 4 * (64 << 10),
        "the test wraps the ring"
    );
    writer.close();
    assert_eq!(
        writer.write_run(META, &[payload(0, 8)]).refused,
        Some(ClaimError::Closed)
    );
}

#[test]
fn a_refused_record_is_counted_once_and_the_ones_after_it_written() {
    let (lane, mut w, mut r) = writer_and_reader();
    let mut batch: Vec<Vec<u8>> = (0..6).map(|i| payload(i, 64)).collect();
    batch[3] = vec![0u8; 9 << 10]; // above the 8 KiB frame
    let run = w.write_run(META, &batch);
    assert_eq!(
        (run.first_seq, run.written),
        (0, 3),
        "the run stops before the refused record"
    );
    assert!(matches!(run.refused, Some(ClaimError::Oversize { .. })));
    let run = w.write_run(META, &batch[4..]);
    assert_eq!((run.first_seq, run.written, run.refused), (3, 2, None));
    assert_eq!(lane.stats().dropped_oversize, 1);
    let (got, lost) = drain(&mut r);
    assert_eq!(lost, 0, "a refused record consumes no sequence number");
    let payloads: Vec<_> = got.into_iter().map(|g| g.2).collect();
    let want: Vec<Vec<u8>> = [0, 1, 2, 4, 5].iter().map(|&i| batch[i].clone()).collect();
    assert_eq!(payloads, want);
}

/// The record number in a payload's first word.
fn first_word(p: &[u8]) -> u64 {
    u64::from_le_bytes(p[..8].try_into().expect("a word"))
}

#[test]
fn emit_many_delivers_every_record_to_a_subscriber() {
    let bus = Bus::start("runs-emit-many");
    let (p, meta) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe();
    let lens = |i: u64| 8 + (i * 53 % 900) as usize;
    let batch: Vec<Vec<u8>> = (0..1000).map(|i| payload(i, lens(i))).collect();
    p.emit_many(meta, &batch).expect("every record written");
    assert_eq!(p.stats().written, 1000);
    let t0 = Instant::now();
    let mut got = Vec::new();
    while got.len() < 1000 {
        assert!(t0.elapsed() < WATCHDOG, "only {} records", got.len());
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(r)) => {
                let i = first_word(r.payload);
                assert_eq!(r.payload, batch[i as usize], "record {i}");
                got.push(i);
            }
            Some(Event::Lagged { lost, .. }) => panic!("{lost} lost"),
            _ => {}
        }
    }
    assert_eq!(got, (0..1000).collect::<Vec<_>>());
}

#[test]
fn emit_many_counts_what_it_could_not_write_and_says_so() {
    let bus = Bus::start("runs-refused");
    let (p, meta) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe();
    // The lane's largest frame is 128 KiB: records 2 and 7 are refused, the rest written.
    let mut batch: Vec<Vec<u8>> = (0..10).map(|i| payload(i, 200)).collect();
    batch[2] = payload(2, 200 << 10);
    batch[7] = payload(7, 200 << 10);
    let err = p.emit_many(meta, &batch).expect_err("two refused");
    assert_eq!((err.written, err.total), (8, 10));
    assert!(matches!(
        err.first,
        EmitError::Claim(ClaimError::Oversize { .. })
    ));
    let stats = p.stats();
    assert_eq!((stats.written, stats.oversize), (8, 2));
    let t0 = Instant::now();
    let mut got = Vec::new();
    while got.len() < 8 {
        assert!(t0.elapsed() < WATCHDOG, "only {got:?}");
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(r)) => got.push(first_word(r.payload)),
            Some(Event::Lagged { lost, .. }) => panic!("{lost} lost"),
            _ => {}
        }
    }
    assert_eq!(got, [0, 1, 3, 4, 5, 6, 8, 9]);
}

/// Drains `sub` with `drain_in_place` (at most `max` events a call) until the producer's lane
/// ends: the first word of every record, in order, and the loss reported.
fn drain_to_end(sub: &mut Subscriber, max: usize) -> (Vec<u64>, u64) {
    let (mut seen, mut lost, mut ended) = (Vec::new(), 0, false);
    let t0 = Instant::now();
    while !ended {
        assert!(
            t0.elapsed() < WATCHDOG,
            "no end after {} records",
            seen.len()
        );
        let n = sub
            .drain_in_place(
                Duration::from_millis(100),
                max,
                |r| r.payload.word(0),
                |ev| {
                    match ev {
                        InPlaceEvent::Record(RecordRef { payload: value, .. }) => {
                            seen.push(value.expect("an 8-byte payload"));
                        }
                        InPlaceEvent::Other(Event::Lagged { lost: n, .. }) => lost += n,
                        InPlaceEvent::Other(Event::Ended(_)) => ended = true,
                        InPlaceEvent::Other(_) => {}
                    }
                    ControlFlow::Continue(())
                },
            )
            .expect("drain");
        assert!(n <= max, "{n} events from a call allowed {max}");
    }
    (seen, lost)
}

#[test]
fn drain_in_place_hands_over_every_record_then_the_end() {
    let bus = Bus::start("runs-drain");
    let (p, meta) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe();
    let batch: Vec<Vec<u8>> = (0..3000)
        .map(|i| payload(i, 8 + (i % 5) as usize * 8))
        .collect();
    p.emit_many(meta, &batch).expect("written");
    p.close();
    let (seen, lost) = drain_to_end(&mut sub, 100);
    assert_eq!(lost, 0);
    assert_eq!(seen, (0..3000).collect::<Vec<_>>());
    assert_eq!(sub.stats().delivered, 3000);
}

#[test]
fn drain_in_place_counts_a_lap_exactly() {
    let bus = Bus::start("runs-drain-lap");
    // A 256 KiB ring; 20,000 records of 64 bytes (104-byte frames) lap it about eight times.
    let (p, meta) = bus.publisher(256 << 10);
    let mut sub = bus.subscribe();
    let batch: Vec<Vec<u8>> = (0..20_000).map(|i| payload(i, 64)).collect();
    p.emit_many(meta, &batch).expect("written");
    p.close();
    let (seen, lost) = drain_to_end(&mut sub, usize::MAX);
    assert!(lost > 0, "the ring was lapped");
    assert_eq!(
        seen.len() as u64 + lost,
        20_000,
        "every record delivered or counted"
    );
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_eq!(seen.last(), Some(&19_999), "the newest record");
}

#[test]
fn drain_in_place_stops_where_its_callback_says() {
    let bus = Bus::start("runs-drain-break");
    let (p, meta) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe();
    let batch: Vec<Vec<u8>> = (0..100).map(|i| payload(i, 8)).collect();
    p.emit_many(meta, &batch).expect("written");
    // Up to the tenth record: the call ends there, and the next one goes on after it.
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while seen.len() < 10 {
        assert!(t0.elapsed() < WATCHDOG, "only {seen:?}");
        sub.drain_in_place(
            Duration::from_millis(100),
            usize::MAX,
            |r| r.payload.word(0),
            |ev| match ev {
                InPlaceEvent::Record(RecordRef { payload: value, .. }) => {
                    seen.push(value.expect("a word"));
                    if seen.len() == 10 {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                }
                InPlaceEvent::Other(_) => ControlFlow::Continue(()),
            },
        )
        .expect("drain");
    }
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    p.close();
    let (rest, lost) = drain_to_end(&mut sub, usize::MAX);
    assert_eq!(lost, 0);
    assert_eq!(rest, (10..100).collect::<Vec<_>>());
}

#[test]
fn a_run_meets_the_ring_s_end_with_a_pad_between_its_records() {
    let (_, mut w, mut r) = writer_and_reader();
    // 600 records of 96 bytes (144-byte frames) fill 86,400 bytes: the 64 KiB ring's end is
    // met after 455 of them (65,520 bytes), 16 bytes short of a frame: a PAD, then the next
    // record at the ring's start, inside the run of records 448..512.
    let batch: Vec<Vec<u8>> = (0..600).map(|i| payload(i, 96)).collect();
    let mut rest = &batch[..];
    let mut wrapped_mid_run = false;
    while !rest.is_empty() {
        let run = w.write_run(META, rest);
        assert_eq!(run.refused, None);
        let first = run.first_seq;
        // What the reader gets of this run: positions, in order, intact.
        let mut positions = Vec::new();
        loop {
            match r.poll() {
                Poll::Frame(f) => {
                    assert_eq!(f.payload, &batch[f.meta.seq as usize][..]);
                    positions.push((f.meta.seq, f.meta.pos));
                }
                Poll::Empty => break,
                p => panic!("unexpected {p:?}"),
            }
        }
        assert_eq!(positions.len(), run.written, "the whole run, at once");
        assert_eq!(positions[0].0, first);
        for pair in positions.windows(2) {
            let ((_, a), (_, b)) = (pair[0], pair[1]);
            if b - a != 144 {
                // The gap is the PAD to the ring's end.
                assert_eq!(b % (64 << 10), 0, "a record after a pad starts the ring");
                wrapped_mid_run = true;
            }
        }
        rest = &rest[run.written..];
    }
    assert!(wrapped_mid_run, "some run met the ring's end");
}

#[test]
fn a_run_refused_by_the_lap_guard_mid_run_keeps_what_it_wrote() {
    let lane = heap_lane();
    let writer = lane.shared_writer().expect("writer");
    // A claim held in flight at the ring's start (seq 0, [0, 112)).
    let mut held = writer.claim(64, META).expect("claim");
    held.write_payload(&payload(0, 64));
    // Runs of 64-byte records (112-byte frames) from seq 1: record 585 would start a lap on
    // (after an implicit pad at 65,520) and overwrite the held claim, so the run of seqs
    // 577..641 stops there, with 8 written.
    let batch: Vec<Vec<u8>> = (1..=700).map(|i| payload(i, 64)).collect();
    let mut rest = &batch[..];
    let mut refused_mid_run = None;
    while !rest.is_empty() && refused_mid_run.is_none() {
        let run = writer.write_run(META, rest);
        if let Some(e) = run.refused {
            refused_mid_run = Some((run.first_seq, run.written, e));
        }
        rest = &rest[run.written..];
    }
    assert_eq!(
        refused_mid_run,
        Some((577, 8, ClaimError::Lapped)),
        "the run stops at the record that would lap the held claim"
    );
    assert_eq!(lane.stats().dropped_wrap, 1, "counted once");
    held.commit();
    // Records 1..=584 and the held record 0 are all there to read, intact.
    let mut r = lane.reader(StartAt::Oldest);
    let (got, lost) = drain(&mut r);
    assert_eq!(lost, 0);
    assert_eq!(got.len(), 585);
    for (i, (seq, _, p)) in got.iter().enumerate() {
        assert_eq!((*seq, p), (i as u64, &payload(i as u64, 64)));
    }
}

/// A payload whose `as_ref` counts its calls (and could answer differently each time).
struct Counted<'a>(Vec<u8>, &'a std::cell::Cell<usize>);

impl AsRef<[u8]> for Counted<'_> {
    fn as_ref(&self) -> &[u8] {
        self.1.set(self.1.get() + 1);
        &self.0
    }
}

#[test]
fn a_run_asks_each_payload_for_its_bytes_once() {
    let bus = Bus::start("runs-asref");
    let (p, meta) = bus.publisher(1 << 20);
    let calls = std::cell::Cell::new(0);
    let batch: Vec<Counted<'_>> = (0..200).map(|i| Counted(payload(i, 40), &calls)).collect();
    p.emit_many(meta, &batch).expect("written");
    assert_eq!(
        calls.get(),
        200,
        "one `as_ref` a record: the length reserved is the one copied"
    );
    let lane = heap_lane();
    let mut w = lane.writer().expect("writer");
    calls.set(0);
    let run = w.write_run(META, &batch[..10]);
    assert_eq!((run.written, calls.get()), (10, 10));
}

#[test]
fn drain_in_place_reads_batches_to_their_end() {
    let bus = Bus::start("runs-drain-batches");
    let (p, meta) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe();
    sub.read_in_batches(Some(snapbus_bus::subscriber::BatchReads {
        min_bytes: 16 << 10,
        max_wait: Duration::from_secs(3600),
    }));
    // Under a batch: nothing is handed over, however often it is asked.
    let small: Vec<Vec<u8>> = (0..10).map(|i| payload(i, 64)).collect();
    p.emit_many(meta, &small).expect("written");
    let mut seen = Vec::new();
    for _ in 0..100 {
        sub.drain_in_place(
            Duration::ZERO,
            usize::MAX,
            |r| r.payload.word(0),
            |ev| {
                if let InPlaceEvent::Record(RecordRef { payload: value, .. }) = ev {
                    seen.push(value.expect("a word"));
                }
                ControlFlow::Continue(())
            },
        )
        .expect("drain");
    }
    assert!(seen.is_empty(), "read before a batch: {seen:?}");
    // A batch (over 16 KiB with the frames' headers): all of it, in order, then the end.
    let more: Vec<Vec<u8>> = (10..300).map(|i| payload(i, 64)).collect();
    p.emit_many(meta, &more).expect("written");
    p.close();
    let (rest, lost) = drain_to_end(&mut sub, usize::MAX);
    assert_eq!(lost, 0);
    assert_eq!(rest, (0..300).collect::<Vec<_>>());
}

/// Every record `drain_in_place` hands over until the lane ends (at most `max` events a call):
/// its schema, emitter and first word.
fn drain_named(sub: &mut Subscriber, until_end: bool, want: usize) -> Vec<(String, String, u64)> {
    let (mut seen, mut ended) = (Vec::new(), false);
    let t0 = Instant::now();
    while if until_end { !ended } else { seen.len() < want } {
        assert!(t0.elapsed() < WATCHDOG, "only {} records", seen.len());
        sub.drain_in_place(
            Duration::from_millis(100),
            usize::MAX,
            |r| r.payload.word(0),
            |ev| {
                match ev {
                    InPlaceEvent::Record(r) => seen.push((
                        r.schema.id().to_string(),
                        r.emitter.unwrap_or("").to_string(),
                        r.payload.expect("a word"),
                    )),
                    InPlaceEvent::Other(Event::Lagged { lost, .. }) => panic!("{lost} lost"),
                    InPlaceEvent::Other(Event::Ended(_)) => ended = true,
                    InPlaceEvent::Other(_) => {}
                }
                ControlFlow::Continue(())
            },
        )
        .expect("drain");
    }
    seen
}

#[test]
fn drain_in_place_names_each_record_and_skips_what_no_glob_matches() {
    let bus = Bus::start("runs-drain-keys");
    let (p, words) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe_to(&["test.words", "test.late"]);
    let skipped = EmitMeta {
        schema_key: p
            .register_schema(&bytes_schema("test.skipped"))
            .expect("key"),
        ..words
    };
    let (left, right) = (p.emitter("left"), p.emitter("right"));
    // Records of a schema no glob matches among those of one that is matched, from two
    // emitters: the drain reads them in runs, and must name every record right.
    let mut want = Vec::new();
    for i in 0..600u64 {
        if i % 3 == 0 {
            emit_bytes(&p, skipped, &payload(i, 16)).expect("emit");
        } else {
            let (emitter, name) = if i % 2 == 0 {
                (left, "left")
            } else {
                (right, "right")
            };
            emit_bytes(&p, EmitMeta { emitter, ..words }, &payload(i, 16)).expect("emit");
            want.push(("test.words".to_string(), name.to_string(), i));
        }
    }
    assert_eq!(drain_named(&mut sub, false, want.len()), want);
    // A schema registered after the subscriber read its lane: its first record is classified
    // as it comes, in the middle of a drain.
    let late = EmitMeta {
        schema_key: p.register_schema(&bytes_schema("test.late")).expect("key"),
        ..words
    };
    let mut rest = Vec::new();
    for i in 600..800u64 {
        let (meta, schema) = if i % 2 == 1 {
            (late, "test.late")
        } else {
            (words, "test.words")
        };
        emit_bytes(&p, meta, &payload(i, 16)).expect("emit");
        rest.push((schema.to_string(), String::new(), i));
    }
    p.close();
    assert_eq!(drain_named(&mut sub, true, 0), rest);
    let stats = sub.stats();
    assert_eq!(
        (stats.delivered, stats.lost, stats.unknown_keys),
        (600, 0, 0)
    );
}

/// Payload bytes that are never zero, so stale bytes of an earlier lap show in a frame's
/// padding if it is not cleared.
fn nonzero_payload(i: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|k| (i * 31 + k) as u8 | 1).collect()
}

#[test]
fn writes_into_shared_memory_arrive_whole_with_their_padding_zeroed() {
    use snapbus_bus::lane::ShmLane;
    let shm = ShmLane::create("runs-padding", &LANE_CONFIG).expect("lane");
    let reading = ShmLane::open(shm.read_only_fd().expect("fd")).expect("read-only mapping");
    let writer = shm.lane().shared_writer().expect("writer");
    let mut r = reading.lane().reader(StartAt::Oldest);
    // Lengths that are not multiples of 8 and change from record to record, so that over many
    // laps a frame's padding lies where an earlier lap wrote payload bytes.
    let len_of = |seq: u64| 1 + (seq * 13 % 61) as usize;
    let (mut next, mut seen) = (0u64, 0u64);
    for round in 0..400u64 {
        if round % 2 == 0 {
            // A run (`write_run`)...
            let batch: Vec<Vec<u8>> = (next..next + 40)
                .map(|s| nonzero_payload(s, len_of(s)))
                .collect();
            let mut rest = &batch[..];
            while !rest.is_empty() {
                let run = writer.write_run(META, rest);
                assert_eq!(run.refused, None);
                next += run.written as u64;
                rest = &rest[run.written..];
            }
        } else {
            // ...and single claims filled with `Claim::write_payload`.
            for _ in 0..40 {
                let p = nonzero_payload(next, len_of(next));
                let mut claim = writer.claim(p.len(), META).expect("claim");
                claim.write_payload(&p);
                claim.commit();
                next += 1;
            }
        }
        loop {
            let got = r.read_in_place(|meta, v| {
                let words: Vec<u64> = (0..v.len().div_ceil(8))
                    .map(|i| v.word(i).expect("word"))
                    .collect();
                (meta.seq, v.len(), words)
            });
            let (_, (seq, len, words)) = match got {
                Ok(x) => x,
                Err(snapbus_bus::lane::NoFrame::Empty) => break,
                Err(e) => panic!("round {round}: {e:?}"),
            };
            assert_eq!(seq, seen, "round {round}: in order, nothing lost");
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(len, len_of(seq));
            assert_eq!(&bytes[..len], &nonzero_payload(seq, len)[..], "seq {seq}");
            assert!(
                bytes[len..].iter().all(|&b| b == 0),
                "seq {seq}: the padding after {len} bytes is zeroed, got {:?}",
                &bytes[len..]
            );
            seen += 1;
        }
    }
    assert_eq!(seen, next);
    assert!(
        shm.lane().stats().claim_tail > 8 * (64 << 10),
        "the test laps the ring many times"
    );
}

#[test]
#[allow(unsafe_code)] // `copy_into_claim` is an unsafe method: the claim's owner calls it.
fn a_copy_into_a_claim_refuses_what_it_cannot_write() {
    use snapbus_bus::lane::ShmLane;
    use snapbus_bus::mem::LaneMem;
    let shm = ShmLane::create("runs-refusals", &LANE_CONFIG).expect("lane");
    let reading = ShmLane::open(shm.read_only_fd().expect("fd")).expect("read-only mapping");
    let mem = shm.lane().mem();
    let end = mem.len_words() * 8;
    let word = |i: usize| {
        mem.get(i)
            .expect("word")
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // SAFETY: nothing in this test reads or writes these bytes meanwhile, and each call is
    // refused before it writes (checked below); the lane has no writer.
    unsafe {
        // Not word-aligned.
        assert!(!mem.copy_into_claim(end - 64 + 4, &[7; 8]));
        // Past the end of the mapping, counting the padding to a whole word.
        assert!(!mem.copy_into_claim(end - 8, &[7; 9]));
        assert!(!mem.copy_into_claim(usize::MAX - 7, &[7; 9]));
        // A read-only mapping.
        assert!(!reading.lane().mem().copy_into_claim(end - 64, &[7; 8]));
    }
    assert!(
        (end / 8 - 8..end / 8).all(|i| word(i) == 0),
        "nothing was written"
    );
    // And in bounds it writes the bytes and zeroes the rest of the last word (set first, so a
    // copy that left it would show).
    mem.get(end / 8 - 1)
        .expect("word")
        .store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
    let wrote = {
        // SAFETY: as above; these bytes are past the lane's tail, which nobody reads.
        unsafe { mem.copy_into_claim(end - 16, &[7; 9]) }
    };
    assert!(wrote);
    assert_eq!(word(end / 8 - 2), u64::from_le_bytes([7; 8]));
    assert_eq!(word(end / 8 - 1), 7);
}
