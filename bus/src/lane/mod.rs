//! Lanes: one overwrite ring per producer process (ARCHITECTURE.md, "Lanes").

mod claim;
mod cursor;
pub mod layout;
mod reader;
mod set;
mod view;
mod writer;

use std::sync::Arc;

pub use claim::{Claim, ClaimError, RUN_RECORDS, RunWritten, WriteError};
pub use cursor::{DEFAULT_STALL_TIMEOUT, FrameMeta, ReaderStats, RunEnd, StartAt, Visit};
pub use layout::{FrameKind, Geometry, GeometryError, LaneConfig, LaneState};
pub use reader::{Frame, LaneReader, LaneStats, NoFrame, Poll};
#[doc(hidden)]
pub use set::ReaderSet;
pub use view::PayloadView;
pub use writer::{LaneWriter, SharedLaneWriter};

use layout::{ENDIAN_MARK, FRAME_HEADER_WORDS, INIT_DONE, LANE_MAGIC, LAYOUT_VERSION, word};

#[cfg(not(loom))]
pub use crate::mem::ShmMem;
pub use crate::mem::{HeapMem, LaneMem};
use crate::sync::{AtomicU64, Ordering};

/// What a record says about itself besides its payload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RecordMeta {
    /// The producer's key for the record's schema (assigned when the schema is registered).
    pub schema_key: u16,
    /// The schema version of the payload.
    pub schema_version: u16,
    /// Severity level (the producer API's `Level`).
    pub level: u8,
    /// Which emitter (telemetry handle) in the process wrote it.
    pub emitter: u16,
}

pub use crate::clock::now_realtime_nanos;

/// A lane header or segment that cannot be read as a lane.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneOpenError {
    /// Wrong magic: not a snapbus lane.
    #[error("not a snapbus lane (magic {found:#018x})")]
    BadMagic {
        /// The word found.
        found: u64,
    },
    /// A layout this build cannot read.
    #[error(
        "lane layout version {found} (endian mark {endian:#010x}); this build reads version {LAYOUT_VERSION}"
    )]
    Version {
        /// Version found.
        found: u32,
        /// Endian mark found.
        endian: u32,
    },
    /// The creator has not finished initialising it.
    #[error("lane is not initialised yet")]
    NotInitialised,
    /// Sizes that are invalid or do not fit the segment.
    #[error("{0}")]
    Geometry(#[from] GeometryError),
    /// The header's sizes need a bigger segment than the one mapped.
    #[error("lane needs {needed} bytes but the segment has {available}")]
    TooSmall {
        /// Bytes the header implies.
        needed: u64,
        /// Bytes mapped.
        available: u64,
    },
    /// The segment could not be created or mapped.
    #[error("{0}")]
    Segment(String),
}

/// A lane: its memory and validated geometry. Shared (`Arc`) by the writer and readers of one
/// process.
pub struct Lane<M: LaneMem> {
    pub(crate) mem: M,
    pub(crate) geo: Geometry,
}

