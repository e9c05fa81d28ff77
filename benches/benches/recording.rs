//! Recordings (consumers crate): the recorder's file writer beside a plain sequential file write
//! of the same bytes, and `replay --max` into a live bus, measured in one run.
//!
//! - `recorder_write/{64B,4KiB}`: `N` payloads (8 MiB of payload per iteration: 131,072 ×
//!   64 B or 2,048 × 4 KiB) written into a new file in a temporary directory, the file created
//!   inside the timed region and deleted outside it:
//!   - `plain`: `BufWriter<File>` (256 KiB buffer, like the recorder's) `write_all` of each
//!     payload, then `flush`;
//!   - `recorder`: `RecordingWriter::create` + `write` of each payload (one producer, one
//!     schema: one channel) + `finish()` (summary, footer). The file holds the payloads plus the
//!     MCAP framing (47 bytes per message, chunk headers, indexes, summary).
//!
//!   Neither side calls `fsync`: both measure writing into the page cache (the recorder never
//!   fsyncs; its `flush` hands chunks to the kernel). Throughput is in **payload bytes** for
//!   both rows, so MB/s compare the same useful bytes; the ratio recorder / plain is the figure
//!   of merit (issue target: ≥ 80 %). After criterion, an interleaved A/B (plain, recorder,
//!   recorder, plain, … for 12 rounds) prints the median ratio, which a noisy machine perturbs
//!   less than two criterion rows measured seconds apart.
//! - `replay_max/64B`: a recording of 200,000 64-byte events (the `Event` of `benches/src`),
//!   written once in setup; per iteration:
//!   - `replay`: `replay(RecordingReader::new(File), &publisher, Pace::Max, &[], …)` into a
//!     publisher on an in-process broker (a thread of this process), default 64 MiB lane as
//!     `snapbus replay` uses; no consumer, so the lane is overwritten and never blocks;
//!   - `read only`: the same file through `RecordingReader`, every item taken, nothing emitted;
//!   - `emit_raw only`: the same 200,000 payloads from memory through `Publisher::emit_with`
//!     (the replay's emit cost without the file).
//!
//!   Throughput in elements (events/s; issue target for `replay`: ≥ 5 M/s).
//!
//! Run: `cargo bench -p snapbus-benches --bench recording`. Results: `BENCHMARKS.md`.

#![allow(missing_docs)]
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_bus::broker;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::EmitMeta;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_consumers::recording::{
    Compression, Item, RecordingReader, RecordingWriter, WriterOptions,
};
use snapbus_consumers::replay::{Pace, ReplaySummary, replay};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Wire};

use snapbus_benches::{Event, TempDir, connected_publisher};

/// Payload bytes per `recorder_write` iteration.
const WRITE_BYTES: usize = 8 << 20;
/// The plain writer's buffer: the recorder's `BufWriter` capacity (`writer.rs`).
const BUF_CAPACITY: usize = 256 << 10;
/// Events in the `replay_max` recording.
const REPLAY_EVENTS: usize = 200_000;

/// A 4 KiB payload: a byte string (8-byte length prefix + 4,088 bytes).
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "bench.blob", version = 1)]
struct Blob {
    data: Vec<u8>,
}

/// `n` payloads of one size, back to back, and the schema they are written with.
struct Payloads {
    size: usize,
    bytes: Vec<u8>,
    schema: Arc<SchemaDescriptor>,
}

impl Payloads {
    fn events(n: usize) -> Payloads {
        let mut bytes = Vec::with_capacity(n * 64);
        for i in 0..n as u64 {
            bytes.extend_from_slice(&Event::sample(i).encode_to_vec().unwrap());
        }
        assert_eq!(bytes.len(), n * 64, "64-byte events");
        Payloads {
            size: 64,
            bytes,
            schema: Arc::new(Event::descriptor().clone()),
        }
    }

    fn blobs(n: usize) -> Payloads {
        let mut bytes = Vec::with_capacity(n * 4096);
        for i in 0..n {
            let data = (0..4088).map(|k| (i + k) as u8).collect();
            bytes.extend_from_slice(&Blob { data }.encode_to_vec().unwrap());
        }
        assert_eq!(bytes.len(), n * 4096, "4 KiB blobs");
        Payloads {
            size: 4096,
            bytes,
            schema: Arc::new(Blob::descriptor().clone()),
        }
    }

