//! `snapbus export`: recordings made with the library (a real recorder on an in-process bus,
//! or the recording writer directly) converted by the real binary, and read back with
//! independent readers (serde_json, the csv and mcap crates, parquet; pyarrow, pandas and the
//! Python mcap package where installed).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value as Json, json};
use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_bus::broker::InProcess;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::lane::StartAt;
use snapbus_bus::publisher::{Publisher, PublisherConfig};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_consumers::recorder::{Recorder, RecorderOptions};
use snapbus_consumers::recording::{Item, RecordingReader, RecordingWriter, WriterOptions};
use snapbus_consumers::{RunOptions, run as run_consumer};
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

/// Records `obs(0..n_obs)` and `n_ticks` ticks with a real recorder on an in-process bus, as
/// `snapbus record` would.
fn record_live(bus_name: &str, path: &Path, n_obs: u64, n_ticks: u32) {
    let root =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("exp-rt-{}", std::process::id()));
    let dir = BusDir::locate_in(&root, &BusName::new(bus_name).expect("bus name"));
    let bus = InProcess::start(dir, Duration::from_secs(60)).expect("broker");
    let (session_tag, perf_tag) = (None, None);
    let lane = LaneConfig {
        capacity: 4 << 20,
        max_frame: 64 << 10,
        ..LaneConfig::default()
    };
    let config = PublisherConfig {
        name: "export-test".into(),
        lane,
        session_tag,
        perf_tag,
    };
    let p = Publisher::start(bus.dir().clone(), config).expect("publisher");
    let t0 = std::time::Instant::now();
    while !p.is_connected() {
        assert!(t0.elapsed() < Duration::from_secs(30), "never connected");
        std::thread::sleep(Duration::from_millis(5));
    }
    let trainer = p.emitter("trainer");
    for i in 0..n_obs {
        p.emit(Level::INFO, trainer, &obs(i)).expect("emit");
    }
    for i in 0..n_ticks {
        p.emit(Level::WARN, trainer, &Tick { i }).expect("emit");
    }
    p.close();
    let mut rec = Recorder::create(RecorderOptions {
        path: path.to_owned(),
        rotate_bytes: None,
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Oldest,
    })
    .expect("recorder");
    let mut opts = RunOptions::new("recorder");
    opts.subscribe.start = StartAt::Oldest;
    opts.until_end = true;
    opts.handle_signals = false;
    let summary = run_consumer(bus.dir(), &opts, &mut rec, None).expect("run");
    assert_eq!(summary.delivered, n_obs + u64::from(n_ticks));
    rec.finish().expect("finish");
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

#[test]
fn jsonl_holds_every_record_as_echo_prints_it() {
    let rec = tmp("live.mcap");
    record_live("exp1", &rec, 40, 10);
    let out = tmp("live.jsonl");
    let o = export(&rec, "jsonl", &out, &[]);
    assert_ok(&o);
    assert!(
        o.stderr
            .contains("snapbus export: 50 records (exp.obs 40, exp.tick 10)"),
        "{}",
        o.stderr
    );
    let lines = read_lines(&out);
    assert_eq!(lines.len(), 50);
    for (i, line) in lines[..40].iter().enumerate() {
        let keys: Vec<&str> = line
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "schema", "version", "level", "t_nanos", "producer", "target", "seq", "payload"
            ]
        );
        assert_eq!(line["schema"], "exp.obs");
        assert_eq!(line["version"], 1);
        assert_eq!(line["level"], "info");
        assert_eq!(line["target"], "trainer");
        assert_eq!(line["producer"]["name"], "export-test");
        assert_eq!(line["producer"]["pid"], std::process::id());
        assert_eq!(line["seq"], i);
        assert!(line["t_nanos"].as_u64().expect("t_nanos") > 1_600_000_000_000_000_000);
        assert_eq!(line["payload"], payload_json(&obs(i as u64)), "record {i}");
    }
    // Spot checks against the events themselves, not only against the decoder.
    assert_eq!(lines[4]["payload"]["pos"], json!({"x": 2.0, "y": -4.0}));
    assert_eq!(lines[4]["payload"]["phase"], json!({"Run": {"speed": 4.5}}));
    assert_eq!(lines[3]["payload"]["label"], Json::Null);
    assert_eq!(
        lines[2]["payload"]["image"],
        json!({"dtype": "u8", "shape": [2, 3], "data": [2, 3, 4, 5, 6, 7]})
    );
    for (i, line) in lines[40..].iter().enumerate() {
        assert_eq!(line["schema"], "exp.tick");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["payload"], json!({ "i": i }));
    }

    // --schema filters (a glob), and --force overwrites.
    let o = export(&rec, "jsonl", &out, &["--schema", "exp.t*", "--force"]);
    assert_ok(&o);
    let lines = read_lines(&out);
    assert_eq!(lines.len(), 10);
    assert!(lines.iter().all(|l| l["schema"] == "exp.tick"));
}

