//! Lane sizes: `SNAPBUS_LANE_BYTES` (and `Config::lane_bytes`) are checked. A program can
//! refuse a bad one up front ([`snapbus::lane_bytes_from_env`]); the producer itself says so
//! once on stderr and uses the default (telemetry never fails its host program).

use std::path::PathBuf;
use std::time::Duration;

use snapbus::{Config, DEFAULT_LANE_BYTES, Level};
use snapbus_bus::broker;
use snapbus_bus::client::{BusClient, Census};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_schemas::builtin::DurationSample;

use crate::child::run_ignored_test;

#[test]
fn lane_sizes_are_checked_with_the_reason() {
    assert_eq!(snapbus::parse_lane_bytes("65536"), Ok(65536));
    assert_eq!(snapbus::parse_lane_bytes(" 1048576 "), Ok(1 << 20));
    for (value, reason) in [
        ("abc", "not a whole number"),
        ("-4", "not a whole number"),
        ("", "not a whole number"),
        ("100000", "not a power of two"),
        ("0", "not a power of two"),
        ("32768", "smaller than 64 KiB"),
        ("2199023255552", "larger than 1 TiB"),
    ] {
        let e = snapbus::parse_lane_bytes(value).expect_err(value);
        assert_eq!(e.reason, reason, "{value}");
        assert!(e.to_string().contains("a power of two from 65536"), "{e}");
    }
    // The largest payload: frames up to 8 MiB, at most a quarter of the lane, less a header;
    // a lane of 8 MiB (one that fits the cache) takes 1 MiB arrays.
    assert_eq!(snapbus::max_payload_bytes(None), Ok((8 << 20) - 48));
    assert_eq!(
        snapbus::max_payload_bytes(Some(1 << 20)),
        Ok((256 << 10) - 48)
    );
    assert_eq!(
        snapbus::max_payload_bytes(Some(8 << 20)),
        Ok((2 << 20) - 48)
    );
    assert!(snapbus::max_payload_bytes(Some(3)).is_err());
}

/// Joins a bus (a broker in this process) with `SNAPBUS_LANE_BYTES` as the parent set it, and
/// prints the lane size the broker sees as `lane_bytes: N`.
#[test]
#[ignore = "run by `a_bad_lane_size_is_reported_once_and_the_default_used` in a child process"]
fn lane_bytes_in_this_process() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("lanebytes-{}", std::process::id()));
    let name = BusName::new("lanebytes").expect("name");
    let dir = BusDir::locate_in(&root, &name);
    let broker = broker::InProcess::start(dir.clone(), Duration::from_secs(60)).expect("broker");
    assert!(snapbus::init(Config {
        bus: Some(name.to_string()),
        runtime_dir: Some(root.clone()),
        ..Config::default()
    }));
    let t = snapbus::telemetry!();
    assert!(
        snapbus::wait_for_bus(Duration::from_secs(30)),
        "never joined"
    );
    let sample = DurationSample {
        label: "x".into(),
        duration_nanos: 1,
        ..Default::default()
    };
    t.try_snapshot(Level::INFO, &sample)
        .expect("emit")
        .expect("written");
    let state = BusClient::connect(&dir)
        .and_then(|c| c.state_with(Census::Skip))
        .expect("ls");
    println!("lane_bytes: {}", state.producers[0].lane_bytes);
    snapbus::shutdown();
    broker.stop().expect("broker");
    let _ = std::fs::remove_dir(&root);
}

fn run_child(lane_bytes: &str) -> (String, String) {
    let (stdout, stderr) = run_ignored_test(
        "lane_bytes::lane_bytes_in_this_process",
        &[("SNAPBUS_LANE_BYTES", lane_bytes)],
        Duration::from_secs(60),
    );
    let lane = stdout
        .lines()
        .find_map(|l| l.strip_prefix("lane_bytes: "))
        .unwrap_or_else(|| panic!("no lane size in the child's output: {stdout}"))
        .to_owned();
    (lane, stderr)
}

#[test]
fn a_bad_lane_size_is_reported_once_and_the_default_used() {
    let (lane, stderr) = run_child("abc");
    assert_eq!(lane, DEFAULT_LANE_BYTES.to_string());
    assert_eq!(
        stderr
            .matches("snapbus: ignoring invalid lane size")
            .count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("\"SNAPBUS_LANE_BYTES=abc\": not a whole number"),
        "{stderr}"
    );
    // A good one is used, silently.
    let (lane, stderr) = run_child("1048576");
    assert_eq!(lane, "1048576");
    assert!(!stderr.contains("ignoring"), "{stderr}");
}
