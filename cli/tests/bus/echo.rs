//! `echo` of a demo: every event in order, live or from the history a closed producer left.

use super::{TestBus, check_demo_grid, check_demo_line, demo_order};

#[test]
fn echo_receives_exactly_the_demo_events_in_order() {
    let bus = TestBus::up();
    let (episodes, steps) = (4u64, 5u64);
    let n = (episodes * (steps + 1)) as usize;
    // Subscribed (from the latest record) before the experiment starts.
    let echo = bus.spawn_subscribed("echo", &["echo", "--count", &n.to_string()]);
    bus.demo(4, 5, 0, &[]);
    let lines = echo.json_lines(n);
    check_demo_grid(&lines, episodes, steps);
    let mut echo = echo;
    let (status, rest) = echo.wait();
    assert!(status.success(), "{}", echo.log());
    assert!(rest.is_empty(), "echo printed more than --count: {rest:?}");
}

#[test]
fn a_late_echo_from_oldest_gets_the_history() {
    let bus = TestBus::up();
    bus.demo(3, 4, 0, &[]);
    // The demo has exited; its lane is kept and read from its oldest record.
    let out = bus.run(&["echo", "--from", "oldest", "--until-end", "demo.step"]);
    assert!(out.status.success(), "echo: {}", out.stderr);
    let lines = out.json_lines();
    let expected: Vec<_> = demo_order(3, 4)
        .into_iter()
        .filter(|(_, s)| s.is_some())
        .collect();
    assert_eq!(lines.len(), expected.len(), "{}", out.stdout);
    for (line, (e, s)) in lines.iter().zip(expected) {
        check_demo_line(line, e, s);
    }
    assert!(out.stderr.contains("ended"), "{}", out.stderr);
    // `ls` describes the schemas it saw.
    let state = bus.ls();
    let step = state["schemas"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "demo.step"))
        .expect("demo.step in ls")
        .clone();
    assert_eq!(step["version"], 1);
    assert_eq!(step["conflict"], false);
    assert!(
        step["descriptor"]
            .as_str()
            .is_some_and(|d| d.contains("observation")),
        "{step}"
    );
    // A glob nothing matches is waited for, with a warning.
    let out = bus.run(&["echo", "--until-end", "no.such.schema"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stderr.contains("no schema on bus") && out.stderr.contains("'no.such.schema'"),
        "{}",
        out.stderr
    );
    // A late echo from the latest record gets nothing and ends at once with --until-end.
    let out = bus.run(&["echo", "--until-end"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout, "");
}
