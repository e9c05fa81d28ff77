//! Claiming and committing a frame: the write protocol both writers run (ARCHITECTURE.md, "Lanes").
//!
//! Protocol, per frame at absolute position `start` (ending at `end`):
//! 1. **Claim**: compute `start`/`end` from the process-local tail (inserting a PAD frame at the
//!    physical end of the ring), store `claim_tail = end` (Relaxed) and, if `end` passes it,
//!    raise `write_limit` past `end` by up to two granules, then `fence(Release)`: the limit is
//!    visible before any byte of `[old tail, end)` is overwritten, so a reader that copied
//!    overwritten bytes sees a limit that proves it was lapped.
//! 2. Write header words 1–4 (Relaxed), then the commit word `tag ^ BUSY` (Release): from now on
//!    the frame's length is known and a dead writer's hole can be skipped.
//! 3. Write the payload in place (the encoder writes straight into the ring).
//! 4. **Commit**: store the anchors of every block boundary in `(start, end]` (Release), then the
//!    commit word `tag` (Release), which publishes header and payload.
//!
//! Dropping a claim without committing turns it into an ABORTED frame (its sequence number is
//! consumed, so readers do not count it as lost). Producers never wait for readers.
//!
//! Both writers (`writer.rs`) run the same claim sequence, [`claim_frame`] (steps 1 and 2,
//! with the crash points `after_intent` and `after_busy`), and the same commit
//! ([`Claim::commit`]). They differ only in the [`ClaimGate`] it passes through while it
//! reserves room: the single [`LaneWriter`](super::LaneWriter) holds its state by `&mut` (no
//! lock, no lap guard: its claims never overlap), the
//! [`SharedLaneWriter`](super::SharedLaneWriter) under its claim lock, with the lap guard and
//! in-flight slots. So the crash-point tests, which drive both, kill the sequence every
//! `Publisher` runs. A run of records ([`write_run`], `Publisher::emit_many`'s) passes the
//! same gate once for all its records, with crash points of its own (`after_intent` before its
//! first record, `run_after_first_commit`, `run_after_busy` inside its second).

use snapbus_schemas::EncodeError;

mod run;
pub(super) use run::write_run;
pub use run::{RUN_RECORDS, RunWritten};

use super::layout::{
    BUSY, FRAME_HEADER_LEN, FRAME_HEADER_WORDS, FrameKind, Geometry, LaneState, align_frame, fw,
    pack_len_meta, pack_schema, word,
};
use super::{Lane, RecordMeta, now_realtime_nanos};
use crate::mem::LaneMem;
#[cfg(not(loom))]
use crate::mem::PlainMem;
use crate::sync::{AtomicU64, ClaimLock, Ordering, fence};
use crate::testpoint;

/// A claim could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// The record is larger than the lane's largest frame; it was not written (never
    /// truncated) and `dropped_oversize` was incremented.
    #[error(
        "record of {payload_len} bytes exceeds the lane's largest payload of {max_payload} bytes"
    )]
    Oversize {
        /// Payload bytes asked for.
        payload_len: usize,
        /// Largest payload the lane takes.
        max_payload: usize,
    },
    /// The claim would overwrite a claim of another thread that is still being written (the
    /// lap guard); it was dropped and `dropped_wrap` was incremented.
    #[error("claim dropped: it would overwrite a record another thread is still writing")]
    Lapped,
    /// The lane was closed.
    #[error("the lane is closed")]
    Closed,
}

/// Writing a record failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// No space could be claimed.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// The value could not be encoded (the claim was aborted).
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// Where a claim goes: the arithmetic of step 1, made on the writer's local state.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Reservation {
    pad_at: u64,
    pad_len: u64,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) seq: u64,
    t_nanos: u64,
}

