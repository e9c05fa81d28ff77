//! Consumers started before the bus wait for it (`--wait [SECS]`), saying so once, then read
//! as usual; past the limit, the usual "no bus" error and a non-zero exit.

use crate::bus::{Bg, TestBus, check_demo_grid};
use crate::util::unique_bus;

#[test]
fn echo_started_before_the_bus_waits_then_prints_every_event() {
    let bus = TestBus { name: unique_bus() };
    let echo = bus.spawn("echo", &["echo", "--wait", "--count", "8"]);
    let said = echo.expect_stderr("waiting for the bus");
    assert!(said.contains(&bus.name), "{said}");
    assert!(said.contains("snapbus up"), "{said}");
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "up: {}", out.stderr);
    echo.expect_stderr("subscribed");
    bus.demo(2, 3, 0, &[]);
    let lines = echo.json_lines(8);
    check_demo_grid(&lines, 2, 3);
    let mut echo = echo;
    let (status, _) = echo.wait();
    assert!(status.success(), "{}", echo.log());
    assert_eq!(
        echo.log().matches("waiting for the bus").count(),
        1,
        "said once: {}",
        echo.log()
    );
}

#[test]
fn attach_and_record_wait_for_the_bus_too() {
    let bus = TestBus { name: unique_bus() };
    let dir = crate::runs::runs_dir("attach-wait");
    std::fs::create_dir_all(&dir).expect("files dir");
    let file = dir.join(format!("{}-attach-wait.mcap", bus.name));
    let _ = std::fs::remove_file(&file);
    let path = file.to_str().expect("utf-8");
    let mut attach = Bg::spawn(
        "attach",
        bus.cmd(&["attach", "recorder", "--wait", "30", "-o", path]),
    );
    attach.expect_stderr("snapbus attach: waiting for the bus");
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "up: {}", out.stderr);
    let (status, id) = attach.wait();
    assert!(status.success(), "{}", attach.log());
    assert!(id.concat().trim().parse::<u64>().is_ok(), "{id:?}");
    bus.demo(1, 4, 0, &[]);
    let out = bus.run(&["detach", id.concat().trim()]);
    assert!(out.status.success(), "detach: {}", out.stderr);
    let out = bus.run(&["replay", "--print", path]);
    check_demo_grid(&out.json_lines(), 1, 4);
}

#[test]
fn past_the_wait_limit_the_no_bus_error_and_a_non_zero_exit() {
    let bus = TestBus { name: unique_bus() };
    for args in [
        &["echo", "--wait", "0.3"][..],
        &["record", "--wait=300ms", "-o", "/nonexistent/never.mcap"][..],
        &[
            "attach",
            "recorder",
            "--wait",
            "300ms",
            "-o",
            "/nonexistent/never.mcap",
        ][..],
    ] {
        let out = bus.run(args);
        assert!(!out.status.success(), "{args:?}: {}", out.stdout);
        out.assert_stderr_has("waiting for the bus");
        out.assert_stderr_has("no bus appeared within --wait 300ms");
        out.assert_stderr_has(&format!("no bus '{}' is running", bus.name));
    }
    // Without --wait, at once as before.
    let out = bus.run(&["echo"]);
    assert!(!out.status.success());
    assert!(!out.stderr.contains("waiting"), "{}", out.stderr);
}
