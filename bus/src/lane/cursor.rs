//! A reader's cursor: the validating loop behind [`LaneReader`](super::LaneReader) (see
//! `reader.rs` for the read protocol), with what it yields, and the recovery from laps, holes
//! left by dead or stalled writers, and garbage.
//!
//! The whole segment is untrusted: every length and offset is checked before use, garbage is
//! skipped and counted, and nothing here can panic or read out of bounds.

mod recover;
mod run;

pub use run::{RunEnd, Visit};

use std::time::{Duration, Instant};

use super::Lane;
use super::layout::{
    BUSY, FRAME_HEADER_LEN, FRAME_HEADER_WORDS, FrameKind, LaneState, align_frame, fw, word,
};
use super::view::PayloadView;
use crate::mem::LaneMem;
use crate::sync::{AtomicU64, Ordering, fence};

/// Where a new reader starts: the one start position of the workspace (lane readers,
/// subscribers, consumers and the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StartAt {
    /// At the oldest frame still in the ring (history).
    Oldest,
    /// After the newest claim: only records written from now on.
    Latest,
    /// At the first frame with `t_nanos >= t` (CLOCK_REALTIME nanoseconds) still in the ring.
    Time(u64),
}

/// A record's header, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameMeta {
    /// Absolute position in the lane.
    pub pos: u64,
    /// The lane's record number.
    pub seq: u64,
    /// CLOCK_REALTIME at claim, nanoseconds.
    pub t_nanos: u64,
    /// The producer's schema key.
    pub schema_key: u16,
    /// The payload's schema version.
    pub schema_version: u16,
    /// Severity level.
    pub level: u8,
    /// Emitter id within the producer.
    pub emitter: u16,
    /// Payload length in bytes.
    pub payload_len: usize,
}

/// A reader's own counters (private to the reader; nothing a reader does is visible to the
/// producer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Records delivered.
    pub delivered: u64,
    /// Records lost: overwritten before being read, or holes left by a dead writer.
    pub lost: u64,
    /// Records lost to damage: the sequence gap across garbage that was skipped (frames whose
    /// commit word or header is invalid). Not counted in `lost`; reported by the same
    /// [`Poll::Lagged`](super::Poll::Lagged).
    pub damaged: u64,
    /// Times the reader was lapped and resynced.
    pub lapped: u64,
    /// Copies discarded because the frame was overwritten while being read (a reader that
    /// finds a frame overwritten before it began reading counts a lap instead).
    pub torn: u64,
    /// Invalid frames or headers skipped (garbage in the segment).
    pub garbage: u64,
    /// Claimed frames that never committed, skipped because the writer died or stalled.
    pub holes: u64,
    /// Records skipped by the schema filter.
    pub filtered: u64,
}

/// What one call of [`Cursor::step`] found.
pub(super) enum Step<R> {
    Deliver(FrameMeta, R),
    Lagged(u64),
    Empty,
    Pending,
    Closed,
}

/// A reader's state, apart from the lane (so the reading loop borrows the lane and mutates
/// the cursor without touching the `Arc`'s count: an atomic read-modify-write per record).
pub(super) struct Cursor {
    pub(super) pos: u64,
    /// A position the lane's `claim_tail` is known to have reached (the last value loaded, or
    /// the end of a committed frame's header seen at the cursor): bytes before it are claimed,
    /// so while the cursor is behind it there is no need to load the tail (a line the producer
    /// writes with every record) just to learn that there is more to read.
    pub(super) known_tail: u64,
    /// The sequence number the next DATA/ABORTED frame should have, and the position after
    /// which it lies (the last accepted frame's, or the lane's start): known once a frame was
    /// accepted, or from the start for a reader that starts at position 0 (the lane's first
    /// record is number 0), so that even a reader lapped before its first delivery counts
    /// what it missed.
    pub(super) next_seq: Option<(u64, u64)>,
    pub(super) not_before_nanos: Option<u64>,
    pub(super) filter: Option<Box<[u64]>>,
    pub(super) scratch: Vec<u8>,
    pub(super) stats: ReaderStats,
    pub(super) writer_gone: bool,
    pub(super) stall_timeout: Duration,
    /// A frame found claimed but uncommitted.
    pub(super) stalled_since: Option<Stall>,
    /// Garbage was skipped since the last accepted frame (and no lap happened): the next
    /// sequence gap is damage, not overwrite.
    pub(super) damage_pending: bool,
}

