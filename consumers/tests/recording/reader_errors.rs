//! Files the reader cannot read to the end: cut anywhere, bit-flipped, with a bad magic, of a
//! newer version, or found by the fuzzer. Each is a clear error, never a panic.

use super::*;
use snapbus_consumers::recording::ReadErrorKind;

#[test]
fn a_file_cut_anywhere_reads_up_to_the_cut_and_says_where() {
    let bus = Bus::start("rec3");
    // Small chunks: many cut points fall between complete chunks.
    let bytes = small_chunks(&bus, "cut.mcap");
    let mut last_count = 0;
    for cut in (0..bytes.len()).step_by(37).chain([bytes.len() - 1]) {
        let (items, err) = read_all(&bytes[..cut]);
        let err = err.unwrap_or_else(|| panic!("a file cut at {cut} reads without error"));
        assert!(
            err.offset <= cut as u64,
            "offset {} beyond the cut {cut}",
            err.offset
        );
        let got = steps(&items);
        assert_eq!(
            got,
            (0..got.len() as u64).map(step).collect::<Vec<_>>(),
            "a prefix"
        );
        assert!(got.len() >= last_count, "a longer prefix never reads less");
        last_count = got.len();
        if cut >= 8 {
            match err.kind {
                ReadErrorKind::Truncated { have, need } => {
                    assert!(have < need, "cut at {cut}: {err}");
                    assert!(err.to_string().contains("the file is cut"), "{err}");
                }
                ReadErrorKind::Unfinished => {
                    assert_eq!(err.offset, cut as u64, "a cut between records: {err}")
                }
                _ => panic!("cut at {cut}: {err}"),
            }
        }
    }
    assert!(
        last_count >= 280,
        "most records survive a cut near the end: {last_count}"
    );
}

#[test]
fn flipped_bits_wrong_magic_and_newer_versions_are_clear_errors() {
    let bus = Bus::start("rec4");
    let p = bus.publisher();
    let path = tmp("flip.mcap");
    record(&bus, &p, &path, 200, None);
    let good = std::fs::read(&path).expect("read");
    // Every byte of the data section, one bit each: never a panic, never a wrong record.
    let want: Vec<Step> = (0..200).map(step).collect();
    for at in (8..good.len()).step_by(3) {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        let (items, err) = read_all(&bad);
        let got = steps(&items);
        if err.is_none() && damage(&items).is_empty() {
            // A flip in a field nobody checks (an index in the summary): the records are intact.
            assert_eq!(
                got, want,
                "flip at {at}: no error, so the records must be intact"
            );
        } else {
            // A damaged chunk is skipped: what is delivered is intact and in order.
            assert!(
                got.iter().all(|s| *s == step(s.i)) && got.windows(2).all(|w| w[0].i < w[1].i),
                "flip at {at}: what was delivered is intact and in order"
            );
        }
        // Resyncing on the next chunk: never a panic, never a wrong or repeated record.
        let items: Vec<Item> = RecordingReader::new(std::io::Cursor::new(&bad[..]))
            .with_resync()
            .map_while(Result::ok)
            .collect();
        let got = steps(&items);
        assert!(
            got.iter().all(|s| *s == step(s.i)) && got.windows(2).all(|w| w[0].i < w[1].i),
            "flip at {at} with resync: what was delivered is intact and in order"
        );
    }
    let mut bad = good.clone();
    bad[1] = b'X';
    let (_, err) = read_all(&bad);
    let err = err.expect("bad magic");
    assert!(matches!(err.kind, ReadErrorKind::NotMcap(_)), "{err}");
    assert_eq!(err.offset, 0);
    let mut bad = good.clone();
    bad[5] = b'1';
    let err = read_all(&bad).1.expect("future MCAP");
    assert!(err.to_string().contains("MCAP major version '1'"), "{err}");
    // A newer snapbus layout: format_version 2.
    let text = b"format_version";
    let at = good
        .windows(text.len())
        .position(|w| w == text)
        .expect("metadata");
    let mut bad = good.clone();
    // "format_version" then u32 length 1 then "1".
    let v = at + text.len() + 4;
    assert_eq!(bad[v], b'1');
    bad[v] = b'2';
    let err = read_all(&bad).1.expect("future format");
    assert!(
        matches!(err.kind, ReadErrorKind::FutureVersion { found: 2 }),
        "{err}"
    );
    assert!(err.to_string().contains("version 2"), "{err}");
    let err = read_all(b"").1.expect("empty");
    assert!(matches!(err.kind, ReadErrorKind::Empty), "{err}");
}

/// Inputs the fuzzer found (`consumers/fuzz/README.md`): each once panicked inside the mcap
/// crate (a chunk record length near `u64::MAX`; an attachment shorter than its header), and a
/// footer followed by a bad end magic was reported complete.
#[test]
fn fuzzer_findings_are_errors_not_panics() {
    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }
    let huge_chunk = unhex(
        "894d434150300d0a01080000000000000000000000000000000c300000000000000011000000736e61706275\
         732e7265636f7264696e67170000000e000000666f726d61745f76657273696f6e010000003106310000000\
         00000000000000000000000000000000000000009000000000000000000000000000000090000000000000005\
         ffffffffffffffff",
    );
    let short_attachment = unhex(
        "894d434150300d0a0920000000000000000000000000000000000000000000000000000000000000000000000\
         000000000",
    );
    for input in [huge_chunk, short_attachment] {
        let (_, err) = read_all(&input);
        let err = err.expect("an error");
        assert!(err.offset <= input.len() as u64, "{err}");
    }
    // A complete recording with its end magic damaged: read, but not complete.
    let bus = Bus::start("rec7");
    let p = bus.publisher();
    let path = tmp("endmagic.mcap");
    record(&bus, &p, &path, 10, None);
    let mut bytes = std::fs::read(&path).expect("read");
    let n = bytes.len();
    bytes[n - 2] ^= 0xff;
    let mut reader = RecordingReader::new(&bytes[..]);
    let results: Vec<_> = reader.by_ref().collect();
    assert!(
        results.iter().any(|r| r.is_err()),
        "the bad end magic is reported"
    );
    assert!(
        !reader.complete(),
        "a file with a bad end magic is not complete"
    );
}
