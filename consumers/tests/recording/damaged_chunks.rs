//! Damaged chunks: the reader skips them, says what they held, and reads the rest. It never
//! delivers a wrong record.

use super::*;

/// The middle of the first chunk (compressed or not) that ends past the middle of the file.
fn mid_chunk(file: &[u8]) -> usize {
    let mut at = 8;
    loop {
        let len = u64::from_le_bytes(file[at + 1..at + 9].try_into().expect("8 bytes")) as usize;
        let end = at + 9 + len;
        if file[at] == mcap::records::op::CHUNK && end > file.len() / 2 {
            return (at + end) / 2;
        }
        at = end;
    }
}

/// Issue #15 item 4: 4 bytes overwritten inside a chunk: that chunk is skipped and reported
/// (byte range, records, time range), everything after it is read, through the footer.
#[test]
fn a_damaged_chunk_is_skipped_and_described_and_the_rest_is_read() {
    let bus = Bus::start("rec10");
    let good = small_chunks(&bus, "damaged.mcap");
    let mut bad = good.clone();
    let at = mid_chunk(&good);
    bad[at..at + 4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    assert_ne!(bad, good);
    let mut reader = RecordingReader::new(&bad[..]);
    let mut items = Vec::new();
    for r in reader.by_ref() {
        items.push(r.unwrap_or_else(|e| panic!("a damaged chunk is not the end: {e}")));
    }
    assert!(reader.complete(), "read through the footer");
    let d = damage(&items);
    assert_eq!(d.len(), 1, "{d:?}");
    let d = d[0];
    assert!(
        d.offset <= at as u64 && at as u64 + 4 <= d.offset + d.len,
        "the range {}+{} holds the damage at {at}",
        d.offset,
        d.len
    );
    let got = steps(&items);
    let missing: Vec<u64> = (0..300)
        .filter(|i| !got.iter().any(|s| s.i == *i))
        .collect();
    assert!(!missing.is_empty());
    assert!(
        missing.windows(2).all(|w| w[1] == w[0] + 1),
        "one run of records is missing: {missing:?}"
    );
    assert!(
        *missing.last().expect("some") < 299,
        "later records are read"
    );
    assert!(
        got.iter().all(|s| *s == step(s.i)),
        "what is read is intact"
    );
    let held = d.held.as_ref().expect("what the chunk held");
    assert_eq!(held.records, Some(missing.len() as u64), "{d}");
    assert_eq!(held.first_nanos, 1_000 + missing[0]);
    assert_eq!(held.last_nanos, 1_000 + missing[missing.len() - 1]);
    let text = d.to_string();
    assert!(
        text.contains(&format!("{} records", missing.len())) && text.contains("rec.step"),
        "{text}"
    );
}

/// Issue #15 item 4, damage to a chunk's length field: a seekable reader finds the next
/// intact chunk, reports the bytes in between, and reads the rest through the footer; without
/// seeking, the read ends there with an error, as before.
#[test]
fn damage_to_a_chunks_length_is_skipped_by_resyncing_on_the_next_chunk() {
    let bus = Bus::start("rec11");
    let good = small_chunks(&bus, "length.mcap");
    let (items, err) = read_all(&good);
    assert!(err.is_none());
    let mut chunks: Vec<u64> = items
        .iter()
        .filter_map(|i| match i {
            Item::Message(m) => Some(m.offset),
            _ => None,
        })
        .collect();
    chunks.dedup();
    assert!(chunks.len() > 5, "{chunks:?}");
    for (what, patch) in [
        ("longer than the file", [0xff_u8, 0xff, 0xff, 0x00]),
        ("shorter", [0x20, 0x00, 0x00, 0x00]),
    ] {
        let victim = chunks[chunks.len() / 2] as usize;
        let mut bad = good.clone();
        // The length field follows the opcode.
        bad[victim + 1..victim + 5].copy_from_slice(&patch);
        let mut reader = RecordingReader::new(std::io::Cursor::new(&bad[..])).with_resync();
        let mut got = Vec::new();
        for r in reader.by_ref() {
            got.push(r.unwrap_or_else(|e| panic!("{what}: resynced, not the end: {e}")));
        }
        assert!(reader.complete(), "{what}: read through the footer");
        let d = damage(&got);
        assert!(!d.is_empty(), "{what}: reported");
        assert_eq!(d[0].offset, victim as u64, "{what}: {}", d[0]);
        let next = chunks[chunks.len() / 2 + 1];
        assert_eq!(d[0].offset + d[0].len, next, "{what}: up to the next chunk");
        let read = steps(&got);
        assert!(read.iter().all(|s| *s == step(s.i)), "{what}: intact");
        assert_eq!(
            read.last().map(|s| s.i),
            Some(299),
            "{what}: the rest is read"
        );
        let lost = 300 - read.len();
        assert!(
            lost > 0 && lost < 60,
            "{what}: only that chunk is lost ({lost})"
        );
        // Without seeking: the read ends at the damage, as before.
        let (_, err) = read_all(&bad);
        assert!(err.is_some(), "{what}");
    }
}

/// Random damage (1 to 3 overwrites of 1 to 8 bytes, sometimes a cut), read with and without
/// resyncing: never a panic, and every delivered record is one that was written, in order —
/// a reader that loses the framing must not parse garbage as records (before, a damaged
/// message index length could land the reader on bytes it took for a top-level message).
#[test]
fn random_damage_never_delivers_a_wrong_record() {
    let bus = Bus::start("rec12");
    let good = small_chunks(&bus, "stress.mcap");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..4000 {
        let mut bad = good.clone();
        for _ in 0..(1 + rnd() % 3) {
            let at = (rnd() as usize) % bad.len();
            let n = 1 + (rnd() as usize) % 8;
            for b in bad.iter_mut().skip(at).take(n) {
                *b = rnd() as u8;
            }
        }
        if rnd() % 4 == 0 {
            let cut = (rnd() as usize) % bad.len();
            bad.truncate(cut);
        }
        let (plain, _) = read_all(&bad);
        let resynced: Vec<Item> = RecordingReader::new(std::io::Cursor::new(&bad[..]))
            .with_resync()
            .map_while(Result::ok)
            .collect();
        for (how, items) in [("plain", plain), ("resync", resynced)] {
            let got: Vec<Step> = items
                .iter()
                .filter_map(|i| match i {
                    Item::Message(m) => Some(
                        Step::decode_exact(&m.data)
                            .unwrap_or_else(|e| panic!("round {round}, {how}: {e}")),
                    ),
                    _ => None,
                })
                .collect();
            assert!(
                got.iter().all(|s| *s == step(s.i)) && got.windows(2).all(|w| w[0].i < w[1].i),
                "round {round}, {how}: a wrong or repeated record"
            );
        }
    }
}

/// A reader that lost the framing can land on bytes that look like a record outside the
/// chunks. The writer never puts messages there, so such a "message" is damage, not a record:
/// here a message index after a chunk is replaced by a message of a declared channel with a
/// garbage payload, of the same length. It must not be delivered (before, it was).
#[test]
fn a_message_outside_the_chunks_is_damage_not_a_record() {
    let bus = Bus::start("rec13");
    let good = small_chunks(&bus, "toplevel.mcap");
    let (items, err) = read_all(&good);
    assert!(err.is_none());
    let first = items
        .iter()
        .find_map(|i| match i {
            Item::Message(m) => Some(m.clone()),
            _ => None,
        })
        .expect("a message");
    let chunk = first.offset as usize;
    assert_eq!(good[chunk], 0x06, "a chunk");
    let len = u64::from_le_bytes(good[chunk + 1..chunk + 9].try_into().expect("8 bytes"));
    let index = chunk + 9 + len as usize;
    assert_eq!(good[index], 0x07, "a message index follows the chunk");
    let body = u64::from_le_bytes(good[index + 1..index + 9].try_into().expect("8 bytes"));
    assert!(body >= 22 + 8, "room for a message: {body}");
    let mut bad = good.clone();
    bad[index] = 0x05;
    let m = &mut bad[index + 9..index + 9 + body as usize];
    m[..2].copy_from_slice(&first.channel.id.to_le_bytes());
    m[2..6].copy_from_slice(&7u32.to_le_bytes());
    m[6..14].copy_from_slice(&5u64.to_le_bytes());
    m[14..22].copy_from_slice(&5u64.to_le_bytes());
    for b in &mut m[22..] {
        *b = 0xee;
    }
    let (items, err) = read_all(&bad);
    assert!(err.is_some(), "the damage is reported");
    let got = steps(&items);
    assert!(got.iter().all(|s| *s == step(s.i)), "no garbage record");
    let items: Vec<Item> = RecordingReader::new(std::io::Cursor::new(&bad[..]))
        .with_resync()
        .map_while(Result::ok)
        .collect();
    let got = steps(&items);
    assert!(!damage(&items).is_empty(), "reported as damage");
    assert_eq!(got.len(), 300, "no record is lost: {}", got.len());
}

/// Fuzzer finding (CI, `recording_reader`): when a search for the next intact chunk found
/// none, reading went on from where the search had left the source, and parts past the end of
/// the file were reported as damaged. Every skipped part the reader reports lies within the
/// file, with or without resynchronising.
#[test]
fn damage_is_reported_within_the_file() {
    let data: &[u8] = include_bytes!("../data/damage-past-the-end.mcap");
    let len = data.len() as u64;
    for resync in [false, true] {
        let cursor = std::io::Cursor::new(data);
        let reader = if resync {
            RecordingReader::new(cursor).with_resync()
        } else {
            RecordingReader::new(cursor)
        };
        for item in reader {
            match item {
                Ok(Item::Damaged(d)) => {
                    assert!(
                        d.offset + d.len <= len,
                        "damage {}+{} beyond {len}",
                        d.offset,
                        d.len
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    assert!(e.offset <= len);
                    break;
                }
            }
        }
    }
}
