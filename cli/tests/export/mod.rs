//! `snapbus export`: recordings made with the library (a real recorder on an in-process bus,
//! or the recording writer directly) converted by the real binary, and read back with
//! independent readers (serde_json, the csv and mcap crates, parquet; pyarrow, pandas and the
//! Python mcap package where installed). Here: the recordings and the readers the tests share.

mod csv_files;
mod damaged;
mod jsonl;
mod mcap_json;
mod output;
mod parquet_files;
mod python;
mod replay_print;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::Value as Json;
use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_consumers::recording::{RecordingWriter, WriterOptions};
use snapbus_schemas::{Snapshot, Tensor, Wire, decode};

use crate::util::{Output, run};

#[derive(Wire, Debug, Clone, PartialEq)]
struct Pos {
    x: f64,
    y: f64,
}

#[derive(Wire, Debug, Clone, PartialEq)]
enum Phase {
    Warmup,
    Run { speed: f32 },
    Done(u8),
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "exp.obs", version = 1)]
struct Obs {
    step: u64,
    pos: Pos,
    reward: f64,
    hist: Vec<f32>,
    image: Tensor<u8>,
    label: Option<String>,
    note: String,
    phase: Phase,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "exp.tick", version = 1)]
struct Tick {
    i: u32,
}

/// Version 2 of `exp.tick`: one field appended.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "exp.tick", version = 2)]
struct Tick2 {
    i: u32,
    #[snapshot(since = 2)]
    unit: String,
}

/// Deterministic observation `i`: every third has no label; the phase cycles; the note needs
/// CSV quoting.
fn obs(i: u64) -> Obs {
    Obs {
        step: i,
        pos: Pos {
            x: i as f64 * 0.5,
            y: -(i as f64),
        },
        reward: (i % 7) as f64 / 4.0,
        hist: vec![i as f32, 0.25, -1.5],
        image: Tensor::new(
            vec![2, 3],
            (0..6).map(|k| (i as u8).wrapping_add(k)).collect(),
        )
        .expect("tensor"),
        label: (i % 3 != 0).then(|| format!("l{i}")),
        note: format!("a, \"quoted\"\nnote {i}"),
        phase: match i % 3 {
            0 => Phase::Warmup,
            1 => Phase::Run {
                speed: i as f32 + 0.5,
            },
            _ => Phase::Done(i as u8),
        },
    }
}

/// The JSON of a payload as snapbus decodes it (the form every format exports).
fn payload_json<T: Snapshot>(v: &T) -> Json {
    let bytes = v.encode_to_vec().expect("encode");
    decode(T::descriptor().root(), &bytes)
        .expect("decode")
        .to_json()
}

