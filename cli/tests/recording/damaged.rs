//! Damaged files: clear errors naming the offset or the version, and a damaged chunk skipped with
//! every other record read.

use serde_json::Value;

use super::{Tick, out_path, printed, run_demo, s, write_ticks};
use crate::bus::TestBus;

#[test]
fn damaged_files_give_clear_errors_naming_the_offset_or_version() {
    let bus = TestBus::up();
    let good = out_path("good.mcap");
    run_demo(&bus, 3, 5, 0);
    let out = bus.run(&["snapshot", "-o", s(&good)]);
    assert!(out.status.success(), "{}", out.stderr);
    let bytes = std::fs::read(&good).expect("read");
    let at = |needle: &[u8]| {
        bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("needle")
    };
    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    cases.push(("truncated", bytes[..bytes.len() / 2].to_vec(), "offset"));
    let mut flipped = bytes.clone();
    let payload_at = at(b"demo.step") + 200;
    flipped[payload_at] ^= 0x04;
    cases.push(("bit-flipped", flipped, "offset"));
    let mut magic = bytes.clone();
    magic[1] = b'Z';
    cases.push(("wrong magic", magic, "not an MCAP file"));
    let mut newer = bytes.clone();
    newer[at(b"format_version") + 14 + 4] = b'9';
    cases.push(("future format", newer, "format version 9"));
    let mut major = bytes.clone();
    major[5] = b'1';
    cases.push(("future MCAP", major, "MCAP major version '1'"));
    cases.push(("empty", Vec::new(), "empty"));
    cases.push((
        "text",
        b"episode,reward\n1,0.5\n".to_vec(),
        "not an MCAP file",
    ));
    for (what, data, needle) in cases {
        let path = out_path(&format!("bad-{}.mcap", what.replace(' ', "-")));
        std::fs::write(&path, data).expect("write");
        let refuses = |args: &[&str]| {
            let out = bus.run(args);
            assert!(!out.status.success(), "{what}: {args:?} succeeded");
            assert!(
                out.stderr.contains(needle),
                "{what}: {args:?}: {needle:?} not in {}",
                out.stderr
            );
            assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
        };
        refuses(&["inspect", s(&path)]);
        refuses(&["replay", "--print", s(&path)]);
        refuses(&["replay", s(&path)]);
        let exported = out_path(&format!("bad-{}.jsonl", what.replace(' ', "-")));
        let _ = std::fs::remove_file(&exported);
        refuses(&["export", s(&path), "--format", "jsonl", "-o", s(&exported)]);
    }
    let out = bus.run(&["inspect", s(&out_path("missing.mcap"))]);
    assert!(!out.status.success());
    out.assert_stderr_has("opening");
}

/// Issue #15 item 4: 4 bytes overwritten in the middle of a recording of many chunks:
/// `inspect`, `replay --print` and `export` skip the damaged chunk, say where it is and what it
/// held, read every other record, and exit non-zero.
#[test]
fn inspect_replay_and_export_skip_a_damaged_chunk_and_read_the_rest() {
    use snapbus_schemas::Wire as _;
    let bus = TestBus::up();
    let path = out_path("chunky.mcap");
    let n = 2000u64;
    write_ticks(&path, n);
    let mut bytes = std::fs::read(&path).expect("read");
    // Inside a chunk: in the payload of record 1000 (its note is 1000 % 9 = 1 long).
    let needle = Tick {
        i: 1000,
        note: "n".to_owned(),
    }
    .encode_to_vec()
    .expect("encode");
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("record 1000 is in the file");
    bytes[at..at + 4].copy_from_slice(b"\xde\xad\xbe\xef");
    std::fs::write(&path, &bytes).expect("write");

    let out = bus.run(&["inspect", "--json", s(&path)]);
    assert!(!out.status.success(), "a damaged file is an error");
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    let skipped = v["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 1, "{v}");
    let (offset, len) = (
        skipped[0]["offset"].as_u64().expect("offset"),
        skipped[0]["bytes"].as_u64().expect("bytes"),
    );
    assert!(offset <= at as u64 && at as u64 + 4 <= offset + len, "{v}");
    let lost = skipped[0]["records"].as_u64().expect("records it held");
    assert!(lost > 0 && lost < n / 4, "{v}");
    assert_eq!(v["records"], n - lost, "every other record is read: {v}");
    assert_eq!(v["complete"], true, "read through the footer: {v}");
    assert!(v["damage"].is_null(), "{v}");
    assert!(
        !v["loss_verdict"]
            .as_str()
            .expect("verdict")
            .starts_with("none")
    );
    let text = bus.run(&["inspect", s(&path)]);
    assert!(
        text.stdout
            .contains(&format!("skipped: damaged at byte offset {offset}")),
        "{}",
        text.stdout
    );
    text.assert_stdout_has(&format!("they held {lost} records"));
    text.assert_stderr_has("1 damaged part was skipped");

    let (lines, ok, stderr) = printed(&bus, &path);
    assert!(!ok, "replay --print of a damaged file fails at the end");
    assert_eq!(lines.len() as u64, n - lost, "{stderr}");
    assert!(
        stderr.contains(&format!("damaged at byte offset {offset}")),
        "{stderr}"
    );
    let last = lines.last().expect("lines");
    assert_eq!(last["payload"]["i"], n - 1, "the records after the damage");

    let exported = out_path("chunky.jsonl");
    let out = bus.run(&["export", s(&path), "--format", "jsonl", "-o", s(&exported)]);
    assert!(
        !out.status.success(),
        "export of a damaged file fails at the end"
    );
    assert!(
        out.stderr
            .contains(&format!("damaged at byte offset {offset}")),
        "{}",
        out.stderr
    );
    out.assert_stderr_has("every record outside them was exported");
    let rows = std::fs::read_to_string(&exported).expect("export output");
    let records = rows.lines().filter(|l| l.contains("\"cli.tick\"")).count() as u64;
    assert_eq!(records, n - lost, "every other record is exported");
}
