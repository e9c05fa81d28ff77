//! `snapbus demo` emits exactly the documented deterministic values.

use std::io::{BufRead, BufReader, ErrorKind};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::{run, run_cmd, snapbus, wait_with_watchdog};

/// The formulas from `snapbus demo --help`, restated independently.
pub(crate) fn expected_reward(e: u64, s: u64) -> f64 {
    ((31 * e + 17 * s) % 11) as f64 / 10.0 - 0.5
}

pub(crate) fn expected_mode(e: u64) -> &'static str {
    if e % 4 == 3 { "Eval" } else { "Train" }
}

/// The demo's values (see `snapbus demo --help`) for episode `e`, step `s`, 8x6 images.
pub(crate) fn demo_leaves(e: u64, s: u64) -> Vec<(&'static str, f64)> {
    let reward = expected_reward(e, s);
    let pixels: Vec<f64> = (0..6u64)
        .flat_map(|y| (0..8u64).map(move |x| ((x + 2 * y + 3 * s + 5 * e) % 256) as f64))
        .collect();
    vec![
        ("step", s as f64),
        ("reward", reward),
        ("position.0", f64::from(s as f32 * 0.5)),
        ("position.1", f64::from(e as f32)),
        ("position.2", f64::from((s % 8) as f32 - 4.0)),
        (
            "observation.mean",
            pixels.iter().sum::<f64>() / pixels.len() as f64,
        ),
        (
            "observation.min",
            pixels.iter().copied().fold(f64::INFINITY, f64::min),
        ),
        (
            "observation.max",
            pixels.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ),
    ]
}

#[test]
fn demo_emits_the_documented_values_in_order() {
    let (episodes, steps, w, h) = (5u64, 3u64, 4u64, 2u64);
    let out = run(&[
        "demo",
        "--episodes",
        "5",
        "--steps",
        "3",
        "--image",
        "4x2",
        "--rate",
        "0",
    ]);
    assert!(out.status.success(), "{}", out.stderr);
    let all = out.json_lines();
    // The events, and the aggregator's summaries: one per episode, one for the experiment.
    let (summaries, lines): (Vec<&Value>, Vec<&Value>) =
        all.iter().partition(|l| l["schema"] == "demo.step.summary");
    assert_eq!(lines.len() as u64, episodes * (steps + 1));
    assert_eq!(summaries.len() as u64, episodes + 1);
    let mut all_rewards = Vec::new();
    for (i, sm) in summaries.iter().enumerate() {
        let p = &sm["payload"];
        let (window, index) = (p["window"].as_str().expect("window"), p["index"].as_u64());
        let rewards: Vec<f64> = if i as u64 == episodes {
            assert_eq!((window, index), ("experiment", Some(episodes)));
            all_rewards.clone()
        } else {
            assert_eq!((window, index), ("episode", Some(i as u64)));
            (0..steps).map(|s| expected_reward(i as u64, s)).collect()
        };
        all_rewards.extend(if window == "episode" {
            rewards.clone()
        } else {
            Vec::new()
        });
        let mean = rewards.iter().sum::<f64>() / rewards.len() as f64;
        assert_eq!(p["count"], rewards.len() as u64);
        let got = p["stats"]["reward"]["mean"].as_f64().expect("mean");
        assert!((got - mean).abs() < 1e-12, "{got} vs {mean}");
    }

    let mut it = lines.iter();
    let mut last_t = 0;
    for e in 0..episodes {
        let mut total = 0.0;
        for s in 0..steps {
            let line = it.next().expect("step line");
            assert_eq!(line["schema"], "demo.step");
            assert_eq!(line["version"], 1);
            let t = line["t_nanos"].as_u64().expect("t_nanos");
            assert!(t >= last_t, "timestamps go forward");
            last_t = t;
            let p = &line["payload"];
            let pixels: Vec<u64> = (0..h)
                .flat_map(|y| (0..w).map(move |x| (x + 2 * y + 3 * s + 5 * e) % 256))
                .collect();
            let reward = expected_reward(e, s);
            total += reward;
            assert_eq!(
                *p,
                json!({
                    "episode": e,
                    "step": s,
                    "mode": expected_mode(e),
                    "reward": reward,
                    "position": [s as f64 * 0.5, e as f64, (s % 8) as f64 - 4.0],
                    "observation": {"dtype": "u8", "shape": [h, w], "data": pixels},
                })
            );
        }
        let end = it.next().expect("episode_end line");
        assert_eq!(end["schema"], "demo.episode_end");
        assert_eq!(
            end["payload"],
            json!({
                "episode": e,
                "steps": steps,
                "mode": expected_mode(e),
                "total_reward": total,
                "mean_reward": total / steps as f64,
            })
        );
    }
}

