//! A killed broker costs a running producer nothing (issue #15, item 1): the producer keeps
//! writing its lane while no broker is up, a consumer that mapped the lane keeps reading it,
//! and a restarted broker re-adopts the lane with everything written meanwhile. Real
//! processes (`snapbus up`, `demo`, `echo`), the broker killed with SIGKILL.

use serde_json::Value;

use crate::bus::{TestBus, check_demo_line, demo_order, wait_until};
use crate::util::WATCHDOG;

fn kill9_broker(bus: &TestBus) {
    let broker = bus.ls()["broker_pid"].as_u64().expect("broker pid") as i32;
    let broker = rustix::process::Pid::from_raw(broker).expect("pid");
    rustix::process::kill_process(broker, rustix::process::Signal::KILL).expect("kill broker");
    wait_until("the broker is gone", WATCHDOG, || {
        !bus.run(&["ls"]).status.success()
    });
}

#[test]
fn a_broker_killed_mid_run_loses_no_record() {
    let bus = TestBus::up();
    // 6,060 events at 1,000 steps/s: about 6 s, so the broker is down and back meanwhile.
    let (episodes, steps) = (60u64, 100u64);
    let total = episodes * (steps + 1);
    let mut demo = bus.spawn(
        "demo",
        &[
            "demo",
            "--no-echo",
            "--episodes",
            &episodes.to_string(),
            "--steps",
            &steps.to_string(),
            "--rate",
            "1000",
        ],
    );
    let pid = demo.pid();
    wait_until("the demo is live", WATCHDOG, || {
        bus.producer(pid).is_some_and(|p| p["status"] == "live")
    });
    let echo = bus.spawn(
        "echo",
        &["echo", "--from", "oldest", "--count", &total.to_string()],
    );
    echo.expect_stderr("subscribed");
    let mut lines = echo.json_lines(50);

    kill9_broker(&bus);
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
    let check = |lines: &[Value]| {
        assert_eq!(lines.len() as u64, total);
        for (line, (e, s)) in lines.iter().zip(demo_order(episodes, steps)) {
            check_demo_line(line, e, s);
        }
        let seqs: Vec<u64> = lines
            .iter()
            .map(|l| l["seq"].as_u64().expect("seq"))
            .collect();
        assert_eq!(
            seqs,
            (0..total).collect::<Vec<_>>(),
            "no gap in the sequence"
        );
    };
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
    let late: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    check(&late);
}
