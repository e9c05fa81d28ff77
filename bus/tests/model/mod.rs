//! Property tests of a lane against a reference model: random record sizes (wrapping the ring
//! many times), aborted claims, readers of different speeds and start points, schema filters,
//! and garbage written over the ring. Asserted: every delivered record is exactly what was
//! written under that sequence number (nothing torn, nothing from an older lap), sequence
//! numbers strictly increase (nothing twice), and loss is exact.
//!
//! This file holds the lane configurations and helpers the topic files share.

mod garbage;
mod in_flight;
mod loss;
mod properties;
mod readers_and_writers;

use snapbus_bus::lane::{Lane, LaneConfig, RecordMeta};
use snapbus_bus::mem::HeapMem;

use crate::common::store_frame_word;

pub(super) const CONFIG: LaneConfig = LaneConfig {
    capacity: 64 << 10,
    max_frame: 8 << 10,
    block_size: 4 << 10,
};

/// A lane whose frames may be a quarter of it, the largest the lane allows (a lane that fits
/// the cache, taking large records): a lapped reader's slack is then one largest frame.
pub(super) const QUARTER: LaneConfig = LaneConfig {
    capacity: 64 << 10,
    max_frame: 16 << 10,
    block_size: 4 << 10,
};

/// Deterministic payload of record `seq` with length `len`.
pub(super) fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ len as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub(super) fn meta(key: u16) -> RecordMeta {
    RecordMeta {
        schema_key: key,
        schema_version: 1,
        level: 2,
        emitter: 3,
    }
}

/// Writes `n` records of 88 bytes into a fresh heap lane.
pub(super) fn filled_lane(n: u64) -> std::sync::Arc<Lane<HeapMem>> {
    let lane = Lane::heap(&CONFIG, 0x7a11).expect("lane");
    let mut writer = lane.writer().expect("writer");
    for seq in 0..n {
        let mut claim = writer.claim(88, meta(0)).expect("claim");
        claim.write_payload(&payload(seq, 88));
        claim.commit();
    }
    lane
}

/// Overwrites the commit word of the frame at `pos` with `value`.
pub(super) fn store_commit_word(lane: &Lane<HeapMem>, pos: u64, value: u64) {
    store_frame_word(lane, pos, 0, value);
}
