//! Fixtures shared by the test modules.

use snapbus_bus::Level;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::{Publisher, PublisherConfig};
use snapbus_bus::runtime::BusDir;
use snapbus_consumers::RecordHeader;
use snapbus_schemas::Wire;

#[derive(Wire, Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    Train,
    Eval,
}

#[derive(Wire, Debug, Clone, PartialEq)]
pub(crate) struct Info {
    pub(crate) loss: f64,
    pub(crate) note: String,
}

/// A publisher `name` on `dir` with a 1 MiB lane and 64 KiB frames (not waiting to join).
pub(crate) fn small_publisher(dir: &BusDir, name: &str) -> Publisher {
    let mut lane = LaneConfig::default();
    (lane.capacity, lane.max_frame) = (1 << 20, 64 << 10);
    let (session_tag, perf_tag) = (None, None);
    let config = PublisherConfig {
        name: name.into(),
        lane,
        session_tag,
        perf_tag,
    };
    Publisher::start(dir.clone(), config).expect("publisher")
}

/// The header of record `seq` stamped `t_nanos` (schema key and version 1, level INFO).
#[cfg_attr(
    not(any(feature = "recording", feature = "aggregator")),
    allow(dead_code)
)]
pub(crate) fn header(seq: u64, t_nanos: u64, payload_len: usize) -> RecordHeader {
    RecordHeader {
        seq,
        t_nanos,
        payload_len,
        schema_key: 1,
        schema_version: 1,
        level: Level::INFO,
        emitter_id: 0,
    }
}

/// A producer of pid `pid` named `name` on lane `lane_id` (no tags, no command line).
#[cfg(feature = "recording")]
pub(crate) fn producer(pid: u32, name: &str, lane_id: u64) -> snapbus_bus::ProducerInfo {
    snapbus_bus::ProducerInfo {
        pid,
        name: name.into(),
        cmdline: Vec::new(),
        session_tag: None,
        perf_tag: None,
        lane_id,
        started_nanos: 1,
    }
}

/// A loss of `lost` records of producer `producer_id`, for calling `Consumer::on_lag`.
#[cfg(any(feature = "aggregator", feature = "recording"))]
pub(crate) fn lag(
    producer_id: u64,
    info: &snapbus_bus::ProducerInfo,
    lost: u64,
) -> snapbus_consumers::Lag<'_> {
    let producer = info.into();
    snapbus_consumers::Lag {
        producer_id,
        producer,
        lost,
        damaged: 0,
    }
}
