//! (d) Garbage: reader processes over corrupt lanes and segments.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use rustix::fs::{MemfdFlags, SealFlags};
use snapbus_bus::lane::{LaneConfig, ShmLane};

use super::harness::{Watchdog, proc_fd_path, spawn};
use super::roles::{self, Rng};
use super::{lane_path, secs, time_seed};

/// A writer process fills its lane with garbage (raw word stores: random words, fake frame
/// headers with valid commit tags, all-random data, garbage tail/state words); a reader
/// process maps it and polls until it goes quiet. It must not crash, must go quiet, must
/// never deliver a sequence number twice, and must count what it skipped.
#[test]
fn reader_process_survives_and_counts_garbage_lanes() {
    let wd = Watchdog::new(
        "reader_process_survives_and_counts_garbage_lanes",
        secs(240),
    );
    let dl = wd.deadline;
    let seed = time_seed();
    eprintln!("reader_process_survives_and_counts_garbage_lanes: SNAPBUS_MP_SEED={seed}");
    let mut rng = Rng(seed);
    // (mode, counters variant, reader start): random words and fake frames with random
    // starts; random data with starts that read it; every garbage tail with every start.
    let mut rounds: Vec<(&str, Option<u64>, Option<&str>)> = Vec::new();
    for i in 0..4 {
        rounds.push(("words", None, None));
        // Half from the oldest record, which is sure to meet the frame planted on a boundary.
        rounds.push(("frames", None, (i % 2 == 0).then_some("oldest")));
    }
    for start in ["oldest", "time"] {
        rounds.push(("noise", None, Some(start)));
        rounds.push(("noise_all", None, Some(start)));
    }
    for variant in 0..9 {
        for start in ["oldest", "latest", "time"] {
            rounds.push(("counters", Some(variant), Some(start)));
        }
    }
    let mut detected: BTreeMap<&str, u64> = BTreeMap::new();
    for (round, &(mode, variant, start)) in rounds.iter().enumerate() {
        let (wseed, rseed) = (rng.next(), rng.next());
        // Sometimes fewer records than fit the ring (readers then start at position 0).
        let valid = 1 + rng.below([200, 3000][round % 2]);
        let mut wenv = vec![
            ("MP_CAP", (256u64 << 10).to_string()),
            ("MP_MAX_FRAME", (32u64 << 10).to_string()),
            ("MP_BLOCK", (4u64 << 10).to_string()),
            ("MP_VALID", valid.to_string()),
            ("MP_GARBAGE", mode.to_owned()),
            ("MP_SEED", wseed.to_string()),
        ];
        if let Some(v) = variant {
            wenv.push(("MP_VARIANT", v.to_string()));
        }
        let mut writer = spawn(&format!("garbage writer[{round}]"), "garbage_writer", &wenv);
        let lane = lane_path(&mut writer, dl);
        let mut renv = vec![
            ("MP_LANE", lane),
            ("MP_SEED", rseed.to_string()),
            ("MP_POLLS", "200000".into()),
        ];
        if let Some(start) = start {
            renv.push(("MP_START", start.to_owned()));
        }
        let mut reader = spawn(&format!("garbage reader[{round}]"), "garbage_reader", &renv);
        let res = reader.expect("result", dl);
        reader.wait_success(dl);
        let ctx = format!(
            "round {round} mode {mode} variant {variant:?} (seed {seed}): {}\n{}",
            res.line,
            reader.log()
        );
        assert_eq!(res.num("quiet"), 1, "the reader never went quiet: {ctx}");
        assert_eq!(res.num("order_err"), 0, "{ctx}");
        let skipped = res.num("garbage") + res.num("holes") + res.num("torn");
        if mode == "frames" && start == Some("oldest") {
            // One fake frame replaces the last record's header: a reader from the oldest
            // record meets it.
            assert!(
                skipped > 0,
                "a fake frame on a boundary read without complaint: {ctx}"
            );
        }
        if mode == "noise" {
            // The anchors are intact, so the reader starts inside the random data. (With
            // random anchors too, a reader may find no frame boundary and start at the tail.)
            assert!(skipped > 0, "random data read without complaint: {ctx}");
        }
        *detected.entry(mode).or_default() += skipped;
        writer.wait_success(dl);
        eprintln!("{mode} {variant:?}: {}", res.line);
    }
    eprintln!("garbage, holes and torn copies counted, by mode: {detected:?}");
    assert!(
        detected["frames"] + detected["words"] > 0,
        "no garbage was ever reported"
    );
}

