//! A full disk: `snapshot` and `record` name ENOSPC, exit with EXIT_NO_RESTART, and leave a
//! file that says what it could not write (or no empty file at all).

use std::path::PathBuf;

use serde_json::Value;

use super::{in_small_tmpfs, out_path, printed, s};
use crate::bus::TestBus;

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
