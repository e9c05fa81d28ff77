//! What `ls` and `hz` show: records and rates from the lane counters, rates that agree, columns
//! that line up, and a ring census only when it is needed.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{TestBus, wait_until};
use crate::util::WATCHDOG;

#[test]
fn hz_reports_per_schema_rates_of_a_running_producer() {
    let bus = TestBus::up();
    let demo = bus.spawn_demo("400");
    let out = bus.run(&["hz", "--period-secs", "0.5", "--reports", "2", "demo.step"]);
    assert!(out.status.success(), "{}", out.stderr);
    // The second report covers a full period of steady emission.
    let report = out.stdout.split("\n\n").nth(1).expect("two reports");
    let row = report
        .lines()
        .find(|l| l.starts_with("demo.step"))
        .unwrap_or_else(|| panic!("no demo.step row: {}", out.stdout));
    let cols: Vec<&str> = row.split_whitespace().collect();
    let rate: f64 = cols[1].parse().expect("rate");
    let records: u64 = cols.last().expect("records").parse().expect("records");
    assert!(rate > 0.0 && records > 0, "{row}");
    // The rate is the period's records over its length (0.5 s, give or take a poll).
    assert!(
        (rate * 0.5 - records as f64).abs() <= records as f64 * 0.2 + 2.0,
        "{row}"
    );
    assert!(
        !report.contains("demo.episode_end"),
        "unsubscribed schema shown: {report}"
    );
    drop(demo);
}

/// A producer's rate and its schemas' rates come from the same ring timestamps, so they agree;
/// a producer that closed its lane writes nothing, so its rate and its schemas' are 0.
/// (Regression: a closed producer's schema still showed ~2000/s, and a live producer 0.0
/// while its schema showed 1255/s.)
#[test]
fn producer_and_schema_rates_agree_and_are_zero_once_closed() {
    let bus = TestBus::up();
    let schema_rates = |ls: &Value, id: u64| -> f64 {
        ls["schemas"]
            .as_array()
            .expect("schemas")
            .iter()
            .filter(|s| {
                s["producers"]
                    .as_array()
                    .is_some_and(|p| p.contains(&id.into()))
            })
            .map(|s| s["rate_hz"].as_f64().expect("rate"))
            .sum()
    };
    let demo = bus.spawn_demo("1000");
    let pid = demo.pid();
    wait_until("the producer's rate matches its schemas'", WATCHDOG, || {
        let ls = bus.ls();
        let Some(p) = ls["producers"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["info"]["pid"] == pid))
        else {
            return false;
        };
        let rate = p["rate_hz"].as_f64().expect("rate");
        let id = p["id"].as_u64().expect("id");
        rate > 500.0 && (rate - schema_rates(&ls, id)).abs() <= rate * 0.15
    });
    drop(demo);
    bus.demo(1, 400, 1000, &[]);
    let ls = bus.ls();
    let closed = ls["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .find(|p| p["status"] == "closed")
        .expect("a closed producer");
    let id = closed["id"].as_u64().expect("id");
    assert_eq!(closed["rate_hz"], 0.0, "{closed}");
    assert_eq!(schema_rates(&ls, id), 0.0, "{ls}");
}

/// `ls` sizes its columns to their cells: with `aggregator-1of3` among short kinds, every
/// consumer row still has its PID ending and its STATUS starting under the header's.
/// (Regression: the long kind pushed the rest of its row right.)
#[test]
fn ls_columns_line_up_with_long_kinds() {
    let bus = TestBus::up();
    let out = bus.run(&["spawn", "aggregator", "-n", "3", "--group-by", "step"]);
    assert!(out.status.success(), "{}", out.stderr);
    let echo = bus.spawn("echo", &["echo"]);
    wait_until("four consumers", WATCHDOG, || {
        bus.ls()["consumers"].as_array().map(Vec::len) == Some(4)
    });
    let text = bus.run(&["ls"]).stdout;
    let section = text
        .split("CONSUMERS\n")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .expect("a CONSUMERS section");
    let mut lines = section.lines();
    let header = lines.next().expect("header");
    let pid_end = header.find("PID").expect("PID") + 3;
    let status_at = header.find("STATUS").expect("STATUS");
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert!(text.contains("aggregator-1of3"), "{text}");
    for row in rows {
        let b = row.as_bytes();
        assert!(
            b[pid_end - 1].is_ascii_digit() && b[pid_end] == b' ',
            "PID not under its header:\n{header}\n{row}"
        );
        assert!(
            b[status_at - 1] == b' ' && b[status_at] != b' ',
            "STATUS not under its header:\n{header}\n{row}"
        );
    }
    drop(echo);
}

