//! Reading records where they lie in the ring (`Subscriber::next_in_place`): what it delivers
//! is what a copying read delivers, and a record overwritten while it was being read in place
//! is never delivered, but counted as lost. A real broker (threads of this process), a
//! producer thread writing into shared memory, a real subscriber.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use snapbus_bus::Level;
use snapbus_bus::broker;
use snapbus_bus::lane::{LaneConfig, StartAt};
use snapbus_bus::publisher::{EmitError, EmitMeta, FillError, Publisher, PublisherConfig};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::schemas::{Field, SchemaDescriptor, TypeDesc};
use snapbus_bus::subscriber::{
    Event, Glob, InPlaceEvent, RecordRef, SubscribeOptions, Subscriber, SubscriberStats,
};

const WATCHDOG: Duration = Duration::from_secs(60);

/// A broker and a producer on a bus of their own; removed on drop.
pub(crate) struct Bus {
    root: PathBuf,
    dir: BusDir,
    broker: Option<broker::InProcess>,
}

impl Bus {
    pub(crate) fn start(name: &str) -> Bus {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{name}-{}", std::process::id()));
        let dir = BusDir::locate_in(&root, &BusName::new(name).expect("name"));
        let broker =
            broker::InProcess::start(dir.clone(), Duration::from_secs(60)).expect("broker");
        Bus {
            root,
            dir,
            broker: Some(broker),
        }
    }

    pub(crate) fn publisher(&self, capacity: usize) -> (Publisher, EmitMeta) {
        let p = Publisher::start(
            self.dir.clone(),
            PublisherConfig {
                name: "inplace".into(),
                lane: LaneConfig {
                    capacity,
                    max_frame: (capacity / 8).min(2 << 20),
                    block_size: 64 << 10,
                },
                session_tag: None,
                perf_tag: None,
                relayed: false,
            },
        )
        .expect("publisher");
        // Connected, so that a subscriber made next maps its lane at once.
        let t0 = Instant::now();
        while !p.is_connected() {
            assert!(t0.elapsed() < WATCHDOG, "the publisher never joined");
            std::thread::sleep(Duration::from_millis(5));
        }
        let key = p
            .register_schema(&bytes_schema("test.words"))
            .expect("register");
        let meta = EmitMeta {
            schema_key: key,
            schema_version: 1,
            level: Level::INFO,
            emitter: 0,
        };
        (p, meta)
    }

    pub(crate) fn subscribe(&self) -> Subscriber {
        self.subscribe_to(&["test.words"])
    }

