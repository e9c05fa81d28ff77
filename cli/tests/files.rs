//! Issue #44: recordings and the files the CLI writes — a flipped bit in a recording's first
//! chunk, a snapshot onto a too-small disk, and output paths another user planted.

use std::path::{Path, PathBuf};

use crate::bus::TestBus;
use crate::util::runtime_root;

fn out_path(name: &str) -> PathBuf {
    let dir = runtime_root().join("files44");
    std::fs::create_dir_all(&dir).expect("files dir");
    let p = dir.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Issue #44 item 2: one flipped bit at byte 700 — in the first chunk, which declares the
/// schema and the channel — used to make `export` read 0 records and say "every other record
/// was exported". Now `export`, `inspect` and `replay --print` read every other chunk (the
/// schema and channel come from the summary at the end of the file), and say how many records
/// the damaged chunk held.
#[test]
fn a_flipped_bit_in_the_first_chunk_costs_only_that_chunk() {
    let bus = TestBus::up();
    let path = out_path("flip700.mcap");
    let n = 2000u64;
    crate::recording::write_ticks(&path, n);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[700] ^= 0x10;
    std::fs::write(&path, &bytes).expect("write");

    let out = bus.run(&["inspect", "--json", s(&path)]);
    assert!(!out.status.success(), "a damaged file is an error");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    let read = v["records"].as_u64().expect("records");
    let held = v["skipped"][0]["records"]
        .as_u64()
        .unwrap_or_else(|| panic!("{v}"));
    assert!(held > 0 && held < 200, "only the first chunk is lost: {v}");
    assert_eq!(read + held, n, "the rest is read: {v}");

    let exported = out_path("flip700.jsonl");
    let out = bus.run(&["export", s(&path), "--format", "jsonl", "-o", s(&exported)]);
    assert!(!out.status.success(), "damage is an error");
    let rows = std::fs::read_to_string(&exported).expect("export output");
    let records = rows.lines().filter(|l| l.contains("\"cli.tick\"")).count() as u64;
    assert_eq!(records, n - held, "{}", out.stderr);
    out.assert_stderr_has(&format!(
        "{records} records were exported; 1 damaged part was skipped (see above): they held \
         {held} records, which were not exported"
    ));

    let out = bus.run(&["replay", "--print", s(&path)]);
    assert!(!out.status.success());
    assert_eq!(out.json_lines().len() as u64, n - held, "{}", out.stderr);
    out.assert_stderr_has("which were not printed");
}

/// Runs `snapbus snapshot -o MNT/f.mcap` on `bus` with MNT a tmpfs of `size` (mounted in a
/// mount namespace of its own with `unshare`, gone when the command ends: a real full disk,
/// ENOSPC; that needs root, which the tests and CI have), which must end with
/// EXIT_NO_RESTART naming ENOSPC; keeps a copy of the file it left as `NAME.mcap`.
fn snapshot_onto_tmpfs(bus: &TestBus, size: &str, name: &str) -> (crate::util::Output, PathBuf) {
    let kept = out_path(&format!("{name}.mcap"));
    // Uncompressed: the demo's images compress 34x, and would fit.
    let script = "\"$2\" snapshot --compression none -o \"$1/f.mcap\"; rc=$?\n\
                  cp \"$1/f.mcap\" \"$3\"\nexit $rc";
    let mnt = format!("{name}-mnt");
    let out = crate::recording::in_tmpfs(bus, &mnt, size, script, Some(&kept));
    (out, kept)
}

fn inspect_json(bus: &TestBus, file: &Path) -> serde_json::Value {
    serde_json::from_str(bus.run(&["inspect", "--json", s(file)]).stdout.trim()).expect("JSON")
}

/// Issue #44 item 6: a snapshot larger than the disk keeps what fits — a valid file ending at
/// its last complete chunk, as the recorder's does — says what it kept and what was cut, and
/// exits with EXIT_NO_RESTART. (Before, the file was cut back to its header: 0 records.)
#[test]
fn a_snapshot_onto_a_too_small_disk_keeps_what_fits() {
    let bus = TestBus::up();
    // 3,000 steps with a 64×64 image each: about 12 MB of records, in 1 MiB chunks.
    let mut demo = bus.demo_cmd("10", "300", "0");
    demo.args(["--image", "64x64"]);
    let out = crate::util::run_cmd(&mut demo);
    assert!(out.status.success(), "{}", out.stderr);
    let (out, kept) = snapshot_onto_tmpfs(&bus, "4m", "small-disk");
    let v = inspect_json(&bus, &kept);
    let records = v["records"].as_u64().expect("records");
    assert!(records > 300, "the file keeps what fitted: {v}");
    assert!(
        v["damage"].is_null() && v["skipped"].as_array().is_some_and(Vec::is_empty),
        "{v}"
    );
    let unwritten: u64 = v["cut"]["unwritten"]
        .as_str()
        .expect("cut")
        .parse()
        .expect("n");
    out.assert_stderr_has(&format!(
        "keeps {records} records, up to its last complete chunk"
    ));
    out.assert_stderr_has(&format!(
        "{unwritten} records read from the bus were not written"
    ));
    // Where there is room: everything.
    let roomy = out_path("roomy44.mcap");
    let out = bus.run(&["snapshot", "-o", s(&roomy)]);
    assert!(out.status.success(), "{}", out.stderr);
    let all = inspect_json(&bus, &roomy)["records"]
        .as_u64()
        .expect("records");
    // The snapshot stops at the failed write: the records after it were not even read.
    assert!(
        records + unwritten <= all,
        "kept + not written ≤ all ({all}): {v}"
    );
    assert!(
        std::fs::metadata(&kept).expect("kept").len() > 2 << 20,
        "most of the disk is used"
    );
}

/// Issue #44 item 6: a snapshot of a bus whose only lane is refused (a corrupt header) read
/// nothing of it; it used to exit 0 with 0 records. Now it exits non-zero, saying so.
#[test]
fn a_snapshot_with_a_refused_lane_fails() {
    let bus = TestBus::up();
    bus.demo(2, 10, 0, &[]);
    let broker = bus.ls()["broker_pid"].as_u64().expect("broker pid") as u32;
    let lane = crate::bus::broker_lane_file(broker);
    crate::bus::set_word_at(&lane, 0, 0x0bad_0bad_0bad_0bad);
    let file = out_path("refused.mcap");
    let out = bus.run(&["snapshot", "-o", s(&file)]);
    assert!(!out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("not reading producer 'demo'");
    out.assert_stderr_has("1 lane was refused (named above): its records are not in");
}

/// The uid of `nobody`: a real second user, for files another user owns (the tests run as
/// root, which may `chown`).
const OTHER_UID: u32 = 65534;

/// A root-owned 0600 file (`secret`), and `planted`: a symlink to it that another user owns.
fn planted_symlink(name: &str) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let secret = out_path(&format!("{name}-secret"));
    std::fs::write(&secret, b"root's secret").expect("secret");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let planted = out_path(name);
    std::os::unix::fs::symlink(&secret, &planted).expect("symlink");
    std::os::unix::fs::lchown(&planted, Some(OTHER_UID), Some(OTHER_UID)).expect("lchown");
    (secret, planted)
}

fn assert_untouched(secret: &Path) {
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::read(secret).expect("secret"), b"root's secret");
    let mode = std::fs::metadata(secret)
        .expect("secret")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// Issue #44 item 11: `record`, `snapshot` and `export` never write through a symlink another
/// user planted at the output path, even with --force: the file it points to is untouched,
/// and the command fails naming the owner. (Before, `record --force` overwrote the root-owned
/// 0600 file it pointed to.)
#[test]
fn a_planted_symlink_is_never_followed() {
    let bus = TestBus::up();
    bus.demo(2, 10, 0, &[]);
    let (secret, planted) = planted_symlink("planted.mcap");
    for args in [
        vec!["record", "-o", s(&planted), "--force"],
        vec!["snapshot", "-o", s(&planted), "--force"],
        vec!["snapshot", "-o", s(&planted)],
    ] {
        let out = bus.run(&args);
        assert!(!out.status.success(), "{args:?}: {}", out.stderr);
        out.assert_stderr_has(&format!("belongs to another user (uid {OTHER_UID})"));
        assert_untouched(&secret);
        assert!(
            std::fs::symlink_metadata(&planted)
                .expect("link")
                .file_type()
                .is_symlink()
        );
    }
    let recording = out_path("for-export.mcap");
    assert!(bus.run(&["snapshot", "-o", s(&recording)]).status.success());
    let (secret, planted) = planted_symlink("planted.jsonl");
    let out = bus.run(&[
        "export",
        s(&recording),
        "--format",
        "jsonl",
        "-o",
        s(&planted),
        "--force",
    ]);
    assert!(!out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("belongs to another user");
    assert_untouched(&secret);
}

/// Issue #44 item 11: a file another user pre-created (0666) at the output path is refused,
/// with or without --force, and left as it was; a file of ours is replaced by rename with
/// --force (a new file, 0600: whoever had the old one open keeps the old contents), and a
/// symlink of ours is replaced, not followed.
#[test]
fn another_users_file_is_refused_and_force_replaces_by_rename() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let bus = TestBus::up();
    bus.demo(2, 10, 0, &[]);
    let theirs = out_path("theirs.mcap");
    std::fs::write(&theirs, b"their data").expect("write");
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    std::os::unix::fs::chown(&theirs, Some(OTHER_UID), Some(OTHER_UID)).expect("chown");
    for force in [false, true] {
        let mut args = vec!["snapshot", "-o", s(&theirs)];
        if force {
            args.push("--force");
        }
        let out = bus.run(&args);
        assert!(!out.status.success(), "{args:?}: {}", out.stderr);
        out.assert_stderr_has(&format!("belongs to another user (uid {OTHER_UID})"));
        let m = std::fs::metadata(&theirs).expect("theirs");
        assert_eq!((m.uid(), m.len()), (OTHER_UID, 10), "left as it was");
    }
    // Ours, open elsewhere: replaced by a new file.
    let ours = out_path("ours.mcap");
    std::fs::write(&ours, b"old contents").expect("write");
    std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let old = std::fs::File::open(&ours).expect("open");
    let old_ino = old.metadata().expect("meta").ino();
    let out = bus.run(&["snapshot", "-o", s(&ours)]);
    assert!(!out.status.success(), "exists without --force");
    out.assert_stderr_has("exists; choose another path, or pass --force");
    let out = bus.run(&["snapshot", "-o", s(&ours), "--force"]);
    assert!(out.status.success(), "{}", out.stderr);
    let new = std::fs::metadata(&ours).expect("new");
    assert_ne!(new.ino(), old_ino, "a new file, renamed over the old one");
    assert_eq!(new.mode() & 0o777, 0o600);
    assert_eq!(
        old.metadata().expect("old").len(),
        12,
        "the old file is untouched"
    );
    // A symlink of ours: replaced by the file; what it pointed to is untouched.
    let target = out_path("target.mcap");
    std::fs::write(&target, b"pointed to").expect("write");
    let link = out_path("link.mcap");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let out = bus.run(&["snapshot", "-o", s(&link), "--force"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(std::fs::symlink_metadata(&link).expect("link").is_file());
    assert_eq!(std::fs::read(&target).expect("target"), b"pointed to");
    // No temporary file is left behind.
    let dir = ours.parent().expect("dir");
    let left: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".snapbus-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
