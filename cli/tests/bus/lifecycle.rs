//! `up` and `down`, buses side by side, and what verbs refuse: no bus, bad globs, bad filter
//! directives, bad bus names.

use super::TestBus;
use crate::util::{run_cmd, snapbus, unique_bus};

#[test]
fn two_buses_side_by_side_stay_isolated() {
    let a = TestBus::up();
    let b = TestBus::up();
    a.demo(2, 2, 0, &[]);
    assert_eq!(a.ls()["producers"].as_array().map(Vec::len), Some(1));
    assert_eq!(b.ls()["producers"].as_array().map(Vec::len), Some(0));
    let out = b.run(&["echo", "--from", "oldest", "--until-end"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "", "bus b saw bus a's events");
    let out = a.run(&["echo", "--from", "oldest", "--until-end"]);
    assert_eq!(out.stdout.lines().count(), 6, "{}", out.stderr);
}

#[test]
fn up_twice_says_so_and_down_removes_the_socket_and_keeps_the_log() {
    let bus = TestBus::up();
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("already running"), "{}", out.stdout);
    let dir = crate::util::runtime_root().join(&bus.name);
    assert!(dir.join("broker.sock").exists());
    let out = bus.run(&["down"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!dir.join("broker.sock").exists(), "down left the socket");
    assert!(!dir.join("broker.lock").exists(), "down left the lock file");
    // The broker's log stays for the user to read, and `down` says where.
    assert!(
        dir.join("broker.log").exists(),
        "down removed the broker's log"
    );
    assert!(
        out.stdout.contains(&dir.display().to_string()),
        "{}",
        out.stdout
    );
    let out = bus.run(&["down"]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("no bus"), "{}", out.stderr);
}

#[test]
fn verbs_without_a_bus_fail_with_a_clear_message() {
    let name = unique_bus();
    for args in [
        &["ls"][..],
        &["echo"][..],
        &["hz"][..],
        &["down"][..],
        &["filter", "info"][..],
    ] {
        let out = run_cmd(snapbus().env("SNAPBUS_BUS", &name).args(args));
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            out.stderr.contains(&format!(
                "no bus '{name}' is running — start one with `snapbus up"
            )),
            "{args:?}: {}",
            out.stderr
        );
    }
}

#[test]
fn bad_globs_directives_and_bus_names_are_refused() {
    let bus = TestBus::up();
    for (args, needle) in [
        (&["echo", "demo/*"][..], "bad glob"),
        (&["hz", "a b"][..], "bad glob"),
        (&["filter", "info,monty=loud"][..], "unknown level"),
        (&["filter", "=debug"][..], "target before '=' is empty"),
        (&["filter", "a=b=c"][..], "more than one '='"),
        (&["ls", "--bus", "../etc"][..], "invalid bus name"),
    ] {
        let out = bus.run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{args:?}: {}", out.stderr);
    }
}
