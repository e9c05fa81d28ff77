//! A broker under a low open-file limit (issue #44, item 5): each producer costs the broker
//! about four fds, so a soft limit of 1,024 refused producers past ~250 with "expected 2 fds,
//! got 0", blaming the producer. A real `snapbus up` under `prlimit`, and many real producers
//! (publishers of this test process, each with a lane and a connection of its own).

use std::process::Command;

use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::{Publisher, PublisherConfig};
use snapbus_bus::runtime::{BusDir, BusName};

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, run_cmd, unique_bus};

/// A bus whose broker runs under `prlimit --nofile=SOFT:HARD`.
fn up_limited(soft: u32, hard: u32) -> TestBus {
    let bus = TestBus { name: unique_bus() };
    let up = bus.cmd(&["up"]);
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--nofile={soft}:{hard}"))
        .arg(up.get_program())
        .args(up.get_args());
    for (k, v) in up.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = run_cmd(&mut cmd);
    assert!(out.status.success(), "up under prlimit: {}", out.stderr);
    bus
}

/// `n` small producers on `bus`.
fn producers(bus: &TestBus, n: usize) -> Vec<Publisher> {
    let name = BusName::new(&bus.name).expect("bus name");
    let dir = BusDir::locate_in(&crate::util::runtime_root(), &name);
    let lane = LaneConfig {
        capacity: 1 << 20,
        max_frame: 64 << 10,
        ..LaneConfig::default()
    };
    (0..n)
        .map(|i| {
            let config = PublisherConfig {
                name: format!("p{i}"),
                lane,
                session_tag: None,
                perf_tag: None,
                relayed: false,
            };
            Publisher::start(dir.clone(), config).expect("publisher")
        })
        .collect()
}

#[test]
fn the_broker_raises_its_soft_fd_limit_and_takes_every_producer() {
    // Soft 256 took ~60 producers before; the hard limit (4,096) takes them all.
    let bus = up_limited(256, 4096);
    let ps = producers(&bus, 300);
    wait_until("every producer is welcomed", WATCHDOG, || {
        ps.iter().all(Publisher::is_connected)
    });
    let refused: Vec<String> = ps.iter().filter_map(Publisher::refusal).collect();
    assert!(refused.is_empty(), "{refused:?}");
    let ls = bus.ls();
    assert_eq!(ls["producers"].as_array().expect("producers").len(), 300);
    let log = std::fs::read_to_string(
        crate::util::runtime_root()
            .join(&bus.name)
            .join("broker.log"),
    )
    .expect("broker.log");
    assert!(
        log.contains("open-file limit raised from 256 to 4096"),
        "{log}"
    );
}

#[test]
fn a_producer_the_broker_has_no_fds_for_is_told_it_is_the_broker() {
    // Soft = hard = 128: about 25 producers fit; the others are refused, each told why.
    let bus = up_limited(128, 128);
    let ps = producers(&bus, 60);
    wait_until("every producer is welcomed or refused", WATCHDOG, || {
        ps.iter().all(|p| p.is_connected() || p.refusal().is_some())
    });
    let refused: Vec<String> = ps.iter().filter_map(Publisher::refusal).collect();
    assert!(!refused.is_empty(), "128 fds cannot take 60 producers");
    for why in &refused {
        assert!(
            why.contains("the broker is out of file descriptors")
                && why.contains("the producer is not at fault"),
            "{why}"
        );
    }
    // Once the producers are gone the broker has fds for `ls` again, which names them.
    drop(ps);
    let mut ls = serde_json::Value::Null;
    wait_until("ls answers", WATCHDOG, || {
        let out = bus.run(&["ls", "--json"]);
        out.status.success() && {
            ls = serde_json::from_str(&out.stdout).expect("ls --json");
            true
        }
    });
    let named = ls["refused_producers"]
        .as_array()
        .expect("refused_producers");
    assert!(!named.is_empty(), "{ls}");
    assert!(
        named.iter().all(|r| r
            .as_str()
            .is_some_and(|r| r.contains("out of file descriptors"))),
        "{ls}"
    );
    let out = bus.run(&["ls"]);
    assert!(
        out.stdout.contains("! refused producer 'p"),
        "{}",
        out.stdout
    );
}
