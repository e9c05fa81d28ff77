//! Recordings end to end with the real binary: `attach`/`detach`, `record`, `snapshot`,
//! `replay`, `inspect`, with producers and recorders killed on purpose and files damaged on
//! purpose.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, kill9, runtime_root};

/// A fresh path for a recording of this test process.
fn out_path(name: &str) -> PathBuf {
    let dir = runtime_root().join("files");
    std::fs::create_dir_all(&dir).expect("files dir");
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `replay --print FILE`: the records as JSON, and the exit status's success.
fn printed(bus: &TestBus, file: &std::path::Path) -> (Vec<Value>, bool, String) {
    let out = bus.run(&["replay", "--print", s(file)]);
    (out.json_lines(), out.status.success(), out.stderr)
}

fn run_demo(bus: &TestBus, episodes: u32, steps: u32, rate: u32) {
    bus.demo(episodes, steps, rate, &[]);
}

fn attach_recorder(bus: &TestBus, file: &std::path::Path, extra: &[&str]) -> String {
    let mut args = vec!["attach", "recorder", "-o", s(file)];
    args.extend_from_slice(extra);
    let id = bus.attach(&args);
    assert!(id.parse::<u64>().is_ok(), "attach prints the id: {id:?}");
    id
}

/// A bus with a recorder attached, writing `name` (with `extra` flags), that has recorded a demo
/// of `episodes` × `steps` at `rate` steps/s run to its end: the bus, the file, the recorder's
/// id.
fn recorded_demo(
    name: &str,
    extra: &[&str],
    episodes: u32,
    steps: u32,
    rate: u32,
) -> (TestBus, PathBuf, String) {
    let bus = TestBus::up();
    let file = out_path(name);
    let id = attach_recorder(&bus, &file, extra);
    run_demo(&bus, episodes, steps, rate);
    (bus, file, id)
}

/// Waits until `file` holds `n` records (the recorder hands a finished chunk to the file every
/// second), then `kill -9`s the recorder `id`.
fn kill9_once_recorded(bus: &TestBus, file: &std::path::Path, id: &str, n: usize) {
    wait_until("the records are in the file", WATCHDOG, || {
        printed(bus, file).0.len() == n
    });
    kill9(consumer(bus, id)["info"]["pid"].as_u64().expect("pid"));
}

fn consumer(bus: &TestBus, id: &str) -> Value {
    bus.consumer_by_id(id).unwrap_or(Value::Null)
}

#[test]
fn attach_record_replay_echo_round_trip_is_byte_identical_and_in_order() {
    let bus = TestBus::up();
    let file = out_path("round.mcap");
    let id = attach_recorder(&bus, &file, &[]);
    let c = consumer(&bus, &id);
    assert_eq!(c["supervised"], true, "{c}");
    assert_eq!(c["status"], "running", "{c}");
    assert_eq!(c["info"]["kind"], "recorder", "{c}");
    let live = bus.spawn_subscribed("echo-live", &["echo", "--raw", "--count", "18"]);
    // Emitted right after `attach` returned: every event must be in the file.
    run_demo(&bus, 3, 5, 0);
    let original = live.json_lines(18);
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);
    out.assert_stdout_has("exited 0");
    assert!(
        consumer(&bus, &id)["status"] == "exited 0",
        "ls shows how it ended"
    );
    let out = bus.run(&["inspect", s(&file)]);
    assert!(
        out.status.success(),
        "inspect: {}{}",
        out.stdout,
        out.stderr
    );
    out.assert_stdout_has("records    18");
    out.assert_stdout_has("demo.step");
    out.assert_stdout_has("read through the footer");

    let replayed = bus.spawn_subscribed("echo-replay", &["echo", "--raw", "--count", "18"]);
    let out = bus.run(&["replay", "--max", s(&file)]);
    assert!(out.status.success(), "replay: {}", out.stderr);
    out.assert_stderr_has("18 records republished");
    let again = replayed.json_lines(18);
    for (a, b) in original.iter().zip(&again) {
        assert_eq!(a["schema"], b["schema"]);
        assert_eq!(
            a["payload"], b["payload"],
            "byte-identical payloads, in order"
        );
        assert_eq!(a["target"], b["target"], "the emitter is restored");
        assert_eq!(a["level"], b["level"]);
        assert_eq!(b["producer"]["name"], "replay");
    }
}