    /// A subscriber to the schemas `globs` match, from the oldest record.
    pub(crate) fn subscribe_to(&self, globs: &[&str]) -> Subscriber {
        Subscriber::connect(
            &self.dir,
            SubscribeOptions {
                kind: "test".into(),
                globs: globs.iter().map(|g| Glob::new(g).expect("glob")).collect(),
                start: StartAt::Oldest,
                cut: false,
                skip_lanes: Vec::new(),
                count_history_as_lost: true,
            },
        )
        .expect("subscribe")
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        if let Some(b) = self.broker.take() {
            let _ = b.stop();
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A schema of one bytes field, named `id`.
pub(crate) fn bytes_schema(id: &str) -> SchemaDescriptor {
    SchemaDescriptor::new(
        id,
        1,
        TypeDesc::Struct {
            fields: vec![Field::new("data", TypeDesc::Bytes)],
        },
    )
    .expect("schema")
}

/// Emits an encoded payload, put whole (`emit_with`).
pub(crate) fn emit_bytes(p: &Publisher, meta: EmitMeta, payload: &[u8]) -> Result<u64, EmitError> {
    p.emit_with(meta, payload.len(), |w| Ok(w.put(payload)?))
}

/// Record `i`: `len` bytes, every 8-byte word `i`, then a tail of bytes `i as u8` (so a
/// payload that is not a whole number of words is covered too).
pub(crate) fn payload(i: u64, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = std::iter::repeat_n(i.to_le_bytes(), len / 8)
        .flatten()
        .collect();
    v.resize(len, i as u8);
    v
}

#[test]
fn in_place_reads_deliver_what_copying_reads_do() {
    let bus = Bus::start("inplace-same");
    let (p, meta) = bus.publisher(1 << 20);
    let lens = [0usize, 1, 7, 8, 9, 100, 4096, 4099, 16_003];
    for (i, len) in lens.iter().enumerate() {
        emit_bytes(&p, meta, &payload(i as u64, *len)).expect("emit");
    }
    p.close();

    // A copying subscriber and an in-place one over the same records.
    let mut copied = Vec::new();
    let mut sub = bus.subscribe();
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < WATCHDOG, "copies: {} records", copied.len());
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(r)) => copied.push((r.meta, r.payload.to_vec())),
            Some(Event::Ended(_)) => break,
            _ => {}
        }
    }
    assert_eq!(copied.len(), lens.len());

    let mut in_place = Vec::new();
    let mut sub = bus.subscribe();
    // A piece size that is not a power of two, so pieces straddle the payloads unevenly.
    let mut scratch = [0u8; 24];
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < WATCHDOG,
            "in place: {} records",
            in_place.len()
        );
        let next = sub
            .next_in_place(Duration::from_millis(100), |r| {
                assert_eq!(r.schema.id(), "test.words");
                assert_eq!(r.producer.name, "inplace");
                let v = r.payload;
                // Piece by piece, and word by word: the same bytes.
                let mut bytes = Vec::with_capacity(v.len());
                assert!(v.for_each_chunk(&mut scratch, |piece| bytes.extend_from_slice(piece)));
                let words: Vec<u64> = (0..v.len().div_ceil(8))
                    .map(|i| v.word(i).expect("in range"))
                    .collect();
                assert_eq!(v.word(words.len()), None, "past the end");
                // Byte by byte: the same bytes again, and none past the payload (not even
                // the padding in its last word).
                let each: Vec<u8> = (0..v.len()).map(|i| v.byte(i).expect("in range")).collect();
                assert_eq!(each, bytes, "bytes one at a time");
                assert_eq!(v.byte(v.len()), None, "past the end");
                // A range: aligned and inside, unaligned, past the end.
                let mut two = [0u8; 2];
                let aligned = v.copy_range_to(8, &mut two).then_some(two);
                assert!(!v.copy_range_to(1, &mut two), "unaligned");
                assert!(!v.copy_range_to(v.len().saturating_sub(1), &mut two) || v.len() < 2);
                (r.meta, bytes, words, aligned)
            })
            .expect("next_in_place");
        match next {
            Some(InPlaceEvent::Record(r)) => {
                assert_eq!(r.meta, r.payload.0);
                in_place.push(r.payload);
            }
            Some(InPlaceEvent::Other(Event::Ended(_))) => break,
            Some(InPlaceEvent::Other(Event::Record(_))) => panic!("a record as Other"),
            _ => {}
        }
    }
    assert_eq!(in_place.len(), copied.len());
    for ((meta, bytes, words, aligned), (cmeta, cbytes)) in in_place.iter().zip(&copied) {
        assert_eq!(meta, cmeta);
        assert_eq!(bytes, cbytes);
        for (i, w) in words.iter().enumerate() {
            // Whole words equal the copy; the last one's bytes past the payload are padding.
            let have = &w.to_le_bytes()[..(cbytes.len() - 8 * i).min(8)];
            assert_eq!(have, &cbytes[8 * i..(8 * i + 8).min(cbytes.len())]);
        }
        let want = (cbytes.len() >= 10).then(|| [cbytes[8], cbytes[9]]);
        assert_eq!(
            *aligned,
            want,
            "bytes 8..10 of a {}-byte payload",
            cbytes.len()
        );
    }
    let stats: SubscriberStats = sub.stats();
    assert_eq!((stats.delivered, stats.lost), (lens.len() as u64, 0));
}

