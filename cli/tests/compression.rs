//! Issue #45 item 5: a compressed recording (LZ4, the default) through the real binary:
//! `inspect` states the codec and the compression ratio, `export` gives the same values as from
//! the same records written uncompressed.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value as Json;
use snapbus_bus::Level;
use snapbus_consumers::recording::{Compression, RecordingWriter, WriterOptions};
use snapbus_schemas::{Snapshot, Tensor, Wire};

use crate::export::tmp;
use crate::util::run;

/// A 64×64 observation frame: a gradient shifted by the step, like the example experiment's.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "cmp.frame", version = 1)]
struct Frame {
    step: u64,
    patch: Tensor<f32>,
}

fn frame(step: u64) -> Frame {
    let data = (0..64 * 64)
        .map(|k: u64| ((k % 64 + k / 64 + 3 * step) % 64) as f32 / 63.0)
        .collect();
    Frame {
        step,
        patch: Tensor::new(vec![64, 64], data).expect("tensor"),
    }
}

const FRAMES: u64 = 200;

fn write(path: &Path, compression: Compression) {
    let mut opts = WriterOptions::new("recorder", "test");
    opts.compression = compression;
    let mut w = RecordingWriter::create(path, &opts).expect("create");
    let info = crate::util::producer_info(100, "env", 100);
    let desc = Arc::new(Frame::descriptor().clone());
    for i in 0..FRAMES {
        let payload = frame(i).encode_to_vec().expect("encode");
        let meta = snapbus_consumers::RecordHeader {
            seq: i,
            t_nanos: 1_000 + i,
            schema_key: 1,
            schema_version: 1,
            level: Level::INFO,
            emitter_id: 0,
            payload_len: payload.len(),
        };
        let producer = snapbus_consumers::Producer::from(&info);
        w.write(7, producer, &desc, None, &meta, &payload)
            .expect("write");
    }
    w.finish().expect("finish");
}

fn inspect_json(path: &Path) -> Json {
    let o = run(&["inspect", "--json", path.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", o.stderr);
    serde_json::from_str(&o.stdout).expect("JSON")
}

fn export_jsonl(input: &Path, name: &str) -> String {
    let out = tmp(name);
    let o = run(&[
        "export",
        input.to_str().expect("utf-8"),
        "--format",
        "jsonl",
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", o.stderr);
    std::fs::read_to_string(out).expect("read")
}

#[test]
fn a_compressed_recording_inspects_with_its_ratio_and_exports_the_same_values() {
    let (lz4, plain) = (tmp("frames-lz4.mcap"), tmp("frames-plain.mcap"));
    write(&lz4, Compression::default());
    write(&plain, Compression::None);

    let o = run(&["inspect", lz4.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", o.stderr);
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("chunks"))
        .unwrap_or_else(|| panic!("a chunks line: {}", o.stdout));
    assert!(
        line.contains("compression lz4") && line.contains("ratio 0."),
        "{line}"
    );

    let got = inspect_json(&lz4)["compression"].clone();
    assert_eq!(got["codecs"], serde_json::json!(["lz4"]), "{got}");
    let ratio = got["ratio"].as_f64().expect("ratio");
    assert!(ratio < 0.5, "64x64 frames shrink by at least 2x: {got}");
    let (stored, whole) = (
        got["stored_bytes"].as_u64(),
        got["uncompressed_bytes"].as_u64(),
    );
    assert!(stored.zip(whole).is_some_and(|(s, w)| s * 2 < w), "{got}");
    let none = inspect_json(&plain)["compression"].clone();
    assert_eq!(none["codecs"], serde_json::json!(["none"]), "{none}");
    assert_eq!(none["ratio"].as_f64(), Some(1.0), "{none}");
    assert_eq!(none["uncompressed_bytes"], got["uncompressed_bytes"]);

    let from_lz4 = export_jsonl(&lz4, "frames-lz4.jsonl");
    assert_eq!(from_lz4, export_jsonl(&plain, "frames-plain.jsonl"));
    let lines: Vec<Json> = from_lz4
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), FRAMES as usize);
    for (i, l) in lines.iter().enumerate() {
        let want = frame(i as u64);
        assert_eq!(l["payload"]["step"], i as u64);
        let data = l["payload"]["patch"]["data"].as_array().expect("data");
        let data: Vec<f32> = data
            .iter()
            .map(|v| v.as_f64().expect("f64") as f32)
            .collect();
        assert_eq!(data, want.patch.data(), "frame {i}");
    }
}
