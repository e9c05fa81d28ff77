//! Tests that need a process of their own (the producer's state is process-wide): this test
//! binary runs one of its ignored tests in a child process.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the ignored test `test` of this test binary in a child process with `env` added, and
/// returns its stdout and stderr. Panics if the child fails, hangs past `timeout` (it is
/// killed), or did not run `test`.
pub(crate) fn run_ignored_test(
    test: &str,
    env: &[(&str, &str)],
    timeout: Duration,
) -> (String, String) {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", test, "--ignored", "--nocapture"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run the test binary");
    let t0 = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if t0.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{test} hung in a child process; killed it");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{test} failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}