#[test]
fn a_record_overwritten_while_read_in_place_is_never_delivered_and_is_counted_lost() {
    let bus = Bus::start("inplace-torn");
    // A 256 KiB ring of 4 KiB records: the producer laps it every 64 records.
    let (p, meta) = bus.publisher(256 << 10);
    let len = 4096;
    let mut sub = bus.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let producer = {
        let (stop, written) = (Arc::clone(&stop), Arc::clone(&written));
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut i = 0u64;
            // Until the reader has seen enough overwrites (or the watchdog).
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < WATCHDOG {
                emit_bytes(&p, meta, &payload(i, len)).expect("emit");
                i += 1;
            }
            written.store(i, Ordering::Relaxed);
            p.close();
        })
    };

    // The reader reads the first word, dawdles, then reads the last: while it dawdles the
    // producer overwrites the frame now and then, and what it read is then inconsistent.
    let (mut delivered, mut lost, mut inconsistent_seen, mut runs) = (0u64, 0u64, 0u64, 0u64);
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < WATCHDOG * 2,
            "no end after {delivered} records"
        );
        let next = sub
            .next_in_place(Duration::from_millis(100), |r| {
                runs += 1;
                let v = r.payload;
                let first = v.word(0).expect("word 0");
                for _ in 0..2_000 {
                    std::hint::spin_loop();
                }
                let middle = v.word(len / 16).expect("a middle word");
                let last = v.word(len / 8 - 1).expect("the last word");
                if first != last || first != middle {
                    inconsistent_seen += 1;
                    if inconsistent_seen >= 20 {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                (first, middle, last)
            })
            .expect("next_in_place");
        match next {
            Some(InPlaceEvent::Record(r)) => {
                let (first, middle, last) = r.payload;
                assert!(
                    first == middle && middle == last,
                    "record {} delivered torn: {:?}",
                    r.meta.seq,
                    r.payload
                );
                assert_eq!(first, r.meta.seq, "the record's own number");
                delivered += 1;
            }
            Some(InPlaceEvent::Other(Event::Lagged { lost: n, .. })) => lost += n,
            Some(InPlaceEvent::Other(Event::Ended(_))) => break,
            _ => {}
        }
    }
    producer.join().expect("producer");
    let written = written.load(Ordering::Relaxed);
    assert!(
        inconsistent_seen >= 20,
        "only {inconsistent_seen} overwrites seen in {written} records"
    );
    assert!(
        runs > delivered,
        "results thrown away: {runs} runs, {delivered} delivered"
    );
    // Every record is accounted for: delivered, or reported lost.
    assert_eq!(
        delivered + lost,
        written,
        "delivered {delivered} + lost {lost}"
    );
    let stats = sub.stats();
    assert_eq!((stats.delivered, stats.lost), (delivered, lost));
}

#[test]
fn a_payload_filled_in_place_is_delivered_whole_and_an_aborted_one_never() {
    let bus = Bus::start("inplace-loan");
    let (p, meta) = bus.publisher(16 << 20);
    let len = 1 << 20;
    let mut sub = bus.subscribe();
    // Three loans: the first and third filled and committed, the second given up half-way.
    for (i, commit) in [(0u64, true), (1, false), (2, true)] {
        let got = p.emit_with(meta, len, |w| {
            assert_eq!(w.len(), len);
            w.put_with(len, |buf| {
                if !commit {
                    buf[..len / 2].fill(0xee);
                    return Err(FillError::Abort);
                }
                buf.copy_from_slice(&payload(i, len));
                Ok(())
            })?
        });
        match got {
            Ok(_) => assert!(commit),
            Err(EmitError::Aborted) => assert!(!commit),
            Err(e) => panic!("emit_with: {e}"),
        }
    }
    p.close();
    let lane = p.lane().lane().stats();
    assert_eq!((lane.frames_committed, lane.aborted), (2, 1));
    assert_eq!(
        p.stats().encode_errors,
        0,
        "a loan given up is no encode error"
    );

    let mut scratch = vec![0u8; 4096];
    let (mut seen, mut lost) = (Vec::new(), 0);
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < WATCHDOG, "no end after {seen:?}");
        let next = sub
            .next_in_place(Duration::from_millis(100), |r| {
                // Every byte, as it lies in the ring.
                let mut bytes = Vec::with_capacity(r.payload.len());
                r.payload
                    .for_each_chunk(&mut scratch, |piece| bytes.extend_from_slice(piece));
                bytes
            })
            .expect("next_in_place");
        match next {
            Some(InPlaceEvent::Record(RecordRef { payload: value, .. })) => {
                let i = u64::from_le_bytes(value[..8].try_into().expect("a word"));
                assert!(value == payload(i, len), "record {i} not whole");
                seen.push(i);
            }
            Some(InPlaceEvent::Other(Event::Lagged { lost: n, .. })) => lost += n,
            Some(InPlaceEvent::Other(Event::Ended(_))) => break,
            _ => {}
        }
    }
    assert_eq!(
        (seen, lost),
        (vec![0, 2], 0),
        "the aborted loan is skipped, not lost"
    );
}

