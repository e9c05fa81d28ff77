//! Property tests against a reference model: random writes, aborted claims and reads, schema
//! filters, and garbage words written over the ring. Their regression seeds are in
//! `properties.proptest-regressions` next to this file.

use std::collections::BTreeMap;

use proptest::prelude::*;
use snapbus_bus::lane::layout::FRAME_HEADER_LEN;
use snapbus_bus::lane::{Lane, LaneConfig, LaneReader, Poll, StartAt};
use snapbus_bus::mem::{HeapMem, LaneMem};

use super::{CONFIG, QUARTER, meta, payload};

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
