//! The lane's shared-memory layout: header, anchors, frames. Every constant here is part of the
//! cross-process ABI; [`LAYOUT_VERSION`] changes when any of them does.
//!
//! ```text
//! 0x0000  LaneHeader (4 KiB; 128-byte lines so hot words never share a cache line)
//! 0x1000  anchors[n_blocks]: u64 absolute position of the first frame at or after each block
//! data    data[capacity]  (page-aligned, capacity a power of two)
//! ```
//!
//! A frame is 16-byte aligned and starts with a 48-byte header of six little-endian `u64` words,
//! so every payload starts on a 16-byte boundary (layout version 3; version 2 had a 40-byte
//! header and 8-byte frames, which put every payload 8 bytes off one):
//!
//! | word | contents | written |
//! |---|---|---|
//! | 0 | commit tag: `tag(pos) = pos ^ (salt \| 1 << 63)` = committed, `tag(pos) ^ BUSY` = claimed, anything else = not written in this lap | BUSY first (Release), committed last (Release) |
//! | 1 | `frame_len: u32` (header + payload) \| `kind: u8` << 32 \| `level: u8` << 40 \| `emitter: u16` << 48 | before BUSY |
//! | 2 | `schema_key: u16` \| `schema_version: u16` << 16 (upper 32 bits reserved, 0) | before BUSY |
//! | 3 | `seq: u64`, the lane's record number (DATA and ABORTED frames) | before BUSY |
//! | 4 | `t_nanos: u64`, CLOCK_REALTIME at claim, non-decreasing within a lane | before BUSY |
//! | 5 | reserved, 0 | before BUSY |
//!
//! then the payload, then padding to the next 16-byte boundary (whatever was there before).

use std::mem::{offset_of, size_of};

// The layout is defined with std atomics (8 bytes each) even under loom; only offsets are used.
use std::sync::atomic::AtomicU64;

/// `"SNAPLANE"`, little-endian.
pub const LANE_MAGIC: u64 = u64::from_le_bytes(*b"SNAPLANE");
/// Layout version of this file's constants.
pub const LAYOUT_VERSION: u32 = 3;
/// Written next to the layout version; reads back differently on a foreign-endian machine.
pub const ENDIAN_MARK: u32 = 0x0102_0304;
/// Written last during initialisation (Release); readers refuse a lane without it.
pub const INIT_DONE: u64 = u64::from_le_bytes(*b"LANEINIT");

/// Header size in bytes (anchors start here).
pub const HEADER_LEN: usize = 4096;
/// Frame header size in bytes.
pub const FRAME_HEADER_LEN: usize = 48;
/// Frame header size in words.
pub(crate) const FRAME_HEADER_WORDS: usize = FRAME_HEADER_LEN / 8;
/// Frame alignment in bytes: with the header, it puts every payload on a 16-byte boundary,
/// where the platform's `memcpy` is fast for a 16-aligned source whatever the machine.
pub const FRAME_ALIGN: usize = 16;
/// The BUSY bit of the commit word.
pub const BUSY: u64 = 1;

/// Rounds `n` up to [`FRAME_ALIGN`].
#[inline]
pub const fn align_frame(n: u64) -> u64 {
    (n + FRAME_ALIGN as u64 - 1) & !(FRAME_ALIGN as u64 - 1)
}

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A record.
    Data = 1,
    /// Filler to the physical end of the ring; carries no record.
    Pad = 2,
    /// A claim dropped without commit; it used a sequence number but carries no record.
    Aborted = 3,
    /// The writer closed the lane cleanly.
    EndOfStream = 4,
}

impl FrameKind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<FrameKind> {
        Some(match b {
            1 => FrameKind::Data,
            2 => FrameKind::Pad,
            3 => FrameKind::Aborted,
            4 => FrameKind::EndOfStream,
            _ => return None,
        })
    }
}

/// Lane liveness, in the header's `state` word (written by the producer only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum LaneState {
    /// The producer is writing.
    Live = 1,
    /// The producer closed the lane; `final_tail` is valid.
    Closed = 2,
    /// The producer died (marked by whoever detected it: the broker, from socket EOF and
    /// pidfd); readers skip the holes it left without waiting for the stall timeout.
    Dead = 3,
}

