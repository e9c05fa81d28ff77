//! A big bus: `ls` of 2,000 producers and 5,000 schemas, and filters past the documented
//! bounds.
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
                    relayed: false,
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

#[test]
fn filters_past_the_bounds_are_refused_and_a_valid_one_is_kept() {
    let bus = TestBus::up();
    // 300 directives: past the count bound, well under the length bound.
    let many: Vec<String> = (0..300).map(|i| format!("t{i}=debug")).collect();
    let out = bus.run(&["filter", &many.join(",")]);
    assert!(!out.status.success(), "300 directives accepted");
    out.assert_stderr_has("at most 256");
    // 20 KB in few directives: past the length bound.
    let long = format!("warn,{}=debug", "a".repeat(20_000));
    let out = bus.run(&["filter", &long]);
    assert!(!out.status.success(), "a 20 KB filter accepted");
    out.assert_stderr_has("at most 16384");
    assert!(
        out.stderr.len() < 1_000,
        "the error quotes the whole filter: {} bytes",
        out.stderr.len()
    );
    // The broker holds to the same bounds whoever asks.
    let dir = BusDir::locate_in(&runtime_root(), &BusName::new(&bus.name).expect("name"));
    let client = snapbus_bus::client::BusClient::connect(&dir).expect("client");
    let err = client
        .set_filter(&long)
        .expect_err("the broker took a 20 KB filter");
    assert!(err.to_string().contains("at most 16384"), "{err}");
    // 250 directives: within both, kept and shown.
    let ok: Vec<String> = (0..250).map(|i| format!("t{i}=debug")).collect();
    let out = bus.run(&["filter", &ok.join(",")]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        bus.ls()["filter"]
            .as_str()
            .is_some_and(|f| f.contains("t249=debug"))
    );
}

/// A bus filter stored past the bounds (by an older release: 150 KB were seen) is dropped when
/// the next broker loads the state file, saying so in its log.
#[test]
fn a_stored_filter_past_the_bounds_is_dropped_at_up() {
    let bus = crate::util::unique_bus();
    let dir = BusDir::locate_in(&runtime_root(), &BusName::new(&bus).expect("name"));
    dir.create().expect("bus dir");
    let filter = format!("warn,{}=debug", "a".repeat(150_000));
    // The state file (postcard): format 3, next id 1, the filter, no supervised consumers.
    let mut state = vec![3u8, 1];
    let mut len = filter.len();
    while len >= 0x80 {
        state.push((len as u8) | 0x80);
        len >>= 7;
    }
    state.push(len as u8);
    state.extend_from_slice(filter.as_bytes());
    state.push(0);
    std::fs::write(dir.path().join("broker.state"), &state).expect("state file");
    let bus = TestBus { name: bus };
    let out = bus.run(&["up"]);
    assert!(out.status.success(), "{}", out.stderr);
    let kept = bus.ls()["filter"].as_str().map(str::len);
    assert_eq!(kept, Some(0), "the stored filter was kept (its length)");
    let log = std::fs::read_to_string(dir.path().join("broker.log")).expect("broker.log");
    assert!(log.contains("is dropped (the filter is"), "{log}");
}
