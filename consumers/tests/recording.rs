//! Recordings: the recorder on a live bus, then the reader on the file — intact, cut at every
//! kind of place, bit-flipped, of a newer version, or not MCAP at all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use snapbus_bus::Level;
use snapbus_bus::lane::StartAt;
use snapbus_bus::publisher::Publisher;
use snapbus_bus::schemas::{Snapshot, Wire};
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::recorder::{Recorder, RecorderOptions, rotated_path};
use snapbus_consumers::recording::{
    Damage, Item, ReadError, ReadErrorKind, RecordingReader, RecordingWriter, WriterOptions,
};
use snapbus_consumers::replay::{Pace, ReplaySummary, replay};
use snapbus_consumers::{RunOptions, run};

use crate::common::lag;
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

#[test]
fn a_recording_holds_every_record_with_its_schema_producer_and_metadata() {
    let bus = Bus::start("rec1");
    let p = bus.publisher();
    let path = tmp("one.mcap");
    let files = record(&bus, &p, &path, 1000, None);
    assert_eq!(files, std::slice::from_ref(&path));
    let bytes = std::fs::read(&path).expect("read");
    let (items, err) = read_all(&bytes);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(steps(&items), (0..1000).map(step).collect::<Vec<_>>());
    let Some(Item::Metadata { name, fields }) = items.first() else {
        panic!(
            "the first item is the recording metadata: {:?}",
            items.first()
        );
    };
    assert_eq!(name, "snapbus.recording");
    assert_eq!(fields["format_version"], "1");
    assert_eq!(fields["source"], "recorder");
    let producer = items.iter().find_map(|i| match i {
        Item::Metadata { name, fields } if name == "snapbus.producer" => Some(fields),
        _ => None,
    });
    assert_eq!(producer.expect("producer metadata")["name"], "rt-test");
    let Some(Item::Message(m)) = items.iter().find(|i| matches!(i, Item::Message(_))) else {
        panic!("no message");
    };
    assert_eq!(m.channel.schema.id(), "rec.step");
    assert_eq!(*m.channel.schema, *Step::descriptor());
    assert_eq!(m.channel.emitter.as_deref(), Some("trainer"));
    assert_eq!(m.channel.level, Level::INFO);
    let mut reader = RecordingReader::new(&bytes[..]);
    reader.by_ref().for_each(drop);
    assert!(
        reader.complete(),
        "an intact file is read through its footer"
    );
}

