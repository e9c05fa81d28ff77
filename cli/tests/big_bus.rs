//! A big bus: `ls` of 2,000 producers and 5,000 schemas.
//!
//! The 2,000 producers are 2,000 publishers of this test process, each with its own lane,
//! catalog and connection to the broker, exactly as 2,000 processes would have: the broker
//! tells them apart by connection and lane, not by pid, and `ls` shows each with its own row
//! (its cmdline, filters, counters). Only the pid repeats, which takes the same bytes in the
//! reply. 2,000 processes of their own would mostly measure fork and exec on 2 cores.

use std::time::{Duration, Instant};

use serde_json::Value;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::schemas::{Field, SchemaDescriptor, TypeDesc};
use snapbus_bus::{Publisher, PublisherConfig};

use crate::bus::{TestBus, wait_until};
use crate::util::runtime_root;

const PRODUCERS: usize = 2_000;
const SCHEMAS: usize = 5_000;

/// Schema `k` of the big bus: its own id, a few fields (the descriptor `ls` shows).
fn schema(k: usize) -> SchemaDescriptor {
    let fields = vec![
        Field::new("episode", TypeDesc::U32),
        Field::new("reward", TypeDesc::F64),
        Field::new("position", TypeDesc::F32),
    ];
    SchemaDescriptor::new(format!("big.schema_{k:05}"), 1, TypeDesc::Struct { fields })
        .expect("a valid descriptor")
}

#[test]
fn ls_answers_for_2000_producers_and_5000_schemas() {
    let bus = TestBus::up();
    let dir = BusDir::locate_in(&runtime_root(), &BusName::new(&bus.name).expect("name"));
    let lane = LaneConfig {
        capacity: 64 << 10,
        max_frame: 16 << 10,
        block_size: 16 << 10,
    };
    let publishers: Vec<Publisher> = (0..PRODUCERS)
        .map(|i| {
            let p = Publisher::start(
                dir.clone(),
                PublisherConfig {
                    name: format!("producer-{i:04}"),
                    lane,
                    session_tag: None,
                    perf_tag: None,
                },
            )
            .expect("publisher");
            // Producer i registers schemas i, i + 2000, i + 4000 (those below 5,000).
            for k in (i..SCHEMAS).step_by(PRODUCERS) {
                p.register_schema(&schema(k)).expect("register");
            }
            p
        })
        .collect();
    let deadline = Duration::from_secs(240);
    wait_until("every producer connected", deadline, || {
        publishers.iter().all(Publisher::is_connected)
    });
    let mut last = (0, 0);
    wait_until("ls shows every producer and schema", deadline, || {
        let out = bus.run(&["ls", "--json"]);
        assert!(out.status.success(), "ls --json failed: {}", out.stderr);
        let ls: Value = serde_json::from_str(&out.stdout).expect("ls --json is JSON");
        let n = |k: &str| ls[k].as_array().map_or(0, Vec::len);
        last = (n("producers"), n("schemas"));
        last == (PRODUCERS, SCHEMAS)
    });
    // Both forms answer, whole (timed for the run note, asserted only for content).
    let t0 = Instant::now();
    let json = bus.run(&["ls", "--json"]);
    let json_took = t0.elapsed();
    assert!(json.status.success(), "{}", json.stderr);
    let ls: Value = serde_json::from_str(&json.stdout).expect("JSON");
    let names: std::collections::BTreeSet<&str> = ls["producers"]
        .as_array()
        .expect("producers")
        .iter()
        .filter_map(|p| p["info"]["name"].as_str())
        .collect();
    assert_eq!(names.len(), PRODUCERS, "every producer by its own name");
    let t0 = Instant::now();
    let text = bus.run(&["ls"]);
    let text_took = t0.elapsed();
    assert!(text.status.success(), "{}", text.stderr);
    text.assert_stdout_has("producer-1999");
    text.assert_stdout_has("big.schema_04999");
    eprintln!(
        "big bus: ls --json {json_took:?} ({} bytes), ls {text_took:?} ({} bytes)",
        json.stdout.len(),
        text.stdout.len()
    );
    drop(publishers);
}