/// The client of this test's bus (what `ls` and monitors use).
fn client(bus: &TestBus) -> snapbus_bus::client::BusClient {
    use snapbus_bus::runtime::{BusDir, BusName};
    let name = BusName::new(&bus.name).expect("bus name");
    let dir = BusDir::locate_in(&crate::util::runtime_root(), &name);
    snapbus_bus::client::BusClient::connect(&dir).expect("connect")
}

/// A producer's RECORDS are its lane's commit counter, and its rate the counter's change over
/// the last seconds: a demo of 3 × 40 steps wrote exactly 123 records (steps and episode
/// ends), and one emitting 500 steps/s (550 records/s with its episode ends) is shown at
/// that rate.
#[test]
fn ls_counts_records_and_rates_from_the_lane_counters() {
    let bus = TestBus::up();
    bus.demo(3, 40, 0, &[]);
    let ls = bus.ls();
    let done = &ls["producers"].as_array().expect("producers")[0];
    assert_eq!(done["status"], "closed", "{done}");
    assert_eq!(done["frames"], 3 * 41, "{done}");
    assert_eq!(done["rate_hz"], 0.0, "{done}");
    let demo = bus.spawn_demo("500");
    let pid = demo.pid();
    wait_until("the demo's rate is 550 records/s", WATCHDOG, || {
        let p = bus.producer(pid).expect("the demo");
        let rate = p["rate_hz"].as_f64().expect("rate");
        (rate - 550.0).abs() <= 550.0 * 0.1
    });
}

/// The ring census (a read of every record header of every ring, on the broker's thread)
/// runs for `ls --history`, at most every few seconds for a plain `ls`, and never for a poll of
/// counters (the Prometheus exporter's health thread): polling `ls` is cheap for the broker.
#[test]
fn only_ls_history_and_stale_rings_make_the_broker_run_a_census() {
    use snapbus_bus::client::Census;
    let bus = TestBus::up();
    bus.demo(2, 50, 0, &[]);
    let _demo = bus.spawn_demo("200");
    let runs = |v: &Value| v["census_runs"].as_u64().expect("census_runs");
    let ls = |args: &[&str]| -> Value {
        let out = bus.run(args);
        assert!(out.status.success(), "{args:?}: {}", out.stderr);
        serde_json::from_str(out.stdout.trim()).expect("ls --json is JSON")
    };
    // A fresh census of both rings, which `ls` shows with its age.
    let t0 = Instant::now();
    let fresh = ls(&["ls", "--json", "--history"]);
    let producers = fresh["producers"].as_array().expect("producers");
    assert_eq!(producers.len(), 2, "{fresh}");
    for p in producers {
        assert!(
            p["census_age_secs"].as_f64().is_some_and(|a| a < 1.0),
            "{p}"
        );
        assert!(p["history_records"].as_u64().is_some_and(|n| n > 0), "{p}");
    }
    let after_fresh = runs(&fresh);
    assert!(after_fresh >= 2, "{fresh}");
    let again = ls(&["ls", "--json", "--history"]);
    assert_eq!(runs(&again), after_fresh + 2, "every ring, every time");
    // A plain `ls` soon after uses those censuses.
    let plain = ls(&["ls", "--json"]);
    if t0.elapsed() < Duration::from_secs(4) {
        assert_eq!(runs(&plain), runs(&again), "{plain}");
    }
    let demo_step = plain["schemas"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["id"] == "demo.step"))
        .expect("demo.step")
        .clone();
    assert!(
        demo_step["in_rings"].as_u64().is_some_and(|n| n > 100),
        "{demo_step}"
    );
    // A poll of counters never runs one, however often, and its rates are current.
    let client = client(&bus);
    let before = runs(&plain);
    for _ in 0..20 {
        let s = client.state_with(Census::Skip).expect("state");
        assert_eq!(s.census_runs, before);
        assert_eq!(s.producers.len(), 2);
    }
    wait_until(
        "the live demo's rate shows without a census",
        WATCHDOG,
        || {
            let s = client.state_with(Census::Skip).expect("state");
            assert_eq!(s.census_runs, before);
            s.producers.iter().any(|p| p.rate_hz > 100.0)
        },
    );
}