#[test]
fn replay_keeps_the_original_timing_unless_told_otherwise() {
    // 20 steps at 20/s: about a second of recording.
    let (bus, file, id) = recorded_demo("timing.mcap", &[], 1, 20, 20);
    assert!(bus.run(&["detach", &id]).status.success());
    let (lines, ok, err) = printed(&bus, &file);
    assert!(ok, "{err}");
    let t = |l: &Value| l["t_nanos"].as_u64().expect("t_nanos");
    let span = t(&lines[lines.len() - 1]) - t(&lines[0]);
    assert!(
        span > 800_000_000,
        "the recording spans about a second: {span}"
    );
    let t0 = std::time::Instant::now();
    let out = bus.run(&["replay", "--speed", "2", s(&file)]);
    assert!(out.status.success(), "{}", out.stderr);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_nanos(span / 2),
        "--speed 2 takes at least half the recorded span: {took:?} for {span} ns"
    );
}

#[test]
fn a_snapshot_after_kill9_holds_the_dead_producers_last_events() {
    let bus = TestBus::up();
    let mut demo = bus.spawn_demo("200");
    let echo = bus.spawn_subscribed("echo", &["echo", "--until-end", "--from", "oldest"]);
    let mut seen = echo.json_lines(5);
    let pid = demo.pid();
    bus.kill9_producer(&mut demo);
    let mut echo = echo;
    let (status, rest) = echo.wait();
    assert!(status.success(), "{}", echo.log());
    seen.extend(
        rest.iter()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON")),
    );
    let file = out_path("dead.mcap");
    let out = bus.run(&["snapshot", "-o", s(&file)]);
    assert!(out.status.success(), "snapshot: {}", out.stderr);
    let (lines, ok, err) = printed(&bus, &file);
    assert!(ok, "{err}");
    let of_demo: Vec<&Value> = lines
        .iter()
        .filter(|l| l["producer"]["pid"] == pid)
        .collect();
    // Everything the dead producer wrote is still in its ring (it wrote far less than a ring).
    assert_eq!(
        of_demo.len(),
        seen.len(),
        "the snapshot holds what echo saw"
    );
    for (a, b) in seen.iter().zip(&of_demo) {
        assert_eq!(a["payload"], b["payload"]);
        assert_eq!(
            a["seq"].as_u64().map(|s| s as u32 as u64),
            b["seq"].as_u64()
        );
    }
    let out = bus.run(&["inspect", "--json", s(&file)]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(v["recording"]["source"], "snapshot");
    assert_eq!(v["complete"], true);
}

#[test]
fn snapshot_last_holds_only_the_last_seconds() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("100");
    let pid = demo.pid();
    // About 4 s of history (the demo emits 11 records per 10 steps).
    wait_until("4 s of history", WATCHDOG, || {
        bus.producer(pid)
            .is_some_and(|p| p["frames"].as_u64().unwrap_or(0) >= 440)
    });
    let before_nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let last = out_path("last.mcap");
    let out = bus.run(&["snapshot", "--last", "2s", "-o", s(&last)]);
    assert!(out.status.success(), "{}", out.stderr);
    let all = out_path("all.mcap");
    let out = bus.run(&["snapshot", "-o", s(&all)]);
    assert!(out.status.success(), "{}", out.stderr);
    drop(demo);
    let (recent, ok, err) = printed(&bus, &last);
    assert!(ok, "{err}");
    let (everything, ok, err) = printed(&bus, &all);
    assert!(ok, "{err}");
    assert!(!recent.is_empty());
    let oldest = recent
        .iter()
        .filter_map(|l| l["t_nanos"].as_u64())
        .min()
        .expect("times");
    assert!(
        oldest >= before_nanos - 2_000_000_000,
        "a record {} ms older than the 2 s window",
        (before_nanos - 2_000_000_000 - oldest) / 1_000_000
    );
    assert!(
        everything.len() > recent.len() + 100,
        "the full snapshot has the older history too ({} vs {})",
        everything.len(),
        recent.len()
    );
}

