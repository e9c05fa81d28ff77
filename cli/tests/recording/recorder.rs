//! An attached recorder under supervision: killed, crashed and restarted, detached while it
//! waits for a restart, and refused when it cannot work.

use serde_json::Value;

use super::{consumer, out_path, printed, recorded_demo, run_demo, s};
use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, kill9};

/// Waits until `file` holds `n` records (the recorder hands a finished chunk to the file every
/// second), then `kill -9`s the recorder `id`.
fn kill9_once_recorded(bus: &TestBus, file: &std::path::Path, id: &str, n: usize) {
    wait_until("the records are in the file", WATCHDOG, || {
        printed(bus, file).0.len() == n
    });
    kill9(consumer(bus, id)["info"]["pid"].as_u64().expect("pid"));
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
