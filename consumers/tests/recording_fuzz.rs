//! Issue #44 item 2: one flipped bit anywhere in a recording — the first chunk (which declares
//! the channels), the header, a chunk's length, the summary — never costs the records of an
//! intact chunk. The chunks and what they hold are counted here by parsing the undamaged file's
//! top-level records (independently of the reader), and each damaged copy is read with
//! resynchronisation, as the CLI and Python read files, under a watchdog. Both with chunks
//! compressed (LZ4, the default: a flipped bit in a compressed chunk is damage counted, never a
//! panic) and stored as they are.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use snapbus_bus::schemas::{Snapshot, Wire};
use snapbus_consumers::recording::{
    Compression, Item, RecordingReader, RecordingWriter, WriterOptions,
};

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "fuzz.step", version = 1, crate = "snapbus_bus::schemas")]
struct Step {
    i: u64,
    note: String,
}

const RECORDS: u64 = 600;

fn step(i: u64) -> Step {
    Step {
        i,
        note: "n".repeat((i % 11) as usize),
    }
}

/// Writes `RECORDS` records in ~2 KB chunks over three channels (emitters), the third first
/// used half way: its channel is declared in a later chunk than the others.
fn recording(compression: Compression) -> Vec<u8> {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fuzz-{}-{compression}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("fuzz.mcap");
    let _ = std::fs::remove_file(&path);
    let mut opts = WriterOptions::new("recorder", "test");
    opts.chunk_bytes = 2000;
    opts.compression = compression;
    let mut w = RecordingWriter::create(&path, &opts).expect("create");
    let info = crate::common::producer(4242, "fuzzer", 0x44);
    let desc = Arc::new(Step::descriptor().clone());
    for i in 0..RECORDS {
        let payload = step(i).encode_to_vec().expect("encode");
        let mut header = crate::common::header(i, 1_000 + i, payload.len());
        header.emitter_id = if i < RECORDS / 2 { i % 2 } else { i % 3 } as u16;
        let emitter = format!("e{}", header.emitter_id);
        w.write(
            7,
            snapbus_consumers::Producer::from(&info),
            &desc,
            Some(&emitter),
            &header,
            &payload,
        )
        .expect("write");
    }
    w.finish().expect("finish");
    std::fs::read(&path).expect("read")
}

/// A chunk of the undamaged file: its byte range and its records.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    start: usize,
    end: usize,
    records: u64,
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// The chunks of an (undamaged) MCAP file, from its top-level records: each chunk's records
/// counted from the opcodes inside it.
fn chunks(file: &[u8]) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut at = 8;
    while at + 9 <= file.len() {
        let (opcode, len) = (file[at], u64_at(file, at + 1) as usize);
        let end = at + 9 + len;
        if opcode == mcap::records::op::CHUNK {
            // start, end, uncompressed size (u64 each), CRC (u32), compression (u32 length +
            // name), records length (u64), then the records (an LZ4 frame for `lz4`).
            let name_len = u32::from_le_bytes(file[at + 37..at + 41].try_into().expect("4"));
            let stored = &file[at + 9 + 8 * 3 + 4 + 4 + name_len as usize + 8..end];
            let plain = match &file[at + 41..at + 41 + name_len as usize] {
                b"" => stored.to_vec(),
                b"lz4" => {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut lz4_flex::frame::FrameDecoder::new(stored),
                        &mut out,
                    )
                    .expect("an intact LZ4 frame");
                    out
                }
                other => panic!("compression {other:?}"),
            };
            let mut r = 0;
            let mut records = 0;
            while r < plain.len() {
                if plain[r] == mcap::records::op::MESSAGE {
                    records += 1;
                }
                r += 9 + u64_at(&plain, r + 1) as usize;
            }
            assert_eq!(r, plain.len(), "the chunk's records fill it");
            out.push(Chunk {
                start: at,
                end,
                records,
            });
        }
        if opcode == mcap::records::op::FOOTER {
            break;
        }
        at = end;
    }
    out
}