#[test]
fn large_payloads_streamed_into_a_lane_larger_than_the_caches_read_back_whole() {
    let bus = Bus::start("inplace-stream");
    // A lane larger than the last-level cache: `emit_with` copies payloads from
    // `STREAM_MIN_BYTES` on with non-temporal stores. This checks the bytes (lengths around the
    // threshold, odd tails), read after the lane is closed; the fences that order the streamed
    // stores before the commit are the stream module's (`bus/src/stream.rs`), not tested here.
    let capacity = (2 * snapbus_bus::stream::last_level_cache_bytes()).next_power_of_two();
    let (p, meta) = bus.publisher(capacity);
    assert!(p.streams_large_payloads(), "a {capacity}-byte lane");
    let min = snapbus_bus::stream::STREAM_MIN_BYTES;
    // Around the threshold, odd lengths (a tail that is not whole lines or words), and large.
    let lens = [min - 1, min, min + 3, 3 * min + 61, (1 << 20) + 5];
    let mut sub = bus.subscribe();
    for (i, &len) in lens.iter().enumerate() {
        emit_bytes(&p, meta, &payload(i as u64, len)).expect("emit_with");
    }
    p.close();
    let (mut seen, mut lost) = (Vec::new(), 0);
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < WATCHDOG, "no end after {seen:?}");
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(r)) => {
                let i = seen.len();
                assert!(
                    r.payload == payload(i as u64, lens[i]).as_slice(),
                    "record {i} ({} bytes) not what was emitted",
                    lens[i]
                );
                seen.push(r.payload.len());
            }
            Some(Event::Lagged { lost: n, .. }) => lost += n,
            Some(Event::Ended(_)) => break,
            _ => {}
        }
    }
    assert_eq!((seen.as_slice(), lost), (&lens[..], 0));
}

#[test]
fn a_payload_read_in_place_from_any_offset_gives_the_bytes_a_copy_gives() {
    let bus = Bus::start("inplace-read-at");
    let (p, meta) = bus.publisher(1 << 20);
    let lens = [1usize, 9, 31, 100];
    // Every byte different from its neighbours, so a shifted or reordered read shows.
    let bytes = |i: usize, len: usize| -> Vec<u8> {
        (0..len).map(|k| (k * 7 + i * 13 + 1) as u8).collect()
    };
    for (i, len) in lens.iter().enumerate() {
        emit_bytes(&p, meta, &bytes(i, *len)).expect("emit");
    }
    p.close();
    let mut sub = bus.subscribe();
    let mut seen = 0;
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < WATCHDOG, "{seen} records");
        let next = sub
            .next_in_place(Duration::from_millis(100), |r| {
                let v = r.payload;
                let mut reads = Vec::new();
                for offset in 0..=v.len() {
                    for n in 0..=(v.len() - offset).min(19) {
                        let mut dst = vec![0u8; n];
                        assert!(v.read_at(offset, &mut dst), "{offset}+{n} of {}", v.len());
                        reads.push((offset, dst));
                    }
                    let mut past = vec![0u8; v.len() - offset + 1];
                    assert!(!v.read_at(offset, &mut past), "past the end");
                }
                reads
            })
            .expect("next_in_place");
        match next {
            Some(InPlaceEvent::Record(RecordRef { payload: value, .. })) => {
                let want = bytes(seen, lens[seen]);
                for (offset, got) in value {
                    assert_eq!(got, want[offset..offset + got.len()], "record {seen}");
                }
                seen += 1;
            }
            Some(InPlaceEvent::Other(Event::Ended(_))) => break,
            _ => {}
        }
    }
    assert_eq!(seen, lens.len());
}

#[test]
fn records_marked_lost_are_reported_as_lag_exactly_and_in_place() {
    let bus = Bus::start("inplace-marked");
    let (p, meta) = bus.publisher(1 << 20);
    let mut sub = bus.subscribe();
    // 5 records missing after the first, 5,000 after the second (more than one aborted
    // frame's room: 128 KiB frames hold 3,274 headers), none after the third.
    for (i, gap) in [(0u64, 5u64), (1, 5_000), (2, 0)] {
        p.emit_with(meta, 16, |w| Ok(w.put(&payload(i, 16))?))
            .expect("emit");
        if gap > 0 {
            p.mark_lost(gap).expect("mark_lost");
        }
    }
    p.close();
    let mut events = Vec::new();
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < WATCHDOG, "no end after {events:?}");
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(r)) => {
                events.push((
                    u64::from_le_bytes(r.payload[..8].try_into().expect("a word")),
                    0,
                ));
            }
            Some(Event::Lagged { lost, damaged, .. }) => {
                assert_eq!(damaged, 0, "marked loss is no damage");
                match events.last_mut() {
                    Some((_, l)) => *l += lost,
                    None => panic!("loss before the first record"),
                }
            }
            Some(Event::Ended(_)) => break,
            _ => {}
        }
    }
    assert_eq!(events, [(0, 5), (1, 5_000), (2, 0)]);
    assert_eq!(sub.stats().lost, 5_005);
}
