//! Garbage in a producer's ring, end to end: a real broker (`snapbus up`), a producer (this
//! process) whose closed lane has garbage over some records' headers, and real `snapbus`
//! processes reading it: a consumer's DAMAGED in `ls` counts each damaged record once (none of
//! it LOST), and a `snapshot` of the lane says DAMAGE in `inspect`, with the count.

use std::path::PathBuf;

use snapbus_bus::Level;
use snapbus_bus::lane::{LaneConfig, Poll, StartAt};
use snapbus_bus::mem::LaneMem;
use snapbus_bus::publisher::{Publisher, PublisherConfig};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_schemas::Snapshot;

use crate::bus::{TestBus, wait_until};
use crate::util::{WATCHDOG, runtime_root};

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "test.damage", version = 1)]
struct Step {
    i: u64,
    x: f64,
}

const N: u64 = 5_000;
const DAMAGED: u64 = 20;

/// A closed lane of `N` records on `bus`, with garbage over the headers of `DAMAGED` of them.
fn damaged_lane(bus: &TestBus) -> Publisher {
    let dir = BusDir::locate_in(&runtime_root(), &BusName::new(&bus.name).expect("bus name"));
    let config = PublisherConfig {
        name: "damaged".into(),
        lane: LaneConfig {
            capacity: 4 << 20,
            max_frame: 64 << 10,
            ..LaneConfig::default()
        },
        session_tag: None,
        perf_tag: None,
        relayed: false,
    };
    let p = Publisher::start(dir, config).expect("publisher");
    wait_until("the producer joined", WATCHDOG, || p.is_connected());
    let emitter = p.emitter("test");
    for i in 0..N {
        p.emit(Level::INFO, emitter, &Step { i, x: i as f64 })
            .expect("emit");
    }
    p.close();
    let lane = p.lane().lane();
    let mut r = lane.reader(StartAt::Oldest);
    let positions: Vec<u64> = std::iter::from_fn(|| match r.poll() {
        Poll::Frame(f) => Some(f.meta.pos),
        _ => None,
    })
    .collect();
    assert_eq!(positions.len() as u64, N);
    let g = *lane.geometry();
    for k in 0..DAMAGED {
        // The commit word and the length of records spread over the lane, the last among them.
        let pos = positions[(N - 1 - k * 241) as usize];
        let word = ((g.data_off + (pos & (g.capacity - 1))) / 8) as usize;
        for (w, v) in [0xdead_beef_0bad_f00d_u64, 0x0123_4567_89ab_cdef]
            .iter()
            .enumerate()
        {
            lane.mem()
                .get(word + w)
                .expect("a word of the ring")
                .store(*v ^ k, std::sync::atomic::Ordering::Relaxed);
        }
    }
    p
}

#[test]
fn damaged_ring_records_are_counted_once_as_damage_in_ls_and_inspect() {
    let bus = TestBus::up();
    let _p = damaged_lane(&bus);

    // A consumer's books, as `ls` shows them.
    let echo = bus.spawn_subscribed("echo", &["echo", "--from", "oldest"]);
    let pid = u64::from(echo.pid());
    wait_until("the echo read the lane", WATCHDOG, || {
        bus.consumer_where(|c| c["info"]["pid"].as_u64() == Some(pid))
            .is_some_and(|c| c["delivered"].as_u64() == Some(N - DAMAGED))
    });
    let c = bus
        .consumer_where(|c| c["info"]["pid"].as_u64() == Some(pid))
        .expect("the echo in ls");
    assert_eq!(
        (c["lost"].as_u64(), c["damaged"].as_u64()),
        (Some(0), Some(DAMAGED)),
        "{c}"
    );
    let text = bus.run(&["ls"]).stdout;
    assert!(text.contains("DAMAGED"), "{text}");
    drop(echo);

    // A snapshot of it says so, and `inspect` too.
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "ring-damage-{}-{}.mcap",
        std::process::id(),
        bus.name
    ));
    let out = bus.run(&["snapshot", "-o", file.to_str().expect("path")]);
    assert!(out.status.success(), "snapshot: {}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("{DAMAGED} lost to garbage in the rings")),
        "{}",
        out.stderr
    );
    let out = bus.run(&["inspect", file.to_str().expect("path")]);
    if std::env::var_os("KEEP_DAMAGE_FILE").is_none() {
        let _ = std::fs::remove_file(&file);
    }
    assert!(out.status.success(), "inspect: {}", out.stderr);
    let damage = out
        .stdout
        .split("\nDAMAGE\n")
        .nth(1)
        .expect("a DAMAGE section");
    assert!(
        damage.contains(&format!(
            "'damaged': {DAMAGED} records lost to garbage in its ring"
        )),
        "{}",
        out.stdout
    );
    assert!(!damage.starts_with("none"), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("records    {}", N - DAMAGED)),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout
            .contains("overwritten before they could be recorded"),
        "{}",
        out.stdout
    );
}
