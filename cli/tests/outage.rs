//! The broker is a control plane only (issue #15): a producer keeps writing its lane while no
//! broker is up, consumers that mapped the lane keep reading it, and a restarted broker
//! re-adopts lanes and consumers. Real processes (`snapbus up`, `demo`, `echo`, supervised
//! `attach`es), the broker killed with SIGKILL.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::bus::{Bg, TestBus, check_demo_grid, check_demo_line, demo_order, wait_until};
use crate::util::WATCHDOG;

const EPISODES: u64 = 60;
const STEPS: u64 = 1000;
const RATE_HZ: &str = "10000";

/// The ids of the consumers `ls` shows as running, by pid.
fn consumers(bus: &TestBus) -> BTreeMap<u64, Value> {
    bus.consumers()
        .into_iter()
        .filter(|c| {
            c["status"]
                .as_str()
                .is_some_and(|s| s.starts_with("running"))
        })
        .map(|c| (c["info"]["pid"].as_u64().expect("pid"), c))
        .collect()
}

/// Consumer processes that must not outlive the test, whatever happens to the broker:
/// SIGKILLed on drop (after the bus's own `down`, which should already have stopped them).
#[derive(Default)]
pub(crate) struct Reaper(pub(crate) Vec<u32>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// The id `attach` printed.
fn attach(bus: &TestBus, args: &[&str]) -> u64 {
    let out = bus.attach(args);
    out.parse()
        .unwrap_or_else(|_| panic!("{args:?} printed {out:?}"))
}

#[test]
fn two_broker_kills_lose_nothing_and_keep_consumer_ids() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "outage-{}-{}",
        std::process::id(),
        crate::util::unique_bus()
    ));
    std::fs::create_dir_all(&dir).expect("test dir");
    let rec = dir.join("rec.mcap");
    let mut reaper = Reaper::default();
    let bus = TestBus::up();

    let echo = bus.spawn_subscribed("echo", &["echo", "demo.*", "--from", "oldest"]);
    let rec_id = attach(
        &bus,
        &[
            "attach",
            "recorder",
            "--from",
            "oldest",
            "-o",
            rec.to_str().expect("utf-8 path"),
        ],
    );
    let agg_id = attach(
        &bus,
        &[
            "attach",
            "aggregator",
            "--schema",
            "demo.step",
            "--from",
            "oldest",
        ],
    );
    let before = consumers(&bus);
    reaper.0.extend(before.keys().map(|&pid| pid as u32));
    let ids = |c: &BTreeMap<u64, Value>| -> Vec<(u64, bool)> {
        c.values()
            .map(|c| {
                (
                    c["id"].as_u64().expect("id"),
                    c["supervised"].as_bool().expect("supervised"),
                )
            })
            .collect()
    };
    assert!(ids(&before).contains(&(rec_id, true)), "{before:?}");
    assert!(ids(&before).contains(&(agg_id, true)), "{before:?}");

    let (e, s) = (EPISODES.to_string(), STEPS.to_string());
    let mut demo = Bg::spawn("demo", bus.demo_cmd(&e, &s, RATE_HZ));
    let demo_pid = demo.pid();
    for round in 0..2 {
        // Let the demo get a little ahead of the last outage, then take the broker away.
        let mut frames = 0;
        wait_until("the demo is live on the broker", WATCHDOG, || {
            bus.producer(demo_pid).is_some_and(|p| {
                frames = p["frames"].as_u64().unwrap_or(0);
                p["status"] == "live" && frames > 2_000 * (round + 1)
            })
        });
        bus.kill9_broker();
        // The demo keeps emitting into its lane while no broker is up.
        let demo_lane = std::time::Instant::now();
        wait_until("some time passes without a broker", WATCHDOG, || {
            demo_lane.elapsed() >= std::time::Duration::from_millis(700)
        });
        let out = bus.run(&["up"]);
        assert!(
            out.status.success(),
            "up after kill {round}: {}",
            out.stderr
        );
        wait_until("every consumer is re-adopted", WATCHDOG, || {
            let now = consumers(&bus);
            before.keys().all(|pid| now.contains_key(pid))
        });
        let now = consumers(&bus);
        assert_eq!(
            ids(&now),
            ids(&before),
            "after broker kill {round}: ids and supervision kept\n{now:?}"
        );
    }

    let (status, _) = demo.wait();
    assert!(status.success(), "demo: {}", demo.log());
    let said = demo.log();
    let grid = EPISODES * (STEPS + 1);
    assert!(
        said.contains(&format!("emitted {grid} of {grid}")),
        "the demo says it emitted every event: {said}"
    );

    // The echo: every step and episode end, in order, with the documented values; and the
    // aggregator's summaries, one per episode with `count` = steps, and one for the run.
    let lines = echo.json_lines((grid + EPISODES + 1) as usize);
    drop(echo);
    let (summaries, events): (Vec<&Value>, Vec<&Value>) = lines
        .iter()
        .partition(|l| l["schema"] == "demo.step.summary");
    let order = demo_order(EPISODES, STEPS);
    assert_eq!(
        events.len(),
        order.len(),
        "the echo holds the whole grid ({} of {})",
        events.len(),
        order.len()
    );
    for (line, &(episode, step)) in events.iter().zip(&order) {
        check_demo_line(line, episode, step);
    }
    let mut per_episode = BTreeMap::new();
    for s in &summaries {
        let p = &s["payload"];
        if p["window"] == "episode" {
            let episode = p["group"]["episode"]
                .as_u64()
                .or_else(|| p["index"].as_u64())
                .expect("the episode of a summary");
            *per_episode.entry(episode).or_insert(0) += 1;
            assert_eq!(p["count"].as_u64(), Some(STEPS), "{s}");
            assert_eq!(p["lost"].as_u64(), Some(0), "{s}");
        }
    }
    assert_eq!(per_episode.len() as u64, EPISODES, "{per_episode:?}");
    assert!(per_episode.values().all(|&n| n == 1), "{per_episode:?}");

    // The recording: every event, under the demo, no decode error.
    let out = bus.run(&["detach", &rec_id.to_string()]);
    assert!(out.status.success(), "detach the recorder: {}", out.stderr);
    let out = bus.run(&["replay", "--print", rec.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "replay --print: {}", out.stderr);
    let recorded = out.json_lines();
    assert!(
        recorded
            .iter()
            .all(|l| l["payload"].get("decode_error").is_none()),
        "no decode errors in the recording"
    );
    let steps: Vec<&Value> = recorded
        .iter()
        .filter(|l| l["schema"] == "demo.step" || l["schema"] == "demo.episode_end")
        .collect();
    assert_eq!(
        steps.len(),
        order.len(),
        "the recording holds the whole grid"
    );
    for (line, &(episode, step)) in steps.iter().zip(&order) {
        check_demo_line(line, episode, step);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broker_killed_mid_run_loses_no_record() {
    let bus = TestBus::up();
    // 6,060 events at 1,000 steps/s: about 6 s, so the broker is down and back meanwhile.
    let (episodes, steps) = (60u64, 100u64);
    let total = episodes * (steps + 1);
    let (e, s) = (episodes.to_string(), steps.to_string());
    let mut demo = Bg::spawn("demo", bus.demo_cmd(&e, &s, "1000"));
    let pid = demo.pid();
    wait_until("the demo is live", WATCHDOG, || {
        bus.producer(pid).is_some_and(|p| p["status"] == "live")
    });
    let echo = bus.spawn_subscribed(
        "echo",
        &["echo", "--from", "oldest", "--count", &total.to_string()],
    );
    let mut lines = echo.json_lines(50);

    bus.kill9_broker();
    // No broker: the demo keeps writing its lane, and the echo, which mapped it, keeps reading
    // (1,500 more records is 1.5 s of the demo without a broker).
    lines.extend(echo.json_lines(1500));
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    wait_until("the demo is re-adopted", WATCHDOG, || {
        bus.producer(pid).is_some()
    });

    let (status, _) = demo.wait();
    assert!(status.success(), "{}", demo.log());
    let rest = total as usize - lines.len();
    lines.extend(echo.json_lines(rest));
    let mut echo = echo;
    let (status, extra) = echo.wait();
    assert!(status.success(), "{}", echo.log());
    assert!(extra.is_empty(), "more than --count: {extra:?}");

    // Every step of the grid, in order, nothing twice.
    let check = |lines: &[Value]| check_demo_grid(lines, episodes, steps);
    check(&lines);
    // The demo's count is what reached the lane, and the lane dropped nothing.
    assert!(
        demo.log()
            .contains(&format!("emitted {total} of {total} events")),
        "{}",
        demo.log()
    );
    let p = bus.producer(pid).expect("the demo in ls");
    assert_eq!(p["frames"], total, "{p}");
    assert_eq!(p["dropped"], 0, "{p}");
    // A late reader of the new broker gets the whole history, outage included.
    let out = bus.run(&["echo", "--from", "oldest", "--until-end", "demo.*"]);
    assert!(out.status.success(), "{}", out.stderr);
    let late = out.json_lines();
    check(&late);
}
