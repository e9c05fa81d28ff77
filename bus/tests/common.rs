//! Helpers shared by the test modules.

use std::path::PathBuf;
use std::sync::Arc;

use snapbus_bus::lane::{Lane, LaneConfig, Poll, StartAt};
use snapbus_bus::mem::LaneMem;
use snapbus_bus::publisher::{Publisher, PublisherConfig};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{Glob, SubscribeOptions, Subscriber};

/// The test's own root under the target directory (`<tag>-<pid>`) and bus `name` in it.
pub(crate) fn test_bus(tag: &str, name: &str) -> (PathBuf, BusDir) {
    let root =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}", std::process::id()));
    let dir = BusDir::locate_in(&root, &BusName::new(name).expect("name"));
    (root, dir)
}

/// A publisher `name` on `dir` with a 1 MiB lane and 64 KiB frames.
pub(crate) fn small_publisher(dir: BusDir, name: &str) -> Publisher {
    let lane = LaneConfig {
        capacity: 1 << 20,
        max_frame: 64 << 10,
        ..LaneConfig::default()
    };
    let config = PublisherConfig {
        name: name.to_owned(),
        lane,
        session_tag: None,
        perf_tag: None,
        relayed: false,
    };
    Publisher::start(dir, config).expect("publisher")
}

/// A subscriber of `glob` on `dir` from the oldest record held.
pub(crate) fn subscribe_oldest(dir: &BusDir, glob: &str) -> Subscriber {
    let globs = vec![Glob::new(glob).expect("glob")];
    let options = SubscribeOptions {
        kind: "test".into(),
        globs,
        start: StartAt::Oldest,
        cut: false,
        skip_lanes: Vec::new(),
        count_history_as_lost: false,
    };
    Subscriber::connect(dir, options).expect("subscribe")
}

/// The positions of the records a new reader from the oldest reads in `lane`, in order.
pub(crate) fn record_positions<M: LaneMem>(lane: &Arc<Lane<M>>) -> Vec<u64> {
    let mut r = lane.reader(StartAt::Oldest);
    std::iter::from_fn(|| match r.poll() {
        Poll::Frame(f) => Some(f.meta.pos),
        _ => None,
    })
    .collect()
}

/// Stores `value` into word `word` of the frame at `pos` of `lane` (garbage, for a test).
pub(crate) fn store_frame_word<M: LaneMem>(lane: &Lane<M>, pos: u64, word: usize, value: u64) {
    let g = *lane.geometry();
    let at = ((g.data_off + (pos & (g.capacity - 1))) / 8) as usize + word;
    lane.mem()
        .get(at)
        .expect("a word of the ring")
        .store(value, std::sync::atomic::Ordering::Relaxed);
}