#[test]
fn rotation_splits_the_stream_into_complete_files_in_order() {
    let bus = Bus::start("rec2");
    let p = bus.publisher();
    let path = tmp("rot.mcap");
    let files = record(&bus, &p, &path, 3000, Some(20_000));
    assert!(files.len() >= 3, "{files:?}");
    assert_eq!(files[1], rotated_path(&path, 1));
    let mut all = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let (items, err) = read_all(&std::fs::read(f).expect("read"));
        assert!(err.is_none(), "{f:?}: {err:?}");
        // Each part says where the producer's history in it starts.
        let h = items
            .iter()
            .find_map(|i| match i {
                Item::Metadata { name, fields } if name == "snapbus.history" => Some(fields),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{f:?}: no history record"));
        let first = steps(&items)[0].i;
        assert_eq!(h["first_seq"], first.to_string(), "{f:?}");
        if k == 0 {
            assert_eq!((h["start"].as_str(), first), ("oldest", 0), "{f:?}");
            assert_eq!(h["overwritten"], "0", "{f:?}");
        } else {
            assert_eq!(h["start"], "continued", "{f:?}");
            assert_eq!(first, all.len() as u64, "{f:?} continues the previous part");
        }
        all.extend(steps(&items));
    }
    assert_eq!(all, (0..3000).map(step).collect::<Vec<_>>());
}

#[test]
fn a_file_cut_anywhere_reads_up_to_the_cut_and_says_where() {
    let bus = Bus::start("rec3");
    // Small chunks: many cut points fall between complete chunks.
    let bytes = small_chunks(&bus, "cut.mcap");
    let mut last_count = 0;
    for cut in (0..bytes.len()).step_by(37).chain([bytes.len() - 1]) {
        let (items, err) = read_all(&bytes[..cut]);
        let err = err.unwrap_or_else(|| panic!("a file cut at {cut} reads without error"));
        assert!(
            err.offset <= cut as u64,
            "offset {} beyond the cut {cut}",
            err.offset
        );
        let got = steps(&items);
        assert_eq!(
            got,
            (0..got.len() as u64).map(step).collect::<Vec<_>>(),
            "a prefix"
        );
        assert!(got.len() >= last_count, "a longer prefix never reads less");
        last_count = got.len();
        if cut >= 8 {
            match err.kind {
                ReadErrorKind::Truncated { have, need } => {
                    assert!(have < need, "cut at {cut}: {err}");
                    assert!(err.to_string().contains("the file is cut"), "{err}");
                }
                ReadErrorKind::Unfinished => {
                    assert_eq!(err.offset, cut as u64, "a cut between records: {err}")
                }
                _ => panic!("cut at {cut}: {err}"),
            }
        }
    }
    assert!(
        last_count >= 280,
        "most records survive a cut near the end: {last_count}"
    );
}

#[test]
fn flipped_bits_wrong_magic_and_newer_versions_are_clear_errors() {
    let bus = Bus::start("rec4");
    let p = bus.publisher();
    let path = tmp("flip.mcap");
    record(&bus, &p, &path, 200, None);
    let good = std::fs::read(&path).expect("read");
    // Every byte of the data section, one bit each: never a panic, never a wrong record.
    let want: Vec<Step> = (0..200).map(step).collect();
    for at in (8..good.len()).step_by(3) {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        let (items, err) = read_all(&bad);
        let got = steps(&items);
        if err.is_none() && damage(&items).is_empty() {
            // A flip in a field nobody checks (an index in the summary): the records are intact.
            assert_eq!(
                got, want,
                "flip at {at}: no error, so the records must be intact"
            );
        } else {
            // A damaged chunk is skipped: what is delivered is intact and in order.
            assert!(
                got.iter().all(|s| *s == step(s.i)) && got.windows(2).all(|w| w[0].i < w[1].i),
                "flip at {at}: what was delivered is intact and in order"
            );
        }
        // Resyncing on the next chunk: never a panic, never a wrong or repeated record.
        let items: Vec<Item> = RecordingReader::new(std::io::Cursor::new(&bad[..]))
            .with_resync()
            .map_while(Result::ok)
            .collect();
        let got = steps(&items);
        assert!(
            got.iter().all(|s| *s == step(s.i)) && got.windows(2).all(|w| w[0].i < w[1].i),
            "flip at {at} with resync: what was delivered is intact and in order"
        );
    }
    let mut bad = good.clone();
    bad[1] = b'X';
    let (_, err) = read_all(&bad);
    let err = err.expect("bad magic");
    assert!(matches!(err.kind, ReadErrorKind::NotMcap(_)), "{err}");
    assert_eq!(err.offset, 0);
    let mut bad = good.clone();
    bad[5] = b'1';
    let err = read_all(&bad).1.expect("future MCAP");
    assert!(err.to_string().contains("MCAP major version '1'"), "{err}");
    // A newer snapbus layout: format_version 2.
    let text = b"format_version";
    let at = good
        .windows(text.len())
        .position(|w| w == text)
        .expect("metadata");
    let mut bad = good.clone();
    // "format_version" then u32 length 1 then "1".
    let v = at + text.len() + 4;
    assert_eq!(bad[v], b'1');
    bad[v] = b'2';
    let err = read_all(&bad).1.expect("future format");
    assert!(
        matches!(err.kind, ReadErrorKind::FutureVersion { found: 2 }),
        "{err}"
    );
    assert!(err.to_string().contains("version 2"), "{err}");
    let err = read_all(b"").1.expect("empty");
    assert!(matches!(err.kind, ReadErrorKind::Empty), "{err}");
}

#[test]
fn replay_republishes_byte_identical_payloads_in_order() {
    let bus = Bus::start("rec5");
    let p = bus.publisher();
    let path = tmp("replay.mcap");
    record(&bus, &p, &path, 500, None);
    drop(p);
    let replayer = bus.publisher();
    let file = std::fs::File::open(&path).expect("open");
    let mut summary = ReplaySummary::default();
    replay(
        RecordingReader::new(file),
        &replayer,
        Pace::Max,
        &[Glob::new("rec.*").expect("glob")],
        &AtomicBool::new(false),
        &mut summary,
    )
    .expect("replay");
    assert_eq!(summary.emitted, 500);
    replayer.close();
    let out = tmp("replayed.mcap");
    record_to_end(&bus, &out, None);
    let (items, err) = read_all(&std::fs::read(&out).expect("read"));
    assert!(err.is_none());
    // The bus still holds the original producer's lane (closed, retained) and the replay's:
    // each carries the 500 payloads, byte for byte and in order.
    let mut by_producer: std::collections::BTreeMap<u64, Vec<Vec<u8>>> = Default::default();
    for i in &items {
        if let Item::Message(m) = i {
            by_producer
                .entry(m.channel.producer_id)
                .or_default()
                .push(m.data.clone());
        }
    }
    let want: Vec<Vec<u8>> = (0..500)
        .map(|i| step(i).encode_to_vec().expect("encode"))
        .collect();
    assert_eq!(by_producer.len(), 2, "original and replay");
    for (id, payloads) in by_producer {
        assert!(
            payloads == want,
            "producer {id}: {} payloads differ",
            payloads.len()
        );
    }
}

/// A recorder that stalls on its first record until told to go on (so the producer laps it).
struct Stalling {
    inner: Recorder,
    gate: Option<std::sync::mpsc::Receiver<()>>,
    started: Option<std::sync::mpsc::Sender<()>>,
}

impl snapbus_consumers::Consumer for Stalling {
    fn on_event(
        &mut self,
        r: &snapbus_consumers::Record<'_>,
    ) -> Result<snapbus_consumers::Flow, snapbus_consumers::HookError> {
        if let Some(tx) = self.started.take() {
            let _ = tx.send(());
        }
        if let Some(gate) = self.gate.take() {
            let _ = gate.recv();
        }
        self.inner.on_event(r)
    }
    fn on_lag(
        &mut self,
        lag: snapbus_consumers::Lag<'_>,
    ) -> Result<snapbus_consumers::Flow, snapbus_consumers::HookError> {
        self.inner.on_lag(lag)
    }
    fn flush(&mut self) -> Result<(), snapbus_consumers::HookError> {
        self.inner.flush()
    }
}

#[test]
fn records_lost_before_the_recorder_read_them_are_in_the_file_as_loss_records() {
    use snapbus_consumers::Consumer as _;
    let bus = Bus::start("rec6");
    let p = bus.publisher();
    let path = tmp("loss.mcap");
    let (go_tx, go_rx) = std::sync::mpsc::channel();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let mut rec = Stalling {
        inner: Recorder::create(RecorderOptions {
            path: path.clone(),
            rotate_bytes: None,
            writer: WriterOptions::new("recorder", "test"),
            start: StartAt::Latest,
        })
        .expect("create"),
        gate: Some(go_rx),
        started: Some(started_tx),
    };
    let dir = bus.dir().clone();
    let recorder = std::thread::spawn(move || {
        let mut opts = RunOptions::new("recorder");
        opts.subscribe.start = StartAt::Latest;
        opts.until_end = true;
        opts.handle_signals = false;
        let summary = run(&dir, &opts, &mut rec, None).expect("run");
        rec.flush().expect("flush");
        let (_, messages) = rec.inner.finish().expect("finish");
        (summary, messages)
    });
    // Emit until the recorder holds its first record, then lap it several times over (the
    // lane is 1 MiB; each record is about 80 bytes).
    let mut emitted = 0u64;
    loop {
        p.emit(Level::INFO, 0, &step(emitted)).expect("emit");
        emitted += 1;
        if started_rx.try_recv().is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    for _ in 0..60_000 {
        p.emit(Level::INFO, 0, &step(emitted)).expect("emit");
        emitted += 1;
    }
    go_tx.send(()).expect("go");
    p.close();
    let (summary, _) = recorder.join().expect("recorder thread");
    assert!(summary.lost > 0, "the recorder was lapped");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let recorded = steps(&items).len() as u64;
    let lost_in_file: u64 = items
        .iter()
        .filter_map(|i| match i {
            Item::Loss { record, .. } => Some(record.lost),
            _ => None,
        })
        .sum();
    assert_eq!(lost_in_file, summary.lost, "every loss is in the file");
    // From the first record the recorder received on, every record is recorded or counted.
    let first = steps(&items)[0].i;
    assert_eq!(
        recorded + lost_in_file,
        emitted - first,
        "recorded + lost = emitted since the first recorded record"
    );
}

/// Inputs the fuzzer found (`consumers/fuzz/README.md`): each once panicked inside the mcap
/// crate (a chunk record length near `u64::MAX`; an attachment shorter than its header), and a
/// footer followed by a bad end magic was reported complete.
#[test]
fn fuzzer_findings_are_errors_not_panics() {
    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }
    let huge_chunk = unhex(
        "894d434150300d0a01080000000000000000000000000000000c300000000000000011000000736e61706275\
         732e7265636f7264696e67170000000e000000666f726d61745f76657273696f6e010000003106310000000\
         00000000000000000000000000000000000000009000000000000000000000000000000090000000000000005\
         ffffffffffffffff",
    );
    let short_attachment = unhex(
        "894d434150300d0a0920000000000000000000000000000000000000000000000000000000000000000000000\
         000000000",
    );
    for input in [huge_chunk, short_attachment] {
        let (_, err) = read_all(&input);
        let err = err.expect("an error");
        assert!(err.offset <= input.len() as u64, "{err}");
    }
    // A complete recording with its end magic damaged: read, but not complete.
    let bus = Bus::start("rec7");
    let p = bus.publisher();
    let path = tmp("endmagic.mcap");
    record(&bus, &p, &path, 10, None);
    let mut bytes = std::fs::read(&path).expect("read");
    let n = bytes.len();
    bytes[n - 2] ^= 0xff;
    let mut reader = RecordingReader::new(&bytes[..]);
    let results: Vec<_> = reader.by_ref().collect();
    assert!(
        results.iter().any(|r| r.is_err()),
        "the bad end magic is reported"
    );
    assert!(
        !reader.complete(),
        "a file with a bad end magic is not complete"
    );
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rec.a", version = 1, crate = "snapbus_bus::schemas")]
struct RecA {
    i: u64,
    note: String,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rec.b", version = 1, crate = "snapbus_bus::schemas")]
struct RecB {
    x: f32,
    i: u32,
}

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "rec.d", version = 1, crate = "snapbus_bus::schemas")]
struct RecD {
    flag: bool,
}

/// Polls `cond` every 5 ms until it holds; panics after 30 s.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn named_publisher(dir: &snapbus_bus::runtime::BusDir, name: &str) -> Publisher {
    let p = crate::common::small_publisher(dir, name);
    wait_for("the publisher to join", || p.is_connected());
    p
}

