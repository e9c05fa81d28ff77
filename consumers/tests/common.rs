//! Fixtures shared by the test modules.

use snapbus_bus::Level;
use snapbus_bus::lane::LaneConfig;
use snapbus_bus::publisher::{Publisher, PublisherConfig};
use snapbus_bus::runtime::BusDir;
use snapbus_consumers::RecordHeader;
use snapbus_schemas::Wire;
#[cfg(any(feature = "plotter", feature = "foxglove"))]
use snapbus_schemas::{Snapshot, Tensor};

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
        relayed: false,
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
        relayed: false,
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

#[cfg(any(feature = "plotter", feature = "foxglove"))]
/// A camera's observation, held in a list and a dict of a record (tbp.monty's `SensorObs`).
#[derive(snapbus_schemas::Wire, Debug, Clone, PartialEq)]
#[snapshot(crate = "snapbus_schemas")]
pub(crate) struct SensorObs {
    pub(crate) depth: f32,
    pub(crate) rgba: Tensor<u8>,
}

#[cfg(any(feature = "plotter", feature = "foxglove"))]
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "plot.sensors", version = 1, crate = "snapbus_schemas")]
pub(crate) struct Sensors {
    pub(crate) sensors: Vec<SensorObs>,
    pub(crate) by_name: std::collections::BTreeMap<String, SensorObs>,
    pub(crate) cloud: Tensor<f32>,
    pub(crate) profile: Tensor<f64>,
}

#[cfg(any(feature = "plotter", feature = "foxglove"))]
/// Record `i`: two cameras in a list, one in a dict (RGBA 2 × 3, pixel = 10 * camera + i), a
/// cloud of 4 points (k, 2k, -k) + i, and a profile of 5 values k * i.
pub(crate) fn sensors(i: u8) -> Sensors {
    let obs = |cam: u8| SensorObs {
        depth: f32::from(cam),
        rgba: Tensor::new(vec![2, 3, 4], vec![10 * cam + i; 24]).expect("tensor"),
    };
    let cloud = (0..4)
        .flat_map(|k| [k as f32, 2.0 * k as f32, -(k as f32)].map(|v| v + f32::from(i)))
        .collect();
    Sensors {
        sensors: vec![obs(1), obs(2)],
        by_name: [("wrist".to_owned(), obs(3))].into_iter().collect(),
        cloud: Tensor::new(vec![4, 3], cloud).expect("tensor"),
        profile: Tensor::new(vec![5], (0..5).map(|k| f64::from(k * i)).collect()).expect("tensor"),
    }
}