#[test]
fn demo_with_closed_stdout_exits_cleanly() {
    let mut child = snapbus()
        .args([
            "demo",
            "--episodes",
            "100000",
            "--steps",
            "100",
            "--rate",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).expect("read");
    // The reader (and the pipe) are dropped here, like `snapbus demo | head -1`.
    assert!(first.contains("demo.step"));
    let status = wait_with_watchdog(&mut child);
    assert!(
        status.success(),
        "a closed pipe is not an error: {status:?}"
    );
}

#[test]
fn demo_refuses_an_image_the_lane_cannot_hold_before_starting() {
    for (lane, image) in [(None, "4096x4096"), (Some("1048576"), "1024x1024")] {
        let mut cmd = snapbus();
        cmd.args(["demo", "--no-echo", "--image", image, "--rate", "0"]);
        if let Some(l) = lane {
            cmd.env("SNAPBUS_LANE_BYTES", l);
        }
        let out = run_cmd(&mut cmd);
        assert!(!out.status.success(), "{image}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        // Refused up front, said once, with the limit: no bus was started.
        assert_eq!(
            out.stderr.matches("largest record").count(),
            1,
            "{}",
            out.stderr
        );
        out.assert_stderr_has(&format!("--image {image}"));
        assert!(!out.stderr.contains("is up"), "{}", out.stderr);
    }
    // What fits runs, in a small lane too (256 KiB records: 300x300 is 90,000 pixels).
    let out = run_cmd(
        snapbus()
            .args(["demo", "--no-echo", "--image", "300x300", "--rate", "0"])
            .args(["--episodes", "1", "--steps", "2"])
            .env("SNAPBUS_LANE_BYTES", "1048576"),
    );
    assert!(out.status.success(), "{}", out.stderr);
    out.assert_stderr_has("emitted 3 of 3 events");
}

#[test]
fn demo_refuses_a_bad_lane_size() {
    for (value, reason) in [
        ("abc", "not a whole number"),
        ("100000", "not a power of two"),
        ("1024", "smaller than 64 KiB"),
    ] {
        let out = run_cmd(
            snapbus()
                .args(["demo", "--no-echo", "--rate", "0"])
                .env("SNAPBUS_LANE_BYTES", value),
        );
        assert!(!out.status.success(), "{value}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("SNAPBUS_LANE_BYTES={value}"))
                && out.stderr.contains(reason),
            "{value}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert!(!out.stderr.contains("is up"), "{}", out.stderr);
    }
}

#[test]
fn demo_counts_only_the_events_it_wrote() {
    let demo = |filter: &str| {
        let out = run_cmd(
            snapbus()
                .args(["demo", "--no-echo", "--rate", "0"])
                .args(["--episodes", "2", "--steps", "3"])
                .env("SNAPBUS_FILTER", filter),
        );
        assert!(out.status.success(), "{}", out.stderr);
        out
    };
    // Everything the demo emits is INFO under `demo`: `warn` filters all of it out.
    let out = demo("warn");
    assert!(
        out.stderr.contains("emitted 0 of 8 events")
            && out.stderr.contains("8 filtered out by the level filter"),
        "{}",
        out.stderr
    );
    let out = demo("warn,demo=info");
    out.assert_stderr_has("emitted 8 of 8 events");
    assert!(!out.stderr.contains("filtered"), "{}", out.stderr);
}

/// The demo and the processes it starts (`echo`, the aggregator) share one standard error;
/// each of their lines reaches it in one write, so no line arrives cut by another process's.
/// Standard error is a datagram socket here: each `write(2)` is one datagram.
#[test]
fn demo_and_its_children_write_whole_lines_to_a_shared_stderr() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixDatagram;
    use std::time::Instant;

    let (ours, theirs) = UnixDatagram::pair().expect("socketpair");
    let mut child = snapbus()
        .args(["demo", "--episodes", "3", "--steps", "5", "--rate", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::from(OwnedFd::from(theirs)))
        .spawn()
        .expect("spawn snapbus demo");
    ours.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("read timeout");
    let deadline = Instant::now() + crate::util::WATCHDOG;
    let mut writes = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut exited = None;
    loop {
        match ours.recv(&mut buf) {
            Ok(n) => writes.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            // Quiet: done once the demo has exited and nothing more is queued.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if exited.is_some() {
                    break;
                }
                exited = child.try_wait().expect("try_wait");
                assert!(
                    Instant::now() < deadline || exited.is_some(),
                    "{:?}",
                    child.kill()
                );
            }
            Err(e) => panic!("reading the demo's stderr: {e}"),
        }
    }
    assert!(exited.expect("exited").success(), "{writes:?}");
    assert!(
        writes
            .iter()
            .any(|w| w.contains("snapbus demo: emitted 18 of 18 events")),
        "{writes:?}"
    );
    let cut: Vec<&String> = writes.iter().filter(|w| !w.ends_with('\n')).collect();
    assert!(
        cut.is_empty(),
        "lines written in pieces: {cut:?} (all: {writes:?})"
    );
}

/// The pids of the live (not zombie) children of `parent` whose command line holds `word`.
fn children_running(parent: u32, word: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // `pid (comm) state ppid …`: the fields after the last ')'.
            let mut rest = stat.rsplit_once(')').map_or("", |r| r.1).split_whitespace();
            let (state, ppid) = (rest.next(), rest.next().and_then(|p| p.parse::<u32>().ok()));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(parent)
                && state != Some("Z")
                && String::from_utf8_lossy(&cmdline).contains(word)
        })
        .collect()
}

/// Whether process `pid` is gone (or a zombie nobody reaped: it runs no more).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|r| r.1.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// The `echo` the demo starts for itself dies with it, even by `kill -9` (it used to run on,
/// re-parented, after the demo and the bus were gone).
#[test]
fn the_demos_echo_dies_with_a_killed_demo() {
    let bus = crate::bus::TestBus::up();
    let mut demo = crate::bus::Bg::spawn(
        "demo",
        bus.cmd(&[
            "demo",
            "--episodes",
            "1000000",
            "--steps",
            "10",
            "--rate",
            "50",
        ]),
    );
    let demo_pid = demo.pid();
    let mut echo = Vec::new();
    crate::bus::wait_until("the demo started its echo", crate::util::WATCHDOG, || {
        echo = children_running(demo_pid, "echo");
        !echo.is_empty()
    });
    assert_eq!(echo.len(), 1, "{echo:?}");
    let echo = echo[0];
    // The echo has printed demo events: it is reading, not starting.
    demo.json_lines(3);
    demo.kill9();
    crate::bus::wait_until(
        &format!("the echo (pid {echo}) is gone after the demo's kill -9"),
        Duration::from_secs(20),
        || gone(echo),
    );
}
