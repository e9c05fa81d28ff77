//! A broker that refuses a producer (another snapbus release's protocol, a lane it cannot
//! map): the producer is not counted as connected, and it keeps and tells why. A stand-in
//! broker (a listener on the bus socket, in this process) plays the refusing side. (Unit tests:
//! the protocol is private to the crate.)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{Conn, FromBroker, Listener, ToBroker};
use crate::lane::LaneConfig;
use crate::publisher::{Publisher, PublisherConfig};
use crate::runtime::{BusDir, BusName};

const WATCHDOG: Duration = Duration::from_secs(30);

fn accept(l: &Listener) -> Conn {
    let t0 = Instant::now();
    loop {
        if let Some(c) = l.accept().expect("accept") {
            return c;
        }
        assert!(t0.elapsed() < WATCHDOG, "the publisher never connected");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A bus directory with a stand-in broker listening on its socket, and a publisher `name`
/// started on it (it connects to the stand-in); the root to remove at the end.
fn stand_in(bus: &str, name: &str) -> (PathBuf, Listener, Publisher) {
    let root: PathBuf = std::env::temp_dir().join(format!("snapbus-{bus}-{}", std::process::id()));
    let dir = BusDir::locate_in(&root, &BusName::new(bus).expect("name"));
    dir.create().expect("bus dir");
    let listener = Listener::bind(&dir.socket_path()).expect("bind");
    let p = Publisher::start(
        dir,
        PublisherConfig {
            name: name.into(),
            lane: LaneConfig {
                capacity: 1 << 20,
                max_frame: 64 << 10,
                block_size: 64 << 10,
            },
            session_tag: None,
            perf_tag: None,
            relayed: false,
        },
    )
    .expect("publisher");
    (root, listener, p)
}

#[test]
fn a_refused_producer_is_not_connected_and_says_why() {
    let (root, listener, p) = stand_in("refusal", "refused");
    let mut conn = accept(&listener);
    let (hello, _fds) = conn
        .recv::<ToBroker>(Some(WATCHDOG))
        .expect("recv")
        .expect("a hello within the watchdog");
    assert!(matches!(hello, ToBroker::HelloProducer { .. }), "{hello:?}");
    // Said hello, not welcomed: not connected (for a while, nothing changes that).
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(300) {
        assert!(!p.is_connected(), "connected before any welcome");
        std::thread::sleep(Duration::from_millis(10));
    }
    let why = "protocol version Some(99) is not this broker's (4); use matching snapbus versions";
    conn.send(
        &FromBroker::Error {
            message: why.into(),
        },
        &[],
    )
    .expect("send");
    let t0 = Instant::now();
    while p.refusal().as_deref() != Some(why) {
        assert!(
            t0.elapsed() < WATCHDOG,
            "the refusal was never kept: {:?}",
            p.refusal()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!p.is_connected());
    assert!(!p.stats().connected);
    drop(conn);
    drop(p);
    drop(listener);
    let _ = std::fs::remove_dir_all(&root);
}

/// After a refusal the producer tries again (later and later), and a broker that welcomes it
/// clears the refusal.
#[test]
fn a_refused_producer_joins_a_broker_that_welcomes_it() {
    let (root, listener, p) = stand_in("refusal2", "refused-then-welcomed");
    let hello = |conn: &mut Conn| {
        let (m, _) = conn
            .recv::<ToBroker>(Some(WATCHDOG))
            .expect("recv")
            .expect("a hello within the watchdog");
        assert!(matches!(m, ToBroker::HelloProducer { .. }), "{m:?}");
    };
    let mut first = accept(&listener);
    hello(&mut first);
    first
        .send(
            &FromBroker::Error {
                message: "not now".into(),
            },
            &[],
        )
        .expect("send");
    drop(first);
    // It comes back on its own.
    let mut second = accept(&listener);
    hello(&mut second);
    assert_eq!(p.refusal().as_deref(), Some("not now"));
    second
        .send(
            &FromBroker::WelcomeProducer {
                producer_id: 7,
                bus: "refusal2".into(),
                filter: String::new(),
                wake_mask: 0,
            },
            &[],
        )
        .expect("send");
    let t0 = Instant::now();
    while !p.is_connected() || p.refusal().is_some() {
        assert!(
            t0.elapsed() < WATCHDOG,
            "the welcome was not taken: {:?}",
            p.refusal()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(second);
    drop(p);
    drop(listener);
    let _ = std::fs::remove_dir_all(&root);
}
