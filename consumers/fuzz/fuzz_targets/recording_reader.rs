//! Fuzzes the recording reader over untrusted files.
//!
//! The input is the whole file: `RecordingReader::new(&data[..])` is iterated to its end (the
//! seed corpus, `seeds/recording_reader/`, holds small valid recordings made by
//! `examples/gen_seeds.rs`, so the fuzzer starts from real MCAP chunks, CRCs and snapbus
//! metadata). Checked:
//!
//! - no panic (overflow checks and debug assertions are on in this crate's profile) and no
//!   unbounded allocation (`-malloc_limit_mb` / `-rss_limit_mb`);
//! - **after an `Err` the iterator ends**: no item follows an error, and `next()` keeps
//!   returning `None` once it has;
//! - the same with a seekable reader that resyncs on the next intact chunk after damage
//!   (`with_resync`); a skipped part (`Item::Damaged`) lies within the input;
//! - every error's `offset` and every message's `offset` is within the input
//!   (`<= data.len()`), and so is `RecordingReader::offset()` at the end; errors display;
//! - a file the reader calls `complete()` ended without an error (`SNAPBUS_FUZZ_ALLOW=
//!   complete-after-error` turns this check off, to fuzz past that known finding);
//! - every delivered message decodes or fails cleanly with
//!   `snapbus_schemas::decode(channel.schema.root(), &m.data)` (the schema is the one the file
//!   declares, so a hostile descriptor meets a hostile payload); decoded values convert to JSON.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Read;

use snapbus_consumers::recording::{Item, RecordingReader};

fuzz_target!(|data: &[u8]| {
    check(data.len() as u64, RecordingReader::new(data));
    // Seekable, so that damage to a record's framing is skipped by resyncing on the next
    // intact chunk: the same checks hold.
    check(
        data.len() as u64,
        RecordingReader::new(std::io::Cursor::new(data)).with_resync(),
    );
});

fn check<R: Read>(len: u64, mut reader: RecordingReader<R>) {
    let mut failed = false;
    for item in reader.by_ref() {
        assert!(
            !failed,
            "an item after an error: {:?}",
            item.as_ref().map(|_| ()).map_err(ToString::to_string)
        );
        match item {
            Ok(Item::Message(m)) => {
                assert!(m.offset <= len, "message offset {} beyond {len}", m.offset);
                assert!(m.data.len() as u64 <= len, "a message larger than the file");
                match snapbus_schemas::decode(m.channel.schema.root(), &m.data) {
                    Ok(value) => {
                        let _ = value.to_json().to_string();
                    }
                    Err(e) => {
                        assert!(
                            e.offset <= m.data.len(),
                            "decode error offset {} beyond the payload ({} bytes)",
                            e.offset,
                            m.data.len()
                        );
                        let _ = e.to_string();
                    }
                }
                let _ = m.channel.schema.to_string();
            }
            Ok(Item::Loss { record, .. }) => {
                let _ = record.lost;
            }
            Ok(Item::Metadata { name, fields }) => {
                let _ = (name.len(), fields.len());
            }
            Ok(Item::Damaged(d)) => {
                assert!(
                    d.offset.saturating_add(d.len) <= len,
                    "damage {}+{} beyond {len}",
                    d.offset,
                    d.len
                );
                let _ = d.to_string();
            }
            Err(e) => {
                assert!(
                    e.offset <= len,
                    "error offset {} beyond {len}: {e}",
                    e.offset
                );
                let _ = e.to_string();
                failed = true;
            }
        }
    }
    for _ in 0..2 {
        assert!(reader.next().is_none(), "an item after the end");
    }
    assert!(
        reader.offset() <= len,
        "reader offset {} beyond {len}",
        reader.offset()
    );
    if reader.complete() && !allowed("complete-after-error") {
        assert!(
            !failed,
            "complete() is true after an error (it promises the file was read through its \
             footer and end magic)"
        );
    }
}

/// Whether `SNAPBUS_FUZZ_ALLOW` (comma-separated) names this known finding, so that a long
/// run can continue past it. CI sets nothing: every check is on.
fn allowed(finding: &str) -> bool {
    static ALLOW: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ALLOW
        .get_or_init(|| {
            std::env::var("SNAPBUS_FUZZ_ALLOW")
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_owned())
                .collect()
        })
        .iter()
        .any(|a| a == finding)
}