/// The lane header, `#[repr(C)]`, 4 KiB. Every field is atomic because another process writes
/// the memory. The immutable part is written once before `init_done`.
#[repr(C)]
pub struct LaneHeader {
    // ---- line 0: immutable after init (written by the creator, before `init_done`) ----
    /// [`LANE_MAGIC`].
    pub magic: AtomicU64,
    /// `LAYOUT_VERSION | ENDIAN_MARK << 32`.
    pub version_endian: AtomicU64,
    /// Data capacity in bytes (a power of two).
    pub capacity: AtomicU64,
    /// Largest frame (header + payload, aligned) in bytes; at most `capacity / 4`.
    pub max_frame: AtomicU64,
    /// Random non-zero salt of the commit tags.
    pub salt: AtomicU64,
    /// log2 of the anchor block size.
    pub block_shift: AtomicU64,
    /// Number of anchors (`capacity >> block_shift`).
    pub n_blocks: AtomicU64,
    /// Byte offset of the data area.
    pub data_off: AtomicU64,
    /// The producer's pid.
    pub producer_pid: AtomicU64,
    /// CLOCK_REALTIME at creation.
    pub created_realtime_nanos: AtomicU64,
    /// [`INIT_DONE`], stored last with Release.
    pub init_done: AtomicU64,
    _pad0: [u64; 5],
    // ---- line 1: claim tail ----
    /// Absolute end of the newest claim. Written by the producer's claimers (Relaxed, before
    /// `write_limit` and its `fence(Release)`); read by readers with Acquire to find new data
    /// (only once they have read up to the last value they loaded) and to detect laps.
    pub claim_tail: AtomicU64,
    _pad1: [u64; 15],
    // ---- line 2: state ----
    /// [`LaneState`]; Release by the producer on close, or by the broker when it marks the
    /// producer dead.
    pub state: AtomicU64,
    /// End of the last frame once closed (valid when `state == Closed`).
    pub final_tail: AtomicU64,
    _pad2: [u64; 14],
    // ---- line 3: counters (Relaxed, producer-written, for `snapbus ls`) ----
    /// DATA frames committed. Written only by the producer, with a Relaxed load and store (no
    /// read-modify-write: the single writer is its only writer, shared writers change it under
    /// their claim lock, counting a claim when it is made and taking it back on abort).
    pub frames_committed: AtomicU64,
    /// Claims dropped because they would have overwritten an in-flight claim (lap guard).
    pub dropped_wrap: AtomicU64,
    /// Claims refused because the record exceeded `max_frame`.
    pub dropped_oversize: AtomicU64,
    /// Claims dropped without commit (become ABORTED frames).
    pub aborted: AtomicU64,
    _pad3: [u64; 12],
    // ---- line 4: write limit (layout version 2) ----
    /// No byte at an absolute position at or past this value has been written: the writer
    /// raises it (Relaxed store, under the claim lock for shared writers, then
    /// `fence(Release)`) before it writes any byte beyond it, in steps of
    /// [`Geometry::limit_granule`], so it changes once per granule, not once per record.
    /// Readers validate copies against it (`fence(Acquire)`, then a Relaxed load): the line
    /// stays in their cache, where validating against `claim_tail` (written with every record)
    /// moved a cache line between the two CPUs per record. Always `>= claim_tail`, and at most
    /// two granules beyond it.
    pub write_limit: AtomicU64,
    _pad4: [u64; 15],
    _rest: [u64; (HEADER_LEN - 5 * 128) / 8],
}

const _: () = {
    assert!(size_of::<LaneHeader>() == HEADER_LEN);
    assert!(offset_of!(LaneHeader, init_done) == 80);
    assert!(offset_of!(LaneHeader, claim_tail) == 128);
    assert!(offset_of!(LaneHeader, state) == 256);
    assert!(offset_of!(LaneHeader, final_tail) == 264);
    assert!(offset_of!(LaneHeader, frames_committed) == 384);
    assert!(offset_of!(LaneHeader, aborted) == 408);
    assert!(offset_of!(LaneHeader, write_limit) == 512);
};

/// Word index of a header field.
macro_rules! word {
    ($field:ident) => {
        std::mem::offset_of!($crate::lane::layout::LaneHeader, $field) / 8
    };
}
pub(crate) use word;

/// Frame header word indices (relative to the frame start).
pub(crate) mod fw {
    pub(crate) const COMMIT: usize = 0;
    pub(crate) const LEN_META: usize = 1;
    pub(crate) const SCHEMA: usize = 2;
    pub(crate) const SEQ: usize = 3;
    pub(crate) const T_NANOS: usize = 4;
    pub(crate) const RESERVED: usize = 5;
}

/// Packs word 1 of a frame header.
#[inline]
pub(crate) const fn pack_len_meta(frame_len: u32, kind: FrameKind, level: u8, emitter: u16) -> u64 {
    frame_len as u64 | (kind as u64) << 32 | (level as u64) << 40 | (emitter as u64) << 48
}

/// Packs word 2 of a frame header.
#[inline]
pub(crate) const fn pack_schema(key: u16, version: u16) -> u64 {
    key as u64 | (version as u64) << 16
}

/// Sizes of a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneConfig {
    /// Data capacity in bytes: a power of two, at least 64 KiB.
    pub capacity: usize,
    /// Largest frame (header + payload) in bytes, at most `capacity / 4` (a lane that fits the
    /// cache can still take records of an eighth of its size and more: 1 MiB in 8 MiB).
    pub max_frame: usize,
    /// Anchor block size in bytes: a power of two between 4 KiB and `capacity / 4`.
    pub block_size: usize,
}

impl Default for LaneConfig {
    /// 64 MiB, 8 MiB frames, 64 KiB blocks.
    fn default() -> LaneConfig {
        LaneConfig {
            capacity: 64 << 20,
            max_frame: 8 << 20,
            block_size: 64 << 10,
        }
    }
}

