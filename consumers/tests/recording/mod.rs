//! Recordings: the recorder on a live bus, then the reader on the file — intact, cut at every
//! kind of place, bit-flipped, of a newer version, or not MCAP at all. This file holds the
//! helpers the topic files share.

mod damaged_chunks;
mod losses;
mod producers;
mod reader_errors;
mod recorder;
mod replay;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use snapbus_bus::Level;
use snapbus_bus::lane::StartAt;
use snapbus_bus::publisher::Publisher;
use snapbus_bus::schemas::{Snapshot, Wire};
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::{
    Damage, Item, ReadError, RecordingReader, RecordingWriter, WriterOptions,
};
use snapbus_consumers::run;

use crate::runtime::Bus;

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rec.step", version = 1, crate = "snapbus_bus::schemas")]
struct Step {
    i: u64,
    reward: f64,
    note: String,
}

fn tmp(name: &str) -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn step(i: u64) -> Step {
    Step {
        i,
        reward: i as f64 * 0.5,
        note: "x".repeat((i % 7) as usize),
    }
}

/// Records `n` steps emitted by a publisher on `bus` into `path` (rotation optional).
fn record(bus: &Bus, p: &Publisher, path: &Path, n: u64, rotate: Option<u64>) -> Vec<PathBuf> {
    for i in 0..n {
        p.emit(Level::INFO, p.emitter("trainer"), &step(i))
            .expect("emit");
    }
    p.close();
    let (delivered, files, messages) = record_to_end(bus, path, rotate);
    assert_eq!(delivered, n);
    assert_eq!(messages, n);
    files
}

/// Records everything on `bus`, from the oldest record, until every producer has ended;
/// returns the records delivered, the files and the messages written.
fn record_to_end(bus: &Bus, path: &Path, rotate: Option<u64>) -> (u64, Vec<PathBuf>, u64) {
    let mut rec = Recorder::create(RecorderOptions {
        path: path.to_owned(),
        rotate_bytes: rotate,
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Oldest,
    })
    .expect("create");
    let mut opts = rec.run_options("recorder");
    opts.until_end = true;
    opts.handle_signals = false;
    let summary = run(bus.dir(), &opts, &mut rec, None).expect("run");
    let (files, messages) = rec.finish().expect("finish");
    (summary.delivered, files, messages)
}

fn read_all(bytes: &[u8]) -> (Vec<Item>, Option<ReadError>) {
    let mut items = Vec::new();
    for r in RecordingReader::new(bytes) {
        match r {
            Ok(i) => items.push(i),
            Err(e) => return (items, Some(e)),
        }
    }
    (items, None)
}

fn damage(items: &[Item]) -> Vec<&Damage> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Damaged(d) => Some(d),
            _ => None,
        })
        .collect()
}

fn steps(items: &[Item]) -> Vec<Step> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Message(m) => Some(Step::decode_exact(&m.data).expect("decodes")),
            _ => None,
        })
        .collect()
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rec.b", version = 1, crate = "snapbus_bus::schemas")]
struct RecB {
    x: f32,
    i: u32,
}

/// Writes 300 records in small chunks and returns the file's bytes.
fn small_chunks(bus: &Bus, name: &str) -> Vec<u8> {
    let p = bus.publisher();
    let path = tmp(name);
    let mut w = RecordingWriter::create(&path, &{
        let mut o = WriterOptions::new("recorder", "test");
        o.chunk_bytes = 2000;
        o
    })
    .expect("create");
    let info = p.info().clone();
    let desc = Arc::new(Step::descriptor().clone());
    for i in 0..300u64 {
        let payload = step(i).encode_to_vec().expect("encode");
        let meta = crate::common::header(i, 1_000 + i, payload.len());
        w.write(
            7,
            snapbus_consumers::Producer::from(&info),
            &desc,
            None,
            &meta,
            &payload,
        )
        .expect("write");
    }
    w.finish().expect("finish");
    std::fs::read(&path).expect("read")
}

/// A producer as a consumer's hooks see it.
fn producer(name: &str, lane_id: u64) -> snapbus_bus::ProducerInfo {
    crate::common::producer(4242, name, lane_id)
}

/// Hands `rec` one record, as the run loop would.
fn feed_record(
    rec: &mut Recorder,
    producer_id: u64,
    who: &snapbus_bus::ProducerInfo,
    schema: &Arc<snapbus_bus::schemas::SchemaDescriptor>,
    payload: &[u8],
    seq: u64,
) {
    use snapbus_consumers::Consumer as _;
    let r = snapbus_consumers::Record {
        producer_id,
        producer: snapbus_consumers::Producer::from(who),
        schema,
        emitter: None,
        header: crate::common::header(seq, 1_000 + seq, payload.len()),
        payload,
        extracted: None,
    };
    rec.on_event(&r).expect("on_event");
}