/// A flip of a high bit in the length field of each record that is not a chunk (message
/// indexes, metadata, the header): a length that stays inside the file and swallows chunks.
fn length_fields(file: &[u8]) -> Vec<(usize, u8)> {
    let mut out = Vec::new();
    let mut at = 8;
    while at + 9 <= file.len() && file[at] != mcap::records::op::DATA_END {
        if file[at] != mcap::records::op::CHUNK {
            out.push((at + 2, 0x80));
            out.push((at + 2, 0x10));
        }
        at += 9 + u64_at(file, at + 1) as usize;
    }
    out
}

/// What reading a damaged copy gave.
struct Read {
    /// Records read, by the offset of the chunk they were read from.
    per_chunk: HashMap<u64, u64>,
    records: u64,
    /// Damaged parts reported, and the error the read ended with.
    reported: usize,
    /// A record read that was not one written, or one read twice.
    wrong: Option<String>,
}

fn read(bytes: Vec<u8>) -> Read {
    let mut r = Read {
        per_chunk: HashMap::new(),
        records: 0,
        reported: 0,
        wrong: None,
    };
    let mut seen = vec![false; RECORDS as usize];
    for item in RecordingReader::new(std::io::Cursor::new(bytes)).with_resync() {
        match item {
            Ok(Item::Message(m)) => {
                let s = Step::decode_exact(&m.data);
                match s {
                    Ok(s) if s == step(s.i) && s.i < RECORDS && !seen[s.i as usize] => {
                        seen[s.i as usize] = true;
                    }
                    other => r.wrong = Some(format!("{other:?}")),
                }
                r.records += 1;
                *r.per_chunk.entry(m.offset).or_default() += 1;
            }
            Ok(Item::Damaged(_)) | Err(_) => r.reported += 1,
            Ok(_) => {}
        }
    }
    r
}

#[test]
fn one_flipped_bit_anywhere_never_costs_an_intact_chunks_records() {
    flips_never_cost_intact_chunks(Compression::None);
}

#[test]
fn one_flipped_bit_in_a_compressed_recording_never_costs_an_intact_chunks_records() {
    flips_never_cost_intact_chunks(Compression::Lz4);
}

fn flips_never_cost_intact_chunks(compression: Compression) {
    let good = recording(compression);
    let table = chunks(&good);
    assert!(table.len() >= 10, "many chunks: {table:?}");
    assert_eq!(table.iter().map(|c| c.records).sum::<u64>(), RECORDS);
    let clean = read(good.clone());
    assert_eq!((clean.records, clean.reported), (RECORDS, 0));
    // Seeded: the same 200 offsets every run. A tenth of them in the first chunk, which
    // declares the channels (the case of the issue: byte 700 of the file). Then, not random,
    // the length field of every record that is not a chunk.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let first = table[0];
    let flips: Vec<(usize, u8)> = (0..200)
        .map(|k| {
            let at = if k < 20 {
                first.start + (rnd() as usize) % (first.end - first.start)
            } else {
                (rnd() as usize) % good.len()
            };
            (at, 1u8 << (rnd() % 8))
        })
        .chain(length_fields(&good))
        .collect();
    // The reads run on a thread; each must finish within the watchdog.
    let (tx, rx) = std::sync::mpsc::channel();
    let copy = good.clone();
    let flips2 = flips.clone();
    std::thread::spawn(move || {
        for (at, bit) in flips2 {
            let mut bad = copy.clone();
            bad[at] ^= bit;
            if tx.send(read(bad)).is_err() {
                return;
            }
        }
    });
    let mut zero = 0;
    for (at, bit) in flips {
        let got = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!("reading the copy with bit {bit:#x} of byte {at} flipped hangs")
            });
        let what = format!("bit {bit:#x} of byte {at} flipped");
        assert!(
            got.wrong.is_none(),
            "{what}: a wrong record: {:?}",
            got.wrong
        );
        assert!(got.reported > 0, "{what}: the damage is reported");
        for c in table.iter().filter(|c| !(c.start..c.end).contains(&at)) {
            assert_eq!(
                got.per_chunk.get(&(c.start as u64)).copied().unwrap_or(0),
                c.records,
                "{what}: every record of the intact chunk at {} is read ({} records read in all)",
                c.start,
                got.records
            );
        }
        if got.records == 0 {
            zero += 1;
        }
    }
    assert_eq!(zero, 0, "no flip reads nothing");
}
