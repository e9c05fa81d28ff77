//! `snapshot`: a dead producer's last events, the last seconds only, where a wrapped ring's
//! history starts, and how much time a ring holds.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::{out_path, printed, s};
use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, runtime_root};

#[test]
fn a_snapshot_after_kill9_holds_the_dead_producers_last_events() {
    let bus = TestBus::up();
    let mut demo = bus.spawn_demo("200");
    let echo = bus.spawn_subscribed("echo", &["echo", "--until-end", "--from", "oldest"]);
    let mut seen = echo.json_lines(5);
    let pid = demo.pid();
    bus.kill9_producer(&mut demo);
    let mut echo = echo;
    let (status, rest) = echo.wait();
    assert!(status.success(), "{}", echo.log());
    seen.extend(
        rest.iter()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON")),
    );
    let file = out_path("dead.mcap");
    let out = bus.run(&["snapshot", "-o", s(&file)]);
    assert!(out.status.success(), "snapshot: {}", out.stderr);
    let (lines, ok, err) = printed(&bus, &file);
    assert!(ok, "{err}");
    let of_demo: Vec<&Value> = lines
        .iter()
        .filter(|l| l["producer"]["pid"] == pid)
        .collect();
    // Everything the dead producer wrote is still in its ring (it wrote far less than a ring).
    assert_eq!(
        of_demo.len(),
        seen.len(),
        "the snapshot holds what echo saw"
    );
    for (a, b) in seen.iter().zip(&of_demo) {
        assert_eq!(a["payload"], b["payload"]);
        assert_eq!(
            a["seq"].as_u64().map(|s| s as u32 as u64),
            b["seq"].as_u64()
        );
    }
    let out = bus.run(&["inspect", "--json", s(&file)]);
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(v["recording"]["source"], "snapshot");
    assert_eq!(v["complete"], true);
}

#[test]
fn snapshot_last_holds_only_the_last_seconds() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("100");
    let pid = demo.pid();
    // About 4 s of history (the demo emits 11 records per 10 steps).
    wait_until("4 s of history", WATCHDOG, || {
        bus.producer(pid)
            .is_some_and(|p| p["frames"].as_u64().unwrap_or(0) >= 440)
    });
    let before_nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let last = out_path("last.mcap");
    let out = bus.run(&["snapshot", "--last", "2s", "-o", s(&last)]);
    assert!(out.status.success(), "{}", out.stderr);
    let all = out_path("all.mcap");
    let out = bus.run(&["snapshot", "-o", s(&all)]);
    assert!(out.status.success(), "{}", out.stderr);
    drop(demo);
    let (recent, ok, err) = printed(&bus, &last);
    assert!(ok, "{err}");
    let (everything, ok, err) = printed(&bus, &all);
    assert!(ok, "{err}");
    assert!(!recent.is_empty());
    let oldest = recent
        .iter()
        .filter_map(|l| l["t_nanos"].as_u64())
        .min()
        .expect("times");
    assert!(
        oldest >= before_nanos - 2_000_000_000,
        "a record {} ms older than the 2 s window",
        (before_nanos - 2_000_000_000 - oldest) / 1_000_000
    );
    assert!(
        everything.len() > recent.len() + 100,
        "the full snapshot has the older history too ({} vs {})",
        everything.len(),
        recent.len()
    );
}

/// The LOSSES section of `inspect`'s output.
fn losses_section(stdout: &str) -> &str {
    let after = stdout.split("LOSSES").nth(1).expect("LOSSES");
    after.split("DAMAGE").next().unwrap_or(after)
}

