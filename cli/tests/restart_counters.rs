//! A consumer's counters in `ls` never go backwards across a broker restart: not while an
//! attached (supervised) consumer is re-adopted and has not rejoined yet, and not when a
//! consumer rejoins. Real processes: the broker (`snapbus up`, killed with SIGKILL), a demo,
//! an attached aggregator and an `echo` started in a terminal.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::Value;

use crate::bus::{TestBus, wait_until};
use crate::outage::Reaper;
use crate::util::WATCHDOG;

/// Every consumer's `delivered` in `ls --json`, by id; asserts none is below what was seen.
fn check(ls: &Value, seen: &mut HashMap<u64, u64>, when: &str) {
    for c in ls["consumers"].as_array().expect("consumers") {
        let (Some(id), Some(delivered)) = (c["id"].as_u64(), c["delivered"].as_u64()) else {
            continue;
        };
        let before = seen.entry(id).or_insert(0);
        assert!(
            delivered >= *before,
            "{when}: consumer {id}'s delivered went back from {before} to {delivered}: {c}"
        );
        *before = delivered;
    }
}

#[test]
fn consumer_counters_never_go_backwards_across_a_broker_restart() {
    let bus = TestBus::up();
    let _demo = bus.spawn_demo("500");
    let out = bus.run(&["attach", "aggregator", "--schema", "demo.step"]);
    assert!(out.status.success(), "attach: {}", out.stderr);
    let agg: u64 = out.stdout.trim().parse().expect("attach prints the id");
    let agg_pid = bus
        .consumer_by_id(&agg.to_string())
        .expect("the aggregator")["info"]["pid"]
        .as_u64()
        .expect("pid");
    let _reaper = Reaper(vec![agg_pid as u32]);
    let echo = bus.spawn_subscribed("echo", &["echo"]);
    let echo_pid = u64::from(echo.pid());
    let mut seen = HashMap::new();
    wait_until("both consumers have read records", WATCHDOG, || {
        let ls = bus.ls();
        check(&ls, &mut seen, "before the restart");
        let delivered = |pick: &dyn Fn(&Value) -> bool| {
            ls["consumers"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| pick(c)))
                .and_then(|c| c["delivered"].as_u64())
                .unwrap_or(0)
        };
        delivered(&|c| c["id"].as_u64() == Some(agg)) > 0
            && delivered(&|c| c["info"]["pid"].as_u64() == Some(echo_pid)) > 0
    });
    for round in 0..2 {
        bus.kill9_broker();
        let out = bus.run(&["up"]);
        assert!(out.status.success(), "up: {}", out.stderr);
        // From the first `ls` of the new broker until both have rejoined and reported twice.
        let t0 = Instant::now();
        let mut reports = 0;
        while reports < 2 {
            assert!(t0.elapsed() < WATCHDOG, "the consumers never rejoined");
            let ls = bus.ls();
            check(&ls, &mut seen, &format!("after restart {round}"));
            let rejoined = |pick: &dyn Fn(&Value) -> bool| {
                ls["consumers"].as_array().is_some_and(|cs| {
                    cs.iter().any(|c| {
                        let status = c["status"].as_str().unwrap_or("");
                        pick(c) && status.contains("running") && !status.contains("not connected")
                    })
                })
            };
            if rejoined(&|c| c["id"].as_u64() == Some(agg))
                && rejoined(&|c| c["info"]["pid"].as_u64() == Some(echo_pid))
            {
                reports += 1;
            }
        }
    }
}
