//! `snapbus up --record DIR`: every run kept in a file of its own, under a size cap, stated in
//! `ls`; a DIR that cannot be used fails `up`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::bus::{TestBus, check_demo_grid, wait_until};
use crate::util::{WATCHDOG, unique_bus};

/// A fresh directory for the runs of a test (outside the runtime root, which the buses want
/// private).
pub(crate) fn runs_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("files-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A bus started with `up --record DIR` and `extra` flags.
fn up_recording(dir: &Path, extra: &[&str]) -> TestBus {
    let bus = TestBus { name: unique_bus() };
    let mut args = vec!["up", "--record", s(dir)];
    args.extend_from_slice(extra);
    let out = bus.run(&args);
    assert!(out.status.success(), "up: {}{}", out.stdout, out.stderr);
    out.assert_stdout_has("is up");
    out.assert_stdout_has("keeping every run in");
    bus
}

/// The recorder of runs in `ls --json`, and its status board.
fn runs_recorder(bus: &TestBus) -> Option<(Value, Value)> {
    let c = bus.consumer_where(|c| c["info"]["kind"] == "recorder")?;
    let board = c["board"].clone();
    Some((c, board))
}

/// The recorder's board once `done` holds for it (polled).
fn board_once(bus: &TestBus, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut board = Value::Null;
    wait_until(what, WATCHDOG, || {
        board = runs_recorder(bus).map(|(_, b)| b).unwrap_or(Value::Null);
        done(&board)
    });
    board
}

/// The recorder of runs is idle (its run ended: the file is finished) after `runs` runs.
fn idle_after(runs: u64) -> impl Fn(&Value) -> bool {
    move |b| b["state"] == "idle" && b["runs"] == runs
}

/// The run files in `dir`, sorted by name.
fn run_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("runs dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "mcap"))
        .collect();
    files.sort();
    files
}

/// The records of a finished run file, checked to be the demo's grid of `episodes` ×
/// `steps`, and the file read through its footer.
fn check_run(bus: &TestBus, file: &Path, episodes: u64, steps: u64) {
    check_finished(bus, file);
    let out = bus.run(&["replay", "--print", s(file)]);
    assert!(out.status.success(), "replay --print: {}", out.stderr);
    check_demo_grid(&out.json_lines(), episodes, steps);
}

#[test]
fn up_record_keeps_two_runs_as_two_complete_files() {
    let dir = runs_dir("two-runs");
    let bus = up_recording(&dir, &[]);
    let (c, _) = runs_recorder(&bus).expect("a recorder is attached");
    assert_eq!(c["supervised"], true, "{c}");
    // Two scripts one after the other.
    bus.demo(2, 3, 0, &[]);
    board_once(&bus, "the first run ended", idle_after(1));
    bus.demo(3, 2, 0, &[]);
    let board = board_once(&bus, "the second run ended", idle_after(2));
    assert_eq!(board["files_kept"], 2, "{board}");
    assert_eq!(board["removed"], 0, "{board}");
    assert_eq!(board["dir"], s(&std::fs::canonicalize(&dir).expect("dir")));
    let files = run_files(&dir);
    assert_eq!(files.len(), 2, "{files:?}");
    for f in &files {
        let name = f.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(
            name.starts_with("run-") && name.ends_with("-demo-0000.mcap"),
            "{name}"
        );
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&f.metadata().expect("meta").permissions());
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
    // Sorted by name is sorted by time: the first run is the 2 × 3 one.
    check_run(&bus, &files[0], 2, 3);
    check_run(&bus, &files[1], 3, 2);
    // `ls` states where the runs go.
    let out = bus.run(&["ls"]);
    out.assert_stdout_has("files_kept=2");
    out.assert_stdout_has(&format!("dir={}", board["dir"].as_str().expect("dir")));

    // A run cut by `down` is finished too; the recorder keeps going across producer
    // restarts, so a third run got a third file.
    let mut demo = bus.spawn_demo("200");
    board_once(&bus, "the third run records", |b| {
        b["state"] == "recording" && b["runs"] == 3
    });
    let out = bus.run(&["down"]);
    assert!(out.status.success(), "down: {}", out.stderr);
    demo.kill9();
    let files = run_files(&dir);
    assert_eq!(files.len(), 3, "{files:?}");
    check_finished(&bus, &files[2]);
}

/// `inspect` reads `file` through its footer: it was finished (indexes, summary, footer).
fn check_finished(bus: &TestBus, file: &Path) {
    let out = bus.run(&["inspect", s(file)]);
    let said = format!("inspect: {}{}", out.stdout, out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(out.stdout.contains("read through the footer"), "{said}");
}

#[test]
fn past_the_cap_the_oldest_run_is_removed_and_ls_says_so() {
    let dir = runs_dir("capped");
    // A cap smaller than one run: the last run is always kept, every older one removed.
    let bus = up_recording(&dir, &["--record-keep-bytes", "1K"]);
    bus.demo(2, 3, 0, &[]);
    board_once(&bus, "the first run ended", idle_after(1));
    let first = run_files(&dir);
    assert_eq!(first.len(), 1, "the last run is kept even past the cap");
    bus.demo(3, 2, 0, &[]);
    let board = board_once(&bus, "the oldest run is removed", |b| {
        idle_after(2)(b) && b["removed"] == 1
    });
    assert_eq!(board["files_kept"], 1, "{board}");
    assert_eq!(board["keep_bytes"], 1024, "{board}");
    let files = run_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(!first[0].exists(), "the oldest run was removed");
    check_run(&bus, &files[0], 3, 2);
    let out = bus.run(&["ls"]);
    out.assert_stdout_has("removed=1");
    out.assert_stdout_has("keep_bytes=1024");
}

#[test]
fn snapbus_record_env_is_read_by_up() {
    let dir = runs_dir("from-env");
    let bus = TestBus { name: unique_bus() };
    let out = crate::util::run_cmd(bus.cmd(&["up"]).env("SNAPBUS_RECORD", &dir));
    assert!(out.status.success(), "up: {}", out.stderr);
    out.assert_stdout_has("keeping every run in");
    bus.demo(1, 2, 0, &[]);
    board_once(&bus, "the run ended", idle_after(1));
    assert_eq!(run_files(&dir).len(), 1);
    // Asked again while it records: no second recorder.
    let out = bus.run(&["up", "--record", s(&dir)]);
    assert!(out.status.success(), "up: {}", out.stderr);
    out.assert_stdout_has("already kept in");
    let recorders = bus
        .consumers()
        .iter()
        .filter(|c| c["info"]["kind"] == "recorder")
        .count();
    assert_eq!(recorders, 1);
}

#[test]
fn a_record_dir_that_cannot_be_used_fails_up_and_starts_nothing() {
    let file = runs_dir("a-file");
    std::fs::create_dir_all(file.parent().expect("parent")).expect("files dir");
    std::fs::write(&file, b"not a directory").expect("file");
    let missing_root = PathBuf::from("/proc/snapbus-no-such-dir/runs");
    for (dir, says) in [
        (file.as_path(), "not a directory"),
        (missing_root.as_path(), "creating it"),
    ] {
        let bus = TestBus { name: unique_bus() };
        let out = bus.run(&["up", "--record", s(dir)]);
        assert!(
            !out.status.success(),
            "up --record {}: {}",
            dir.display(),
            out.stdout
        );
        out.assert_stderr_has(&format!("--record/--dir {}", dir.display()));
        out.assert_stderr_has(says);
        assert!(!bus.run(&["ls"]).status.success(), "no bus was started");
    }
    let _ = std::fs::remove_file(&file);
}