#[test]
fn jsonl_writes_loss_records_and_every_version() {
    let (_, out, o) = export_mixed("mixed-j.mcap", "jsonl", "mixed.jsonl");
    o.assert_stderr_has("1 loss record →");
    let lines = read_lines(&out);
    assert_eq!(lines.len(), 30 + 5 + 1 + 4);
    let loss: Vec<&Json> = lines.iter().filter(|l| l.get("loss").is_some()).collect();
    assert_eq!(
        loss,
        [
            &json!({"loss": {"producer_id": 8, "producer_pid": 200, "lost": 42, "damaged": 0}, "t_nanos": 3000})
        ]
    );
    let v2: Vec<&Json> = lines.iter().filter(|l| l["version"] == 2).collect();
    assert_eq!(v2.len(), 4);
    assert_eq!(v2[3]["payload"], json!({"i": 3, "unit": "ms"}));
    assert_eq!(
        v2[3]["producer"],
        json!({"id": 8, "name": "beta", "pid": 200})
    );
    assert_eq!(v2[3]["t_nanos"], 4003);
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

#[test]
fn csv_has_a_file_per_schema_and_version_with_flattened_columns() {
    let (rec, out, o) = export_mixed("mixed-c.mcap", "csv", "mixed-csv");
    assert_eq!(
        dir_files(&out),
        [
            "exp.obs.csv",
            "exp.tick.v1.csv",
            "exp.tick.v2.csv",
            "snapbus.loss.csv"
        ]
    );
    o.assert_stderr_has("4 files in");

    let (header, rows) = read_csv(&out.join("exp.obs.csv"));
    assert_eq!(
        header,
        columns(&[
            "step",
            "pos.x",
            "pos.y",
            "reward",
            "hist",
            "image",
            "image.shape",
            "label",
            "note",
            "phase",
            "phase.Run.speed",
            "phase.Done",
        ])
    );
    assert_eq!(rows.len(), 30);
    for (i, row) in rows.iter().enumerate() {
        let o = obs(i as u64);
        assert_eq!(row["t_nanos"], (1000 + i).to_string());
        assert_eq!(row["producer_id"], "7");
        assert_eq!(row["producer"], "alpha");
        assert_eq!(row["step"], i.to_string());
        assert_eq!(row["pos.x"].parse::<f64>().expect("pos.x"), o.pos.x);
        assert_eq!(row["pos.y"].parse::<f64>().expect("pos.y"), o.pos.y);
        assert_eq!(row["reward"].parse::<f64>().expect("reward"), o.reward);
        let hist: Vec<f32> = serde_json::from_str(&row["hist"]).expect("hist is JSON");
        assert_eq!(hist, o.hist);
        let image: Vec<u8> = serde_json::from_str(&row["image"]).expect("image is JSON");
        assert_eq!(image, o.image.data());
        assert_eq!(row["image.shape"], "[2,3]");
        assert_eq!(row["label"], o.label.clone().unwrap_or_default());
        assert_eq!(row["note"], o.note, "quoting round-trips");
        match o.phase {
            Phase::Warmup => {
                assert_eq!(row["phase"], "Warmup");
                assert_eq!(row["phase.Run.speed"], "");
                assert_eq!(row["phase.Done"], "");
            }
            Phase::Run { speed } => {
                assert_eq!(row["phase"], "Run");
                assert_eq!(row["phase.Run.speed"].parse::<f32>().expect("speed"), speed);
                assert_eq!(row["phase.Done"], "");
            }
            Phase::Done(n) => {
                assert_eq!(row["phase"], "Done");
                assert_eq!(row["phase.Run.speed"], "");
                assert_eq!(row["phase.Done"], n.to_string());
            }
        }
    }
    assert_eq!(rows[1]["pos.x"], "0.5", "shortest round-trip floats");

    let (header, rows) = read_csv(&out.join("exp.tick.v2.csv"));
    assert_eq!(header, columns(&["i", "unit"]));
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[2]["unit"], "ms");
    assert_eq!(rows[2]["producer"], "beta");
    let (header, rows) = read_csv(&out.join("exp.tick.v1.csv"));
    assert_eq!(header, columns(&["i"]));
    assert_eq!(rows.len(), 5);
    let (header, rows) = read_csv(&out.join("snapbus.loss.csv"));
    assert_eq!(
        header,
        columns(&["payload.producer_id", "producer_pid", "lost", "damaged"])
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["lost"], "42");
    assert_eq!(rows[0]["producer_pid"], "200");

    // A glob keeps only its schemas (and loss records, which may concern any schema).
    let out2 = tmp("mixed-csv-obs");
    let o = export(&rec, "csv", &out2, &["--schema", "exp.obs"]);
    assert_ok(&o);
    assert_eq!(dir_files(&out2), ["exp.obs.csv", "snapbus.loss.csv"]);
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

#[test]
fn mcap_json_reads_back_with_the_mcap_crate() {
    let (_, out, _) = export_mixed("mixed-m.mcap", "mcap-json", "mixed-json.mcap");
    let bytes = std::fs::read(&out).expect("read");
    let (summary, messages) = read_mcap(&bytes);
    // exp.obs, exp.tick v1, exp.tick v2, snapbus.loss.
    assert_eq!(summary.schemas.len(), 4);
    for s in summary.schemas.values() {
        assert_eq!(s.encoding, "jsonschema");
        let js: Json = serde_json::from_slice(&s.data).expect("a JSON Schema");
        assert_eq!(js["title"], s.name.as_str());
        assert_eq!(js["type"], "object");
    }
    // obs (alpha), tick v1 (beta), loss (beta), tick v2 (beta).
    assert_eq!(summary.channels.len(), 4);
    for c in summary.channels.values() {
        assert_eq!(c.message_encoding, "json");
        let schema = c.schema.as_ref().expect("channel schema");
        assert_eq!(schema.name, c.topic);
    }
    assert_eq!(messages.len(), 30 + 5 + 1 + 4);
    let stats = summary.stats.expect("statistics");
    assert_eq!(stats.message_count, 40);
    assert!(
        stats.metadata_count >= 3,
        "the recording's metadata is kept"
    );

    let obs_msgs: Vec<&mcap::Message<'_>> = messages
        .iter()
        .filter(|m| m.channel.topic == "exp.obs")
        .collect();
    assert_eq!(obs_msgs.len(), 30);
    for (i, m) in obs_msgs.iter().enumerate() {
        assert_eq!(m.log_time, 1000 + i as u64);
        assert_eq!(m.publish_time, m.log_time);
        let v: Json = serde_json::from_slice(&m.data).expect("JSON message");
        assert_eq!(v, payload_json(&obs(i as u64)));
    }
    assert_eq!(obs_msgs[0].channel.metadata["producer"], "alpha");
    let loss = messages
        .iter()
        .find(|m| m.channel.topic == "snapbus.loss")
        .expect("loss message");
    assert_eq!(
        serde_json::from_slice::<Json>(&loss.data).expect("JSON"),
        json!({"producer_id": 8, "producer_pid": 200, "lost": 42, "damaged": 0})
    );
    let v2 = messages
        .iter()
        .filter(|m| m.channel.topic == "exp.tick")
        .filter(|m| {
            m.channel.schema.as_ref().is_some_and(|s| {
                serde_json::from_slice::<Json>(&s.data).expect("schema")["properties"]
                    .get("unit")
                    .is_some()
            })
        })
        .count();
    assert_eq!(v2, 4, "version 2 has its own schema");
}

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
fn existing_output_is_refused_without_force() {
    let rec = mixed("mixed-f.mcap");
    let out = tmp("exists.jsonl");
    std::fs::write(&out, "keep me").expect("write");
    let o = export(&rec, "jsonl", &out, &[]);
    assert!(!o.status.success());
    o.assert_stderr_has("exists");
    o.assert_stderr_has("--force");
    assert_eq!(
        std::fs::read_to_string(&out).expect("read"),
        "keep me",
        "untouched"
    );
    let o = export(&rec, "jsonl", &out, &["--force"]);
    assert_ok(&o);
    assert_eq!(read_lines(&out).len(), 40);

    let dir = tmp("exists-dir");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let o = export(&rec, "csv", &dir, &[]);
    assert!(!o.status.success());
    o.assert_stderr_has("--force");
    assert!(dir_files(&dir).is_empty());
    let o = export(&rec, "csv", &dir, &["--force"]);
    assert_ok(&o);
    assert_eq!(dir_files(&dir).len(), 4);

    // Never over the input, even with --force.
    let o = export(&rec, "mcap-json", &rec, &["--force"]);
    assert!(!o.status.success());
    o.assert_stderr_has("being exported");
    assert!(RecordingReader::new(std::fs::read(&rec).expect("read").as_slice()).all(|r| r.is_ok()));
}

#[cfg(not(feature = "parquet"))]
#[test]
fn parquet_without_the_feature_is_a_clear_error() {
    let rec = mixed("mixed-p0.mcap");
    let out = tmp("no-parquet");
    let o = export(&rec, "parquet", &out, &[]);
    assert!(!o.status.success());
    o.assert_stderr_has("--no-default-features");
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert!(!out.exists(), "nothing is created");
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_has_typed_columns_and_every_row() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let (_, out, _) = export_mixed("mixed-p.mcap", "parquet", "mixed-parquet");
    assert_eq!(
        dir_files(&out),
        [
            "exp.obs.parquet",
            "exp.tick.v1.parquet",
            "exp.tick.v2.parquet",
            "snapbus.loss.parquet"
        ]
    );
    let file = std::fs::File::open(out.join("exp.obs.parquet")).expect("open");
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).expect("a parquet file");
    let types: Vec<String> = builder
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect();
    assert_eq!(
        types,
        [
            "t_nanos:Timestamp(ns, \"UTC\")",
            "producer_id:UInt64",
            "producer:Utf8",
            "pid:UInt32",
            "level:Utf8",
            "seq:UInt32",
            "version:UInt32",
            "step:UInt64",
            "pos.x:Float64",
            "pos.y:Float64",
            "reward:Float64",
            "hist:List(Float32)",
            "image:List(UInt8)",
            "image.shape:List(Int64)",
            "label:Utf8",
            "note:Utf8",
            "phase:Utf8",
            "phase.Run.speed:Float32",
            "phase.Done:UInt8",
        ]
    );
    assert_eq!(parquet_rows(&out.join("exp.obs.parquet")), 30);
    assert_eq!(parquet_rows(&out.join("snapbus.loss.parquet")), 1);
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_holds_recordings_larger_than_a_batch() {
    let rec = tmp("many.mcap");
    let mut d = Direct::create(&rec, 1 << 20);
    d.ticks(0, 20_000, 0, 1);
    d.finish();
    let out = tmp("many-parquet");
    assert_ok(&export(&rec, "parquet", &out, &[]));
    assert_eq!(parquet_rows(&out.join("exp.tick.parquet")), 20_000);
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

#[test]
fn python_mcap_reads_the_recording_and_the_mcap_json_export() {
    // The recording is LZ4-compressed: the `mcap` package decodes it with `lz4`.
    if !python_with("mcap, lz4") {
        return;
    }
    let (rec, out, _) = export_mixed("mixed-py.mcap", "mcap-json", "mixed-py-json.mcap");
    let topics = json!({"exp.obs": 30, "exp.tick": 9, "snapbus.loss": 1});
    for mode in [None, Some("--stream")] {
        // The recording, then its export: the same messages, encoded their own way.
        let check = |file: &Path, schema_encoding: &str, message_encoding: &str| {
            let mut args = vec![path_str(file)];
            args.extend(mode);
            let r = python_json("check_mcap.py", &args);
            assert_eq!(r["messages"], 40, "{r}");
            assert_eq!(r["topics"], topics, "{r}");
            assert_eq!(r["schemas"], 4, "{r}");
            assert_eq!(r["channels"], 4, "{r}");
            assert_eq!(r["schema_encodings"], json!([schema_encoding]), "{r}");
            assert_eq!(r["message_encodings"], json!([message_encoding]), "{r}");
            r
        };
        check(&rec, "snapbus.descriptor", "snapbus");
        let j = check(&out, "jsonschema", "json");
        assert_eq!(j["json_messages"], 40, "every message parses as JSON: {j}");
        assert_eq!(j["json_schemas"], 4, "every schema parses as JSON: {j}");
        assert_eq!(
            j["first"]["exp.obs"],
            payload_json(&obs(0)),
            "the first observation: {j}"
        );
    }
}

#[cfg(feature = "parquet")]
#[test]
fn pyarrow_and_pandas_read_the_parquet_export() {
    if !python_with("pyarrow, pandas") {
        return;
    }
    let (_, out, _) = export_mixed("mixed-pq-py.mcap", "parquet", "mixed-pq-py");
    let r = python_json("check_parquet.py", &[path_str(&out)]);
    let obs_table = &r["exp.obs.parquet"];
    assert_eq!(obs_table["rows"], 30, "{r}");
    assert_eq!(obs_table["columns"].as_array().expect("columns").len(), 19);
    assert_eq!(obs_table["columns"][8], "pos.x");
    assert_eq!(obs_table["arrow_types"]["t_nanos"], "timestamp[ns, tz=UTC]");
    assert_eq!(obs_table["arrow_types"]["image"], "list<item: uint8>");
    assert_eq!(obs_table["pandas_dtypes"]["t_nanos"], "datetime64[ns, UTC]");
    assert_eq!(obs_table["pandas_dtypes"]["step"], "uint64");
    assert_eq!(obs_table["pandas_dtypes"]["reward"], "float64");
    assert_eq!(obs_table["first"]["hist"], json!([0.0, 0.25, -1.5]));
    assert_eq!(obs_table["first"]["image.shape"], json!([2, 3]));
    assert_eq!(obs_table["first"]["phase"], "Warmup");
    assert_eq!(obs_table["first"]["label"], Json::Null);
    assert_eq!(r["exp.tick.v1.parquet"]["rows"], 5);
    assert_eq!(r["exp.tick.v2.parquet"]["rows"], 4);
    assert_eq!(
        r["exp.tick.v2.parquet"]["columns"],
        json!(columns(&["i", "unit"]))
    );
    assert_eq!(r["snapbus.loss.parquet"]["rows"], 1);
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

/// The permission bits of `path`.
pub(crate) fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

/// Issue 15, item 12: every file and directory `export` creates is private (0600 / 0700), in
/// every format, whatever the umask lets through.
#[test]
fn every_export_file_and_directory_is_private() {
    let rec = mixed("modes.mcap");
    let mut formats = vec![("jsonl", false), ("mcap-json", false), ("csv", true)];
    if cfg!(feature = "parquet") {
        formats.push(("parquet", true));
    }
    for (format, is_dir) in formats {
        let out = tmp(&format!("modes-{format}"));
        let o = export(&rec, format, &out, &[]);
        assert_ok(&o);
        if is_dir {
            assert_eq!(mode(&out), 0o700, "{format}: the directory");
            let files = dir_files(&out);
            assert!(files.len() >= 3, "{format}: {files:?}");
            for f in files {
                assert_eq!(mode(&out.join(&f)), 0o600, "{format}: {f}");
            }
        } else {
            assert_eq!(mode(&out), 0o600, "{format}");
        }
    }
}

/// Issue 15, item 16: a `--schema` that matches nothing in the recording is an error naming
/// the schemas that are there, in every format, and leaves no empty output behind; one glob
/// among several that matches nothing is a warning.
#[test]
fn a_schema_glob_that_matches_nothing_is_an_error_naming_the_schemas() {
    let rec = mixed("nomatch.mcap");
    let mut formats = vec!["jsonl", "csv", "mcap-json"];
    if cfg!(feature = "parquet") {
        formats.push("parquet");
    }
    for format in formats {
        let out = tmp(&format!("nomatch-{format}"));
        let o = export(&rec, format, &out, &["--schema", "nomatch.*"]);
        assert!(!o.status.success(), "{format}: {}", o.stderr);
        assert!(
            o.stderr.contains("'nomatch.*'")
                && o.stderr.contains("exp.obs")
                && o.stderr.contains("exp.tick"),
            "{format}: {}",
            o.stderr
        );
        assert!(!out.exists(), "{format}: no output is left behind");
    }
    let out = tmp("partmatch.jsonl");
    let o = export(
        &rec,
        "jsonl",
        &out,
        &["--schema", "exp.tick", "--schema", "nomatch.*"],
    );
    assert_ok(&o);
    assert!(
        o.stderr.contains("warning") && o.stderr.contains("'nomatch.*'"),
        "{}",
        o.stderr
    );
    // The 9 ticks (v1 and v2) and the loss record.
    assert_eq!(read_lines(&out).len(), 10);
}

/// `replay --print FILE`: the printed records (and the command's success).
fn replay_print(file: &Path) -> (Vec<Json>, Output) {
    let out = run(&["replay", "--print", path_str(file)]);
    (out.json_lines(), out)
}

/// Checks that `lines` are in record-time order and each producer's records in its own order.
fn assert_time_ordered(lines: &[Json]) {
    let times: Vec<u64> = lines
        .iter()
        .map(|l| l["t_nanos"].as_u64().expect("t_nanos"))
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "not in time order: {times:?}"
    );
    let mut last_seq: BTreeMap<String, u64> = BTreeMap::new();
    for l in lines {
        let p = l["producer"].to_string();
        let seq = l["seq"].as_u64().expect("seq");
        if let Some(prev) = last_seq.insert(p, seq) {
            assert!(prev < seq, "a producer's records out of order: {l}");
        }
    }
}

/// Issue 15, item 17: `replay --print` merges the producers of a file by record time (a file
/// holds them interleaved as the recorder read them), keeping every record.
#[test]
fn replay_print_merges_producers_by_record_time() {
    // alpha at 1000.., beta at 2000.. but written interleaved; then beta's loss and v2 ticks.
    let rec = mixed("merge-mixed.mcap");
    let (lines, out) = replay_print(&rec);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(lines.len(), 39, "{}", out.stderr);
    assert_time_ordered(&lines);
    out.assert_stderr_has("lost 42 records");

    // Three producers written one after the other, with overlapping times.
    let rec = tmp("merge-blocks.mcap");
    let mut d = Direct::create(&rec, 4 << 10);
    d.ticks(0, 200, 10_000, 3);
    d.ticks(1, 200, 10_001, 3);
    d.ticks(0, 100, 20_000, 1);
    d.finish();
    let (lines, out) = replay_print(&rec);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(lines.len(), 500);
    assert_time_ordered(&lines);
    let producers: Vec<&str> = lines[..4]
        .iter()
        .map(|l| l["producer"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(producers, ["alpha", "beta", "alpha", "beta"]);
}

/// Issue 15, item 17, as reported: a snapshot of two producers that ran at the same time
/// prints in time order.
#[test]
fn replay_print_of_a_snapshot_of_two_producers_is_in_time_order() {
    let bus = crate::bus::TestBus::up();
    let demos: Vec<_> = (0..2)
        .map(|_| {
            bus.spawn(
                "demo",
                &[
                    "demo",
                    "--no-echo",
                    "--episodes",
                    "20",
                    "--steps",
                    "10",
                    "--rate",
                    "2000",
                ],
            )
        })
        .collect();
    for mut d in demos {
        let (status, _) = d.wait();
        assert!(status.success(), "{}", d.log());
    }
    let snap = tmp("merge-snap.mcap");
    let out = bus.run(&["snapshot", "-o", path_str(&snap)]);
    assert!(out.status.success(), "{}", out.stderr);
    let (lines, out) = replay_print(&snap);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(lines.len(), 2 * 20 * 11, "{}", out.stderr);
    assert_time_ordered(&lines);
}

/// `replay --print` of an interleaved file that was cut: the records before the cut, merged
/// by time, then the error naming the offset.
#[test]
fn replay_print_of_a_cut_interleaved_file_merges_what_precedes_the_cut() {
    let rec = two_producers_cut("merge-cut.mcap", 3);
    let (lines, out) = replay_print(&rec);
    assert_fails_at_one_offset(&out);
    assert!(lines.len() > 300 && lines.len() < 600, "{}", lines.len());
    assert_time_ordered(&lines);
}

/// A recording `name` of 300 ticks of alpha from 10,000 ns and 300 of beta 1 ns after each,
/// `every` ns apart, written one producer after the other, then cut at three quarters.
fn two_producers_cut(name: &str, every: u64) -> PathBuf {
    let rec = tmp(name);
    let mut d = Direct::create(&rec, 2 << 10);
    d.ticks(0, 300, 10_000, every);
    d.ticks(1, 300, 10_001, every);
    d.finish();
    let bytes = std::fs::read(&rec).expect("read");
    std::fs::write(&rec, &bytes[..bytes.len() * 3 / 4]).expect("cut");
    rec
}

/// Asserts that `out` is a failure that names the one byte offset where the file is damaged.
#[track_caller]
fn assert_fails_at_one_offset(out: &Output) {
    assert!(!out.status.success(), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("at byte offset").count(),
        1,
        "{}",
        out.stderr
    );
}

/// `replay --print` of a file cut inside its second producer's records (written after the
/// first's): every record before the cut is printed, then the error.
#[test]
fn replay_print_of_a_file_cut_in_its_second_producer_prints_everything_before_the_cut() {
    let rec = two_producers_cut("merge-cut2.mcap", 2);
    // What the reader gets before the cut, in file order.
    let before: usize = RecordingReader::new(std::fs::File::open(&rec).expect("open"))
        .map_while(Result::ok)
        .filter(|i| matches!(i, Item::Message(_)))
        .count();
    assert!(before > 300, "the cut is in the second producer's records");
    let (lines, out) = replay_print(&rec);
    assert_fails_at_one_offset(&out);
    assert_eq!(lines.len(), before, "{}", out.stderr);
    assert_time_ordered(&lines);
}

/// A pose with fixed arrays: short ones are split into a column per element in CSV.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "exp.pose", version = 1)]
struct Pose3 {
    position: [f32; 3],
    counts: [u16; 2],
    long: [f64; 17],
}

fn pose(i: u32) -> Pose3 {
    let f = i as f32;
    Pose3 {
        position: [f * 0.5, -f, f + 0.25],
        counts: [i as u16, 1000 + i as u16],
        long: std::array::from_fn(|k| f64::from(i) + k as f64),
    }
}

/// Issue 20, item 2: `position.0…2` in CSV (values exact, integers as integers); arrays longer
/// than 16 stay one JSON-array cell; Parquet keeps each array as one list column.
#[test]
fn csv_splits_short_fixed_arrays_into_a_column_per_element() {
    let rec = tmp("pose.mcap");
    let mut d = Direct::create(&rec, 1 << 20);
    for i in 0..4 {
        d.write(0, 1000 + u64::from(i), &pose(i));
    }
    d.finish();
    let out = tmp("pose-csv");
    assert_ok(&export(&rec, "csv", &out, &[]));
    let (header, rows) = read_csv(&out.join("exp.pose.csv"));
    assert_eq!(
        header[7..],
        [
            "position.0",
            "position.1",
            "position.2",
            "counts.0",
            "counts.1",
            "long"
        ]
    );
    assert_eq!(rows.len(), 4);
    for (i, row) in rows.iter().enumerate() {
        let p = pose(i as u32);
        for k in 0..3 {
            let got: f32 = row[&format!("position.{k}")].parse().expect("a float");
            assert_eq!(got, p.position[k], "row {i} position.{k}");
        }
        assert_eq!(row["counts.0"], i.to_string());
        assert_eq!(row["counts.1"], (1000 + i).to_string());
        let long: Vec<f64> = serde_json::from_str(&row["long"]).expect("a JSON array");
        assert_eq!(long, p.long.to_vec());
    }
    #[cfg(feature = "parquet")]
    {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let out = tmp("pose-parquet");
        assert_ok(&export(&rec, "parquet", &out, &[]));
        let file = std::fs::File::open(out.join("exp.pose.parquet")).expect("open");
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).expect("a parquet file");
        let types: Vec<String> = builder.schema().fields()[7..]
            .iter()
            .map(|f| format!("{}:{}", f.name(), f.data_type()))
            .collect();
        assert_eq!(
            types,
            [
                "position:List(Float32)",
                "counts:List(UInt16)",
                "long:List(Float64)"
            ]
        );
    }
}