/// Sink for out-of-range word accesses, which validated geometry rules out; it keeps every
/// accessor total (no panic, no out-of-bounds access) even if that reasoning were wrong.
static SINK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl<M: LaneMem> Lane<M> {
    /// Word `i` of the lane memory.
    #[inline]
    pub(crate) fn word(&self, i: usize) -> &AtomicU64 {
        match self.mem.get(i) {
            Some(w) => w,
            None => sink(),
        }
    }

    /// The header words of the frame at absolute position `pos` (the sink's, if they were past
    /// the end of the memory, which validated geometry rules out for a frame's start: frames
    /// never cross the physical end of the ring, and a gap too small for a header holds none).
    #[inline(always)]
    pub(crate) fn frame_header(&self, pos: u64) -> &[AtomicU64; FRAME_HEADER_WORDS] {
        match self.mem.words(self.geo.frame_word(pos, 0)) {
            Some(w) => w,
            None => sink_header(),
        }
    }

    /// Adds `n` to the lane's `frames_committed` count: a load and a store, not a locked
    /// read-modify-write (one writer changes it at a time: the single writer, or a shared writer
    /// under the claim lock). The word is in shared memory and can hold anything, so the count
    /// wraps, as `fetch_add` would, never panicking.
    #[inline(always)]
    pub(crate) fn count_committed(&self, n: u64) {
        let w = self.word(word!(frames_committed));
        w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Takes back one frame [`Lane::count_committed`] counted (an aborted claim), stopping at
    /// zero; the same one-writer-at-a-time rule.
    pub(crate) fn uncount_committed(&self) {
        let w = self.word(word!(frames_committed));
        w.store(
            w.load(Ordering::Relaxed).saturating_sub(1),
            Ordering::Relaxed,
        );
    }

    /// The validated geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The lane's memory (for tests and tools that inspect or corrupt raw lane words).
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Initialises fresh (zeroed) memory as a lane.
    fn init(mem: M, config: &LaneConfig, salt: u64) -> Result<Lane<M>, LaneOpenError> {
        let geo = geometry_of(config, salt)?;
        if (mem.len_words() as u64) * 8 < geo.segment_len() {
            return Err(LaneOpenError::TooSmall {
                needed: geo.segment_len(),
                available: mem.len_words() as u64 * 8,
            });
        }
        let lane = Lane { mem, geo };
        let w = |i| lane.word(i);
        w(word!(magic)).store(LANE_MAGIC, Ordering::Relaxed);
        w(word!(version_endian)).store(
            u64::from(LAYOUT_VERSION) | u64::from(ENDIAN_MARK) << 32,
            Ordering::Relaxed,
        );
        w(word!(capacity)).store(geo.capacity, Ordering::Relaxed);
        w(word!(max_frame)).store(geo.max_frame, Ordering::Relaxed);
        w(word!(salt)).store(geo.salt, Ordering::Relaxed);
        w(word!(block_shift)).store(u64::from(geo.block_shift), Ordering::Relaxed);
        w(word!(n_blocks)).store(geo.n_blocks, Ordering::Relaxed);
        w(word!(data_off)).store(geo.data_off, Ordering::Relaxed);
        w(word!(producer_pid)).store(u64::from(std::process::id()), Ordering::Relaxed);
        w(word!(created_realtime_nanos)).store(now_realtime_nanos(), Ordering::Relaxed);
        w(word!(state)).store(LaneState::Live as u64, Ordering::Relaxed);
        w(word!(init_done)).store(INIT_DONE, Ordering::Release);
        Ok(lane)
    }

    /// Reads and validates the header of memory another process wrote.
    pub fn attach(mem: M) -> Result<Lane<M>, LaneOpenError> {
        let load = |i: usize| mem.get(i).map_or(0, |w| w.load(Ordering::Acquire));
        let magic = load(word!(magic));
        if magic != LANE_MAGIC {
            return Err(LaneOpenError::BadMagic { found: magic });
        }
        if load(word!(init_done)) != INIT_DONE {
            return Err(LaneOpenError::NotInitialised);
        }
        let ve = load(word!(version_endian));
        let (version, endian) = (ve as u32, (ve >> 32) as u32);
        if version != LAYOUT_VERSION || endian != ENDIAN_MARK {
            return Err(LaneOpenError::Version {
                found: version,
                endian,
            });
        }
        let shift = u32::try_from(load(word!(block_shift))).unwrap_or(u32::MAX);
        let geo = Geometry::new(
            load(word!(capacity)),
            load(word!(max_frame)),
            shift,
            load(word!(salt)),
        )?;
        if geo.n_blocks != load(word!(n_blocks)) || geo.data_off != load(word!(data_off)) {
            return Err(LaneOpenError::Geometry(GeometryError(
                "header offsets disagree with its sizes",
            )));
        }
        let available = mem.len_words() as u64 * 8;
        if available < geo.segment_len() {
            return Err(LaneOpenError::TooSmall {
                needed: geo.segment_len(),
                available,
            });
        }
        Ok(Lane { mem, geo })
    }

    /// Marks the lane's producer dead (for the process that detected the death and maps the
    /// lane read-write, i.e. the broker). Returns `false` if this mapping is read-only.
    pub fn mark_dead(&self) -> bool {
        if !self.mem.writable() {
            return false;
        }
        self.word(word!(state))
            .store(LaneState::Dead as u64, Ordering::Release);
        true
    }

    /// The lane's counters and state, as the producer last wrote them.
    pub fn stats(&self) -> LaneStats {
        let load = |i| self.word(i).load(Ordering::Relaxed);
        LaneStats {
            claim_tail: self.word(word!(claim_tail)).load(Ordering::Acquire),
            state: match self.word(word!(state)).load(Ordering::Acquire) {
                3 => Some(LaneState::Dead),
                2 => Some(LaneState::Closed),
                1 => Some(LaneState::Live),
                _ => None,
            },
            frames_committed: load(word!(frames_committed)),
            dropped_wrap: load(word!(dropped_wrap)),
            dropped_oversize: load(word!(dropped_oversize)),
            aborted: load(word!(aborted)),
            producer_pid: load(word!(producer_pid)) as u32,
        }
    }
}

fn sink() -> &'static AtomicU64 {
    #[cfg(not(loom))]
    {
        &SINK
    }
    #[cfg(loom)]
    {
        // Under loom the lane words are loom atomics; a leaked one serves as the sink.
        let _ = &SINK;
        Box::leak(Box::new(AtomicU64::new(0)))
    }
}

fn sink_header() -> &'static [AtomicU64; FRAME_HEADER_WORDS] {
    #[cfg(not(loom))]
    {
        static SINK_HEADER: [AtomicU64; FRAME_HEADER_WORDS] =
            [const { AtomicU64::new(0) }; FRAME_HEADER_WORDS];
        &SINK_HEADER
    }
    #[cfg(loom)]
    {
        Box::leak(Box::new(std::array::from_fn(|_| AtomicU64::new(0))))
    }
}

