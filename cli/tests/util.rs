//! Running the real binary with a watchdog.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long any single `snapbus` invocation in these tests may take before it is killed.
pub(crate) const WATCHDOG: Duration = Duration::from_secs(60);

pub(crate) fn snapbus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_snapbus"))
}

pub(crate) struct Output {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Waits for `child`, killing it if the watchdog expires (then panics: a hung CLI is a bug).
pub(crate) fn wait_with_watchdog(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("snapbus did not exit within {WATCHDOG:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `snapbus ARGS`, capturing output, under the watchdog.
pub(crate) fn run(args: &[&str]) -> Output {
    let mut child = snapbus()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn snapbus");
    let mut stdout_pipe = child.stdout.take().expect("stdout");
    let mut stderr_pipe = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout_pipe.read_to_string(&mut s).expect("read stdout");
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr_pipe.read_to_string(&mut s).expect("read stderr");
        s
    });
    let status = wait_with_watchdog(&mut child);
    Output {
        status,
        stdout: out_reader.join().expect("stdout thread"),
        stderr: err_reader.join().expect("stderr thread"),
    }
}
