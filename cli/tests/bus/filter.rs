//! `filter`: a running producer's filter changed from outside, and the bus filter over each
//! producer's own until it is reset.

use std::time::Duration;

use super::{Bg, TestBus, wait_until};
use crate::util::WATCHDOG;

#[test]
fn filter_changes_what_a_running_producer_emits() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("500");
    let pid = demo.pid();
    let frames = |bus: &TestBus| {
        bus.producer(pid)
            .and_then(|p| p["frames"].as_u64())
            .unwrap_or(0)
    };
    wait_until("the demo emits", WATCHDOG, || frames(&bus) > 10);
    // Everything the demo emits is INFO: `warn` stops it, within 100 ms by the spec.
    let out = bus.run(&["filter", "warn"]);
    assert!(out.status.success(), "{}", out.stderr);
    std::thread::sleep(Duration::from_millis(300));
    let before = frames(&bus);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(frames(&bus), before, "records emitted after `filter warn`");
    assert_eq!(bus.ls()["filter"], "warn");
    let out = bus.run(&["filter", "warn,demo=info"]);
    assert!(out.status.success(), "{}", out.stderr);
    wait_until("the demo emits again", WATCHDOG, || frames(&bus) > before);
    drop(demo);
}

/// The bus filter is in force in producers started after it was set, in place of their own
/// `SNAPBUS_FILTER`, and `ls` says so (the bus filter, each producer's filter in force and its
/// own); `filter --reset` gives them back their own; an empty directive is refused with a
/// pointer to `--reset`. (Regression: the override was invisible, there was no way back, and
/// `filter ''` reset silently.)
#[test]
fn the_bus_filter_overrides_producers_own_visibly_until_reset() {
    let bus = TestBus::up();
    let out = bus.run(&["filter", "info"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("--reset"), "{}", out.stdout);
    // Its own filter would silence the demo (it emits at INFO).
    let mut cmd = bus.endless_demo("10", "500");
    cmd.env("SNAPBUS_FILTER", "warn");
    let demo = Bg::spawn("demo", cmd);
    let pid = demo.pid();
    let frames = |bus: &TestBus| {
        bus.producer(pid)
            .and_then(|p| p["frames"].as_u64())
            .unwrap_or(0)
    };
    wait_until(
        "ls shows the bus filter in force in the demo",
        WATCHDOG,
        || {
            bus.producer(pid)
                .is_some_and(|p| p["filter"] == "info" && p["own_filter"] == "warn")
        },
    );
    assert_eq!(bus.ls()["filter"], "info");
    wait_until("the demo emits under the bus filter", WATCHDOG, || {
        frames(&bus) > 10
    });
    let text = bus.run(&["ls"]).stdout;
    assert!(text.contains("bus filter 'info'"), "{text}");
    // The bus filter outlives a broker crash: the next broker has it and tells the producers.
    bus.kill9_broker();
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        bus.ls()["filter"],
        "info",
        "the restarted broker kept the bus filter"
    );
    wait_until(
        "the rejoined demo is still under the bus filter",
        WATCHDOG,
        || {
            bus.producer(pid)
                .is_some_and(|p| p["status"] == "live" && p["filter"] == "info")
        },
    );
    let out = bus.run(&["filter", "--reset"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("removed"), "{}", out.stdout);
    wait_until("the demo is back on its own filter", WATCHDOG, || {
        bus.producer(pid).is_some_and(|p| p["filter"] == "warn")
    });
    assert_eq!(bus.ls()["filter"], "");
    // It reported `warn` after applying it: nothing more is emitted (a record that passed
    // the old filter a moment before may still be committing: let it land first).
    std::thread::sleep(Duration::from_millis(100));
    let before = frames(&bus);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(frames(&bus), before, "records emitted after the reset");
    for args in [&["filter", ""][..], &["filter", " "][..]] {
        let out = bus.run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            out.stderr.contains("snapbus filter --reset"),
            "{}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
    assert_eq!(bus.ls()["filter"], "");
    drop(demo);
}