/// Where an `aligned`-byte frame goes after `tail`: `(pad, start)`, with `pad` the bytes to
/// the physical end of the ring when it does not fit before it (frames never cross it), and
/// `start = tail + pad`.
#[inline(always)]
fn place(geo: &Geometry, tail: u64, aligned: u64) -> (u64, u64) {
    let off = tail & (geo.capacity - 1);
    let pad = if off + aligned > geo.capacity {
        geo.capacity - off
    } else {
        0
    };
    (pad, tail + pad)
}

/// Process-local writer state (never in shared memory).
#[derive(Debug, Default)]
pub(super) struct Local {
    tail: u64,
    pub(super) seq: u64,
    last_t: u64,
    closed: bool,
}

impl Local {
    /// Reserves room for a record at time `now` (CLOCK_REALTIME nanoseconds, read inside the
    /// gate; raised to the last time handed out so times never go backwards). Inlined into
    /// the claim (out of line, it is a call, and its spills, on every emit).
    /// `None`: the record is larger than the lane's largest frame.
    #[inline]
    fn reserve(&mut self, geo: &Geometry, payload_len: usize, now: u64) -> Option<Reservation> {
        let frame_len = FRAME_HEADER_LEN as u64 + payload_len as u64;
        let aligned = align_frame(frame_len);
        if aligned > geo.max_frame {
            return None;
        }
        let t = self.tail;
        let (pad_len, start) = place(geo, t, aligned);
        let end = start + aligned;
        let t_nanos = now.max(self.last_t);
        self.last_t = t_nanos;
        let seq = self.seq;
        Some(Reservation {
            pad_at: t,
            pad_len,
            start,
            end,
            seq,
            t_nanos,
        })
    }

    pub(super) fn accept(&mut self, r: &Reservation) {
        self.tail = r.end;
        self.seq += 1;
    }

    /// Closes the lane once: an end-of-stream frame after the last claim, `final_tail`, state
    /// CLOSED; later claims fail.
    pub(super) fn close<M: LaneMem>(&mut self, lane: &Lane<M>) {
        if !self.closed {
            self.closed = true;
            let t = now_realtime_nanos().max(self.last_t);
            lane.close_at(self.tail, self.seq, t);
        }
    }
}

/// How a claim passes through its writer's local state while it reserves room: the one
/// difference between the two writers' claims. The gate is held (by `&mut`, or the claim
/// lock) from the reservation until the tail intent is published, then dropped.
pub(super) trait ClaimGate<'w, M: LaneMem> {
    /// The writer's local state.
    fn local(&mut self) -> &mut Local;

    /// The lap guard: the end no claim may pass now (the start of the oldest claim still in
    /// flight, plus the capacity); `None` when nothing limits it (the single writer, whose
    /// claims cannot overlap, or nothing in flight). Made once per claim or run, under the
    /// gate: claims retired meanwhile only raise it, so a run checks all its records against
    /// the one value.
    fn lap_limit(&mut self, lane: &Lane<M>) -> Option<u64>;

    /// Registers the admitted claim `seq` at `start` in flight; returns how it is retired
    /// (`None`: by the single writer). A run registers only its first record: retired once
    /// the whole run is committed, it holds back every claim that would lap any of the run's
    /// records (they all start after it, within `max_frame`).
    fn register(&mut self, seq: u64, start: u64) -> Option<Inflight<'w>>;

    /// Counts `n` admitted claims as committed, still under the gate (the shared writer's
    /// `frames_committed`: a load and a store under the lock). The single writer counts at
    /// commit time instead: nothing.
    fn count_admitted(&mut self, lane: &Lane<M>, n: usize);
}

/// The single writer's gate: its state, by `&mut`. Its claims cannot overlap (a claim borrows
/// the writer), so there is no lap guard and nothing in flight to register.
impl<'w, M: LaneMem> ClaimGate<'w, M> for &'w mut Local {
    #[inline(always)]
    fn local(&mut self) -> &mut Local {
        self
    }

    #[inline(always)]
    fn lap_limit(&mut self, _lane: &Lane<M>) -> Option<u64> {
        None
    }

    #[inline(always)]
    fn register(&mut self, _seq: u64, _start: u64) -> Option<Inflight<'w>> {
        None
    }

    #[inline(always)]
    fn count_admitted(&mut self, _lane: &Lane<M>, _n: usize) {}
}