/// Smallest capacity (64 KiB). Under `--cfg loom` only, 256 B, so the models' lanes (loom
/// atomics, one object per word) stay small; `max_frame <= capacity / 4` still holds.
#[cfg(not(loom))]
const MIN_CAPACITY: u64 = 64 << 10;
#[cfg(loom)]
const MIN_CAPACITY: u64 = 256;
/// log2 of the smallest anchor block (4 KiB; 64 B under `--cfg loom`).
#[cfg(not(loom))]
const MIN_BLOCK_SHIFT: u32 = 12;
#[cfg(loom)]
const MIN_BLOCK_SHIFT: u32 = 6;
/// Alignment of the data area: a page, so it can be mapped on its own. Under `--cfg loom`
/// (heap memory only) 64 B, which keeps the models' lanes from carrying a page of padding.
#[cfg(not(loom))]
const DATA_ALIGN: u64 = 4096;
#[cfg(loom)]
const DATA_ALIGN: u64 = 64;

/// Validated sizes of a lane (from a [`LaneConfig`], or read from an untrusted header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Data capacity (power of two).
    pub capacity: u64,
    /// Largest aligned frame.
    pub max_frame: u64,
    /// log2 of the block size.
    pub block_shift: u32,
    /// Number of anchors.
    pub n_blocks: u64,
    /// Byte offset of the data area.
    pub data_off: u64,
    /// Commit tag salt.
    pub salt: u64,
}

/// Why a lane configuration or header is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid lane geometry: {0}")]
pub struct GeometryError(pub &'static str);

impl Geometry {
    /// Checks sizes and derives the layout for a segment.
    pub fn new(
        capacity: u64,
        max_frame: u64,
        block_shift: u32,
        salt: u64,
    ) -> Result<Geometry, GeometryError> {
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=1 << 40).contains(&capacity) {
            return Err(GeometryError(
                "capacity must be a power of two between 64 KiB and 1 TiB",
            ));
        }
        if max_frame < FRAME_HEADER_LEN as u64 + 8
            || max_frame > capacity / 4
            || max_frame % FRAME_ALIGN as u64 != 0
        {
            return Err(GeometryError(
                "max_frame must be 16-aligned, hold a header, and be at most capacity / 4",
            ));
        }
        if !(MIN_BLOCK_SHIFT..=40).contains(&block_shift) || 1u64 << block_shift > capacity / 4 {
            return Err(GeometryError(
                "block size must be a power of two between 4 KiB and capacity / 4",
            ));
        }
        if salt == 0 {
            return Err(GeometryError("salt must be non-zero"));
        }
        let n_blocks = capacity >> block_shift;
        let page = DATA_ALIGN;
        let data_off = (HEADER_LEN as u64 + n_blocks * 8).div_ceil(page) * page;
        Ok(Geometry {
            capacity,
            max_frame,
            block_shift,
            n_blocks,
            data_off,
            salt,
        })
    }

    /// Total segment size in bytes.
    pub fn segment_len(&self) -> u64 {
        self.data_off + self.capacity
    }

    /// The step in which the writer raises `write_limit`: a thirty-second of the capacity, at
    /// most 64 KiB (a power of two). The limit is at most two granules (a sixteenth of the
    /// capacity) ahead of `claim_tail`, inside the slack readers keep when they resync
    /// ([`Geometry::resync_slack`]).
    #[inline]
    pub fn limit_granule(&self) -> u64 {
        (self.capacity / 32).min(64 << 10)
    }

    /// How far past the oldest byte still in the ring a lapped reader resumes: an eighth of the
    /// capacity, or, in a lane whose frames may be larger than that, one largest frame and the
    /// writer's limit window (two granules) more, so the frame it resumes at outlives the next
    /// claim.
    #[inline]
    pub fn resync_slack(&self) -> u64 {
        if self.max_frame <= self.capacity / 8 {
            self.capacity / 8
        } else {
            self.max_frame + 2 * self.limit_granule()
        }
    }

    /// The committed tag of position `pos`: `pos ^ (salt | 1 << 63)`. Positions stay below
    /// 2^63, so a tag always has its top bit set and zeroed memory (a fresh lane beyond its
    /// tail) never reads as committed, whatever the salt (layout version 2).
    #[inline]
    pub fn tag(&self, pos: u64) -> u64 {
        pos ^ (self.salt | 1 << 63)
    }

    /// Word index of the frame word `w` of the frame at absolute position `pos`.
    #[inline]
    pub(crate) fn frame_word(&self, pos: u64, w: usize) -> usize {
        ((self.data_off + (pos & (self.capacity - 1))) / 8) as usize + w
    }

    /// Byte offset (in the segment) of absolute position `pos`.
    #[inline]
    pub(crate) fn byte_off(&self, pos: u64) -> usize {
        (self.data_off + (pos & (self.capacity - 1))) as usize
    }

    /// Word index of anchor `block` (absolute block number).
    #[inline]
    pub(crate) fn anchor_word(&self, block: u64) -> usize {
        HEADER_LEN / 8 + (block % self.n_blocks) as usize
    }

    /// Block size in bytes.
    #[inline]
    pub fn block_size(&self) -> u64 {
        1 << self.block_shift
    }
}