/// Per lane: records seen and the producer id of the last one.
type Seen = Arc<Mutex<HashMap<u64, (u64, u64)>>>;

/// A recorder that also notes, per lane, what it was handed.
struct Watching {
    inner: Recorder,
    seen: Seen,
}

impl snapbus_consumers::Consumer for Watching {
    fn on_event(
        &mut self,
        r: &snapbus_consumers::Record<'_>,
    ) -> Result<snapbus_consumers::Flow, snapbus_consumers::HookError> {
        let flow = self.inner.on_event(r)?;
        let mut seen = self.seen.lock().expect("lock");
        let e = seen.entry(r.producer.lane_id).or_default();
        e.0 += 1;
        e.1 = r.producer_id;
        Ok(flow)
    }
    fn on_lag(
        &mut self,
        lag: snapbus_consumers::Lag<'_>,
    ) -> Result<snapbus_consumers::Flow, snapbus_consumers::HookError> {
        self.inner.on_lag(lag)
    }
    fn flush(&mut self) -> Result<(), snapbus_consumers::HookError> {
        self.inner.flush()
    }
}

/// Sets the flag when dropped (a failed assertion stops the recorder thread too).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Issue #15 item 2, end to end: a recorder re-adopted by a restarted broker (an in-process one:
/// no state file) goes on filing every record under its own producer and schema, for the
/// producers that rejoin and for new ones (which the new broker numbers from its own counter).
/// The deterministic case of an id handed to another lane is
/// `a_broker_id_reused_by_another_lane_does_not_misfile_records`.
#[test]
fn a_recorder_re_adopted_by_a_restarted_broker_files_every_record_under_its_own_producer() {
    use snapbus_bus::broker::InProcess;
    let root =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("readopt-{}", std::process::id()));
    let dir = snapbus_bus::runtime::BusDir::locate_in(
        &root,
        &snapbus_bus::runtime::BusName::new("rec8").expect("name"),
    );
    let broker = InProcess::start(dir.clone(), std::time::Duration::from_secs(60)).expect("broker");
    let d1 = named_publisher(&dir, "D1");
    let d2 = named_publisher(&dir, "D2");
    for p in [&d1, &d2] {
        for _ in 0..10 {
            p.emit(Level::INFO, 0, &RecD { flag: true }).expect("emit");
        }
    }
    let path = tmp("readopt.mcap");
    let seen: Seen = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let _guard = StopOnDrop(Arc::clone(&stop));
    let mut rec = Watching {
        inner: Recorder::create(RecorderOptions {
            path: path.clone(),
            rotate_bytes: None,
            writer: WriterOptions::new("recorder", "test"),
            start: StartAt::Oldest,
        })
        .expect("create"),
        seen: Arc::clone(&seen),
    };
    let recorder = {
        let (dir, stop) = (dir.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut opts = rec.inner.run_options("recorder");
            opts.until_end = true;
            opts.handle_signals = false;
            let summary = run(&dir, &opts, &mut rec, Some(&stop)).expect("run");
            rec.inner.finish().expect("finish");
            summary
        })
    };
    let a = named_publisher(&dir, "A");
    let b = named_publisher(&dir, "B");
    let (lane_a, lane_b) = (a.info().lane_id, b.info().lane_id);
    let (lane_d1, lane_d2) = (d1.info().lane_id, d2.info().lane_id);
    let mut sent = (0u64, 0u32);
    let emit_ab = |sent: &mut (u64, u32)| {
        a.emit(
            Level::INFO,
            0,
            &RecA {
                i: sent.0,
                note: "a".repeat((sent.0 % 5) as usize),
            },
        )
        .expect("emit a");
        b.emit(
            Level::INFO,
            0,
            &RecB {
                x: sent.1 as f32,
                i: sent.1,
            },
        )
        .expect("emit b");
        sent.0 += 1;
        sent.1 += 1;
    };
    for _ in 0..100 {
        emit_ab(&mut sent);
    }
    let count = |lane: u64| seen.lock().expect("lock").get(&lane).map_or(0, |e| e.0);
    wait_for("the first records to be recorded", || {
        count(lane_d1) == 10 && count(lane_d2) == 10 && count(lane_a) == 100 && count(lane_b) == 100
    });
    drop((d1, d2));
    broker.stop().expect("broker stops");
    wait_for("the producers to lose the broker", || {
        !a.is_connected() && !b.is_connected()
    });
    let broker = InProcess::start(dir.clone(), std::time::Duration::from_secs(60)).expect("broker");
    wait_for("the producers to rejoin the new broker", || {
        a.is_connected() && b.is_connected()
    });
    let n1 = named_publisher(&dir, "N1");
    let n2 = named_publisher(&dir, "N2");
    let (lane_n1, lane_n2) = (n1.info().lane_id, n2.info().lane_id);
    for i in 0..10u32 {
        n1.emit(Level::INFO, 0, &RecB { x: 0.5, i })
            .expect("emit n1");
        n2.emit(
            Level::INFO,
            0,
            &RecA {
                i: u64::from(i),
                note: "n".into(),
            },
        )
        .expect("emit n2");
    }
    wait_for("the recorder to read the new producers", || {
        count(lane_n1) == 10 && count(lane_n2) == 10
    });
    for _ in 0..100 {
        emit_ab(&mut sent);
    }
    a.close();
    b.close();
    n1.close();
    n2.close();
    let summary = recorder.join().expect("recorder thread");
    drop(broker);
    assert_eq!(summary.lost, 0, "nothing was overwritten");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let (mut got_a, mut got_b, mut got_d, mut got_n) = (Vec::new(), Vec::new(), 0, 0);
    for i in &items {
        let Item::Message(m) = i else { continue };
        let c = &m.channel;
        match (c.producer.as_str(), c.schema.id()) {
            ("A", "rec.a") => got_a.push(RecA::decode_exact(&m.data).expect("an A decodes").i),
            ("B", "rec.b") => got_b.push(RecB::decode_exact(&m.data).expect("a B decodes").i),
            ("D1" | "D2", "rec.d") => {
                RecD::decode_exact(&m.data).expect("a D decodes");
                got_d += 1;
            }
            ("N1", "rec.b") => {
                RecB::decode_exact(&m.data).expect("an N1 decodes");
                got_n += 1;
            }
            ("N2", "rec.a") => {
                RecA::decode_exact(&m.data).expect("an N2 decodes");
                got_n += 1;
            }
            (p, s) => panic!("a record of schema {s} filed under producer {p}"),
        }
        assert!(
            c.lane_id
                .is_some_and(|l| [lane_a, lane_b, lane_d1, lane_d2, lane_n1, lane_n2].contains(&l)),
            "the channel names the producer's lane: {:?}",
            c.lane_id
        );
    }
    assert_eq!(got_a, (0..sent.0).collect::<Vec<_>>(), "every A, in order");
    assert_eq!(got_b, (0..sent.1).collect::<Vec<_>>(), "every B, in order");
    assert_eq!(got_d, 20);
    assert_eq!(got_n, 20);
}

