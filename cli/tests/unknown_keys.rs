//! Records whose schema key their producer's catalog does not explain (a producer's bug, or
//! damage) used to vanish at every consumer with no counter (issue #44, item 4). Now each
//! consumer counts them and `snapbus ls` shows the count per consumer. A real broker and
//! `echo`; the producer is a publisher of this test process that writes such frames by hand.

use snapbus_bus::Level;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::{EmitMeta, Publisher, PublisherConfig};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::schemas::Snapshot;

use crate::bus::TestBus;
use crate::util::WATCHDOG;

#[derive(Snapshot)]
#[snapshot(id = "test.known", version = 1, crate = "snapbus_bus::schemas")]
struct Known {
    i: u32,
}

#[test]
fn records_of_an_unregistered_schema_key_are_counted_and_shown_in_ls() {
    let bus = TestBus::up();
    let echo = bus.spawn_subscribed("echo", &["echo", "--from", "oldest", "test.*"]);
    let name = BusName::new(&bus.name).expect("bus name");
    let dir = BusDir::locate_in(&crate::util::runtime_root(), &name);
    let config = PublisherConfig {
        name: "unknown-keys".into(),
        lane: LaneConfig {
            capacity: 1 << 20,
            max_frame: 64 << 10,
            ..LaneConfig::default()
        },
        session_tag: None,
        perf_tag: None,
        relayed: false,
    };
    let p = Publisher::start(dir, config).expect("publisher");
    let emitter = p.emitter("test");
    for i in 0..10 {
        p.emit(Level::INFO, emitter, &Known { i }).expect("emit");
        if i % 2 == 0 {
            // A frame under key 777, which no catalog entry explains.
            let meta = EmitMeta {
                schema_key: 777,
                schema_version: 1,
                level: Level::INFO,
                emitter,
            };
            p.emit_with(meta, 4, |w| Ok(w.put(&7u32.to_le_bytes())?))
                .expect("emit a frame of key 777");
        }
    }
    let mut last = Vec::new();
    let t0 = std::time::Instant::now();
    while !last
        .iter()
        .any(|c: &serde_json::Value| c["delivered"] == 10 && c["unknown_keys"] == 5)
    {
        assert!(
            t0.elapsed() < WATCHDOG,
            "echo never read every record: {last:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        last = bus.consumers();
    }
    let out = bus.run(&["ls"]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(
        out.stdout.contains("skipped 5 records whose schema key"),
        "{}",
        out.stdout
    );
    drop(echo);
}