pub(crate) fn tmp(name: &str) -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    let _ = std::fs::remove_dir_all(&p);
    p
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Runs `snapbus export INPUT --format FORMAT -o OUTPUT EXTRA…`.
pub(crate) fn export(input: &Path, format: &str, output: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "export",
        path_str(input),
        "--format",
        format,
        "-o",
        path_str(output),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "export failed: {}\n{}",
        out.stderr,
        out.stdout
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

/// Writes recordings directly (chosen timestamps, two producers, losses, two versions).
struct Direct {
    w: RecordingWriter,
    producers: [ProducerInfo; 2],
    seq: u64,
}

impl Direct {
    fn create(path: &Path, chunk_bytes: u64) -> Direct {
        let mut opts = WriterOptions::new("recorder", "test");
        opts.chunk_bytes = chunk_bytes;
        let info = |pid: u32, name: &str| crate::util::producer_info(pid, name, u64::from(pid));
        Direct {
            w: RecordingWriter::create(path, &opts).expect("create"),
            producers: [info(100, "alpha"), info(200, "beta")],
            seq: 0,
        }
    }

    /// Writes `v` as producer `p` (0 or 1, ids 7 and 8) at `t_nanos`.
    fn write<T: Snapshot>(&mut self, p: usize, t_nanos: u64, v: &T) {
        self.write_raw::<T>(p, t_nanos, v.encode_to_vec().expect("encode"));
    }

    /// Writes `n` ticks 0, 1, … as producer `p`, the first at `t0` and then every `every` ns.
    fn ticks(&mut self, p: usize, n: u32, t0: u64, every: u64) {
        for i in 0..n {
            self.write(p, t0 + every * u64::from(i), &Tick { i });
        }
    }

    /// Writes `payload` as a record of `T`'s schema (whether or not it decodes).
    fn write_raw<T: Snapshot>(&mut self, p: usize, t_nanos: u64, payload: Vec<u8>) {
        let desc = Arc::new(T::descriptor().clone());
        let meta = snapbus_consumers::RecordHeader {
            seq: self.seq,
            t_nanos,
            // Any key unique per schema in a producer will do.
            schema_key: (T::descriptor().fingerprint() % 60_000) as u16,
            schema_version: T::descriptor().version() as u16,
            level: Level::INFO,
            emitter_id: 0,
            payload_len: payload.len(),
        };
        self.seq += 1;
        self.w
            .write(
                7 + p as u64,
                snapbus_consumers::Producer::from(&self.producers[p]),
                &desc,
                None,
                &meta,
                &payload,
            )
            .expect("write");
    }

    fn loss(&mut self, p: usize, lost: u64, t_nanos: u64) {
        self.w
            .write_loss(
                7 + p as u64,
                snapbus_consumers::Producer::from(&self.producers[p]),
                (lost, 0),
                t_nanos,
            )
            .expect("loss");
    }

    fn finish(self) {
        self.w.finish().expect("finish");
    }
}

/// The mixed recording most tests use: 30 observations from producer alpha, ticks v1 from
/// beta, a loss record of beta, ticks v2 from beta. Timestamps: 1000 + i.
pub(crate) fn record_mixed(path: &Path) {
    let mut d = Direct::create(path, 1 << 20);
    for i in 0..30 {
        d.write(0, 1000 + i, &obs(i));
        if i < 5 {
            d.write(1, 2000 + i, &Tick { i: i as u32 });
        }
    }
    d.loss(1, 42, 3000);
    for i in 0..4 {
        d.write(
            1,
            4000 + i,
            &Tick2 {
                i: i as u32,
                unit: "ms".into(),
            },
        );
    }
    d.finish();
}

/// The recording of [`record_mixed`], written to `tmp(name)`.
fn mixed(name: &str) -> PathBuf {
    let rec = tmp(name);
    record_mixed(&rec);
    rec
}

/// Exports [`mixed`]`(name)` as `format` to `tmp(out)`, which must succeed: the recording, the
/// output and what `export` printed.
fn export_mixed(name: &str, format: &str, out: &str) -> (PathBuf, PathBuf, Output) {
    let rec = mixed(name);
    let out = tmp(out);
    let o = export(&rec, format, &out, &[]);
    assert_ok(&o);
    (rec, out, o)
}

fn read_lines(path: &Path) -> Vec<Json> {
    std::fs::read_to_string(path)
        .expect("read output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Parses a CSV file into its header and rows.
fn read_csv(path: &Path) -> (Vec<String>, Vec<BTreeMap<String, String>>) {
    let mut r = csv::Reader::from_path(path).expect("open csv");
    let header: Vec<String> = r
        .headers()
        .expect("header")
        .iter()
        .map(str::to_owned)
        .collect();
    let rows = r
        .records()
        .map(|rec| {
            let rec = rec.expect("a csv row");
            assert_eq!(rec.len(), header.len(), "every row has every column");
            header
                .iter()
                .cloned()
                .zip(rec.iter().map(str::to_owned))
                .collect()
        })
        .collect();
    (header, rows)
}

/// The columns of a table of CSV or Parquet: the seven of every record, then `payload`'s.
fn columns(payload: &[&str]) -> Vec<String> {
    [
        "t_nanos",
        "producer_id",
        "producer",
        "pid",
        "level",
        "seq",
        "version",
    ]
    .iter()
    .chain(payload)
    .map(|c| (*c).to_owned())
    .collect()
}

fn dir_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Reads an MCAP file with the Rust `mcap` crate: summary and every message.
fn read_mcap(bytes: &[u8]) -> (mcap::Summary, Vec<mcap::Message<'static>>) {
    let summary = mcap::Summary::read(bytes)
        .expect("summary")
        .expect("has a summary");
    let messages = mcap::MessageStream::new(bytes)
        .expect("stream")
        .map(|m| m.expect("message"))
        .collect();
    (summary, messages)
}

/// The number of rows of a Parquet file, read with the parquet crate.
#[cfg(feature = "parquet")]
fn parquet_rows(path: &Path) -> usize {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let file = std::fs::File::open(path).expect("open");
    ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("a parquet file")
        .build()
        .expect("reader")
        .map(|b| b.expect("batch").num_rows())
        .sum()
}

/// Whether the Python modules are importable; if not, the test fails when
/// `SNAPBUS_REQUIRE_PYTHON=1` (CI) and is skipped loudly otherwise.
pub(crate) fn python_with(modules: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    if std::env::var("SNAPBUS_REQUIRE_PYTHON").as_deref() == Ok("1") {
        panic!(
            "SNAPBUS_REQUIRE_PYTHON=1 but `python3 -c 'import {modules}'` fails: \
             pip install pyarrow pandas mcap lz4"
        );
    }
    // Straight to the stderr file descriptor: the test harness captures `eprintln!` of
    // passing tests, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!! skipped: `python3 -c 'import {modules}'` fails, so the Python cross-check does \
         not run (pip install pyarrow pandas mcap lz4; SNAPBUS_REQUIRE_PYTHON=1 makes this fail) \
         !!!!!\n"
    );
    false
}

/// Runs `python3 tests/python/SCRIPT ARGS` and parses its JSON output.
pub(crate) fn python_json(script: &str, args: &[&str]) -> Json {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the script prints JSON")
}

/// The permission bits of `path`.
pub(crate) fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}
