//! Lane sizes: `SNAPBUS_LANE_BYTES` and [`Config::lane_bytes`] checked, and the lane geometry
//! they give.

use snapbus_bus::lane::layout::FRAME_HEADER_LEN;
use snapbus_bus::lane::{Geometry, LaneConfig};

use crate::config::Config;

/// The lane size used when none is configured (64 MiB).
pub const DEFAULT_LANE_BYTES: usize = 64 << 20;

/// A lane size that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid lane size {value:?}: {reason} (a lane size is a number of bytes, a power of two \
     from 65536 (64 KiB) to 1099511627776 (1 TiB), e.g. 67108864 for 64 MiB)"
)]
pub struct LaneBytesError {
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a lane size in bytes (as `SNAPBUS_LANE_BYTES` holds it) and checks it.
pub fn parse_lane_bytes(value: &str) -> Result<usize, LaneBytesError> {
    let bytes: usize = value.trim().parse().map_err(|_| LaneBytesError {
        value: value.to_owned(),
        reason: "not a whole number",
    })?;
    lane_config(bytes)?;
    Ok(bytes)
}

/// `$SNAPBUS_LANE_BYTES`, checked: `Ok(None)` if unset or empty. The producer itself only
/// reports a bad value on stderr and uses the default; a program (such as `snapbus demo`)
/// that would rather refuse to start calls this first.
pub fn lane_bytes_from_env() -> Result<Option<usize>, LaneBytesError> {
    match std::env::var("SNAPBUS_LANE_BYTES") {
        Ok(v) if !v.trim().is_empty() => parse_lane_bytes(&v).map(Some).map_err(|mut e| {
            e.value = format!("SNAPBUS_LANE_BYTES={v}");
            e
        }),
        Ok(_) => Ok(None),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(LaneBytesError {
            value: format!("SNAPBUS_LANE_BYTES={}", v.to_string_lossy()),
            reason: "not a whole number",
        }),
    }
}

/// The geometry of a lane of `lane_bytes` bytes (frames up to 8 MiB, at most a quarter of
/// the lane).
fn lane_config(lane_bytes: usize) -> Result<LaneConfig, LaneBytesError> {
    let bad = |reason| LaneBytesError {
        value: lane_bytes.to_string(),
        reason,
    };
    if !lane_bytes.is_power_of_two() {
        return Err(bad("not a power of two"));
    }
    if lane_bytes < 64 << 10 {
        return Err(bad("smaller than 64 KiB"));
    }
    if lane_bytes as u64 > 1 << 40 {
        return Err(bad("larger than 1 TiB"));
    }
    let default = LaneConfig::default();
    let lane = LaneConfig {
        capacity: lane_bytes,
        max_frame: default.max_frame.min(lane_bytes / 4),
        block_size: default.block_size.min(lane_bytes / 4),
    };
    Geometry::new(
        lane.capacity as u64,
        lane.max_frame as u64,
        lane.block_size.trailing_zeros(),
        1,
    )
    .map_err(|e| bad(e.0))?;
    Ok(lane)
}

/// The largest payload (encoded snapshot) a lane of `lane_bytes` bytes takes (`None`: the
/// default size). A larger snapshot is not written and counted as `oversize` in [`stats`](crate::stats).
pub fn max_payload_bytes(lane_bytes: Option<usize>) -> Result<usize, LaneBytesError> {
    let lane = lane_config(lane_bytes.unwrap_or(DEFAULT_LANE_BYTES))?;
    Ok(lane.max_frame - FRAME_HEADER_LEN)
}

/// The lane geometry from [`Config::lane_bytes`] or `$SNAPBUS_LANE_BYTES`; an invalid size is
/// reported (once per process: the watcher runs once) and the default used.
pub(crate) fn configured_lane(config: &Config) -> LaneConfig {
    let configured = match config.lane_bytes {
        Some(b) => lane_config(b).map(Some).map_err(|mut e| {
            e.value = format!("Config::lane_bytes = {b}");
            e
        }),
        None => lane_bytes_from_env().and_then(|b| b.map(lane_config).transpose()),
    };
    match configured {
        Ok(lane) => lane.unwrap_or_default(),
        Err(e) => {
            snapbus_bus::say!(
                "snapbus: ignoring {e}; using the default lane of {DEFAULT_LANE_BYTES} bytes"
            );
            LaneConfig::default()
        }
    }
}
