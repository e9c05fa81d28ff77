//! Processes killed or stopped on purpose: a dead producer, a replaced broker, a stopped
//! consumer, and what `ls` and `echo` make of them.

use serde_json::Value;

use super::{Bg, TestBus, consumer, wait_until};
use crate::util::WATCHDOG;

#[test]
fn a_killed_producer_is_shown_dead_and_echo_ends_cleanly() {
    let bus = TestBus::up();
    let mut demo = bus.spawn_demo("200");
    let echo = bus.spawn_subscribed("echo", &["echo", "--until-end", "--from", "oldest"]);
    let first = echo.json_lines(5);
    assert_eq!(first[0]["seq"], 0);
    bus.kill9_producer(&mut demo);
    let mut echo = echo;
    let (status, _) = echo.wait();
    assert!(status.success(), "{}", echo.log());
    let log = echo.log();
    assert!(log.contains("died"), "{log}");
    assert!(log.contains("ended"), "{log}");
    // The broker lives on.
    let state = bus.ls();
    assert!(state["broker_pid"].as_u64().is_some());
}

#[test]
fn a_killed_broker_is_replaced_and_the_producer_readopted() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("200");
    let pid = demo.pid();
    // A consumer attached before the broker dies keeps reading, and rejoins the new broker.
    let echo = bus.spawn_subscribed("echo", &["echo"]);
    echo.json_lines(3);
    bus.kill9_broker();
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    // The demo kept running and rejoins the new broker with its lane (and its count).
    let mut frames = 0;
    wait_until("the demo is re-adopted", WATCHDOG, || {
        bus.producer(pid).is_some_and(|p| {
            frames = p["frames"].as_u64().unwrap_or(0);
            p["status"] == "live"
        })
    });
    wait_until("the re-adopted demo keeps emitting", WATCHDOG, || {
        bus.producer(pid)
            .is_some_and(|p| p["frames"].as_u64().unwrap_or(0) > frames)
    });
    let seqs: Vec<u64> = echo
        .json_lines(200)
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "the old echo goes on in order"
    );
    wait_until("the old echo rejoins the new broker", WATCHDOG, || {
        bus.ls()["consumers"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["info"]["pid"] == echo.pid()))
    });
    let late = bus.run(&["echo", "--count", "3"]);
    assert!(late.status.success(), "{}", late.stderr);
    assert_eq!(late.stdout.lines().count(), 3);
    drop(echo);
    drop(demo);
}

/// Sends `sig` to process `pid`.
fn signal(pid: u32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    rustix::process::kill_process(pid, sig).expect("kill");
}

/// A SIGSTOPped consumer does not report; `ls` shows it stale, and works out from its last
/// cursor and the ring what it has lost and how far behind it is while a producer laps it.
/// (Regression: it showed `running`, lost 0, lag 0.)
#[test]
fn a_stopped_consumer_is_shown_stale_with_its_loss_and_lag() {
    let bus = TestBus::up();
    let mut cmd = bus.endless_demo("10", "5000");
    cmd.env("SNAPBUS_LANE_BYTES", "65536");
    let demo = Bg::spawn("demo", cmd);
    let demo_pid = demo.pid();
    wait_until("the demo is live", WATCHDOG, || {
        bus.producer(demo_pid)
            .is_some_and(|p| p["status"] == "live")
    });
    let echo = bus.spawn("echo", &["echo", "--from", "latest"]);
    let pid = echo.pid();
    echo.json_lines(10);
    wait_until("the echo reports", WATCHDOG, || {
        consumer(&bus, pid).is_some_and(|c| c["delivered"].as_u64() > Some(0))
    });
    signal(pid, rustix::process::Signal::STOP);
    let mut seen = Value::Null;
    wait_until(
        "ls shows the stopped echo stale, lapped and losing",
        WATCHDOG,
        || {
            seen = consumer(&bus, pid).expect("the echo in ls");
            seen["status"]
                .as_str()
                .is_some_and(|s| s.starts_with("stale (no report for "))
                && seen["lost"].as_u64() > Some(0)
                && seen["lag_bytes"].as_u64() > Some(65536)
        },
    );
    assert!(seen["report_age_secs"].as_f64() > Some(5.0), "{seen}");
    signal(pid, rustix::process::Signal::CONT);
    wait_until("the echo reports again, with its loss", WATCHDOG, || {
        consumer(&bus, pid).is_some_and(|c| {
            c["status"] == "running" && c["lost"].as_u64() > Some(0) && c["damaged"] == 0
        })
    });
    drop(echo);
    drop(demo);
}