/// A frame a cursor found claimed but uncommitted.
pub(super) struct Stall {
    /// Its position.
    pub(super) pos: u64,
    /// The polls that found it so.
    pub(super) polls: u32,
    /// When the stall timeout started counting (after [`STALL_POLLS`] polls).
    pub(super) since: Option<Instant>,
}

impl FrameMeta {
    /// Loads the header words after the commit word of the frame at `pos` (Relaxed: the
    /// commit word's Acquire load came first): the frame's metadata, and its length-and-kind
    /// word as it is, for the caller's checks (the metadata means nothing until they pass).
    #[inline(always)]
    fn load(pos: u64, h: &[AtomicU64; FRAME_HEADER_WORDS]) -> (FrameMeta, u64) {
        let len_meta = h[fw::LEN_META].load(Ordering::Relaxed);
        let schema = h[fw::SCHEMA].load(Ordering::Relaxed);
        let seq = h[fw::SEQ].load(Ordering::Relaxed);
        let t_nanos = h[fw::T_NANOS].load(Ordering::Relaxed);
        let meta = FrameMeta {
            pos,
            seq,
            t_nanos,
            schema_key: schema as u16,
            schema_version: (schema >> 16) as u16,
            level: (len_meta >> 40) as u8,
            emitter: (len_meta >> 48) as u16,
            payload_len: (len_meta as u32 as usize).saturating_sub(FRAME_HEADER_LEN),
        };
        (meta, len_meta)
    }
}

/// The view of the payload of frame `meta` (sane, and within the ring) where it lies.
#[inline(always)]
fn payload_view<'a, M: LaneMem>(lane: &'a Lane<M>, meta: &FrameMeta) -> PayloadView<'a, M> {
    let byte_off = lane.geo.byte_off(meta.pos) + FRAME_HEADER_LEN;
    PayloadView {
        lane,
        byte_off,
        len: meta.payload_len,
        // In bounds: the frame is within the ring (checked by the caller), and the ring within
        // the memory (the geometry was validated); an empty view otherwise.
        words: lane
            .mem
            .span(byte_off / 8, meta.payload_len.div_ceil(8))
            .unwrap_or_default(),
    }
}

/// The lane's `claim_tail` (Acquire).
#[inline]
pub(super) fn tail_of<M: LaneMem>(lane: &Lane<M>) -> u64 {
    lane.word(word!(claim_tail)).load(Ordering::Acquire)
}

/// Polls that find a frame unfinished before the stall clock starts (no clock read per poll
/// for a reader right behind the writer).
const STALL_POLLS: u32 = 64;
/// How long the reader's own clock must see a frame unfinished before the lane's timestamps
/// are trusted to say it has been stuck longer than the stall timeout: what garbage in
/// history older than the stall timeout costs per spot. (Garbage in a closed lane, or before
/// the ring first wraps, is skipped at once; near the live tail of a wrapped ring it cannot be
/// told from a claim not begun yet, and costs up to the stall timeout.)
const LANE_CLOCK_MIN_STALL: Duration = Duration::from_millis(20);

/// Default time a live writer may leave a claimed frame uncommitted before readers skip it.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(5);

impl Cursor {
    /// A cursor at `start` in `lane`.
    pub(super) fn new<M: LaneMem>(lane: &Lane<M>, start: StartAt) -> Cursor {
        let mut r = Cursor {
            pos: 0,
            known_tail: 0,
            next_seq: None,
            not_before_nanos: None,
            filter: None,
            scratch: Vec::new(),
            stats: ReaderStats::default(),
            writer_gone: false,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            stalled_since: None,
            damage_pending: false,
        };
        let tail = tail_of(lane);
        r.known_tail = tail;
        match start {
            StartAt::Latest => r.pos = tail,
            StartAt::Oldest => r.pos = r.oldest_boundary(lane, tail),
            StartAt::Time(t) => {
                r.pos = r.oldest_boundary(lane, tail);
                r.not_before_nanos = Some(t);
            }
        }
        if r.pos == 0 {
            r.next_seq = Some((0, 0));
        }
        r
    }