/// Admits reservation `r` (which `gate.local()` made): checks the lap guard, accepts it into
/// the local state and registers it in flight; returns how the claim is retired.
#[inline(always)]
fn admit<'w, M: LaneMem, G: ClaimGate<'w, M>>(
    gate: &mut G,
    lane: &Lane<M>,
    r: &Reservation,
) -> Result<Option<Inflight<'w>>, ClaimError> {
    if gate.lap_limit(lane).is_some_and(|limit| r.end > limit) {
        return Err(lapped(lane));
    }
    gate.local().accept(r);
    Ok(gate.register(r.seq, r.start))
}

/// Counts a claim the lap guard dropped; the error to return.
#[cold]
fn lapped<M: LaneMem>(lane: &Lane<M>) -> ClaimError {
    lane.word(word!(dropped_wrap))
        .fetch_add(1, Ordering::Relaxed);
    ClaimError::Lapped
}

/// Counts a claim refused for its size; the error to return.
#[cold]
fn oversize<M: LaneMem>(lane: &Lane<M>, payload_len: usize) -> ClaimError {
    lane.word(word!(dropped_oversize))
        .fetch_add(1, Ordering::Relaxed);
    ClaimError::Oversize {
        payload_len,
        max_payload: (lane.geo.max_frame as usize) - FRAME_HEADER_LEN,
    }
}

/// The claim sequence, protocol steps 1 and 2, for a `payload_len`-byte record: the one both
/// writers run. `gate` is the writer's local state, held (by `&mut`, or under the claim lock)
/// until the tail intent is published, so `claim_tail` only ever grows. The clock is read
/// inside the gate: a frame's time is its claim's, so a thread descheduled between a clock
/// read and the lock cannot make a fresh claim look old to a reader (which skips claims older
/// than its stall timeout). The pad, header and BUSY word are written after the gate is
/// dropped, with the crash points `after_intent` and `after_busy` around the header.
///
/// Monomorphised per gate and inlined into each writer's `claim` (and from there into
/// `Publisher::write_record`): the single writer's claim compiles to no lock and no lap
/// guard, the shared writer's to the code it had before the two were one sequence.
#[inline(always)]
pub(super) fn claim_frame<'w, M: LaneMem, G: ClaimGate<'w, M>>(
    lane: &'w Lane<M>,
    mut gate: G,
    payload_len: usize,
    meta: RecordMeta,
) -> Result<Claim<'w, M>, ClaimError> {
    let local = gate.local();
    if local.closed {
        return Err(ClaimError::Closed);
    }
    let now = now_realtime_nanos();
    let Some(r) = local.reserve(&lane.geo, payload_len, now) else {
        return Err(oversize(lane, payload_len));
    };
    let inflight = admit(&mut gate, lane, &r)?;
    gate.count_admitted(lane, 1);
    lane.publish_intent(r.end);
    drop(gate);
    if r.pad_len > 0 {
        lane.write_pad(r.pad_at, r.pad_len);
    }
    testpoint::hit("after_intent");
    lane.begin_frame(
        r.start,
        (FRAME_HEADER_LEN + payload_len) as u64,
        FrameKind::Data,
        meta,
        r.seq,
        r.t_nanos,
    );
    testpoint::hit("after_busy");
    Ok(Claim {
        lane,
        start: r.start,
        end: r.end,
        seq: r.seq,
        payload_len,
        meta,
        inflight,
        done: false,
    })
}

