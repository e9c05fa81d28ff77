//! `replay --print`: the producers of a file merged by record time, whole or cut.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use snapbus_consumers::recording::{Item, RecordingReader};

use super::{Direct, mixed, path_str, tmp};
use crate::util::{Output, run};

/// `replay --print FILE`: the printed records (and the command's success).
fn replay_print(file: &Path) -> (Vec<Json>, Output) {
    let out = run(&["replay", "--print", path_str(file)]);
    (out.json_lines(), out)
}

/// Checks that `lines` are in record-time order and each producer's records in its own order.
fn assert_time_ordered(lines: &[Json]) {
    let times: Vec<u64> = lines
        .iter()
        .map(|l| l["t_nanos"].as_u64().expect("t_nanos"))
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "not in time order: {times:?}"
    );
    let mut last_seq: BTreeMap<String, u64> = BTreeMap::new();
    for l in lines {
        let p = l["producer"].to_string();
        let seq = l["seq"].as_u64().expect("seq");
        if let Some(prev) = last_seq.insert(p, seq) {
            assert!(prev < seq, "a producer's records out of order: {l}");
        }
    }
}

/// Issue 15, item 17: `replay --print` merges the producers of a file by record time (a file
/// holds them interleaved as the recorder read them), keeping every record.
#[test]
fn replay_print_merges_producers_by_record_time() {
    // alpha at 1000.., beta at 2000.. but written interleaved; then beta's loss and v2 ticks.
    let rec = mixed("merge-mixed.mcap");
    let (lines, out) = replay_print(&rec);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(lines.len(), 39, "{}", out.stderr);
    assert_time_ordered(&lines);
    out.assert_stderr_has("lost 42 records");

    // Three producers written one after the other, with overlapping times.
    let rec = tmp("merge-blocks.mcap");
    let mut d = Direct::create(&rec, 4 << 10);
    d.ticks(0, 200, 10_000, 3);
    d.ticks(1, 200, 10_001, 3);
    d.ticks(0, 100, 20_000, 1);
    d.finish();
    let (lines, out) = replay_print(&rec);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(lines.len(), 500);
    assert_time_ordered(&lines);
    let producers: Vec<&str> = lines[..4]
        .iter()
        .map(|l| l["producer"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(producers, ["alpha", "beta", "alpha", "beta"]);
}

/// Issue 15, item 17, as reported: a snapshot of two producers that ran at the same time
/// prints in time order.
#[test]
fn replay_print_of_a_snapshot_of_two_producers_is_in_time_order() {
    let bus = crate::bus::TestBus::up();
    let demos: Vec<_> = (0..2)
        .map(|_| {
            bus.spawn(
                "demo",
                &[
                    "demo",
                    "--no-echo",
                    "--episodes",
                    "20",
                    "--steps",
                    "10",
                    "--rate",
                    "2000",
                ],
            )
        })
        .collect();
    for mut d in demos {
        let (status, _) = d.wait();
        assert!(status.success(), "{}", d.log());
    }
    let snap = tmp("merge-snap.mcap");
    let out = bus.run(&["snapshot", "-o", path_str(&snap)]);
    assert!(out.status.success(), "{}", out.stderr);
    let (lines, out) = replay_print(&snap);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(lines.len(), 2 * 20 * 11, "{}", out.stderr);
    assert_time_ordered(&lines);
}

/// `replay --print` of an interleaved file that was cut: the records before the cut, merged
/// by time, then the error naming the offset.
#[test]
fn replay_print_of_a_cut_interleaved_file_merges_what_precedes_the_cut() {
    let rec = two_producers_cut("merge-cut.mcap", 3);
    let (lines, out) = replay_print(&rec);
    assert_fails_at_one_offset(&out);
    assert!(lines.len() > 300 && lines.len() < 600, "{}", lines.len());
    assert_time_ordered(&lines);
}

/// A recording `name` of 300 ticks of alpha from 10,000 ns and 300 of beta 1 ns after each,
/// `every` ns apart, written one producer after the other, then cut at three quarters.
fn two_producers_cut(name: &str, every: u64) -> PathBuf {
    let rec = tmp(name);
    let mut d = Direct::create(&rec, 2 << 10);
    d.ticks(0, 300, 10_000, every);
    d.ticks(1, 300, 10_001, every);
    d.finish();
    let bytes = std::fs::read(&rec).expect("read");
    std::fs::write(&rec, &bytes[..bytes.len() * 3 / 4]).expect("cut");
    rec
}

/// Asserts that `out` is a failure that names the one byte offset where the file is damaged.
#[track_caller]
fn assert_fails_at_one_offset(out: &Output) {
    assert!(!out.status.success(), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("at byte offset").count(),
        1,
        "{}",
        out.stderr
    );
}

/// `replay --print` of a file cut inside its second producer's records (written after the
/// first's): every record before the cut is printed, then the error.
#[test]
fn replay_print_of_a_file_cut_in_its_second_producer_prints_everything_before_the_cut() {
    let rec = two_producers_cut("merge-cut2.mcap", 2);
    // What the reader gets before the cut, in file order.
    let before: usize = RecordingReader::new(std::fs::File::open(&rec).expect("open"))
        .map_while(Result::ok)
        .filter(|i| matches!(i, Item::Message(_)))
        .count();
    assert!(before > 300, "the cut is in the second producer's records");
    let (lines, out) = replay_print(&rec);
    assert_fails_at_one_offset(&out);
    assert_eq!(lines.len(), before, "{}", out.stderr);
    assert_time_ordered(&lines);
}