#[test]
fn a_killed_recorder_leaves_a_file_that_opens_and_says_where_it_was_cut() {
    let (bus, file, id) = recorded_demo("killed.mcap", &["--restart", "never"], 3, 5, 0);
    kill9_once_recorded(&bus, &file, &id, 18);
    wait_until("ls shows the recorder killed", WATCHDOG, || {
        consumer(&bus, &id)["status"] == "killed by signal 9"
    });
    let out = bus.run(&["inspect", s(&file)]);
    assert!(!out.status.success(), "an unfinished file is reported");
    out.assert_stdout_has("records    18");
    out.assert_stdout_has("without its footer");
    out.assert_stderr_has("offset");
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

#[test]
fn damaged_files_give_clear_errors_naming_the_offset_or_version() {
    let bus = TestBus::up();
    let good = out_path("good.mcap");
    run_demo(&bus, 3, 5, 0);
    let out = bus.run(&["snapshot", "-o", s(&good)]);
    assert!(out.status.success(), "{}", out.stderr);
    let bytes = std::fs::read(&good).expect("read");
    let at = |needle: &[u8]| {
        bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("needle")
    };
    let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    cases.push(("truncated", bytes[..bytes.len() / 2].to_vec(), "offset"));
    let mut flipped = bytes.clone();
    let payload_at = at(b"demo.step") + 200;
    flipped[payload_at] ^= 0x04;
    cases.push(("bit-flipped", flipped, "offset"));
    let mut magic = bytes.clone();
    magic[1] = b'Z';
    cases.push(("wrong magic", magic, "not an MCAP file"));
    let mut newer = bytes.clone();
    newer[at(b"format_version") + 14 + 4] = b'9';
    cases.push(("future format", newer, "format version 9"));
    let mut major = bytes.clone();
    major[5] = b'1';
    cases.push(("future MCAP", major, "MCAP major version '1'"));
    cases.push(("empty", Vec::new(), "empty"));
    cases.push((
        "text",
        b"episode,reward\n1,0.5\n".to_vec(),
        "not an MCAP file",
    ));
    for (what, data, needle) in cases {
        let path = out_path(&format!("bad-{}.mcap", what.replace(' ', "-")));
        std::fs::write(&path, data).expect("write");
        let refuses = |args: &[&str]| {
            let out = bus.run(args);
            assert!(!out.status.success(), "{what}: {args:?} succeeded");
            assert!(
                out.stderr.contains(needle),
                "{what}: {args:?}: {needle:?} not in {}",
                out.stderr
            );
            assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
        };
        refuses(&["inspect", s(&path)]);
        refuses(&["replay", "--print", s(&path)]);
        refuses(&["replay", s(&path)]);
        let exported = out_path(&format!("bad-{}.jsonl", what.replace(' ', "-")));
        let _ = std::fs::remove_file(&exported);
        refuses(&["export", s(&path), "--format", "jsonl", "-o", s(&exported)]);
    }
    let out = bus.run(&["inspect", s(&out_path("missing.mcap"))]);
    assert!(!out.status.success());
    out.assert_stderr_has("opening");
}

#[test]
fn attach_and_detach_refuse_what_cannot_work() {
    let bus = TestBus::up();
    let out = bus.run(&["detach", "999"]);
    assert!(!out.status.success());
    out.assert_stderr_has("no consumer 999");
    let file = out_path("exists.mcap");
    std::fs::write(&file, b"keep me").expect("write");
    let out = bus.run(&["attach", "recorder", "-o", s(&file)]);
    assert!(!out.status.success());
    out.assert_stderr_has("--force");
    assert_eq!(std::fs::read(&file).expect("read"), b"keep me");
    let out = bus.run(&["attach", "recorder", "-o", "/proc/no/such/dir/x.mcap"]);
    assert!(!out.status.success());
    // Refused by `attach` itself, before a recorder is started (#15).
    assert!(
        out.stderr
            .contains("cannot create files in /proc/no/such/dir"),
        "{}",
        out.stderr
    );
    let out = bus.run(&["snapshot", "--last", "soon", "-o", s(&out_path("x.mcap"))]);
    assert!(!out.status.success());
    out.assert_stderr_has("duration");
    let out = bus.run(&["replay", "--speed", "0", s(&file)]);
    assert!(!out.status.success());
    out.assert_stderr_has("--speed");
}

#[test]
fn a_crashed_recorder_is_restarted_and_records_the_gap_once() {
    let (bus, file, id) = recorded_demo("crash.mcap", &[], 3, 5, 0);
    kill9_once_recorded(&bus, &file, &id, 18);
    // Emitted while no recorder runs: still in the ring when the restarted one starts.
    run_demo(&bus, 3, 5, 0);
    let restarted = || {
        bus.consumer_where(|c| {
            c["info"]["kind"] == "recorder" && c["status"] == "running (restarted 1x)"
        })
    };
    wait_until("ls shows the recorder restarted", WATCHDOG, || {
        restarted().is_some()
    });
    let new_id = restarted().expect("restarted")["id"].to_string();
    let out = bus.run(&["detach", &new_id]);
    assert!(out.status.success(), "{}", out.stderr);
    let second = file.with_file_name("crash-restart1.mcap");
    let (lines, ok, err) = printed(&bus, &second);
    assert!(ok, "the restarted recorder finished its file: {err}");
    let (first, _, _) = printed(&bus, &file);
    let pids = |ls: &[Value]| {
        ls.iter()
            .map(|l| l["producer"]["pid"].as_u64().expect("pid"))
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(lines.len(), 18, "the gap, once: {lines:?}");
    assert!(
        pids(&first).is_disjoint(&pids(&lines)),
        "no record of the first demo is recorded twice"
    );
}

#[test]
fn python_mcap_reads_a_recording_and_a_snapshot_with_the_right_counts() {
    // Recordings are LZ4-compressed: the `mcap` package decodes them with `lz4`.
    if !crate::export::python_with("mcap, lz4") {
        return;
    }
    let (bus, file, id) = recorded_demo("py-rec.mcap", &[], 3, 5, 0);
    assert!(bus.run(&["detach", &id]).status.success());
    let snap = out_path("py-snap.mcap");
    let out = bus.run(&["snapshot", "-o", s(&snap)]);
    assert!(out.status.success(), "{}", out.stderr);
    for (f, what) in [(&file, "recording"), (&snap, "snapshot")] {
        for mode in [None, Some("--stream")] {
            let mut args = vec![s(f)];
            args.extend(mode);
            let r = crate::export::python_json("check_mcap.py", &args);
            // 3 episodes × (5 steps + 1 episode end), one producer: two schemas, two channels.
            assert_eq!(r["messages"], 18, "{what}: {r}");
            assert_eq!(
                r["topics"],
                serde_json::json!({"demo.step": 15, "demo.episode_end": 3}),
                "{what}: {r}"
            );
            assert_eq!(r["schemas"], 2, "{what}: {r}");
            assert_eq!(r["channels"], 2, "{what}: {r}");
            assert_eq!(
                r["schema_encodings"],
                serde_json::json!(["snapbus.descriptor"])
            );
            assert_eq!(r["message_encodings"], serde_json::json!(["snapbus"]));
        }
    }
}

#[test]
fn detach_of_a_recorder_waiting_to_be_restarted_cancels_the_restart() {
    let (bus, file, id) = recorded_demo("cancel.mcap", &[], 1, 2, 0);
    kill9_once_recorded(&bus, &file, &id, 3);
    // The first restart comes 1 s after the crash.
    wait_until("ls shows the restart pending", WATCHDOG, || {
        consumer(&bus, &id)["status"]
            .as_str()
            .is_some_and(|s| s.contains("restart 1 of 5"))
    });
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "{}", out.stderr);
    out.assert_stdout_has("not restarted");
    assert_eq!(
        consumer(&bus, &id)["status"],
        "killed by signal 9; not restarted"
    );
}

#[derive(snapbus_schemas::Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "cli.tick", version = 1)]
struct Tick {
    i: u64,
    note: String,
}

/// Issue #15 item 4: 4 bytes overwritten in the middle of a recording of many chunks:
/// `inspect`, `replay --print` and `export` skip the damaged chunk, say where it is and what it
/// held, read every other record, and exit non-zero.
/// Writes `n` `cli.tick` records (note: `i % 9` bytes) into `path`, in 4,000-byte chunks,
/// uncompressed (tests find a record by its bytes).
pub(crate) fn write_ticks(path: &std::path::Path, n: u64) {
    use snapbus_schemas::{Snapshot as _, Wire as _};
    let mut opts = snapbus_consumers::recording::WriterOptions::new("recorder", "test");
    opts.chunk_bytes = 4000;
    opts.compression = snapbus_consumers::recording::Compression::None;
    let mut w = snapbus_consumers::recording::RecordingWriter::create(path, &opts).expect("create");
    let info = crate::util::producer_info(42, "ticker", 0xabc);
    let desc = std::sync::Arc::new(Tick::descriptor().clone());
    for i in 0..n {
        let payload = Tick {
            i,
            note: "n".repeat((i % 9) as usize),
        }
        .encode_to_vec()
        .expect("encode");
        let t = 1_700_000_000_000_000_000 + i * 1000;
        crate::util::write_record(&mut w, &info, &desc, (i, t), &payload);
    }
    w.finish().expect("finish");
}

#[test]
fn inspect_replay_and_export_skip_a_damaged_chunk_and_read_the_rest() {
    use snapbus_schemas::Wire as _;
    let bus = TestBus::up();
    let path = out_path("chunky.mcap");
    let n = 2000u64;
    write_ticks(&path, n);
    let mut bytes = std::fs::read(&path).expect("read");
    // Inside a chunk: in the payload of record 1000 (its note is 1000 % 9 = 1 long).
    let needle = Tick {
        i: 1000,
        note: "n".to_owned(),
    }
    .encode_to_vec()
    .expect("encode");
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("record 1000 is in the file");
    bytes[at..at + 4].copy_from_slice(b"\xde\xad\xbe\xef");
    std::fs::write(&path, &bytes).expect("write");

    let out = bus.run(&["inspect", "--json", s(&path)]);
    assert!(!out.status.success(), "a damaged file is an error");
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    let skipped = v["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 1, "{v}");
    let (offset, len) = (
        skipped[0]["offset"].as_u64().expect("offset"),
        skipped[0]["bytes"].as_u64().expect("bytes"),
    );
    assert!(offset <= at as u64 && at as u64 + 4 <= offset + len, "{v}");
    let lost = skipped[0]["records"].as_u64().expect("records it held");
    assert!(lost > 0 && lost < n / 4, "{v}");
    assert_eq!(v["records"], n - lost, "every other record is read: {v}");
    assert_eq!(v["complete"], true, "read through the footer: {v}");
    assert!(v["damage"].is_null(), "{v}");
    assert!(
        !v["loss_verdict"]
            .as_str()
            .expect("verdict")
            .starts_with("none")
    );
    let text = bus.run(&["inspect", s(&path)]);
    assert!(
        text.stdout
            .contains(&format!("skipped: damaged at byte offset {offset}")),
        "{}",
        text.stdout
    );
    text.assert_stdout_has(&format!("they held {lost} records"));
    text.assert_stderr_has("1 damaged part was skipped");

    let (lines, ok, stderr) = printed(&bus, &path);
    assert!(!ok, "replay --print of a damaged file fails at the end");
    assert_eq!(lines.len() as u64, n - lost, "{stderr}");
    assert!(
        stderr.contains(&format!("damaged at byte offset {offset}")),
        "{stderr}"
    );
    let last = lines.last().expect("lines");
    assert_eq!(last["payload"]["i"], n - 1, "the records after the damage");

    let exported = out_path("chunky.jsonl");
    let out = bus.run(&["export", s(&path), "--format", "jsonl", "-o", s(&exported)]);
    assert!(
        !out.status.success(),
        "export of a damaged file fails at the end"
    );
    assert!(
        out.stderr
            .contains(&format!("damaged at byte offset {offset}")),
        "{}",
        out.stderr
    );
    out.assert_stderr_has("every record outside them was exported");
    let rows = std::fs::read_to_string(&exported).expect("export output");
    let records = rows.lines().filter(|l| l.contains("\"cli.tick\"")).count() as u64;
    assert_eq!(records, n - lost, "every other record is exported");
}

/// The LOSSES section of `inspect`'s output.
fn losses_section(stdout: &str) -> &str {
    let after = stdout.split("LOSSES").nth(1).expect("LOSSES");
    after.split("DAMAGE").next().unwrap_or(after)
}

/// Issue #15 item 3: a snapshot of a ring that had wrapped, and a `--last` window, say where
/// each producer's history starts and never claim "LOSSES none".
#[test]
fn inspect_of_a_wrapped_or_windowed_snapshot_says_where_history_starts() {
    let bus = TestBus::up();
    bus.demo(40, 100, 0, &[("SNAPBUS_LANE_BYTES", "65536")]);
    let full = out_path("wrapped-snap.mcap");
    let out = bus.run(&["snapshot", "-o", s(&full)]);
    assert!(out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("earlier records were already overwritten");
    let out = bus.run(&["inspect", s(&full)]);
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let losses = losses_section(&out.stdout);
    assert!(!losses.contains("none"), "{}", out.stdout);
    assert!(losses.contains("history starts at seq"), "{}", out.stdout);
    assert!(
        losses.contains("earlier records were overwritten in the ring"),
        "{}",
        out.stdout
    );
    let v: Value = serde_json::from_str(bus.run(&["inspect", "--json", s(&full)]).stdout.trim())
        .expect("JSON");
    let h = &v["histories"][0];
    let first: u64 = h["first_seq"]
        .as_str()
        .expect("first_seq")
        .parse()
        .expect("n");
    assert!(first > 0, "{v}");
    assert_eq!(h["overwritten"], first.to_string(), "{v}");

    let window = out_path("window-snap.mcap");
    let out = bus.run(&["snapshot", "--last", "1h", "-o", s(&window)]);
    assert!(out.status.success(), "{}", out.stderr);
    let out = bus.run(&["inspect", s(&window)]);
    let losses = losses_section(&out.stdout);
    assert!(!losses.contains("none"), "{}", out.stdout);
    assert!(
        losses.contains("where the recording's window starts"),
        "{}",
        out.stdout
    );
}

/// Runs `script` as `sh -c script sh MNT SNAPBUS [KEPT]` in a mount namespace of its own
/// (gone when it ends), for tests of a full disk: first a 64 KiB tmpfs is mounted on MNT, a
/// fresh directory named `mnt` (that needs root, which CI has), then the script runs SNAPBUS on
/// `bus`. The run must end with EXIT_NO_RESTART, naming ENOSPC.
fn in_small_tmpfs(
    bus: &TestBus,
    mnt: &str,
    script: &str,
    kept: Option<&std::path::Path>,
) -> crate::util::Output {
    in_tmpfs(bus, mnt, "64k", script, kept)
}

/// [`in_small_tmpfs`] with a tmpfs of `size` (`64k`, `4m`).
pub(crate) fn in_tmpfs(
    bus: &TestBus,
    mnt: &str,
    size: &str,
    script: &str,
    kept: Option<&std::path::Path>,
) -> crate::util::Output {
    let mnt = out_path(mnt);
    let _ = std::fs::remove_dir_all(&mnt);
    std::fs::create_dir_all(&mnt).expect("mount point");
    let script = format!("mount -t tmpfs -o size={size} tmpfs \"$1\" || exit 111\n{script}");
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ])
    .arg(&mnt)
    .arg(env!("CARGO_BIN_EXE_snapbus"))
    .args(kept)
    .env("SNAPBUS_RUNTIME_DIR", crate::util::runtime_root())
    .env("SNAPBUS_BUS", &bus.name);
    let out = crate::util::run_cmd(&mut cmd);
    assert_ne!(
        out.status.code(),
        Some(111),
        "mounting a tmpfs needs root (CI runs as root): {}",
        out.stderr
    );
    assert_eq!(
        out.status.code(),
        Some(snapbus_bus::runtime::EXIT_NO_RESTART),
        "{}",
        out.stderr
    );
    out.assert_stderr_has("No space left on device (os error 28)");
    out
}

/// Runs `snapbus VERB -o FILE` (`snapshot` or `record`) with FILE on a full disk
/// ([`in_small_tmpfs`]), which it must report once, without writing again; the copy of the file
/// it left, `NAME.mcap`.
fn onto_a_full_disk(bus: &TestBus, verb: &str, name: &str) -> PathBuf {
    let kept = out_path(&format!("{name}.mcap"));
    let script =
        format!("\"$2\" {verb} -o \"$1/f.mcap\"; rc=$?\ncp \"$1/f.mcap\" \"$3\"\nexit $rc");
    let out = in_small_tmpfs(bus, &format!("{name}-mnt"), &script, Some(&kept));
    assert!(
        !out.stderr.contains("attempted another write"),
        "{}",
        out.stderr
    );
    kept
}

/// How many records the cut file whose `inspect --json` is `v` says were not written (some).
fn unwritten(v: &Value) -> u64 {
    let n: u64 = v["cut"]["unwritten"]
        .as_str()
        .expect("unwritten")
        .parse()
        .expect("n");
    assert!(n > 0, "{v}");
    n
}

/// Issue #15 item 5: a file that cannot even hold its header (the disk is full before it
/// starts: e.g. a recorder restarted into a full disk) is not left behind empty; the OS error
/// is named and the exit code is EXIT_NO_RESTART.
#[test]
fn a_snapshot_into_a_disk_already_full_leaves_no_empty_file() {
    let bus = TestBus::up();
    bus.demo(2, 10, 0, &[]);
    let script = r#"head -c 1048576 /dev/zero >"$1/fill" 2>/dev/null
"$2" snapshot -o "$1/s.mcap"; rc=$?
[ -e "$1/s.mcap" ] && { echo "an empty file was left behind" >&2; exit 112; }
exit $rc"#;
    let out = in_small_tmpfs(&bus, "full-before-mnt", script, None);
    assert_ne!(out.status.code(), Some(112), "{}", out.stderr);
}

/// Issue #15 item 5: a snapshot into a full file system (a 64 KiB tmpfs in a mount namespace
/// of its own, gone when the command ends) names the OS error, exits with EXIT_NO_RESTART, and
/// leaves a readable file that says what it could not write.
#[test]
fn a_snapshot_into_a_full_disk_names_enospc_exits_no_restart_and_says_what_is_missing() {
    let bus = TestBus::up();
    bus.demo(40, 100, 0, &[]);
    let kept = onto_a_full_disk(&bus, "snapshot", "full-copy");
    let out = bus.run(&["inspect", s(&kept)]);
    assert!(
        !out.status.success(),
        "a cut file is an error: {}",
        out.stdout
    );
    assert!(!out.stdout.contains("none: every record"), "{}", out.stdout);
    out.assert_stdout_has("not written: ");
    assert!(
        out.stdout
            .contains("cut: the writer failed (No space left on device"),
        "{}",
        out.stdout
    );
    let v: Value = serde_json::from_str(bus.run(&["inspect", "--json", s(&kept)]).stdout.trim())
        .expect("JSON");
    let unwritten = unwritten(&v);
    // Replay and export read what is there and say the recording is incomplete.
    let (_, ok, stderr) = printed(&bus, &kept);
    assert!(!ok, "replay --print of a cut file fails at the end");
    assert!(
        stderr.contains("the recording is incomplete: not written:"),
        "{stderr}"
    );
    let exported = out_path("full-copy.jsonl");
    let out = bus.run(&["export", s(&kept), "--format", "jsonl", "-o", s(&exported)]);
    assert!(
        !out.status.success(),
        "export of a cut file fails at the end"
    );
    out.assert_stderr_has("is incomplete: not written:");
    // The same snapshot where there is room.
    let roomy = out_path("roomy.mcap");
    let out = bus.run(&["snapshot", "-o", s(&roomy)]);
    assert!(out.status.success(), "{}", out.stderr);
    let all: Value = serde_json::from_str(bus.run(&["inspect", "--json", s(&roomy)]).stdout.trim())
        .expect("JSON");
    assert_eq!(
        v["records"].as_u64().expect("records") + unwritten,
        all["records"].as_u64().expect("records"),
        "what is in the file and what it says is missing add up: {v}"
    );
}

/// Issue #15 item 5, the recorder: recording a running demo into a full file system (a 64 KiB
/// tmpfs in a mount namespace of its own) stops at the first failed flush, names the OS error,
/// exits with EXIT_NO_RESTART (so that the broker does not restart it into the same disk), and
/// leaves a file that says it was cut and how many received records it could not write.
#[test]
fn a_recorder_on_a_full_disk_stops_with_enospc_and_exit_no_restart() {
    let bus = TestBus::up();
    let _demo = bus.spawn_demo("5000");
    let kept = onto_a_full_disk(&bus, "record", "full-rec-copy");
    let out = bus.run(&["inspect", "--json", s(&kept)]);
    assert!(!out.status.success(), "a cut file is an error");
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert!(
        v["damage"].is_null(),
        "the file reads cleanly to its end: {v}"
    );
    unwritten(&v);
    assert!(
        v["cut"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("os error 28")),
        "{v}"
    );
    assert!(
        !v["loss_verdict"]
            .as_str()
            .expect("verdict")
            .starts_with("none"),
        "{v}"
    );
}

/// Issue 20, item 1: history in seconds. `ls --history` says how much time each lane holds
/// now (its oldest to newest record), and it is what a snapshot of that lane gets (±10 %); `snapshot --last`
/// warns, naming the producer, when its ring holds less than asked; `inspect` states each
/// producer's span.
#[test]
fn ls_history_secs_is_the_span_a_snapshot_gets_and_a_short_ring_is_reported() {
    let bus = TestBus::up();
    let mut cmd = bus.endless_demo("100", "2000");
    cmd.args(["--image", "16x16"])
        .env("SNAPBUS_LANE_BYTES", "262144");
    let demo = crate::bus::Bg::spawn("demo", cmd);
    let pid = demo.pid();
    // A young producer whose ring has not wrapped: it lost nothing, so no warning names it.
    let young = bus.spawn_demo("2000");
    // The ring has wrapped (its oldest record is not the first) and spans some time.
    wait_until("the demo's ring has wrapped", WATCHDOG, || {
        bus.producer_history(pid).is_some_and(|p| {
            p["history_first_seq"].as_u64() > Some(0) && p["history_secs"].as_f64() > Some(0.05)
        })
    });
    let y = bus
        .producer_history(young.pid())
        .expect("the young demo in ls");
    assert_eq!(
        y["history_first_seq"], 0,
        "the young demo's ring holds its first record: {y}"
    );
    // Frozen, so that `ls` and the snapshot see the same ring.
    let stop = |sig| {
        let p = rustix::process::Pid::from_raw(pid as i32).expect("pid");
        rustix::process::kill_process(p, sig).expect("signal the demo");
    };
    stop(rustix::process::Signal::STOP);
    let frozen = || bus.producer_history(pid).expect("the demo in ls");
    let mut p = frozen();
    wait_until("the ring is still", WATCHDOG, || {
        let now = frozen();
        let still = now["frames"] == p["frames"];
        p = now;
        still
    });
    let history_secs = p["history_secs"].as_f64().expect("history_secs");
    let text = bus.run(&["ls", "--history"]).stdout;
    assert!(
        text.contains(&format!("{history_secs:.1} s")),
        "ls shows no HISTORY of {history_secs:.1} s:\n{text}"
    );

    let dir = runtime_root().join(format!("history-{}", bus.name));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("snap.mcap");
    let out = bus.run(&["snapshot", "--last", "1h", "-o", s(&file)]);
    stop(rustix::process::Signal::CONT);
    assert!(out.status.success(), "snapshot: {}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "warning: producer 'demo' (pid {pid}): its ring holds only the last {history_secs:.1} s of the 3600.0 s asked for (256 KiB lane)"
        )),
        "no warning naming the short ring: {}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches("warning").count(),
        1,
        "only the wrapped ring is named: {}",
        out.stderr
    );
    drop(young);
    let v: Value = serde_json::from_str(bus.run(&["inspect", "--json", s(&file)]).stdout.trim())
        .expect("inspect --json");
    let spans = v["producer_spans"].as_array().expect("producer_spans");
    let lane = format!("{:016x}", p["info"]["lane_id"].as_u64().expect("lane_id"));
    let span = spans
        .iter()
        .find(|s| s["lane"] == lane.as_str())
        .unwrap_or_else(|| panic!("no span of lane {lane}: {v}"));
    let span_secs = span["span_secs"].as_f64().expect("span_secs");
    assert!(
        (span_secs - history_secs).abs() <= 0.1 * history_secs,
        "ls said {history_secs} s, the snapshot holds {span_secs} s"
    );
    assert_eq!(
        span["records"].as_u64(),
        p["history_records"].as_u64(),
        "the snapshot holds what ls counted"
    );
    let text = bus.run(&["inspect", s(&file)]).stdout;
    assert!(
        text.contains(&format!("{} records, ", p["history_records"])),
        "inspect states no span per producer:\n{text}"
    );
    // A window the ring does hold: no warning.
    let out = bus.run(&[
        "snapshot",
        "--last",
        "1ms",
        "-o",
        s(&dir.join("short.mcap")),
    ]);
    assert!(out.status.success(), "snapshot: {}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    drop(demo);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_on_record_first_records_what_was_emitted_before_it() {
    let bus = TestBus::up();
    let file = out_path("drain.mcap");
    let mut rec = bus.spawn(
        "record",
        &["record", "-o", s(&file), "--schema", "demo.step"],
    );
    rec.expect_stderr("recording bus");
    let pid = rec.pid();
    wait_until("the recorder reads the bus", WATCHDOG, || {
        bus.ls()["consumers"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["info"]["pid"].as_u64() == Some(u64::from(pid)))
        })
    });
    let signal = |sig| {
        let p = rustix::process::Pid::from_raw(pid as i32).expect("pid");
        rustix::process::kill_process(p, sig).expect("signal the recorder");
    };
    // The recorder is stopped while the demo emits 1000 steps of 4 KiB: all of them wait in
    // the ring when it is told to stop (Ctrl-C, then it runs again).
    signal(rustix::process::Signal::STOP);
    let out = bus.run(&[
        "demo",
        "--no-echo",
        "--episodes",
        "50",
        "--steps",
        "20",
        "--image",
        "64x64",
        "--rate",
        "0",
    ]);
    assert!(out.status.success(), "demo: {}", out.stderr);
    signal(rustix::process::Signal::INT);
    signal(rustix::process::Signal::CONT);
    let (status, _) = rec.wait();
    let log = rec.log();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("snapbus record: 1000 records (0 lost"),
        "{log}"
    );
    assert!(!log.contains("not read"), "{log}");
    let (lines, ok, err) = printed(&bus, &file);
    assert!(ok, "{err}");
    assert_eq!(lines.len(), 1000);
}