impl<M: LaneMem> Lane<M> {
    /// Publishes the tail intent: `claim_tail = end` and, when `end` passes it, a new
    /// `write_limit` (the next granule boundary after `end`, plus a granule), then a release
    /// fence so no byte of the claimed range is overwritten before the limit is visible.
    #[inline]
    fn publish_intent(&self, end: u64) {
        self.word(word!(claim_tail)).store(end, Ordering::Relaxed);
        let limit = self.word(word!(write_limit));
        if end > limit.load(Ordering::Relaxed) {
            let g = self.geo.limit_granule();
            limit.store(((end + g - 1) & !(g - 1)) + g, Ordering::Relaxed);
        }
        fence(Ordering::Release);
    }

    /// Writes header words 1–4 and the BUSY commit word of a frame; returns its header words
    /// (for a caller that commits it without looking them up again).
    #[inline]
    fn begin_frame(
        &self,
        start: u64,
        frame_len: u64,
        kind: FrameKind,
        meta: RecordMeta,
        seq: u64,
        t_nanos: u64,
    ) -> &[AtomicU64; FRAME_HEADER_WORDS] {
        let h = self.frame_header(start);
        h[fw::LEN_META].store(
            pack_len_meta(frame_len as u32, kind, meta.level, meta.emitter),
            Ordering::Relaxed,
        );
        h[fw::SCHEMA].store(
            pack_schema(meta.schema_key, meta.schema_version),
            Ordering::Relaxed,
        );
        h[fw::SEQ].store(seq, Ordering::Relaxed);
        h[fw::T_NANOS].store(t_nanos, Ordering::Relaxed);
        h[fw::RESERVED].store(0, Ordering::Relaxed);
        h[fw::COMMIT].store(self.geo.tag(start) ^ BUSY, Ordering::Release);
        h
    }

    /// Stores the anchors of the block boundaries in `(start, end]`, then the commit tag.
    #[inline]
    fn finish_frame(&self, start: u64, end: u64) {
        self.store_anchors(start, end);
        self.frame_header(start)[fw::COMMIT].store(self.geo.tag(start), Ordering::Release);
    }

    /// Stores `end` as the anchor of every block boundary in `(start, end]`.
    #[inline]
    fn store_anchors(&self, start: u64, end: u64) {
        let g = &self.geo;
        let shift = g.block_shift;
        // First block boundary strictly after `start`.
        let mut b = (start >> shift) + 1;
        while b << shift <= end {
            self.word(g.anchor_word(b)).store(end, Ordering::Release);
            b += 1;
        }
    }

    /// Fills `[at, at + len)` (up to the physical end of the ring) with a PAD frame. A gap too
    /// small for a header is implicit padding: readers skip any position with less than a
    /// header's room before the physical end.
    fn write_pad(&self, at: u64, len: u64) {
        if len >= FRAME_HEADER_LEN as u64 {
            self.begin_frame(at, len, FrameKind::Pad, RecordMeta::default(), 0, 0);
        }
        if len >= FRAME_HEADER_LEN as u64 {
            self.finish_frame(at, at + len);
        } else {
            self.store_anchors(at, at + len);
        }
    }

    fn abort_frame(&self, start: u64, end: u64, payload_len: usize, meta: RecordMeta) {
        let g = &self.geo;
        self.word(g.frame_word(start, fw::LEN_META)).store(
            pack_len_meta(
                (FRAME_HEADER_LEN + payload_len) as u32,
                FrameKind::Aborted,
                meta.level,
                meta.emitter,
            ),
            Ordering::Relaxed,
        );
        self.word(word!(aborted)).fetch_add(1, Ordering::Relaxed);
        self.finish_frame(start, end);
    }