/// Issue #15 item 3: a snapshot of a ring that had wrapped, and a `--last` window, say where
/// each producer's history starts and never claim "LOSSES none".
#[test]
fn inspect_of_a_wrapped_or_windowed_snapshot_says_where_history_starts() {
    let bus = TestBus::up();
    bus.demo(40, 100, 0, &[("SNAPBUS_LANE_BYTES", "65536")]);
    let full = out_path("wrapped-snap.mcap");
    let out = bus.run(&["snapshot", "-o", s(&full)]);
    assert!(out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("earlier records were already overwritten");
    let out = bus.run(&["inspect", s(&full)]);
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    let losses = losses_section(&out.stdout);
    assert!(!losses.contains("none"), "{}", out.stdout);
    assert!(losses.contains("history starts at seq"), "{}", out.stdout);
    assert!(
        losses.contains("earlier records were overwritten in the ring"),
        "{}",
        out.stdout
    );
    let v: Value = serde_json::from_str(bus.run(&["inspect", "--json", s(&full)]).stdout.trim())
        .expect("JSON");
    let h = &v["histories"][0];
    let first: u64 = h["first_seq"]
        .as_str()
        .expect("first_seq")
        .parse()
        .expect("n");
    assert!(first > 0, "{v}");
    assert_eq!(h["overwritten"], first.to_string(), "{v}");

    let window = out_path("window-snap.mcap");
    let out = bus.run(&["snapshot", "--last", "1h", "-o", s(&window)]);
    assert!(out.status.success(), "{}", out.stderr);
    let out = bus.run(&["inspect", s(&window)]);
    let losses = losses_section(&out.stdout);
    assert!(!losses.contains("none"), "{}", out.stdout);
    assert!(
        losses.contains("where the recording's window starts"),
        "{}",
        out.stdout
    );
}

/// Issue 20, item 1: history in seconds. `ls --history` says how much time each lane holds
/// now (its oldest to newest record), and it is what a snapshot of that lane gets (±10 %); `snapshot --last`
/// warns, naming the producer, when its ring holds less than asked; `inspect` states each
/// producer's span.
#[test]
fn ls_history_secs_is_the_span_a_snapshot_gets_and_a_short_ring_is_reported() {
    let bus = TestBus::up();
    let mut cmd = bus.endless_demo("100", "2000");
    cmd.args(["--image", "16x16"])
        .env("SNAPBUS_LANE_BYTES", "262144");
    let demo = crate::bus::Bg::spawn("demo", cmd);
    let pid = demo.pid();
    // A young producer whose ring has not wrapped: it lost nothing, so no warning names it.
    let young = bus.spawn_demo("2000");
    // The ring has wrapped (its oldest record is not the first) and spans some time.
    wait_until("the demo's ring has wrapped", WATCHDOG, || {
        bus.producer_history(pid).is_some_and(|p| {
            p["history_first_seq"].as_u64() > Some(0) && p["history_secs"].as_f64() > Some(0.05)
        })
    });
    let y = bus
        .producer_history(young.pid())
        .expect("the young demo in ls");
    assert_eq!(
        y["history_first_seq"], 0,
        "the young demo's ring holds its first record: {y}"
    );
    // Frozen, so that `ls` and the snapshot see the same ring.
    let stop = |sig| {
        let p = rustix::process::Pid::from_raw(pid as i32).expect("pid");
        rustix::process::kill_process(p, sig).expect("signal the demo");
    };
    stop(rustix::process::Signal::STOP);
    let frozen = || bus.producer_history(pid).expect("the demo in ls");
    let mut p = frozen();
    wait_until("the ring is still", WATCHDOG, || {
        let now = frozen();
        let still = now["frames"] == p["frames"];
        p = now;
        still
    });
    let history_secs = p["history_secs"].as_f64().expect("history_secs");
    let text = bus.run(&["ls", "--history"]).stdout;
    assert!(
        text.contains(&format!("{history_secs:.1} s")),
        "ls shows no HISTORY of {history_secs:.1} s:\n{text}"
    );

    let dir = runtime_root().join(format!("history-{}", bus.name));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("snap.mcap");
    let out = bus.run(&["snapshot", "--last", "1h", "-o", s(&file)]);
    stop(rustix::process::Signal::CONT);
    assert!(out.status.success(), "snapshot: {}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "warning: producer 'demo' (pid {pid}): its ring holds only the last {history_secs:.1} s of the 3600.0 s asked for (256 KiB lane)"
        )),
        "no warning naming the short ring: {}",
        out.stderr
    );
    assert_eq!(
        out.stderr.matches("warning").count(),
        1,
        "only the wrapped ring is named: {}",
        out.stderr
    );
    drop(young);
    let v: Value = serde_json::from_str(bus.run(&["inspect", "--json", s(&file)]).stdout.trim())
        .expect("inspect --json");
    let spans = v["producer_spans"].as_array().expect("producer_spans");
    let lane = format!("{:016x}", p["info"]["lane_id"].as_u64().expect("lane_id"));
    let span = spans
        .iter()
        .find(|s| s["lane"] == lane.as_str())
        .unwrap_or_else(|| panic!("no span of lane {lane}: {v}"));
    let span_secs = span["span_secs"].as_f64().expect("span_secs");
    assert!(
        (span_secs - history_secs).abs() <= 0.1 * history_secs,
        "ls said {history_secs} s, the snapshot holds {span_secs} s"
    );
    assert_eq!(
        span["records"].as_u64(),
        p["history_records"].as_u64(),
        "the snapshot holds what ls counted"
    );
    let text = bus.run(&["inspect", s(&file)]).stdout;
    assert!(
        text.contains(&format!("{} records, ", p["history_records"])),
        "inspect states no span per producer:\n{text}"
    );
    // A window the ring does hold: no warning.
    let out = bus.run(&[
        "snapshot",
        "--last",
        "1ms",
        "-o",
        s(&dir.join("short.mcap")),
    ]);
    assert!(out.status.success(), "snapshot: {}", out.stderr);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
    drop(demo);
    let _ = std::fs::remove_dir_all(&dir);
}