/// Issue #15 item 3: a recording of a ring that had wrapped says where the producer's history
/// starts and how many earlier records were overwritten (and does not count them twice as a
/// loss record).
#[test]
fn a_recording_of_a_wrapped_ring_says_where_the_history_starts_and_what_was_overwritten() {
    let bus = Bus::start("rec9");
    let p = bus.publisher();
    let n = 60_000u64;
    for i in 0..n {
        p.emit(Level::INFO, 0, &step(i)).expect("emit");
    }
    p.close();
    let path = tmp("wrapped.mcap");
    let (delivered, _, _) = record_to_end(&bus, &path, None);
    assert!(delivered < n, "the ring wrapped");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let history: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Metadata { name, fields } if name == "snapbus.history" => Some(fields),
            _ => None,
        })
        .collect();
    assert_eq!(history.len(), 1, "one history record per producer");
    let h = history[0];
    let first = steps(&items)[0].i;
    assert!(first > 0);
    assert_eq!(h["start"], "oldest");
    assert_eq!(h["first_seq"], first.to_string());
    assert_eq!(h["earlier"], first.to_string());
    assert_eq!(h["overwritten"], first.to_string(), "all were overwritten");
    assert_eq!(h["lane_id"], format!("{:016x}", p.info().lane_id));
    assert!(h.contains_key("first_nanos"));
    assert_eq!(steps(&items).len() as u64, n - first, "the rest is there");
    assert!(
        !items.iter().any(|i| matches!(i, Item::Loss { .. })),
        "the history is not counted again as a loss record"
    );
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