    fn close_at(&self, tail: u64, seq: u64, t_nanos: u64) {
        // An EOS frame (header only) marks the end for readers; then final_tail and the state.
        let g = &self.geo;
        let aligned = FRAME_HEADER_LEN as u64;
        let (pad, start) = place(g, tail, aligned);
        let end = start + aligned;
        self.publish_intent(end);
        if pad > 0 {
            self.write_pad(tail, pad);
        }
        self.begin_frame(
            start,
            aligned,
            FrameKind::EndOfStream,
            RecordMeta::default(),
            seq,
            t_nanos,
        );
        self.finish_frame(start, end);
        self.word(word!(final_tail)).store(end, Ordering::Relaxed);
        self.word(word!(state))
            .store(LaneState::Closed as u64, Ordering::Release);
    }
}

/// A claimed frame being filled. Commit it with [`Claim::commit`]; dropping it aborts it.
pub struct Claim<'w, M: LaneMem> {
    lane: &'w Lane<M>,
    start: u64,
    end: u64,
    seq: u64,
    payload_len: usize,
    meta: RecordMeta,
    /// How the claim is retired (shared writers only).
    inflight: Option<Inflight<'w>>,
    done: bool,
}

impl<M: LaneMem> Claim<'_, M> {
    /// The record's sequence number in the lane.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Payload length in bytes.
    pub fn len(&self) -> usize {
        self.payload_len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.payload_len == 0
    }

    /// Writes `bytes` at the start of the payload (one copy on shared memory, atomic word
    /// stores on the heap; [`Claim::payload_mut`] is the zero-copy way on shared memory).
    pub fn write_payload(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.payload_len);
        let off = self.lane.geo.byte_off(self.start) + FRAME_HEADER_LEN;
        // SAFETY: the first `n` payload bytes (padded to a word, still inside the frame, whose
        // length is a multiple of 8) belong to this uncommitted claim; `&mut self` means no
        // slice of them (`payload_mut`) is alive, no one else writes them, and readers only
        // load them atomically (the `mem` module docs).
        let written = unsafe { self.lane.mem.copy_into_claim(off, &bytes[..n]) };
        debug_assert!(written, "a claim's payload lies in its frame");
    }

    /// Commits the frame: readers may deliver it from now on.
    pub fn commit(mut self) {
        testpoint::hit("before_commit");
        self.lane.finish_frame(self.start, self.end);
        testpoint::hit("after_commit");
        if self.inflight.is_none() {
            // The single writer is the only one to write the counter: a load and a store, not
            // a read-modify-write (a locked instruction would wait for the frame's lines).
            self.lane.count_committed(1);
        }
        self.release();
        self.done = true;
    }

    /// Retires the claim: after this, other claims may reuse its bytes.
    fn release(&self) {
        release_inflight(self.inflight, self.seq);
    }
}

/// Retires claim `seq` (a shared writer's; `None`: the single writer's, nothing to do): after
/// this, other claims may reuse its bytes.
#[inline]
fn release_inflight(inflight: Option<Inflight<'_>>, seq: u64) {
    match inflight {
        Some(Inflight::Slot(slot, _)) => slot.store(RETIRED, Ordering::Release),
        Some(Inflight::Overflow(state)) => {
            state.lock().overflow.retain(|o| o.seq != seq);
        }
        None => {}
    }
}

impl<M: LaneMem> Drop for Claim<'_, M> {
    fn drop(&mut self) {
        if !self.done {
            self.lane
                .abort_frame(self.start, self.end, self.payload_len, self.meta);
            if let Some(Inflight::Slot(_, state) | Inflight::Overflow(state)) = self.inflight {
                // A shared writer counted the claim as committed when it made it; take it
                // back (under the lock, like every change of the counter by shared writers).
                let _held = state.lock();
                self.lane.uncount_committed();
            }
            self.release();
        }
    }
}