fn geometry_of(config: &LaneConfig, salt: u64) -> Result<Geometry, GeometryError> {
    if !config.block_size.is_power_of_two() {
        return Err(GeometryError("block size must be a power of two"));
    }
    Geometry::new(
        config.capacity as u64,
        config.max_frame as u64,
        config.block_size.trailing_zeros(),
        salt,
    )
}

/// A random non-zero salt.
#[cfg(not(loom))]
fn random_salt() -> u64 {
    let mut bytes = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    let s = u64::from_le_bytes(bytes)
        ^ now_realtime_nanos().rotate_left(17)
        ^ u64::from(std::process::id());
    if s == 0 { 0x9e37_79b9_7f4a_7c15 } else { s }
}

impl Lane<HeapMem> {
    /// A lane on the heap (tests and models), with a fixed salt.
    pub fn heap(config: &LaneConfig, salt: u64) -> Result<Arc<Lane<HeapMem>>, LaneOpenError> {
        let geo = geometry_of(config, salt)?;
        Ok(Arc::new(Lane::init(
            HeapMem::new(geo.segment_len() as usize),
            config,
            salt,
        )?))
    }
}

impl<M: LaneMem> Lane<M> {
    /// The single writer of a lane this process created (`None` if this process mapped the
    /// lane read-only). Use one writer per lane: two writers would hand out the same space.
    pub fn writer(self: &Arc<Self>) -> Option<LaneWriter<M>> {
        self.mem
            .writable()
            .then(|| LaneWriter::new(Arc::clone(self)))
    }

    /// A writer several threads share (`None` if mapped read-only).
    pub fn shared_writer(self: &Arc<Self>) -> Option<SharedLaneWriter<M>> {
        self.mem
            .writable()
            .then(|| SharedLaneWriter::new(Arc::clone(self)))
    }

    /// A reader starting at `start`.
    pub fn reader(self: &Arc<Self>, start: StartAt) -> LaneReader<M> {
        LaneReader::new(Arc::clone(self), start)
    }
}

#[cfg(not(loom))]
mod shm_lane {
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::sync::Arc;

    use super::{Lane, LaneConfig, LaneOpenError, geometry_of, random_salt};
    use crate::mem::ShmMem;
    use crate::segment::Segment;

    /// A lane in shared memory, with the segment that holds it.
    pub struct ShmLane {
        lane: Arc<Lane<ShmMem>>,
        fd: OwnedFd,
    }

    impl ShmLane {
        /// The lane.
        pub fn lane(&self) -> &Arc<Lane<ShmMem>> {
            &self.lane
        }

        /// The segment's fd (pass it to readers).
        pub fn fd(&self) -> BorrowedFd<'_> {
            self.fd.as_fd()
        }

        /// Creates a lane in a new sealed memfd, mapped read-write by this process.
        pub fn create(name: &str, config: &LaneConfig) -> Result<ShmLane, LaneOpenError> {
            let salt = random_salt();
            let geo = geometry_of(config, salt)?;
            let seg = Segment::create(name, geo.segment_len() as usize)
                .map_err(|e| LaneOpenError::Segment(e.to_string()))?;
            let fd = seg
                .fd()
                .try_clone_to_owned()
                .map_err(|e| LaneOpenError::Segment(e.to_string()))?;
            let lane = Lane::init(seg.mem, config, salt)?;
            Ok(ShmLane {
                lane: Arc::new(lane),
                fd,
            })
        }

        /// Maps another process's lane read-write (the broker, to mark it dead) and validates
        /// its header.
        pub fn open_rw(fd: OwnedFd) -> Result<ShmLane, LaneOpenError> {
            ShmLane::attach(Segment::open_rw(fd))
        }

        /// A read-only fd for the same segment (what the broker hands to consumers), opened
        /// anew through `/proc/self/fd` so the receiver cannot map it writable.
        pub fn read_only_fd(&self) -> std::io::Result<OwnedFd> {
            use std::os::fd::AsRawFd;
            let path = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
            Ok(OwnedFd::from(std::fs::File::open(path)?))
        }

        /// Maps another process's lane read-only and validates its header.
        pub fn open(fd: OwnedFd) -> Result<ShmLane, LaneOpenError> {
            ShmLane::attach(Segment::open(fd))
        }

        fn attach(
            seg: Result<Segment, crate::segment::SegmentError>,
        ) -> Result<ShmLane, LaneOpenError> {
            let seg = seg.map_err(|e| LaneOpenError::Segment(e.to_string()))?;
            let fd = seg
                .fd()
                .try_clone_to_owned()
                .map_err(|e| LaneOpenError::Segment(e.to_string()))?;
            Ok(ShmLane {
                lane: Arc::new(Lane::attach(seg.mem)?),
                fd,
            })
        }
    }
}

#[cfg(not(loom))]
pub use shm_lane::ShmLane;