/// A memfd holding `bytes`, with `seals` (none: created without `MFD_ALLOW_SEALING`).
fn memfd(bytes: &[u8], seals: Option<SealFlags>) -> OwnedFd {
    let flags = match seals {
        Some(_) => MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        None => MemfdFlags::CLOEXEC,
    };
    let fd = rustix::fs::memfd_create("snapbus-mp-garbage", flags).expect("memfd_create");
    rustix::fs::ftruncate(&fd, bytes.len() as u64).expect("ftruncate");
    File::from(fd.try_clone().expect("dup"))
        .write_all_at(bytes, 0)
        .expect("write memfd");
    if let Some(seals) = seals {
        rustix::fs::fcntl_add_seals(&fd, seals).expect("seal");
    }
    fd
}

/// A reader process asked to open segments with garbage headers, unsealed or partly sealed
/// memfds, and bad sizes refuses each with the right error (and opens the valid control).
#[test]
fn reader_process_refuses_garbage_headers_and_unsealed_segments() {
    let wd = Watchdog::new(
        "reader_process_refuses_garbage_headers_and_unsealed_segments",
        secs(60),
    );
    let dl = wd.deadline;
    let config = LaneConfig {
        capacity: 64 << 10,
        max_frame: 8 << 10,
        block_size: 4 << 10,
    };
    let lane = ShmLane::create("snapbus-mp-image", &config).expect("lane");
    let mut w = lane.lane().writer().expect("writer");
    for seq in 0..50 {
        w.write_bytes(roles::meta(seq), &[seq as u8; 100])
            .expect("write");
    }
    let len = lane.lane().geometry().segment_len() as usize;
    let mut image = vec![0u8; len];
    File::from(lane.fd().try_clone_to_owned().expect("dup"))
        .read_exact_at(&mut image, 0)
        .expect("read lane image");
    let with = |word: usize, v: u64| {
        let mut b = image.clone();
        b[word * 8..word * 8 + 8].copy_from_slice(&v.to_le_bytes());
        b
    };
    let mut rng = Rng(time_seed());
    let random: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let mut magic_then_random = random.clone();
    magic_then_random[..8].copy_from_slice(&image[..8]);
    let sealed = Some(SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL);
    // (label, segment, expected error text: "" = opens)
    let cases: Vec<(&str, OwnedFd, &str)> = vec![
        ("valid", memfd(&image, sealed), ""),
        ("unsealed", memfd(&image, None), "not_sealed"),
        (
            "shrink_sealed_only",
            memfd(&image, Some(SealFlags::SHRINK)),
            "not_sealed",
        ),
        ("random", memfd(&random, sealed), "not_a_snapbus_lane"),
        ("zeros", memfd(&vec![0; len], sealed), "not_a_snapbus_lane"),
        (
            "magic_then_random",
            memfd(&magic_then_random, sealed),
            "lane",
        ),
        ("version", memfd(&with(1, 7), sealed), "layout_version"),
        (
            "not_initialised",
            memfd(&with(10, 0), sealed),
            "not_initialised",
        ),
        ("capacity", memfd(&with(2, 3 << 20), sealed), "capacity"),
        ("max_frame", memfd(&with(3, 1 << 30), sealed), "max_frame"),
        ("salt", memfd(&with(4, 0), sealed), "salt"),
        ("block_shift", memfd(&with(5, 63), sealed), "block_size"),
        ("data_off", memfd(&with(7, 8192 + 4096), sealed), "disagree"),
        ("truncated", memfd(&image[..len / 2], sealed), "needs"),
        ("odd_size", memfd(&image[..4096 + 8], sealed), "is_invalid"),
        ("empty", memfd(&[], sealed), "is_invalid"),
    ];
    let me = std::process::id() as i32;
    let spec: Vec<String> = cases
        .iter()
        .map(|(label, fd, _)| format!("{label}={}", proc_fd_path(me, fd.as_fd().as_raw_fd())))
        .collect();
    let mut child = spawn("open_check", "open_check", &[("MP_OPEN", spec.join(","))]);
    for (label, _, needle) in &cases {
        let msg = child.expect("open", dl);
        assert_eq!(msg.str("label"), *label, "{}", msg.line);
        if needle.is_empty() {
            assert_eq!(msg.num("ok"), 1, "{label} should open: {}", msg.line);
        } else {
            assert_eq!(msg.num("ok"), 0, "{label} should be refused: {}", msg.line);
            let err = msg.str("err");
            assert!(
                err.contains(needle),
                "{label}: error `{err}` should mention `{needle}`"
            );
        }
        eprintln!("{label}: {}", msg.line);
    }
    child.wait_success(dl);
}