// `Claim::payload_mut` for each memory a writer can store into plainly.
macro_rules! payload_mut {
    ($mem:ty) => {
        #[cfg(not(loom))]
        impl Claim<'_, $mem> {
            /// The payload bytes, in the ring, to write in place. No one else writes them until
            /// commit (readers may load their old contents meanwhile, and discard what they
            /// loaded once they see the claim).
            pub fn payload_mut(&mut self) -> &mut [u8] {
                // SAFETY: this claim is the frame at `start`, uncommitted, with `payload_len`
                // payload bytes, and `&mut self` keeps a second slice of it from being made
                // while this one lives (see `claimed_payload_mut`).
                unsafe { self.lane.claimed_payload_mut(self.start, self.payload_len) }
            }
        }
    };
}
payload_mut!(crate::mem::ShmMem);
payload_mut!(crate::mem::HeapMem);

#[cfg(not(loom))]
impl<M: PlainMem> Lane<M> {
    /// The payload bytes of the frame claimed at `start`, `len` of them, in the ring.
    ///
    /// # Safety
    /// The caller holds the claim of the frame at `start` (made by this lane's writer, with a
    /// `len`-byte payload, not yet committed or aborted) and makes no other slice of it while
    /// this one lives.
    #[inline]
    // The claim, not `&self`, is what owns the bytes (see # Safety).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn claimed_payload_mut(&self, start: u64, len: usize) -> &mut [u8] {
        let off = self.geo.byte_off(start) + FRAME_HEADER_LEN;
        // SAFETY:
        // - the claim owns `[start, end)` exclusively in this process: claims hand out disjoint
        //   ranges, the lap guard (shared writer) and `&mut` (single writer) keep any later
        //   claim from reaching these bytes while the claim lives, the caller makes one slice
        //   of them at a time, and readers in this process only use atomic loads and never
        //   form references to lane memory (their loads may race with the stores made through
        //   the slice, which they discard: the `mem` module's seqlock caveat);
        // - frames never cross the physical end of the ring, so `off + len` is within the
        //   memory (`Geometry` places the data area inside the segment or heap words), which
        //   stays allocated while `self` (borrowed for the slice's lifetime) lives;
        // - the memory is writable: only the creator holds a writer (`Lane::writer` checks),
        //   and `plain_base` has the provenance of all of it.
        unsafe { std::slice::from_raw_parts_mut(self.mem.plain_base().add(off), len) }
    }
}

/// In-flight slots of a [`SharedLaneWriter`](super::SharedLaneWriter): claim `seq` uses slot `seq % INFLIGHT_SLOTS`
/// (unless a claim that many records older is still in flight: see `SharedLocal::overflow`).
#[cfg(not(loom))]
pub(super) const INFLIGHT_SLOTS: u64 = 1024;
/// Under loom, few slots, so the models reach the overflow path.
#[cfg(loom)]
pub(super) const INFLIGHT_SLOTS: u64 = 2;
/// A slot whose claim was committed or aborted.
pub(super) const RETIRED: u64 = u64::MAX;

/// How a shared writer's claim is retired.
#[derive(Clone, Copy)]
pub(super) enum Inflight<'w> {
    /// A Release store of [`RETIRED`] into its slot, without the lock (the lock is only
    /// taken if the claim is aborted).
    Slot(&'w AtomicU64, &'w ClaimLock<SharedLocal>),
    /// Removal from `SharedLocal::overflow`, under the lock.
    Overflow(&'w ClaimLock<SharedLocal>),
}

/// A shared writer's local state, under its claim lock.
#[derive(Debug, Default)]
pub(super) struct SharedLocal {
    pub(super) local: Local,
    /// Every claim before this sequence number is retired; claims from here on are examined
    /// in order (so the first one in flight has the smallest start of all).
    pub(super) oldest: u64,
    /// Claims that found their slot still owned by a claim `INFLIGHT_SLOTS` older (a thread
    /// stopped mid-record), retired under the lock.
    pub(super) overflow: Vec<Overflowed>,
}

/// A claim in flight without a slot of its own ([`SharedLocal::overflow`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Overflowed {
    pub(super) seq: u64,
    pub(super) start: u64,
}
