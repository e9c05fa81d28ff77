//! Recordings end to end with the real binary: `attach`/`detach`, `record`, `snapshot`,
//! `replay`, `inspect`, with producers and recorders killed on purpose and files damaged on
//! purpose. Here: the files, recorders and full disks the tests share.

mod damaged;
mod full_disk;
mod recorder;
mod replay;
mod snapshot;

use std::path::PathBuf;

use serde_json::Value;

use crate::bus::TestBus;
use crate::util::runtime_root;

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

fn consumer(bus: &TestBus, id: &str) -> Value {
    bus.consumer_by_id(id).unwrap_or(Value::Null)
}

#[derive(snapbus_schemas::Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "cli.tick", version = 1)]
struct Tick {
    i: u64,
    note: String,
}

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
