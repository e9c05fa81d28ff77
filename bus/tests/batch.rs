//! Reading in batches (`Subscriber::read_in_batches`): a lane is read once it holds a batch
//! or its oldest unread byte has waited long enough, then to its end; nothing is lost or
//! reordered by it, and a lane's end is still seen. And a cut made while reading
//! (`Subscriber::cut_now`): read up to it, not a record past it, and no end reported.

use std::time::{Duration, Instant};

use snapbus_bus::Level;
use snapbus_bus::publisher::EmitMeta;
use snapbus_bus::schemas::{Field, SchemaDescriptor, TypeDesc};
use snapbus_bus::subscriber::{BatchReads, Event, Subscriber};

use crate::in_place::{Bus, emit_bytes, payload};

const WATCHDOG: Duration = Duration::from_secs(60);

/// Reads until the lane ends; the records' first words, in order.
fn read_to_end(sub: &mut Subscriber) -> (Vec<u64>, u64) {
    let (mut seen, mut lost) = (Vec::new(), 0);
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < WATCHDOG,
            "no end after {} records",
            seen.len()
        );
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(r)) => seen.push(u64::from_le_bytes(
                r.payload[..8].try_into().expect("a word"),
            )),
            Some(Event::Lagged { lost: n, .. }) => lost += n,
            Some(Event::Ended(_)) => return (seen, lost),
            _ => {}
        }
    }
}

#[test]
fn a_lane_is_read_once_it_holds_a_batch_then_to_its_end() {
    let bus = Bus::start("batch-size");
    let (p, meta) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe();
    // A wait longer than the test: only the size lets a batch through.
    sub.read_in_batches(Some(BatchReads {
        min_bytes: 16 << 10,
        max_wait: Duration::from_secs(3600),
    }));
    // Ten 1 KiB records: under the batch size, so nothing is read, however often it is asked.
    for i in 0..10 {
        emit_bytes(&p, meta, &payload(i, 1024)).expect("emit");
    }
    for _ in 0..1000 {
        if let Some(Event::Record(r)) = sub.next(Duration::ZERO).expect("next") {
            panic!("record {} read before a batch was there", r.meta.seq);
        }
    }
    assert!(
        sub.next(Duration::from_millis(20))
            .expect("next")
            .is_none_or(|e| !matches!(e, Event::Record(_))),
        "a wait is no way around the batch"
    );
    // Ten more: a batch (more than 16 KiB with the frames' headers); all twenty, in order.
    for i in 10..20 {
        emit_bytes(&p, meta, &payload(i, 1024)).expect("emit");
    }
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 20 {
        assert!(t0.elapsed() < WATCHDOG, "only {seen:?}");
        if let Some(Event::Record(r)) = sub.next(Duration::from_millis(100)).expect("next") {
            seen.push(u64::from_le_bytes(
                r.payload[..8].try_into().expect("a word"),
            ));
        }
    }
    assert_eq!(seen, (0..20).collect::<Vec<_>>());
    // Back to record by record: one record is read at once.
    sub.read_in_batches(None);
    emit_bytes(&p, meta, &payload(20, 64)).expect("emit");
    p.close();
    let (rest, lost) = read_to_end(&mut sub);
    assert_eq!((rest, lost), (vec![20], 0));
}

#[test]
fn a_small_batch_is_read_after_the_longest_wait_and_the_end_is_seen() {
    let bus = Bus::start("batch-wait");
    let (p, meta) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe();
    let max_wait = Duration::from_millis(200);
    sub.read_in_batches(Some(BatchReads {
        min_bytes: 1 << 20,
        max_wait,
    }));
    let t0 = Instant::now();
    for i in 0..3 {
        emit_bytes(&p, meta, &payload(i, 100)).expect("emit");
    }
    p.close();
    let (seen, lost) = read_to_end(&mut sub);
    // Not before the oldest byte had waited `max_wait` (counted from when the subscriber
    // first saw it, after the emits).
    assert!(t0.elapsed() >= max_wait, "read after {:?}", t0.elapsed());
    assert_eq!((seen, lost), (vec![0, 1, 2], 0));
    assert_eq!(sub.stats().delivered, 3);
}

#[test]
fn a_cut_while_reading_stops_at_the_cut_even_behind_unsubscribed_records() {
    let bus = Bus::start("cut-now");
    let (p, words) = bus.publisher(1 << 20);
    let other = SchemaDescriptor::new(
        "test.other",
        1,
        TypeDesc::Struct {
            fields: vec![Field::new("x", TypeDesc::U64)],
        },
    )
    .expect("schema");
    let other = EmitMeta {
        schema_key: p.register_schema(&other).expect("register"),
        schema_version: 1,
        level: Level::INFO,
        emitter: 0,
    };
    // The subscriber takes `test.words` only.
    let mut sub = bus.subscribe();
    emit_bytes(&p, words, &payload(0, 64)).expect("emit");
    for i in 0..5u64 {
        emit_bytes(&p, other, &i.to_le_bytes()).expect("emit");
    }
    sub.cut_now();
    // Past the cut: never read, although only unsubscribed records lie between.
    emit_bytes(&p, words, &payload(1, 64)).expect("emit");
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while !sub.all_ended() {
        assert!(t0.elapsed() < WATCHDOG, "the cut never reached: {seen:?}");
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(r)) => seen.push(u64::from_le_bytes(
                r.payload[..8].try_into().expect("a word"),
            )),
            Some(Event::Ended(who)) => panic!("producer {} reported ended at a cut", who.name),
            _ => {}
        }
    }
    assert_eq!(seen, vec![0]);
    // Its producer goes on: nothing more for this subscriber.
    emit_bytes(&p, words, &payload(2, 64)).expect("emit");
    assert!(
        sub.next(Duration::from_millis(50))
            .expect("next")
            .is_none_or(|e| !matches!(e, Event::Record(_))),
        "read past the cut"
    );
    assert_eq!(sub.unread_bytes(), 0);
}
