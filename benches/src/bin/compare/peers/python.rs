//! Python `multiprocessing.Queue` with pickled dataclass events: `mp_queue.py` (next to this
//! harness's sources) runs both sides, the producer as a `multiprocessing.Process` and the
//! consumer in the script's own process, and prints the consumer's `result {json}` line.

use std::process::{Command, Stdio};

use anyhow::{Result, bail};

use crate::common::{HEADER_LEN, Mode, RunArgs};

pub(crate) const HOW: &str = "CPython 3 (stdlib only, `mp_queue.py`): a \
    `multiprocessing.Queue(maxsize=1024)` (fork context) carrying a `@dataclass Event(seq, \
    t_send_nanos, payload: bytes)`, pickled by the queue's feeder thread and sent through its \
    pipe; producer `Process` and consuming main process pinned to the two CPUs; the consumer \
    blocks in `get()` and checks each event in Python; the latency producer busy-waits with \
    `os.sched_yield()` so the feeder thread gets the GIL.";

/// The script, in the source tree.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin/compare/mp_queue.py");

/// The interpreter.
const PYTHON: &str = "python3";

/// `Err(why)` unless `python3` runs with the modules the script needs and the script exists.
pub(crate) fn available() -> Result<(), String> {
    if !std::path::Path::new(SCRIPT).is_file() {
        return Err(format!("{SCRIPT} is missing"));
    }
    let out = Command::new(PYTHON)
        .args([
            "-I",
            "-c",
            "import ctypes, dataclasses, multiprocessing, pickle, resource",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {PYTHON}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty());
        Err(format!(
            "{PYTHON} lacks a module the script needs: {}",
            last.unwrap_or("(no message)")
        ))
    }
}

/// `python3 -I mp_queue.py <args>`: the producer on `args.cpu`, the consumer on
/// `args.other_cpu`.
pub(crate) fn command(args: &RunArgs) -> Result<Command> {
    if args.size < HEADER_LEN {
        bail!("--size must be at least {HEADER_LEN} bytes");
    }
    let mode = match args.mode {
        Mode::Throughput => "throughput",
        Mode::Latency => "latency",
    };
    let mut cmd = Command::new(PYTHON);
    // -I: isolated (no PYTHON* variables, no user site-packages): the stdlib alone.
    cmd.arg("-I").arg(SCRIPT).args([
        "--size".to_owned(),
        args.size.to_string(),
        "--mode".to_owned(),
        mode.to_owned(),
        "--secs".to_owned(),
        args.secs.to_string(),
        "--count".to_owned(),
        args.count.to_string(),
        "--interval-nanos".to_owned(),
        args.interval_nanos.to_string(),
    ]);
    for (flag, cpu) in [
        ("--producer-cpu", args.cpu),
        ("--consumer-cpu", args.other_cpu),
    ] {
        if let Some(c) = cpu {
            cmd.args([flag.to_owned(), c.to_string()]);
        }
    }
    if args.every_byte {
        cmd.arg("--every-byte");
    }
    Ok(cmd)
}