    fn iter(&self) -> std::slice::Chunks<'_, u8> {
        self.bytes.chunks(self.size)
    }
}

fn producer_info() -> ProducerInfo {
    ProducerInfo {
        pid: std::process::id(),
        name: "bench".into(),
        cmdline: vec!["recording".into()],
        session_tag: None,
        perf_tag: None,
        lane_id: 0x5eed,
        started_nanos: 1_700_000_000_000_000_000,
        relayed: false,
    }
}

fn meta(i: usize, payload_len: usize) -> snapbus_consumers::RecordHeader {
    snapbus_consumers::RecordHeader {
        seq: i as u64,
        t_nanos: 1_700_000_000_000_000_000 + i as u64 * 1000,
        schema_key: 1,
        schema_version: 1,
        level: Level::INFO,
        emitter_id: 0,
        payload_len,
    }
}

/// Plain sequential write of the payloads; returns the file size.
fn write_plain(path: &Path, p: &Payloads) -> u64 {
    let mut w = BufWriter::with_capacity(BUF_CAPACITY, File::create(path).unwrap());
    for payload in p.iter() {
        w.write_all(payload).unwrap();
    }
    w.flush().unwrap();
    p.bytes.len() as u64
}

/// The recorder's writer over the same payloads; returns the messages written.
fn write_recording(path: &Path, p: &Payloads, info: &ProducerInfo, codec: Compression) -> u64 {
    let mut opts = WriterOptions::new("recorder", "bench");
    opts.overwrite = true;
    opts.compression = codec;
    let mut w = RecordingWriter::create(path, &opts).unwrap();
    let producer = snapbus_consumers::Producer::from(info);
    for (i, payload) in p.iter().enumerate() {
        w.write(
            7,
            producer,
            &p.schema,
            None,
            &meta(i, payload.len()),
            payload,
        )
        .unwrap();
    }
    w.finish().unwrap()
}

/// Times one write of `p` into a fresh file (deleted outside the timed region).
fn timed(path: &Path, f: impl FnOnce(&Path) -> u64) -> Duration {
    let t0 = Instant::now();
    black_box(f(path));
    let t = t0.elapsed();
    std::fs::remove_file(path).unwrap();
    t
}

fn recorder_write(c: &mut Criterion, tmp: &Path, sets: &[(&str, Payloads)]) {
    let info = producer_info();
    let mut g = c.benchmark_group("recorder_write");
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    g.sample_size(20);
    let path = tmp.join("write.bin");
    for (name, p) in sets {
        g.throughput(Throughput::Bytes(p.bytes.len() as u64));
        g.bench_function(BenchmarkId::new("plain", name), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| timed(&path, |f| write_plain(f, p)))
                    .sum()
            })
        });
        for (row, codec) in [
            ("recorder", Compression::Lz4),
            ("recorder_none", Compression::None),
        ] {
            g.bench_function(BenchmarkId::new(row, name), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| timed(&path, |f| write_recording(f, p, &info, codec)))
                        .sum()
                })
            });
        }
    }
    g.finish();
}

