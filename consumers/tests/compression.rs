//! Issue #45 item 5: recordings are written with LZ4-compressed chunks by default, read back
//! exactly, and files without compression (ours, or written by the mcap crate's own writer
//! as snapbus did before) still read.

use std::collections::BTreeMap;
use std::sync::Arc;

use snapbus_bus::schemas::{Snapshot, Wire};
use snapbus_consumers::recording::{
    Compression, FORMAT_VERSION, Item, RECORDING_METADATA, RecordingReader, RecordingWriter,
    WriterOptions,
};

/// A 64×64 observation frame, like the example experiment's: smooth values, much repetition.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "cmp.obs", version = 1, crate = "snapbus_bus::schemas")]
struct Obs {
    step: u64,
    pixels: Vec<u8>,
}

fn obs(step: u64) -> Obs {
    let pixels = (0..64 * 64)
        .map(|k: u64| ((k % 64 + k / 64 + step) / 8) as u8)
        .collect();
    Obs { step, pixels }
}

const STEPS: u64 = 300;

/// Writes `STEPS` frames with `compression` (64 KiB chunks); returns the file's bytes.
fn write(compression: Compression, name: &str) -> Vec<u8> {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join(name);
    let mut opts = WriterOptions::new("recorder", "test");
    opts.chunk_bytes = 64 << 10;
    opts.compression = compression;
    opts.overwrite = true;
    let mut w = RecordingWriter::create(&path, &opts).expect("create");
    let info = crate::common::producer(7, "env", 0x45);
    let desc = Arc::new(Obs::descriptor().clone());
    for i in 0..STEPS {
        let payload = obs(i).encode_to_vec().expect("encode");
        let header = crate::common::header(i, 1_000 + i, payload.len());
        let producer = snapbus_consumers::Producer::from(&info);
        w.write(1, producer, &desc, None, &header, &payload)
            .expect("write");
    }
    assert_eq!(w.finish().expect("finish"), STEPS);
    std::fs::read(&path).expect("read")
}

/// The frames a file holds, in order, and the reader's chunk statistics.
fn read(bytes: Vec<u8>) -> (Vec<Obs>, snapbus_consumers::recording::ChunkBytes) {
    let mut reader = RecordingReader::new(std::io::Cursor::new(bytes)).with_resync();
    let mut out = Vec::new();
    for item in reader.by_ref() {
        match item.expect("an intact file") {
            Item::Message(m) => out.push(Obs::decode_exact(&m.data).expect("decode")),
            Item::Damaged(d) => panic!("damage in an intact file: {d:?}"),
            _ => {}
        }
    }
    assert!(reader.complete(), "read through the footer");
    (out, reader.chunk_bytes().clone())
}

#[test]
fn a_compressed_recording_is_lz4_by_default_and_reads_back_exactly() {
    assert_eq!(
        WriterOptions::new("recorder", "b").compression,
        Compression::Lz4
    );
    let lz4 = write(Compression::default(), "lz4.mcap");
    let plain = write(Compression::None, "plain.mcap");
    let want: Vec<Obs> = (0..STEPS).map(obs).collect();
    let (got, chunks) = read(lz4.clone());
    assert_eq!(got, want);
    assert_eq!(chunks.codecs.iter().collect::<Vec<_>>(), ["lz4"]);
    assert!(
        chunks.ratio() < 0.5,
        "64x64 frames shrink by at least 2x: {chunks:?}"
    );
    let (got, chunks) = read(plain.clone());
    assert_eq!(got, want);
    assert_eq!(chunks.codecs.iter().collect::<Vec<_>>(), ["none"]);
    assert_eq!(chunks.stored, chunks.uncompressed);
    assert!(
        lz4.len() * 2 < plain.len(),
        "{} vs {}",
        lz4.len(),
        plain.len()
    );
    // The mcap crate's own reader (indexed, through the summary) sees the same messages.
    let summary = mcap::Summary::read(&lz4)
        .expect("summary")
        .expect("a summary");
    assert!(summary.chunk_indexes.iter().all(|c| c.compression == "lz4"));
    assert_eq!(summary.stats.map(|s| s.message_count), Some(STEPS));
}

#[test]
fn a_recording_written_by_the_mcap_crate_without_compression_still_reads() {
    let mut buf = std::io::Cursor::new(Vec::new());
    let mut w = mcap::WriteOptions::new()
        .profile("snapbus")
        .compression(None)
        .create(&mut buf)
        .expect("writer");
    let mut meta = BTreeMap::new();
    meta.insert("format_version".to_owned(), FORMAT_VERSION.to_string());
    meta.insert("source".to_owned(), "recorder".to_owned());
    w.write_metadata(&mcap::records::Metadata {
        name: RECORDING_METADATA.to_owned(),
        metadata: meta,
    })
    .expect("metadata");
    let desc = Obs::descriptor();
    let schema = w
        .add_schema(desc.id(), "snapbus.descriptor", &desc.to_canonical_bytes())
        .expect("schema");
    let mut cmeta = BTreeMap::new();
    cmeta.insert("lane_id".to_owned(), format!("{:016x}", 0x45));
    cmeta.insert("producer_id".to_owned(), "1".to_owned());
    let channel = w
        .add_channel(schema, desc.id(), "snapbus", &cmeta)
        .expect("channel");
    for i in 0..STEPS {
        let header = mcap::records::MessageHeader {
            channel_id: channel,
            sequence: i as u32,
            log_time: 1_000 + i,
            publish_time: 1_000 + i,
        };
        let payload = obs(i).encode_to_vec().expect("encode");
        w.write_to_known_channel(&header, &payload).expect("write");
    }
    w.finish().expect("finish");
    drop(w);
    let (got, chunks) = read(buf.into_inner());
    assert_eq!(got, (0..STEPS).map(obs).collect::<Vec<_>>());
    assert_eq!(chunks.codecs.iter().collect::<Vec<_>>(), ["none"]);
}