    pub(super) fn accepts(&self, key: u16) -> bool {
        match &self.filter {
            None => true,
            Some(bits) => bits
                .get(usize::from(key) / 64)
                .is_some_and(|w| w & (1 << (key % 64)) != 0),
        }
    }

    /// The core loop: advance to the next deliverable record, validating as we go. Each pass
    /// finds the tail (peeking at the frame first), checks that a committed frame with a sane
    /// header is at the cursor, visits it, validates the visit against the write limit and
    /// accounts for its sequence number; the rare outcomes of each check (the end of what is
    /// claimed, a lap, an uncommitted frame, garbage, an overwrite during the visit) are
    /// handled out of line ([`Cursor::at_end`], [`Cursor::uncommitted`],
    /// [`Cursor::insane_header`], [`Cursor::overwritten`]).
    ///
    /// Inlined into `poll` and `read_in_place`: out of line, every record would pay a call and
    /// return its `Step` through memory.
    #[inline(always)]
    pub(super) fn step<M: LaneMem, R>(
        &mut self,
        lane: &Lane<M>,
        mut visit: impl FnMut(&FrameMeta, &PayloadView<'_, M>) -> R,
    ) -> Step<R> {
        let g = &lane.geo;
        let cap = g.capacity;
        // Bounded work per call: every iteration advances the cursor or returns, but cap the
        // number anyway so a hostile segment can never spin a reader forever.
        for _ in 0..1_000_000 {
            let fresh = self.refresh_tail(lane);
            let tail = self.known_tail;
            if self.pos >= tail {
                return self.at_end(lane);
            }
            if tail - self.pos > cap {
                self.lapped_before(lane, tail);
                continue;
            }
            let phys = self.pos & (cap - 1);
            if phys + FRAME_HEADER_LEN as u64 > cap {
                // Implicit padding: too little room for a header before the physical end.
                self.pos = self.pos.saturating_add(cap - phys);
                continue;
            }
            let tag = g.tag(self.pos);
            let h = lane.frame_header(self.pos);
            let commit = h[fw::COMMIT].load(Ordering::Acquire);
            if commit != tag {
                match self.uncommitted(lane, commit == tag ^ BUSY, tail) {
                    Some(stop) => return stop,
                    None => continue,
                }
            }
            let (meta, len_meta) = FrameMeta::load(self.pos, h);
            let frame_len = u64::from(len_meta as u32);
            let aligned = align_frame(frame_len);
            let kind = FrameKind::from_u8((len_meta >> 32) as u8);
            let sane = frame_len >= FRAME_HEADER_LEN as u64
                && aligned <= g.max_frame
                && phys + aligned <= cap
                && kind.is_some();
            if !sane {
                match self.insane_header(lane, tail, fresh) {
                    Some(stop) => return stop,
                    None => continue,
                }
            }
            let is_data = kind == Some(FrameKind::Data);
            let wanted = is_data
                && self.accepts(meta.schema_key)
                && self.not_before_nanos.is_none_or(|t| meta.t_nanos >= t);
            // An `if`, not `bool::then`: its closure is not always inlined, and a call per
            // record returns the caller's value through the stack.
            let result = if wanted {
                Some(visit(&meta, &payload_view(lane, &meta)))
            } else {
                None
            };
            // Overwritten while we read it: discarded, and torn if the tail loaded before was
            // fresh; with a stale one the lap may have come before, which only the resync
            // counts.
            if self.overwritten(lane, wanted && fresh) {
                continue;
            }
            self.pos = self.pos.saturating_add(aligned);
            self.stalled_since = None;
            match kind {
                Some(FrameKind::Data | FrameKind::Aborted) => {
                    if let Some(step) = self.account(meta, is_data && !wanted, result) {
                        return step;
                    }
                }
                Some(FrameKind::EndOfStream) => {
                    if let Some(step) = self.account_end(meta) {
                        return step;
                    }
                }
                _ => {}
            }
        }
        Step::Pending
    }

    /// Brings `known_tail` up to date if the cursor has reached it; returns whether the tail
    /// was loaded now (`fresh`) rather than known from before. Peeks at the frame first: if it
    /// is committed, there is data without loading `claim_tail` (a line the writer stores with
    /// every record, so each load a reader makes slows the next store of the writer). Behind
    /// the last tail seen there is more to read: no need to load it again (a stale tail is
    /// safe: every read is validated against a fresh load).
    #[inline(always)]
    fn refresh_tail<M: LaneMem>(&mut self, lane: &Lane<M>) -> bool {
        if self.pos < self.known_tail {
            return false;
        }
        let g = &lane.geo;
        let phys = self.pos & (g.capacity - 1);
        let committed = phys + FRAME_HEADER_LEN as u64 <= g.capacity
            && lane
                .word(g.frame_word(self.pos, fw::COMMIT))
                .load(Ordering::Acquire)
                == g.tag(self.pos);
        if committed {
            // The frame's header at least is claimed: a lower bound of the tail.
            self.known_tail = self.pos + FRAME_HEADER_LEN as u64;
            false
        } else {
            self.known_tail = tail_of(lane);
            true
        }
    }

    /// The cursor has reached the tail: the lane is closed there, or there is nothing to read.
    #[inline]
    fn at_end<M: LaneMem, R>(&self, lane: &Lane<M>) -> Step<R> {
        let state = lane.word(word!(state)).load(Ordering::Acquire);
        if state == LaneState::Closed as u64
            && self.pos >= lane.word(word!(final_tail)).load(Ordering::Relaxed)
        {
            return Step::Closed;
        }
        Step::Empty
    }

    /// The tail is more than a lap ahead of the cursor: resync (or, with no safe boundary, a
    /// garbage tail or anchors, give up on this lap).
    #[inline]
    fn lapped_before<M: LaneMem>(&mut self, lane: &Lane<M>, tail: u64) {
        self.resync(lane, tail);
        if tail - self.pos > lane.geo.capacity {
            self.pos = tail;
        }
    }

    /// The frame at the cursor is not committed (`busy`: its commit word is BUSY): re-check
    /// the lap, then wait for it or skip it as a hole ([`Cursor::maybe_skip_hole`]). `None`:
    /// look again from the cursor; else what the call returns.
    #[inline]
    fn uncommitted<M: LaneMem, R>(
        &mut self,
        lane: &Lane<M>,
        busy: bool,
        tail: u64,
    ) -> Option<Step<R>> {
        if !busy && self.pos >= tail {
            return Some(Step::Empty);
        }
        // Claimed, not committed (or overwritten: re-check the lap first).
        let now = tail_of(lane);
        if now < self.pos {
            // The tail went back behind the cursor, which only garbage in the header does:
            // nothing is claimed here as far as the lane says.
            self.known_tail = now;
            return Some(Step::Empty);
        }
        if now - self.pos > lane.geo.capacity {
            self.resync(lane, now);
            return None;
        }
        match self.maybe_skip_hole(lane, busy, tail) {
            true => None,
            false => Some(Step::Pending),
        }
    }

    /// The committed frame at the cursor has an insane header. Found through the peek
    /// (`!fresh`) beyond the tail, it is nothing to read yet; otherwise it is garbage, counted
    /// and skipped (or, if the writer lapped the cursor meanwhile, a lap). `None`: look again
    /// from the cursor.
    #[inline]
    fn insane_header<M: LaneMem, R>(
        &mut self,
        lane: &Lane<M>,
        tail: u64,
        fresh: bool,
    ) -> Option<Step<R>> {
        if !fresh {
            // Found through the peek: if it lies beyond the tail, it is a coincidence in
            // memory nobody has claimed, not garbage: nothing to read yet.
            self.known_tail = tail_of(lane);
            if self.pos >= self.known_tail {
                return Some(Step::Empty);
            }
        }
        fence(Ordering::Acquire);
        if lane.word(word!(claim_tail)).load(Ordering::Relaxed)
            > self.pos.saturating_add(lane.geo.capacity)
        {
            self.resync(lane, tail_of(lane));
        } else {
            self.stats.garbage += 1;
            self.damage_pending = true;
            self.skip_garbage(lane, tail);
        }
        None
    }

    /// After the visit: whether the frame at the cursor may have been overwritten while it was
    /// read. If so the cursor resyncs (and the frame counts as torn if `count_torn`).
    #[inline(always)]
    fn overwritten<M: LaneMem>(&mut self, lane: &Lane<M>, count_torn: bool) -> bool {
        fence(Ordering::Acquire);
        // Validate against the write limit first: the same proof as `claim_tail` (it is
        // raised before any byte past it is written), on a line the writer changes once per
        // granule instead of once per record. Only within two granules of being lapped does
        // the exact `claim_tail` decide, so no intact record is discarded.
        let lap = self.pos.saturating_add(lane.geo.capacity);
        if lane.word(word!(write_limit)).load(Ordering::Relaxed) > lap
            && lane.word(word!(claim_tail)).load(Ordering::Relaxed) > lap
        {
            self.torn(lane, count_torn);
            return true;
        }
        false
    }

    /// The frame just read was overwritten meanwhile: count it (if `count_torn`) and resync.
    #[inline]
    fn torn<M: LaneMem>(&mut self, lane: &Lane<M>, count_torn: bool) {
        if count_torn {
            self.stats.torn += 1;
        }
        self.resync(lane, tail_of(lane));
    }

    /// The records missing before the sound frame `meta` (DATA, ABORTED, or the end of
    /// stream, which carries the number the next record would have had), counted as damage if
    /// garbage was skipped since the last frame accepted, else as lost. `None`: its sequence
    /// number is impossible, so the frame is garbage (counted).
    #[inline(always)]
    fn gap_before(&mut self, meta: &FrameMeta) -> Option<u64> {
        let seq = meta.seq;
        let lost = match self.next_seq {
            // The common case first: the record expected (no division below).
            Some((next, _)) if seq == next => 0,
            // Every frame takes at least a header's worth of bytes, so a gap larger than the
            // bytes before this frame can hold is garbage, not loss: it would make the loss
            // count a lie.
            Some((next, base))
                if seq >= next
                    && seq - next <= meta.pos.saturating_sub(base) / FRAME_HEADER_LEN as u64 =>
            {
                seq - next
            }
            Some(_) => {
                // Sequence numbers only grow within a lane: this is garbage.
                self.stats.garbage += 1;
                self.damage_pending = true;
                return None;
            }
            None => 0,
        };
        if std::mem::take(&mut self.damage_pending) {
            self.stats.damaged += lost;
        } else {
            self.stats.lost += lost;
        }
        Some(lost)
    }

    /// The cursor has passed a sound end-of-stream frame (`meta`): the records missing before
    /// it (the last ones under garbage, say) are counted like any other gap.
    #[cold]
    fn account_end<R>(&mut self, meta: FrameMeta) -> Option<Step<R>> {
        let lost = self.gap_before(&meta)?;
        self.next_seq = Some((meta.seq, meta.pos));
        (lost > 0).then_some(Step::Lagged(lost))
    }

    /// The cursor has passed a sound DATA or ABORTED frame (`meta`): count what its sequence
    /// number says was lost (or damaged), and return what the call reports, if anything
    /// (`filtered`: a record the filter skipped; `result`: the visit's, for a record to
    /// deliver).
    #[inline(always)]
    fn account<R>(
        &mut self,
        meta: FrameMeta,
        filtered: bool,
        result: Option<R>,
    ) -> Option<Step<R>> {
        let seq = meta.seq;
        let lost = self.gap_before(&meta)?;
        if filtered {
            self.stats.filtered += 1;
        }
        match (result, lost) {
            (Some(r), 0) => {
                self.next_seq = Some((seq + 1, meta.pos));
                Some(Step::Deliver(meta, r))
            }
            (Some(_), _) => {
                // Report the loss first and read this record again on the next call (as a
                // copy or in place, whichever that call asks for): the cursor stays on it and
                // it is the next expected, so the re-read reports no loss, and an overwrite in
                // between is counted like any other.
                self.pos = meta.pos;
                self.next_seq = Some((seq, meta.pos));
                Some(Step::Lagged(lost))
            }
            (None, lost) => {
                self.next_seq = Some((seq + 1, meta.pos));
                (lost > 0).then_some(Step::Lagged(lost))
            }
        }
    }
}
