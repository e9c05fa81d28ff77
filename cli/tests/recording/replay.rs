//! Recording and replaying: a recorder's file replayed byte for byte and at its timing, `record`
//! stopped by Ctrl-C, and the Python mcap package reading what was recorded.

use std::time::Duration;

use serde_json::Value;

use super::{attach_recorder, consumer, out_path, printed, recorded_demo, run_demo, s};
use crate::bus::{TestBus, wait_until};
use crate::util::WATCHDOG;

#[test]
fn attach_record_replay_echo_round_trip_is_byte_identical_and_in_order() {
    let bus = TestBus::up();
    let file = out_path("round.mcap");
    let id = attach_recorder(&bus, &file, &[]);
    let c = consumer(&bus, &id);
    assert_eq!(c["supervised"], true, "{c}");
    assert_eq!(c["status"], "running", "{c}");
    assert_eq!(c["info"]["kind"], "recorder", "{c}");
    let live = bus.spawn_subscribed("echo-live", &["echo", "--raw", "--count", "18"]);
    // Emitted right after `attach` returned: every event must be in the file.
    run_demo(&bus, 3, 5, 0);
    let original = live.json_lines(18);
    let out = bus.run(&["detach", &id]);
    assert!(out.status.success(), "detach: {}", out.stderr);
    out.assert_stdout_has("exited 0");
    assert!(
        consumer(&bus, &id)["status"] == "exited 0",
        "ls shows how it ended"
    );
    let out = bus.run(&["inspect", s(&file)]);
    assert!(
        out.status.success(),
        "inspect: {}{}",
        out.stdout,
        out.stderr
    );
    out.assert_stdout_has("records    18");
    out.assert_stdout_has("demo.step");
    out.assert_stdout_has("read through the footer");

    let replayed = bus.spawn_subscribed("echo-replay", &["echo", "--raw", "--count", "18"]);
    let out = bus.run(&["replay", "--max", s(&file)]);
    assert!(out.status.success(), "replay: {}", out.stderr);
    out.assert_stderr_has("18 records republished");
    let again = replayed.json_lines(18);
    for (a, b) in original.iter().zip(&again) {
        assert_eq!(a["schema"], b["schema"]);
        assert_eq!(
            a["payload"], b["payload"],
            "byte-identical payloads, in order"
        );
        assert_eq!(a["target"], b["target"], "the emitter is restored");
        assert_eq!(a["level"], b["level"]);
        assert_eq!(b["producer"]["name"], "replay");
    }
}

#[test]
fn replay_keeps_the_original_timing_unless_told_otherwise() {
    // 20 steps at 20/s: about a second of recording.
    let (bus, file, id) = recorded_demo("timing.mcap", &[], 1, 20, 20);
    assert!(bus.run(&["detach", &id]).status.success());
    let (lines, ok, err) = printed(&bus, &file);
    assert!(ok, "{err}");
    let t = |l: &Value| l["t_nanos"].as_u64().expect("t_nanos");
    let span = t(&lines[lines.len() - 1]) - t(&lines[0]);
    assert!(
        span > 800_000_000,
        "the recording spans about a second: {span}"
    );
    let t0 = std::time::Instant::now();
    let out = bus.run(&["replay", "--speed", "2", s(&file)]);
    assert!(out.status.success(), "{}", out.stderr);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_nanos(span / 2),
        "--speed 2 takes at least half the recorded span: {took:?} for {span} ns"
    );
}

#[test]
fn python_mcap_reads_a_recording_and_a_snapshot_with_the_right_counts() {
    // Recordings are LZ4-compressed: the `mcap` package decodes them with `lz4`.
    if !crate::export::python_with("mcap, lz4") {
        return;
    }
    let (bus, file, id) = recorded_demo("py-rec.mcap", &[], 3, 5, 0);
    assert!(bus.run(&["detach", &id]).status.success());
    let snap = out_path("py-snap.mcap");
    let out = bus.run(&["snapshot", "-o", s(&snap)]);
    assert!(out.status.success(), "{}", out.stderr);
    for (f, what) in [(&file, "recording"), (&snap, "snapshot")] {
        for mode in [None, Some("--stream")] {
            let mut args = vec![s(f)];
            args.extend(mode);
            let r = crate::export::python_json("check_mcap.py", &args);
            // 3 episodes × (5 steps + 1 episode end), one producer: two schemas, two channels.
            assert_eq!(r["messages"], 18, "{what}: {r}");
            assert_eq!(
                r["topics"],
                serde_json::json!({"demo.step": 15, "demo.episode_end": 3}),
                "{what}: {r}"
            );
            assert_eq!(r["schemas"], 2, "{what}: {r}");
            assert_eq!(r["channels"], 2, "{what}: {r}");
            assert_eq!(
                r["schema_encodings"],
                serde_json::json!(["snapbus.descriptor"])
            );
            assert_eq!(r["message_encodings"], serde_json::json!(["snapbus"]));
        }
    }
}

#[test]
fn ctrl_c_on_record_first_records_what_was_emitted_before_it() {
    let bus = TestBus::up();
    let file = out_path("drain.mcap");
    let mut rec = bus.spawn(
        "record",
        &["record", "-o", s(&file), "--schema", "demo.step"],
    );
    rec.expect_stderr("recording bus");
    let pid = rec.pid();
    wait_until("the recorder reads the bus", WATCHDOG, || {
        bus.ls()["consumers"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["info"]["pid"].as_u64() == Some(u64::from(pid)))
        })
    });
    let signal = |sig| {
        let p = rustix::process::Pid::from_raw(pid as i32).expect("pid");
        rustix::process::kill_process(p, sig).expect("signal the recorder");
    };
    // The recorder is stopped while the demo emits 1000 steps of 4 KiB: all of them wait in
    // the ring when it is told to stop (Ctrl-C, then it runs again).
    signal(rustix::process::Signal::STOP);
    let out = bus.run(&[
        "demo",
        "--no-echo",
        "--episodes",
        "50",
        "--steps",
        "20",
        "--image",
        "64x64",
        "--rate",
        "0",
    ]);
    assert!(out.status.success(), "demo: {}", out.stderr);
    signal(rustix::process::Signal::INT);
    signal(rustix::process::Signal::CONT);
    let (status, _) = rec.wait();
    let log = rec.log();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("snapbus record: 1000 records (0 lost"),
        "{log}"
    );
    assert!(!log.contains("not read"), "{log}");
    let (lines, ok, err) = printed(&bus, &file);
    assert!(ok, "{err}");
    assert_eq!(lines.len(), 1000);
}