/// Alternates plain, recorder (LZ4) and recorder (no compression) writes, rotating the order
/// each round, and prints the median rates (MB/s of payload, records/s), the median ratio of
/// each recorder to plain, and the file sizes.
fn interleaved(tmp: &Path, sets: &[(&str, Payloads)], rounds: usize) {
    let info = producer_info();
    let path = tmp.join("ab.bin");
    let codecs = [Compression::Lz4, Compression::None];
    for (name, p) in sets {
        let file_bytes = codecs.map(|codec| {
            write_recording(&path, p, &info, codec);
            let n = std::fs::metadata(&path).unwrap().len();
            std::fs::remove_file(&path).unwrap();
            n
        });
        // times[0]: plain; times[1 + k]: recorder with codecs[k].
        let mut times: [Vec<Duration>; 3] = Default::default();
        for r in 0..rounds {
            for k in 0..3 {
                let which = (k + r) % 3;
                let t = match which {
                    0 => timed(&path, |f| write_plain(f, p)),
                    w => timed(&path, |f| write_recording(f, p, &info, codecs[w - 1])),
                };
                times[which].push(t);
            }
        }
        let records = p.bytes.len() / p.size;
        for (k, codec) in codecs.iter().enumerate() {
            let mut ratios: Vec<f64> = times[0]
                .iter()
                .zip(&times[1 + k])
                .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
                .collect();
            ratios.sort_by(f64::total_cmp);
            let mut plain = times[0].clone();
            let mut rec = times[1 + k].clone();
            plain.sort();
            rec.sort();
            let mbs = |t: Duration| p.bytes.len() as f64 / t.as_secs_f64() / 1e6;
            let rps = |t: Duration| records as f64 / t.as_secs_f64() / 1e6;
            println!(
                "interleaved {name} compression {codec}: plain {:.0} MB/s, recorder {:.0} MB/s = \
                 {:.2} M records/s (medians of {rounds}), recorder/plain {:.1} % (median of \
                 per-round ratios; min {:.1} %, max {:.1} %); file {} bytes for {} payload \
                 bytes ({:.2}x)",
                mbs(plain[rounds / 2]),
                mbs(rec[rounds / 2]),
                rps(rec[rounds / 2]),
                100.0 * ratios[rounds / 2],
                100.0 * ratios[0],
                100.0 * ratios[rounds - 1],
                file_bytes[k],
                p.bytes.len(),
                file_bytes[k] as f64 / p.bytes.len() as f64,
            );
        }
    }
}

fn replay_max(c: &mut Criterion, tmp: &Path) {
    let root = tmp.join("bus");
    let dir = BusDir::locate_in(&root, &BusName::new("bench").unwrap());
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(10)).unwrap();
    let publisher = connected_publisher(dir, "replay", LaneConfig::default()).unwrap();

    let events = Payloads::events(REPLAY_EVENTS);
    let path = tmp.join("replay.mcap");
    write_recording(&path, &events, &producer_info(), Compression::default());
    let n = REPLAY_EVENTS as u64;

    let mut g = c.benchmark_group("replay_max/64B");
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    g.sample_size(20);
    g.throughput(Throughput::Elements(n));
    let stop = AtomicBool::new(false);
    g.bench_function("replay", |b| {
        b.iter(|| {
            let mut summary = ReplaySummary::default();
            let reader = RecordingReader::new(File::open(&path).unwrap());
            replay(reader, &publisher, Pace::Max, &[], &stop, &mut summary).unwrap();
            assert_eq!(summary.emitted, n);
            summary
        })
    });
    g.bench_function("read only", |b| {
        b.iter(|| {
            let mut messages = 0u64;
            for item in RecordingReader::new(File::open(&path).unwrap()) {
                if let Item::Message(m) = item.unwrap() {
                    black_box(&m.data);
                    messages += 1;
                }
            }
            assert_eq!(messages, n);
            messages
        })
    });
    let meta = EmitMeta {
        schema_key: publisher.register_schema(&events.schema).unwrap(),
        schema_version: 1,
        level: Level::INFO,
        emitter: 0,
    };
    g.bench_function("emit_raw only", |b| {
        b.iter(|| {
            for payload in events.iter() {
                publisher
                    .emit_with(meta, payload.len(), |w| Ok(w.put(payload)?))
                    .unwrap();
            }
        })
    });
    g.finish();

    publisher.close();
    drop(publisher);
    broker.stop().unwrap();
}

fn main() {
    let tmp = TempDir::new("bench-recording").unwrap();
    let sets = [
        ("64B", Payloads::events(WRITE_BYTES / 64)),
        ("4KiB", Payloads::blobs(WRITE_BYTES / 4096)),
    ];
    let mut c = Criterion::default().configure_from_args();
    recorder_write(&mut c, tmp.path(), &sets);
    replay_max(&mut c, tmp.path());
    c.final_summary();
    // Only when measuring: not in `--test` (CI), `--list` or `--profile-time` runs.
    let measuring =
        !std::env::args().any(|a| ["--test", "--list", "--profile-time"].contains(&a.as_str()));
    if measuring {
        interleaved(tmp.path(), &sets, 12);
    }
}