/// The middle of the first chunk (compressed or not) that ends past the middle of the file.
fn mid_chunk(file: &[u8]) -> usize {
    let mut at = 8;
    loop {
        let len = u64::from_le_bytes(file[at + 1..at + 9].try_into().expect("8 bytes")) as usize;
        let end = at + 9 + len;
        if file[at] == mcap::records::op::CHUNK && end > file.len() / 2 {
            return (at + end) / 2;
        }
        at = end;
    }
}

/// Issue #15 item 4: 4 bytes overwritten inside a chunk: that chunk is skipped and reported
/// (byte range, records, time range), everything after it is read, through the footer.
#[test]
fn a_damaged_chunk_is_skipped_and_described_and_the_rest_is_read() {
    let bus = Bus::start("rec10");
    let good = small_chunks(&bus, "damaged.mcap");
    let mut bad = good.clone();
    let at = mid_chunk(&good);
    bad[at..at + 4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    assert_ne!(bad, good);
    let mut reader = RecordingReader::new(&bad[..]);
    let mut items = Vec::new();
    for r in reader.by_ref() {
        items.push(r.unwrap_or_else(|e| panic!("a damaged chunk is not the end: {e}")));
    }
    assert!(reader.complete(), "read through the footer");
    let d = damage(&items);
    assert_eq!(d.len(), 1, "{d:?}");
    let d = d[0];
    assert!(
        d.offset <= at as u64 && at as u64 + 4 <= d.offset + d.len,
        "the range {}+{} holds the damage at {at}",
        d.offset,
        d.len
    );
    let got = steps(&items);
    let missing: Vec<u64> = (0..300)
        .filter(|i| !got.iter().any(|s| s.i == *i))
        .collect();
    assert!(!missing.is_empty());
    assert!(
        missing.windows(2).all(|w| w[1] == w[0] + 1),
        "one run of records is missing: {missing:?}"
    );
    assert!(
        *missing.last().expect("some") < 299,
        "later records are read"
    );
    assert!(
        got.iter().all(|s| *s == step(s.i)),
        "what is read is intact"
    );
    let held = d.held.as_ref().expect("what the chunk held");
    assert_eq!(held.records, Some(missing.len() as u64), "{d}");
    assert_eq!(held.first_nanos, 1_000 + missing[0]);
    assert_eq!(held.last_nanos, 1_000 + missing[missing.len() - 1]);
    let text = d.to_string();
    assert!(
        text.contains(&format!("{} records", missing.len())) && text.contains("rec.step"),
        "{text}"
    );
}

/// Issue #15 item 4, damage to a chunk's length field: a seekable reader finds the next
/// intact chunk, reports the bytes in between, and reads the rest through the footer; without
/// seeking, the read ends there with an error, as before.
#[test]
fn damage_to_a_chunks_length_is_skipped_by_resyncing_on_the_next_chunk() {
    let bus = Bus::start("rec11");
    let good = small_chunks(&bus, "length.mcap");
    let (items, err) = read_all(&good);
    assert!(err.is_none());
    let mut chunks: Vec<u64> = items
        .iter()
        .filter_map(|i| match i {
            Item::Message(m) => Some(m.offset),
            _ => None,
        })
        .collect();
    chunks.dedup();
    assert!(chunks.len() > 5, "{chunks:?}");
    for (what, patch) in [
        ("longer than the file", [0xff_u8, 0xff, 0xff, 0x00]),
        ("shorter", [0x20, 0x00, 0x00, 0x00]),
    ] {
        let victim = chunks[chunks.len() / 2] as usize;
        let mut bad = good.clone();
        // The length field follows the opcode.
        bad[victim + 1..victim + 5].copy_from_slice(&patch);
        let mut reader = RecordingReader::new(std::io::Cursor::new(&bad[..])).with_resync();
        let mut got = Vec::new();
        for r in reader.by_ref() {
            got.push(r.unwrap_or_else(|e| panic!("{what}: resynced, not the end: {e}")));
        }
        assert!(reader.complete(), "{what}: read through the footer");
        let d = damage(&got);
        assert!(!d.is_empty(), "{what}: reported");
        assert_eq!(d[0].offset, victim as u64, "{what}: {}", d[0]);
        let next = chunks[chunks.len() / 2 + 1];
        assert_eq!(d[0].offset + d[0].len, next, "{what}: up to the next chunk");
        let read = steps(&got);
        assert!(read.iter().all(|s| *s == step(s.i)), "{what}: intact");
        assert_eq!(
            read.last().map(|s| s.i),
            Some(299),
            "{what}: the rest is read"
        );
        let lost = 300 - read.len();
        assert!(
            lost > 0 && lost < 60,
            "{what}: only that chunk is lost ({lost})"
        );
        // Without seeking: the read ends at the damage, as before.
        let (_, err) = read_all(&bad);
        assert!(err.is_some(), "{what}");
    }
}

/// Random damage (1 to 3 overwrites of 1 to 8 bytes, sometimes a cut), read with and without
/// resyncing: never a panic, and every delivered record is one that was written, in order —
/// a reader that loses the framing must not parse garbage as records (before, a damaged
/// message index length could land the reader on bytes it took for a top-level message).
#[test]
fn random_damage_never_delivers_a_wrong_record() {
    let bus = Bus::start("rec12");
    let good = small_chunks(&bus, "stress.mcap");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..4000 {
        let mut bad = good.clone();
        for _ in 0..(1 + rnd() % 3) {
            let at = (rnd() as usize) % bad.len();
            let n = 1 + (rnd() as usize) % 8;
            for b in bad.iter_mut().skip(at).take(n) {
                *b = rnd() as u8;
            }
        }
        if rnd() % 4 == 0 {
            let cut = (rnd() as usize) % bad.len();
            bad.truncate(cut);
        }
        let (plain, _) = read_all(&bad);
        let resynced: Vec<Item> = RecordingReader::new(std::io::Cursor::new(&bad[..]))
            .with_resync()
            .map_while(Result::ok)
            .collect();
        for (how, items) in [("plain", plain), ("resync", resynced)] {
            let got: Vec<Step> = items
                .iter()
                .filter_map(|i| match i {
                    Item::Message(m) => Some(
                        Step::decode_exact(&m.data)
                            .unwrap_or_else(|e| panic!("round {round}, {how}: {e}")),
                    ),
                    _ => None,
                })
                .collect();
            assert!(
                got.iter().all(|s| *s == step(s.i)) && got.windows(2).all(|w| w[0].i < w[1].i),
                "round {round}, {how}: a wrong or repeated record"
            );
        }
    }
}

/// A reader that lost the framing can land on bytes that look like a record outside the
/// chunks. The writer never puts messages there, so such a "message" is damage, not a record:
/// here a message index after a chunk is replaced by a message of a declared channel with a
/// garbage payload, of the same length. It must not be delivered (before, it was).
#[test]
fn a_message_outside_the_chunks_is_damage_not_a_record() {
    let bus = Bus::start("rec13");
    let good = small_chunks(&bus, "toplevel.mcap");
    let (items, err) = read_all(&good);
    assert!(err.is_none());
    let first = items
        .iter()
        .find_map(|i| match i {
            Item::Message(m) => Some(m.clone()),
            _ => None,
        })
        .expect("a message");
    let chunk = first.offset as usize;
    assert_eq!(good[chunk], 0x06, "a chunk");
    let len = u64::from_le_bytes(good[chunk + 1..chunk + 9].try_into().expect("8 bytes"));
    let index = chunk + 9 + len as usize;
    assert_eq!(good[index], 0x07, "a message index follows the chunk");
    let body = u64::from_le_bytes(good[index + 1..index + 9].try_into().expect("8 bytes"));
    assert!(body >= 22 + 8, "room for a message: {body}");
    let mut bad = good.clone();
    bad[index] = 0x05;
    let m = &mut bad[index + 9..index + 9 + body as usize];
    m[..2].copy_from_slice(&first.channel.id.to_le_bytes());
    m[2..6].copy_from_slice(&7u32.to_le_bytes());
    m[6..14].copy_from_slice(&5u64.to_le_bytes());
    m[14..22].copy_from_slice(&5u64.to_le_bytes());
    for b in &mut m[22..] {
        *b = 0xee;
    }
    let (items, err) = read_all(&bad);
    assert!(err.is_some(), "the damage is reported");
    let got = steps(&items);
    assert!(got.iter().all(|s| *s == step(s.i)), "no garbage record");
    let items: Vec<Item> = RecordingReader::new(std::io::Cursor::new(&bad[..]))
        .with_resync()
        .map_while(Result::ok)
        .collect();
    let got = steps(&items);
    assert!(!damage(&items).is_empty(), "reported as damage");
    assert_eq!(got.len(), 300, "no record is lost: {}", got.len());
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

/// Issue #15 item 2: a broker's producer id is not an identity (a broker that restarts without
/// its state file numbers producers anew): two lanes seen under the same producer id, each with
/// its own schema under key 1, are filed under their own lanes. (Regression: channels were keyed
/// by the producer id, so the second lane's records were filed under the first one's channel
/// and schema, and decoded as garbage.)
#[test]
fn a_broker_id_reused_by_another_lane_does_not_misfile_records() {
    use snapbus_bus::ProducerInfo;
    let (old, new) = (producer("old", 0xa1), producer("new", 0xb2));
    let (schema_d, schema_b) = (
        Arc::new(RecD::descriptor().clone()),
        Arc::new(RecB::descriptor().clone()),
    );
    let path = tmp("reused-id.mcap");
    let mut rec = Recorder::create(RecorderOptions {
        path: path.clone(),
        rotate_bytes: None,
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Latest,
    })
    .expect("create");
    let feed = |rec: &mut Recorder, who: &ProducerInfo, schema: &Arc<_>, payload: Vec<u8>, seq| {
        feed_record(rec, 1, who, schema, &payload, seq);
    };
    for seq in 0..3 {
        feed(
            &mut rec,
            &old,
            &schema_d,
            RecD { flag: true }.encode_to_vec().expect("encode"),
            seq,
        );
    }
    for seq in 0..3u32 {
        let b = RecB { x: 1.5, i: seq };
        feed(
            &mut rec,
            &new,
            &schema_b,
            b.encode_to_vec().expect("encode"),
            u64::from(seq),
        );
    }
    rec.finish().expect("finish");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let mut filed = Vec::new();
    for i in &items {
        let Item::Message(m) = i else { continue };
        let c = &m.channel;
        match (c.producer.as_str(), c.schema.id()) {
            ("old", "rec.d") => assert!(RecD::decode_exact(&m.data).expect("a D").flag),
            ("new", "rec.b") => {
                filed.push(RecB::decode_exact(&m.data).expect("a B").i);
            }
            (p, s) => panic!("a record of schema {s} filed under producer {p}"),
        }
    }
    assert_eq!(filed, [0, 1, 2], "every record of the new lane, under it");
}

/// Review of #15: with `--rotate-mb`, a producer's history record and the record it describes
/// go into the same part (regression: a history record that filled the part rotated before its
/// record, leaving a part with a history and no record, and the next part without one).
#[test]
fn a_rotated_part_holds_each_history_with_its_first_record() {
    let who = producer("p", 0xc3);
    let schema = Arc::new(RecB::descriptor().clone());
    let path = tmp("rotate-history.mcap");
    let mut rec = Recorder::create(RecorderOptions {
        path: path.clone(),
        // Every part is full once anything is in it (its header, a history record): each
        // record rotates, so a history record always fills its part.
        rotate_bytes: Some(1),
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Latest,
    })
    .expect("create");
    for seq in 0..3u32 {
        let payload = RecB { x: 0.0, i: seq }.encode_to_vec().expect("encode");
        feed_record(&mut rec, 1, &who, &schema, &payload, u64::from(seq));
    }
    let (files, _) = rec.finish().expect("finish");
    assert!(files.len() >= 2, "rotated: {files:?}");
    let mut all = Vec::new();
    for (k, f) in files.iter().enumerate() {
        let (items, err) = read_all(&std::fs::read(f).expect("read"));
        assert!(err.is_none(), "{err:?}");
        let history: Vec<&std::collections::BTreeMap<String, String>> = items
            .iter()
            .filter_map(|i| match i {
                Item::Metadata { name, fields } if name == "snapbus.history" => Some(fields),
                _ => None,
            })
            .collect();
        let seqs: Vec<u64> = items
            .iter()
            .filter_map(|i| match i {
                Item::Message(m) => Some(u64::from(RecB::decode_exact(&m.data).expect("a B").i)),
                _ => None,
            })
            .collect();
        match seqs.first() {
            None => assert!(history.is_empty(), "part {k}: a history without records"),
            Some(first) => {
                assert_eq!(history.len(), 1, "part {k}: one history record");
                assert_eq!(
                    history[0].get("first_seq").map(String::as_str),
                    Some(first.to_string().as_str()),
                    "part {k}: {:?}",
                    history[0]
                );
            }
        }
        all.extend(seqs);
    }
    assert_eq!(all, [0, 1, 2], "every record, once");
}

/// Review of #15: a recorder started from `latest` (or a time) that loses records of a producer
/// before its first record writes them as a loss record; only a recorder reading from the
/// oldest record counts them as where the producer's history starts. (Regression: they went
/// into a history count the file never showed for such a start.)
#[test]
fn losses_before_the_first_record_of_a_latest_recorder_are_loss_records() {
    use snapbus_consumers::Consumer as _;
    let who = producer("p", 0xd4);
    let schema = Arc::new(RecB::descriptor().clone());
    let path = tmp("latest-early-loss.mcap");
    let mut rec = Recorder::create(RecorderOptions {
        path: path.clone(),
        rotate_bytes: None,
        writer: WriterOptions::new("recorder", "test"),
        start: StartAt::Latest,
    })
    .expect("create");
    rec.on_lag(lag(1, &who, 5)).expect("on_lag");
    let payload = RecB { x: 0.0, i: 7 }.encode_to_vec().expect("encode");
    feed_record(&mut rec, 1, &who, &schema, &payload, 12);
    assert_eq!((rec.losses(), rec.history_losses()), (5, 0));
    rec.finish().expect("finish");
    let (items, err) = read_all(&std::fs::read(&path).expect("read"));
    assert!(err.is_none(), "{err:?}");
    let lost: u64 = items
        .iter()
        .filter_map(|i| match i {
            Item::Loss { record, .. } => Some(record.lost),
            _ => None,
        })
        .sum();
    assert_eq!(lost, 5, "the loss is in the file");
}

/// Fuzzer finding (CI, `recording_reader`): when a search for the next intact chunk found
/// none, reading went on from where the search had left the source, and parts past the end of
/// the file were reported as damaged. Every skipped part the reader reports lies within the
/// file, with or without resynchronising.
#[test]
fn damage_is_reported_within_the_file() {
    let data: &[u8] = include_bytes!("data/damage-past-the-end.mcap");
    let len = data.len() as u64;
    for resync in [false, true] {
        let cursor = std::io::Cursor::new(data);
        let reader = if resync {
            RecordingReader::new(cursor).with_resync()
        } else {
            RecordingReader::new(cursor)
        };
        for item in reader {
            match item {
                Ok(Item::Damaged(d)) => {
                    assert!(
                        d.offset + d.len <= len,
                        "damage {}+{} beyond {len}",
                        d.offset,
                        d.len
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    assert!(e.offset <= len);
                    break;
                }
            }
        }
    }
}
