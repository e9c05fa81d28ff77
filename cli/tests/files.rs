//! Issue #44: recordings and the files the CLI writes — a flipped bit in a recording's first
//! chunk, a snapshot onto a too-small disk, and output paths another user planted.

use std::path::{Path, PathBuf};

use crate::bus::TestBus;
use crate::util::runtime_root;

fn out_path(name: &str) -> PathBuf {
    let dir = runtime_root().join("files44");
    std::fs::create_dir_all(&dir).expect("files dir");
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[derive(snapbus_schemas::Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "cli.flip", version = 1)]
struct Flip {
    i: u64,
    note: String,
}

/// Issue #44 item 2: one flipped bit at byte 700 — in the first chunk, which declares the
/// schema and the channel — used to make `export` read 0 records and say "every other record
/// was exported". Now `export`, `inspect` and `replay --print` read every other chunk (the
/// schema and channel come from the summary at the end of the file), and say how many records
/// the damaged chunk held.
#[test]
fn a_flipped_bit_in_the_first_chunk_costs_only_that_chunk() {
    use snapbus_schemas::{Snapshot as _, Wire as _};
    let bus = TestBus::up();
    let path = out_path("flip700.mcap");
    let mut opts = snapbus_consumers::recording::WriterOptions::new("recorder", "test");
    opts.chunk_bytes = 4000;
    let mut w =
        snapbus_consumers::recording::RecordingWriter::create(&path, &opts).expect("create");
    let info = crate::util::producer_info(42, "flipper", 0xf11);
    let desc = std::sync::Arc::new(Flip::descriptor().clone());
    let n = 2000u64;
    for i in 0..n {
        let payload = Flip {
            i,
            note: "n".repeat((i % 9) as usize),
        }
        .encode_to_vec()
        .expect("encode");
        let t = 1_700_000_000_000_000_000 + i * 1000;
        crate::util::write_record(&mut w, &info, &desc, (i, t), &payload);
    }
    w.finish().expect("finish");
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[700] ^= 0x10;
    std::fs::write(&path, &bytes).expect("write");

    let out = bus.run(&["inspect", "--json", s(&path)]);
    assert!(!out.status.success(), "a damaged file is an error");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    let read = v["records"].as_u64().expect("records");
    let held = v["skipped"][0]["records"]
        .as_u64()
        .unwrap_or_else(|| panic!("{v}"));
    assert!(held > 0 && held < 200, "only the first chunk is lost: {v}");
    assert_eq!(read + held, n, "the rest is read: {v}");

    let exported = out_path("flip700.jsonl");
    let out = bus.run(&["export", s(&path), "--format", "jsonl", "-o", s(&exported)]);
    assert!(!out.status.success(), "damage is an error");
    let rows = std::fs::read_to_string(&exported).expect("export output");
    let records = rows.lines().filter(|l| l.contains("\"cli.flip\"")).count() as u64;
    assert_eq!(records, n - held, "{}", out.stderr);
    out.assert_stderr_has(&format!(
        "{records} records were exported; 1 damaged part was skipped (see above): they held \
         {held} records, which were not exported"
    ));

    let out = bus.run(&["replay", "--print", s(&path)]);
    assert!(!out.status.success());
    assert_eq!(out.json_lines().len() as u64, n - held, "{}", out.stderr);
    out.assert_stderr_has("which were not printed");
}
