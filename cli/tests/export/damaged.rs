//! Damaged input: a cut recording exports what precedes the cut, then fails naming the offset;
//! a payload that does not decode is reported, never dropped silently.

use std::path::Path;

use snapbus_consumers::recording::{Item, RecordingReader};
use snapbus_schemas::Wire as _;

#[cfg(feature = "parquet")]
use super::parquet_rows;
use super::{Direct, Obs, export, obs, payload_json, read_csv, read_lines, read_mcap, tmp};
use crate::util::Output;

/// A recording of 300 observations in small chunks, for cutting.
fn record_for_cutting(path: &Path) -> Vec<u8> {
    let mut d = Direct::create(path, 2000);
    for i in 0..300 {
        d.write(0, 10_000 + i, &obs(i));
    }
    d.finish();
    std::fs::read(path).expect("read")
}

/// How many observations the library reader gets from `bytes`, and its error.
fn readable(bytes: &[u8]) -> (usize, String) {
    let mut n = 0;
    for item in RecordingReader::new(bytes) {
        match item {
            Ok(Item::Message(_)) => n += 1,
            Ok(_) => {}
            Err(e) => return (n, e.to_string()),
        }
    }
    panic!("a cut file reads without error");
}

#[test]
fn a_cut_recording_exports_what_precedes_the_cut_then_fails_naming_the_offset() {
    let whole = tmp("whole.mcap");
    let bytes = record_for_cutting(&whole);
    let cut_path = tmp("cut.mcap");
    let cut_at = bytes.len() * 2 / 3;
    std::fs::write(&cut_path, &bytes[..cut_at]).expect("write cut");
    let (n, reader_error) = readable(&bytes[..cut_at]);
    assert!(n > 50 && n < 300, "{n}");
    let offset = reader_error
        .rsplit_once("at byte offset ")
        .map(|(_, o)| o.trim_end_matches(')').to_owned())
        .expect("the reader names an offset");

    let check_failure = |o: &Output| {
        assert!(!o.status.success(), "a cut file exported without error");
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
        o.assert_stderr_has("the file is cut");
        assert!(
            o.stderr.contains(&format!("at byte offset {offset}")),
            "names the offset {offset}: {}",
            o.stderr
        );
        assert!(
            o.stderr
                .contains(&format!("the {n} records before the damage were exported")),
            "{}",
            o.stderr
        );
        assert!(
            o.stderr.contains(&format!("snapbus export: {n} records")),
            "the summary comes first: {}",
            o.stderr
        );
    };

    let out = tmp("cut.jsonl");
    let o = export(&cut_path, "jsonl", &out, &[]);
    check_failure(&o);
    let lines = read_lines(&out);
    assert_eq!(lines.len(), n);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["payload"], payload_json(&obs(i as u64)));
    }

    let out = tmp("cut-csv");
    let o = export(&cut_path, "csv", &out, &[]);
    check_failure(&o);
    let (_, rows) = read_csv(&out.join("exp.obs.csv"));
    assert_eq!(rows.len(), n);
    assert_eq!(rows[n - 1]["step"], (n - 1).to_string());

    let out = tmp("cut-json.mcap");
    let o = export(&cut_path, "mcap-json", &out, &[]);
    check_failure(&o);
    let (summary, messages) = read_mcap(&std::fs::read(&out).expect("read"));
    assert_eq!(
        messages.len(),
        n,
        "a complete MCAP file of the readable part"
    );
    assert_eq!(summary.stats.expect("stats").message_count, n as u64);

    #[cfg(feature = "parquet")]
    {
        let out = tmp("cut-parquet");
        let o = export(&cut_path, "parquet", &out, &[]);
        check_failure(&o);
        assert_eq!(
            parquet_rows(&out.join("exp.obs.parquet")),
            n,
            "a complete Parquet file"
        );
    }

    // Not a recording at all: an error naming offset 0, and no output created.
    let junk = tmp("junk.mcap");
    std::fs::write(&junk, b"hello, world").expect("write");
    let out = tmp("junk.jsonl");
    let o = export(&junk, "jsonl", &out, &[]);
    assert!(!o.status.success());
    o.assert_stderr_has("not an MCAP file");
    assert!(
        !out.exists(),
        "no output for a file that is not a recording"
    );
}

#[test]
fn payloads_that_do_not_decode_are_reported_never_dropped_silently() {
    let rec = tmp("bad-payload.mcap");
    let mut d = Direct::create(&rec, 1 << 20);
    for i in 0..10 {
        if i == 6 {
            let mut bytes = obs(i).encode_to_vec().expect("encode");
            bytes.truncate(bytes.len() - 3);
            d.write_raw::<Obs>(0, 1000 + i, bytes);
        } else {
            d.write(0, 1000 + i, &obs(i));
        }
    }
    d.finish();

    let out = tmp("bad-payload.jsonl");
    let o = export(&rec, "jsonl", &out, &[]);
    assert!(
        !o.status.success(),
        "an undecodable payload fails the export"
    );
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    o.assert_stderr_has("1 record could not be decoded");
    o.assert_stderr_has("schema exp.obs v1 at t_nanos 1006");
    let lines = read_lines(&out);
    assert_eq!(
        lines.len(),
        10,
        "jsonl keeps it, with its error, as echo does"
    );
    assert!(
        lines[6]["payload"]["decode_error"].is_string(),
        "{}",
        lines[6]
    );
    assert_eq!(lines[7]["payload"], payload_json(&obs(7)));

    let out = tmp("bad-payload-csv");
    let o = export(&rec, "csv", &out, &[]);
    assert!(!o.status.success());
    o.assert_stderr_has("they are not in the output");
    let (_, rows) = read_csv(&out.join("exp.obs.csv"));
    let steps: Vec<&str> = rows.iter().map(|r| r["step"].as_str()).collect();
    assert_eq!(steps, ["0", "1", "2", "3", "4", "5", "7", "8", "9"]);
}
