//! A closed stdout (`snapbus attach … | tail -0`, `snapbus echo … | head -1`) never makes a
//! verb panic: a stream whose reader stopped ends quietly with 0; a verb whose one answer was
//! lost (an attached consumer's id) says so and exits 1. Real pipes, real processes.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use crate::bus::TestBus;
use crate::util::{snapbus, wait_with_watchdog};

/// Runs `cmd` with its stdout a pipe whose reader is gone before it writes (after reading
/// `lines` lines): its exit code and stderr.
fn with_closed_stdout(mut cmd: Command, lines: usize) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn snapbus");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    for _ in 0..lines {
        let mut l = String::new();
        assert!(
            out.read_line(&mut l).expect("read") > 0,
            "stdout ended early"
        );
    }
    drop(out);
    let mut err_pipe = child.stderr.take().expect("stderr");
    let status = wait_with_watchdog(&mut child);
    let mut err = String::new();
    err_pipe.read_to_string(&mut err).expect("stderr");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "a panic: {err}"
    );
    (status.code(), err)
}

#[test]
fn a_closed_stdout_never_makes_a_verb_panic() {
    let bus = TestBus::up();
    bus.demo(1, 50, 0, &[]);
    // A stream whose reader stopped after one line: quiet, 0.
    let (code, err) = with_closed_stdout(
        bus.cmd(&["echo", "demo.step", "--from", "oldest", "--count", "50"]),
        1,
    );
    assert_eq!(code, Some(0), "{err}");
    for args in [&["ls"][..], &["ls", "--json"], &["up"], &["schemas"]] {
        let (code, err) = with_closed_stdout(bus.cmd(args), 0);
        assert_eq!(code, Some(0), "{args:?}: {err}");
    }
    let (code, err) = with_closed_stdout(
        {
            let mut c = snapbus();
            c.arg("--help");
            c
        },
        0,
    );
    assert!(matches!(code, Some(0 | 1)), "--help: {code:?} {err}");
    // An attached consumer's id lost: said, 1; the consumer runs.
    let file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pipes-run.mcap");
    let _ = std::fs::remove_file(&file);
    let (code, err) = with_closed_stdout(
        bus.cmd(&["attach", "recorder", "-o", file.to_str().expect("utf-8")]),
        0,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("stdout is closed: the id of recorder"),
        "{err}"
    );
    let consumers = bus.consumers();
    let rec = consumers
        .iter()
        .find(|c| c["info"]["kind"] == "recorder")
        .expect("the recorder runs");
    let id = rec["id"].to_string();
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);
    let _ = std::fs::remove_file(&file);
}
