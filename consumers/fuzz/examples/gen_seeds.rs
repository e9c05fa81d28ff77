//! Writes the seed corpus of the `recording_reader` fuzz target: small valid recordings made
//! with `RecordingWriter` (plus an unfinished and a cut one), each well under 20 KB.
//!
//! ```sh
//! cd consumers/fuzz && cargo run --example gen_seeds    # writes seeds/recording_reader/*.mcap
//! ```
//!
//! The output is deterministic except for the `started_nanos` metadata fields (the writer
//! stamps the wall clock), so re-running it changes a few bytes of each file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_consumers::recording::{Item, RecordingReader, RecordingWriter, WriterOptions};
use snapbus_schemas::{Snapshot, Wire};

/// A training step: integers, a float, a string.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "seed.step", version = 1)]
struct Step {
    i: u64,
    reward: f64,
    note: String,
}

/// An observation: an array, a sequence of strings, an option, a map, a nested struct.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "seed.obs", version = 2)]
struct Obs {
    pos: [f32; 3],
    tags: Vec<String>,
    flag: Option<bool>,
    scores: BTreeMap<String, f64>,
    inner: Inner,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "seed.inner", version = 1)]
struct Inner {
    a: u8,
    b: Vec<u16>,
}

fn producer(pid: u32, name: &str) -> ProducerInfo {
    ProducerInfo {
        pid,
        name: name.into(),
        cmdline: vec![name.into(), "--seed".into()],
        session_tag: Some("s1".into()),
        perf_tag: None,
        lane_id: 0x1234_5678_9abc_def0 ^ u64::from(pid),
        started_nanos: 1_700_000_000_000_000_000,
        relayed: false,
    }
}

fn meta(
    seq: u64,
    key: u16,
    level: u8,
    emitter: u16,
    len: usize,
) -> snapbus_consumers::RecordHeader {
    snapbus_consumers::RecordHeader {
        seq,
        t_nanos: 1_700_000_000_000_000_000 + seq * 1_000_000,
        schema_key: key,
        schema_version: 1,
        level: Level::from_wire(level),
        emitter_id: emitter,
        payload_len: len,
    }
}

fn step(i: u64) -> Vec<u8> {
    Step {
        i,
        reward: i as f64 * 0.5,
        note: "x".repeat((i % 4) as usize),
    }
    .encode_to_vec()
    .expect("encode")
}

fn obs(i: u64) -> Vec<u8> {
    Obs {
        pos: [i as f32, 1.5, -2.0],
        tags: (0..i % 3).map(|k| format!("t{k}")).collect(),
        flag: i.is_multiple_of(2).then_some(i.is_multiple_of(4)),
        scores: [("a".to_owned(), 1.0), ("b".to_owned(), i as f64)].into(),
        inner: Inner {
            a: i as u8,
            b: vec![1, 2, i as u16],
        },
    }
    .encode_to_vec()
    .expect("encode")
}

fn writer(path: &Path, chunk_bytes: u64) -> RecordingWriter {
    let mut opts = WriterOptions::new("recorder", "seed");
    opts.chunk_bytes = chunk_bytes;
    opts.overwrite = true;
    RecordingWriter::create(path, &opts).expect("create")
}

/// Two producers, two schemas, emitters and levels, a loss record, small chunks.
fn two_producers(w: &mut RecordingWriter) {
    let (p1, p2) = (producer(101, "trainer"), producer(202, "env"));
    let step_desc = Arc::new(Step::descriptor().clone());
    let obs_desc = Arc::new(Obs::descriptor().clone());
    for i in 0..12u64 {
        let s = step(i);
        let emitter = if i % 3 == 0 { Some("policy") } else { None };
        w.write(
            1,
            snapbus_consumers::Producer::from(&p1),
            &step_desc,
            emitter,
            &meta(i, 1, 2, u16::from(emitter.is_some()), s.len()),
            &s,
        )
        .expect("write");
        let o = obs(i);
        w.write(
            2,
            snapbus_consumers::Producer::from(&p2),
            &obs_desc,
            None,
            &meta(i, 1, 1 + (i % 2) as u8, 0, o.len()),
            &o,
        )
        .expect("write");
        if i == 6 {
            w.write_loss(
                2,
                snapbus_consumers::Producer::from(&p2),
                (17, 0),
                1_700_000_000_000_000_000 + i * 1_000_000,
            )
            .expect("loss");
        }
    }
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds/recording_reader");
    std::fs::create_dir_all(&dir).expect("seed dir");
    let tmp = dir.join(".tmp.mcap");

    // 1. Header, recording metadata, summary, footer: no producer, no message.
    let p = dir.join("empty.mcap");
    writer(&p, 1 << 20).finish().expect("finish");

    // 2. One producer, one schema, six messages in one chunk, an emitter.
    let p = dir.join("one_producer.mcap");
    let mut w = writer(&p, 1 << 20);
    let info = producer(7, "rt-seed");
    let desc = Arc::new(Step::descriptor().clone());
    for i in 0..6u64 {
        let s = step(i);
        w.write(
            7,
            snapbus_consumers::Producer::from(&info),
            &desc,
            Some("trainer"),
            &meta(i, 1, 2, 1, s.len()),
            &s,
        )
        .expect("write");
    }
    w.finish().expect("finish");
    // 3. The same file cut in the middle of its chunk (a killed writer's last chunk).
    let bytes = std::fs::read(&p).expect("read");
    std::fs::write(
        dir.join("one_producer_cut.mcap"),
        &bytes[..bytes.len() * 2 / 5],
    )
    .expect("write");

    // 4. Two producers, two schemas, loss record, 400-byte chunks (several chunks).
    let p = dir.join("two_producers.mcap");
    let mut w = writer(&p, 400);
    two_producers(&mut w);
    w.finish().expect("finish");

    // 5. The same, flushed but never finished: chunks, no summary, no footer.
    let mut w = writer(&tmp, 400);
    two_producers(&mut w);
    w.flush().expect("flush");
    let unfinished = std::fs::read(&tmp).expect("read");
    w.finish().expect("finish");
    std::fs::write(dir.join("two_producers_unfinished.mcap"), unfinished).expect("write");
    std::fs::remove_file(&tmp).expect("remove");

    // Each seed reads back as intended: the intact ones to their footer, the damaged ones up to
    // a clear error.
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    for p in names {
        let bytes = std::fs::read(&p).expect("read");
        assert!(bytes.len() < 20_000, "{p:?}: {} bytes", bytes.len());
        let mut reader = RecordingReader::new(&bytes[..]);
        let (mut messages, mut error) = (0, None);
        for item in reader.by_ref() {
            match item {
                Ok(Item::Message(m)) => {
                    snapbus_schemas::decode(m.channel.schema.root(), &m.data).expect("decodes");
                    messages += 1;
                }
                Ok(_) => {}
                Err(e) => error = Some(e.to_string()),
            }
        }
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let damaged = name.contains("cut") || name.contains("unfinished");
        assert_eq!(error.is_some(), damaged, "{name}: {error:?}");
        assert_eq!(reader.complete(), !damaged, "{name}");
        println!(
            "{:>6} bytes  {name}: {messages} messages, {}",
            bytes.len(),
            error.as_deref().unwrap_or("complete")
        );
    }
}
